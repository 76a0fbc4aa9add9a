package serve_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
)

// spineMember is a DualPlane spine route reflector: its plane and zone.
type spineMember struct{ plane, zone string }

// spine returns the active spine members (the spine cluster ID, no draining mark, no standby).
func (s *snapshot) spine() map[string]spineMember {
	out := map[string]spineMember{}
	for name, id := range s.rrs {
		n := s.nodes[name]
		if id == "224.0.0.1" && n.Annotations[extender.AnnotationDrainingSince] == "" && n.Annotations[extender.AnnotationStandbyFor] == "" {
			out[name] = spineMember{plane: n.Annotations[extender.AnnotationPlane], zone: n.Labels[corev1.LabelTopologyZone]}
		}
	}
	return out
}

// spreadSpine: one active spine member per plane (1 and 2), in distinct zones, nothing draining or
// standing by, every client with a current route reflector.
func (s *snapshot) spreadSpine() error {
	sp := s.spine()
	zones := map[string]string{}
	for name, m := range sp {
		if other, ok := zones[m.zone]; ok {
			return fmt.Errorf("spine members %s and %s both in %s: %s", other, name, m.zone, s.roles())
		}
		zones[m.zone] = name
	}
	if len(sp) != 2 {
		return fmt.Errorf("%d spine members %v: %s", len(sp), sp, s.roles())
	}
	for name, n := range s.nodes {
		if n.Annotations[extender.AnnotationDrainingSince] != "" || n.Annotations[extender.AnnotationStandbyFor] != "" {
			return fmt.Errorf("%s still draining or standing by: %s", name, s.roles())
		}
	}
	if o := s.orphans(); len(o) > 0 {
		return fmt.Errorf("clients without a route reflector: %v", o)
	}
	return nil
}

// requireDrillsPass: the graph model of the cluster as the API server holds it (its nodes and
// BGPPeers) loses no node pair with everything up, nor after any one zone or any one route
// reflector is lost.
func (w *world) requireDrillsPass(when string) {
	w.t.Helper()
	w.eventually("the drills pass "+when, 30*time.Second, func() error {
		topo, _, _, err := w.clusterTopology(bgpmodel.Options{})
		if err != nil {
			return err
		}
		m, err := topo.Propagate(nil)
		if err != nil {
			return err
		}
		if m.Summary.MissingPairs > 0 {
			return fmt.Errorf("%d pairs missing with everything up", m.Summary.MissingPairs)
		}
		drills, err := topo.Drills()
		if err != nil {
			return err
		}
		var failed []string
		for _, d := range drills {
			if d.MissingPairs > 0 {
				failed = append(failed, d.String())
			}
		}
		if len(failed) > 0 {
			return fmt.Errorf("%d of %d drills fail: %s", len(failed), len(drills), strings.Join(failed, "; "))
		}
		w.t.Logf("%s: %d drills pass", when, len(drills))
		return nil
	})
}

// TestLifeOnRealAPIServer replays issue 24's cases on the real API server, one after another on
// one cluster (a history, not a fresh plan each time): 2 zones of 30 nodes, DualPlane in racks of
// 10. A zone NotReady past the grace period and Ready again; a spine member relabelled into the
// other member's zone; each spine member deleted. After each, the spine's planes end in distinct
// zones and the graph model of the cluster's own nodes and BGPPeers loses no pair when any one zone
// or route reflector is lost. The planner's side is extender's TestLife* tests; this one proves the
// webhooks and the reconciler get there from real events (status updates, relabels, deletions)
// with short grace, delay and window. It takes about a minute and a half of waiting, beside the
// other parallel tests.
func TestLifeOnRealAPIServer(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.applyDefaultPolicy(`
  topology: {type: DualPlane, maxRackSize: 10}
  notReadyGracePeriod: 3s
  removalDelay: 1s
  behavior: {scaleDown: {stabilizationWindowSeconds: 3}}
`)
	zoneOf := func(i int) string { return fmt.Sprintf("zone-%c", 'a'+i%2) }
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.joinIP(fmt.Sprintf("node-%02d", i), zoneOf(i), fmt.Sprintf("10.0.1.%d", i+1))
		}()
	}
	wg.Wait()
	settle := func(what string) {
		w.t.Helper()
		w.eventually(what, 90*time.Second, func() error { return w.snapshot().spreadSpine() })
		w.requireDrillsPass(what)
	}
	settle("fresh")

	// Zone-b down past the grace period: its spine member is replaced in zone-a.
	setZone := func(zone string, ready bool) {
		var wg sync.WaitGroup
		for i := range 60 {
			if zoneOf(i) == zone {
				wg.Add(1)
				go func() { defer wg.Done(); w.ready(fmt.Sprintf("node-%02d", i), ready) }()
			}
		}
		wg.Wait()
	}
	setZone("zone-b", false)
	w.eventually("the spine in zone-a while zone-b is down", 60*time.Second, func() error {
		s := w.snapshot()
		sp := s.spine()
		for name, m := range sp {
			if m.zone != "zone-a" {
				return fmt.Errorf("spine member %s in %s", name, m.zone)
			}
		}
		if len(sp) != 2 {
			return fmt.Errorf("spine %v: %s", sp, s.roles())
		}
		return nil
	})
	setZone("zone-b", true)
	settle("after zone-b's outage and recovery")

	// A spine member relabelled into the other member's zone gets the spread back.
	sp := w.snapshot().spine()
	var moved, other string
	for name, m := range sp {
		if m.plane == "2" {
			moved = name
		} else {
			other = sp[name].zone
		}
	}
	require.NotEmpty(t, moved, "no plane-2 member: %v", sp)
	n, err := w.admin.CoreV1().Nodes().Get(t.Context(), moved, metav1.GetOptions{})
	require.NoError(t, err)
	n.Labels[corev1.LabelTopologyZone] = other
	_, err = w.admin.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{})
	require.NoError(t, err)
	settle("spine member " + moved + " relabelled into " + other)

	// Each spine member deleted in turn.
	for _, plane := range []string{"1", "2"} {
		var gone string
		for name, m := range w.snapshot().spine() {
			if m.plane == plane {
				gone = name
			}
		}
		require.NotEmpty(t, gone, "no plane-%s member", plane)
		require.NoError(t, w.admin.CoreV1().Nodes().Delete(t.Context(), gone, metav1.DeleteOptions{}))
		settle("plane " + plane + "'s spine member " + gone + " deleted")
	}
}
