package serve_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// TestRackSetMigrationOnRealAPIServer: a DualPlane cluster as the versions before rack-named sets
// left it (each peering set named after its route reflectors: a hash of their sorted names, one
// BGPPeer per set) moves to sets named after racks (extender.RackSetName) with the product's usual
// set change: the rack sets' BGPPeers first, then the labels, then the old BGPPeers once no node
// carries their set. The cluster's own nodes and BGPPeers fed to the graph model lose no pair at any
// moment sampled (every 10 ms), and no route reflector changes. The planner's side (a new rack
// route reflector relabels nobody) is TestLifeRackRouteReflectorReplacedKeepsLabels; this test
// proves the live migration of a cluster written by the former scheme.
func TestRackSetMigrationOnRealAPIServer(t *testing.T) {
	t.Parallel() // its own API server and product: beside the other live tests, mostly waiting
	w := newWorld(t)
	w.applyDefaultPolicy(`
  topology: {type: DualPlane, maxRackSize: 10}
  removalDelay: 2s
`)
	w.joinCluster(30) // 3 zones of 10: a rack per zone and a spine, 8 route reflectors
	// Settled, every BGPPeer's set carried by a node, and none named as the former scheme names
	// the rack sets: a set the admissions named before the racks had their route reflectors (after
	// them, as the former scheme named sets) keeps its BGPPeer until the reconciler collects it,
	// and the copies below would collide with it (AlreadyExists in a .ci/run on 2026-12-02).
	w.eventually("settled on 8 route reflectors, no unused or former-scheme BGPPeer", 60*time.Second, func() error {
		s := w.snapshot()
		if err := s.settled(8); err != nil {
			return err
		}
		for p := range s.peers {
			key, set, ok := extender.SetLabelOf(p)
			if !ok {
				continue
			}
			if !slices.ContainsFunc(slices.Collect(maps.Values(s.nodes)), func(n *corev1.Node) bool { return n.Labels[key] == set }) {
				return fmt.Errorf("BGPPeer %s: no node carries its set", p)
			}
		}
		former, err := formerNames(s)
		if err != nil {
			return err
		}
		for _, old := range former {
			if s.peers[extender.BGPPeerPrefix+old] {
				return fmt.Errorf("BGPPeer %s%s: named as the former scheme names a rack set", extender.BGPPeerPrefix, old)
			}
		}
		return nil
	})
	w.rep.stop()

	// The former scheme's state: every rack set renamed to the hash of its route reflectors' names.
	ctx := t.Context()
	s := w.snapshot()
	rrsBefore := slices.Sorted(maps.Keys(s.rrs))
	formerName, err := formerNames(s) // rack set -> its former name
	require.NoError(t, err)
	for _, old := range formerName {
		require.False(t, s.peers[extender.BGPPeerPrefix+old], "BGPPeer %s%s before the copies", extender.BGPPeerPrefix, old)
	}
	require.Len(t, formerName, 3, "a rack set per zone: %v", formerName)
	// As the product's service account: the BGPPeer guard, whose replica is down, fails closed for
	// everyone else.
	sa, err := dynamic.NewForConfig(w.env.ConfigFor(testenv.UserServiceAccount))
	require.NoError(t, err)
	peers := sa.Resource(bgpPeersGVR)
	for set, old := range formerName {
		rack, err := peers.Get(ctx, extender.BGPPeerPrefix+set, metav1.GetOptions{})
		require.NoError(t, err)
		copied := &unstructured.Unstructured{Object: map[string]any{"apiVersion": rack.GetAPIVersion(), "kind": rack.GetKind(), "spec": rack.Object["spec"]}}
		copied.SetName(extender.BGPPeerPrefix + old)
		copied.SetLabels(rack.GetLabels())
		require.NoError(t, unstructured.SetNestedField(copied.Object, fmt.Sprintf("%s == '%s'", extender.LabelPeeringSet, old), "spec", "nodeSelector"))
		_, err = peers.Create(ctx, copied, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for name, n := range s.nodes {
		if old, ok := formerName[n.Labels[extender.LabelPeeringSet]]; ok {
			patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, extender.LabelPeeringSet, old)
			_, err := w.admin.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			require.NoError(t, err)
		}
	}
	for set := range formerName {
		require.NoError(t, peers.Delete(ctx, extender.BGPPeerPrefix+set, metav1.DeleteOptions{}))
	}
	check := func(when string) {
		t.Helper()
		missing, _, _, err := w.routingState()
		require.NoError(t, err)
		require.Zerof(t, missing, "missing pairs %s: %s", when, w.snapshot().roles())
	}
	check("in the former scheme's state")

	// The new version starts: it migrates while the routes are sampled.
	w.rep = w.start(w.port, true)
	migrated := func() error {
		s := w.snapshot()
		for _, old := range formerName {
			for name, n := range s.nodes {
				if n.Labels[extender.LabelPeeringSet] == old {
					return fmt.Errorf("%s is in the former set %s", name, old)
				}
			}
			if s.peers[extender.BGPPeerPrefix+old] {
				return fmt.Errorf("BGPPeer %s is still there", extender.BGPPeerPrefix+old)
			}
		}
		return s.settled(8)
	}
	samples, start := 0, time.Now()
	for end := time.Now().Add(60 * time.Second); migrated() != nil; time.Sleep(10 * time.Millisecond) {
		require.True(t, time.Now().Before(end), "not migrated in 60 s: %v", migrated())
		check("during the migration")
		samples++
	}
	t.Logf("migrated in %v, %d samples of the routes on the way", time.Since(start).Round(100*time.Millisecond), samples)
	check("after the migration")
	require.Equal(t, rrsBefore, slices.Sorted(maps.Keys(w.snapshot().rrs)), "the same route reflectors")
}

// TestRackRouteReflectorReplacedOnRealAPIServer: a DualPlane rack route reflector NotReady past the
// grace period is replaced in its rack and plane: the rack's BGPPeer changes its peer selector in
// place, no node of the rack is relabelled, and at every moment sampled (every 20 ms) the BGPPeer
// selects two labelled route reflectors and the graph model of the cluster misses no pair. The
// window extender.MakeBeforeBreak closes (the BGPPeer naming the new route reflector before its
// labels are written) lasts milliseconds: the sampling here saw it once in three runs, and the
// test passed with MakeBeforeBreak off too; TestMakeBeforeBreak is its proof.
func TestRackRouteReflectorReplacedOnRealAPIServer(t *testing.T) {
	t.Parallel() // beside the other waiting tests: its time is the grace period
	w := newWorld(t)
	w.applyDefaultPolicy(`
  topology: {type: DualPlane, maxRackSize: 10}
  notReadyGracePeriod: 8s
  removalDelay: 2s
`)
	w.joinCluster(30)
	w.eventually("settled on 8 route reflectors", 60*time.Second, func() error { return w.snapshot().settled(8) })
	s := w.snapshot()
	var victim, rack string
	for name, id := range s.rrs {
		a := s.nodes[name].Annotations
		if id != "224.0.0.1" && a[extender.AnnotationPlane] == "2" && (victim == "" || name < victim) {
			victim, rack = name, a[extender.AnnotationRack]
		}
	}
	require.NotEmpty(t, victim, "a plane-2 rack route reflector: %s", s.roles())
	set := s.nodes[victim].Labels[extender.LabelPeeringSet]
	require.True(t, strings.HasPrefix(set, "rack-"), "%s's set %s is named after its rack", victim, set)
	labels := map[string]string{} // the rack's other nodes (the victim drains on the spine's set)
	for name, n := range s.nodes {
		if n.Annotations[extender.AnnotationRack] == rack && name != victim {
			labels[name] = n.Labels[extender.LabelPeeringSet]
		}
	}
	ctx := t.Context()
	// The route reflectors the rack's BGPPeer selects: listed in its selector and labelled.
	selected := func(s *snapshot) (int, string) {
		bp, err := w.dyn.Resource(bgpPeersGVR).Get(ctx, extender.BGPPeerPrefix+set, metav1.GetOptions{})
		require.NoError(t, err)
		sel, _, _ := unstructured.NestedString(bp.Object, "spec", "peerSelector")
		n := 0
		for name, node := range s.nodes {
			if id := node.Labels[extender.LabelRouteReflectorID]; id != "" && strings.Contains(sel, "'"+id+"'") {
				if _, rr := s.rrs[name]; rr {
					n++
				}
			}
		}
		return n, sel
	}
	w.ready(victim, false)
	var successor string
	samples, widened := 0, 0
	for end := time.Now().Add(90 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		require.True(t, time.Now().Before(end), "%s not replaced in 90 s: %s", victim, w.snapshot().roles())
		s := w.snapshot()
		n, sel := selected(s)
		require.GreaterOrEqualf(t, n, 2, "the rack's BGPPeer selects %d labelled route reflectors (%s): %s", n, sel, s.roles())
		if n > 2 {
			widened++
		}
		missing, _, _, err := w.routingState()
		require.NoError(t, err)
		require.Zerof(t, missing, "missing pairs: %s", s.roles())
		for name, want := range labels {
			require.Equalf(t, want, s.nodes[name].Labels[extender.LabelPeeringSet], "%s relabelled (victim %s): %s", name, victim, s.roles())
		}
		samples++
		successor = ""
		for name := range s.rrs {
			a := s.nodes[name].Annotations
			if name != victim && a[extender.AnnotationRack] == rack && a[extender.AnnotationPlane] == "2" && a[extender.AnnotationDrainingSince] == "" {
				successor = name
			}
		}
		if _, still := s.rrs[victim]; !still && successor != "" && strings.Contains(sel, "'"+successor+"'") && !strings.Contains(sel, "'"+victim+"'") {
			break
		}
	}
	t.Logf("%s replaced by %s in rack %s; %d samples, %d with the old route reflector kept beside the new", victim, successor, rack, samples, widened)
}

// formerNames are the names the former scheme gave the snapshot's rack sets (rack set -> the hash
// of its route reflectors' names, read from the sets' clients); an error when two clients of a set
// list different route reflectors, or two sets' names are one (a client still moving: the copies
// the test writes would collide, AlreadyExists in two .ci/runs on 2026-12-02).
func formerNames(s *snapshot) (map[string]string, error) {
	out := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(s.nodes)) {
		n := s.nodes[name]
		set := n.Labels[extender.LabelPeeringSet]
		rrs := n.Annotations[extender.AnnotationRouteReflectors]
		if !strings.HasPrefix(set, "rack-") || rrs == "" {
			continue
		}
		names := strings.Split(rrs, ",")
		slices.Sort(names)
		h := sha256.Sum256([]byte(strings.Join(names, ",")))
		old := hex.EncodeToString(h[:5])
		if had, ok := out[set]; ok && had != old {
			return nil, fmt.Errorf("rack set %s: %s lists route reflectors %s, another client others", set, name, rrs)
		}
		out[set] = old
	}
	for set, old := range out {
		for other, o := range out {
			if other != set && o == old {
				return nil, fmt.Errorf("rack sets %s and %s: one former name %s", set, other, old)
			}
		}
	}
	return out, nil
}
