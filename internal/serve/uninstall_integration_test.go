package serve_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/uninstall"
)

func (w *world) meshEnabled() (bool, error) {
	cfg, err := w.dyn.Resource(bgpConfigGVR).Get(w.t.Context(), "default", metav1.GetOptions{})
	if err != nil {
		return true, err // Calico's default
	}
	on, found, _ := unstructured.NestedBool(cfg.Object, "spec", "nodeToNodeMeshEnabled")
	return !found || on, nil
}

// TestUninstallOnRealAPIServer: what the chart's pre-delete hook runs. A policy that migrated the
// cluster off the node-to-node mesh (12 nodes, below spec.release.maxMeshNodes) is released by
// `uninstall` through one route reflector: while the mesh is off the other route reflectors go
// one at a time, the mesh comes back on once only that one is left, then every owned label,
// annotation and BGPPeer is gone, and the policy with it. Sampled every 100 ms, the graph model
// of the cluster loses no pair, no node holds more than twice its steady-state routes (the larger
// of before and after) and no route reflector more than twice its steady-state sessions.
func TestUninstallOnRealAPIServer(t *testing.T) {
	t.Parallel() // its own API server and product: beside the other live tests, mostly waiting
	w := newWorld(t)
	w.applyDefaultPolicy(`
  topology: {type: MultiCluster}
  removalDelay: 2s
  migrateFromNodeMesh: true
`)
	w.joinCluster(12)
	w.eventually("mesh off", 60*time.Second, func() error {
		if on, err := w.meshEnabled(); on || err != nil {
			return fmt.Errorf("mesh on (%v)", err)
		}
		return nil
	})
	sample := func(on bool) *bgpmodel.Model {
		t.Helper()
		topo, _, _, err := w.clusterTopology(bgpmodel.Options{NodeToNodeMesh: on})
		require.NoError(t, err)
		m, err := topo.Propagate(nil)
		require.NoError(t, err)
		require.Zerof(t, m.Summary.MissingPairs, "missing pairs with the mesh on %v, e.g. %v: %s", on, m.MissingPairs(3), w.snapshot().roles())
		return m
	}
	before := sample(false)
	peakRoutes, peakSessions := map[string]float64{}, map[string]int{}
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- uninstall.Run(t.Context(), w.env.ConfigFor(testenv.UserAdmin), 90*time.Second, &out) }()
	wasOff := true
	for released := false; !released; {
		select {
		case err := <-done:
			if err != nil {
				require.Fail(t, fmt.Sprintf("uninstall: %v\n%s", err, out.String()))
			}
			released = true
		case <-time.After(100 * time.Millisecond):
		}
		on, _ := w.meshEnabled()
		s := w.snapshot()
		if on && wasOff && len(s.rrs) > 1 {
			require.Fail(t, fmt.Sprintf("the mesh came back with more than the keeper left: %v", s.roles()))
		}
		wasOff = !on
		for _, n := range sample(on).Nodes {
			peakRoutes[n.Name] = max(peakRoutes[n.Name], n.Routes)
			peakSessions[n.Name] = max(peakSessions[n.Name], n.Sessions)
		}
	}
	after := sample(true)
	for i, n := range before.Nodes {
		steadyRoutes := max(n.Routes, after.Nodes[i].Routes)
		require.LessOrEqualf(t, peakRoutes[n.Name], 2*steadyRoutes, "%s: peak routes %.0f, steady %.0f", n.Name, peakRoutes[n.Name], steadyRoutes)
		if n.ClusterID != "" {
			steadySessions := max(n.Sessions, after.Nodes[i].Sessions)
			require.LessOrEqualf(t, peakSessions[n.Name], 2*steadySessions, "%s: peak sessions %d, steady %d", n.Name, peakSessions[n.Name], steadySessions)
		}
	}
	t.Logf("busiest node: %.0f routes before, %.0f after", before.Summary.MaxRoutesPerNode, after.Summary.MaxRoutesPerNode)
	if on, err := w.meshEnabled(); !on || err != nil {
		require.Fail(t, fmt.Sprintf("mesh not back on: %v", err))
	}
	s := w.snapshot()
	for name, n := range s.nodes {
		for _, k := range extender.OwnedLabelKeys("calico-route-reflector") {
			if _, ok := n.Labels[k]; ok {
				require.Fail(t, fmt.Sprintf("%s still has label %s", name, k))
			}
		}
		for _, k := range extender.OwnedAnnotationKeys() {
			if _, ok := n.Annotations[k]; ok {
				require.Fail(t, fmt.Sprintf("%s still has annotation %s", name, k))
			}
		}
	}
	require.Emptyf(t, s.peers, "BGPPeers left: %v", s.peers)
	if got, _, _ := w.kubectl(testenv.UserAdmin, "get", "rrp", "-o", "name"); strings.TrimSpace(got) != "" {
		require.Fail(t, fmt.Sprintf("policies left: %q", got))
	}
	if !strings.Contains(out.String(), "every RouteReflectorPolicy released") {
		require.Fail(t, fmt.Sprintf("output: %s", out.String()))
	}
	t.Logf("uninstall:\n%s", out.String())
}
