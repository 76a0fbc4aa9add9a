package reconciler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// renumbered counts the route reflectors of before still route reflectors in after with another
// cluster ID.
func renumbered(before, after map[string]string) (out []string) {
	for n, id := range before {
		if to, ok := after[n]; ok && to != id {
			out = append(out, n)
		}
	}
	return out
}

// TestReconcileClusterIDChangesOneAtATime: layout switches at 90 nodes (MultiCluster to
// DualPlane, racks halved, to Hierarchical, Hierarchical's racks split from 30 to 12, back to
// MultiCluster) renumber several route reflectors that keep their role; each renumbering restarts
// all of that route reflector's BGP sessions. The reconciler makes them one at a time: never two in
// one reconcile, and the next not before idSettle (no BGPSessions handover here) although
// reconciles come every 4 s. The graph model finds 0 missing pairs after every reconcile (a rack
// split first renumbers the route reflector whose old ID another rack takes, the rest waiting),
// and every switch completes. Without staging, MultiCluster to Hierarchical renumbered 4 in one
// reconcile, and holding changes without the model's check lost 29 pairs in the rack split.
func TestReconcileClusterIDChangesOneAtATime(t *testing.T) {
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.Topology = &v1alpha1.Topology{Type: v1alpha1.MultiCluster, MaxRackSize: ptrTo(int32(20))}
	}, cluster(90))
	h.reconcile()
	require.Zero(t, h.modelMissing(), "settled on MultiCluster")

	for _, topo := range []*v1alpha1.Topology{
		{Type: v1alpha1.DualPlane, MaxRackSize: ptrTo(int32(20))}, {Type: v1alpha1.DualPlane, MaxRackSize: ptrTo(int32(10))},
		{Type: v1alpha1.Hierarchical, MaxRackSize: ptrTo(int32(30))}, {Type: v1alpha1.Hierarchical, MaxRackSize: ptrTo(int32(12))},
		{Type: v1alpha1.MultiCluster, MaxRackSize: ptrTo(int32(20))},
	} {
		h.editPolicy(func(s *v1alpha1.RouteReflectorPolicySpec) { s.Topology = topo })
		total, lastAt := 0, time.Time{}
		for step := 0; step < 60; step++ {
			before := h.rrs()
			h.reconcile()
			changed := renumbered(before, h.rrs())
			require.LessOrEqual(t, len(changed), 1, "%s, reconcile %d: renumbered together: %v", topo.Type, step, changed)
			if len(changed) == 1 {
				if !lastAt.IsZero() {
					require.GreaterOrEqual(t, h.now.Sub(lastAt), idSettle, "%s: %s renumbered %v after the last", topo.Type, changed[0], h.now.Sub(lastAt))
				}
				total, lastAt = total+1, h.now
			}
			require.Zero(t, h.modelMissing(), "%s, reconcile %d", topo.Type, step)
			h.now = h.now.Add(4 * time.Second)
		}
		t.Logf("%s %d: %d route reflectors renumbered, one at a time", topo.Type, *topo.MaxRackSize, total)
		h.now = h.now.Add(5 * time.Minute)
		h.reconcile()
		h.reconcile()
		require.Zero(t, h.r.last[h.policyNm].Summary.DrainingRouteReflectors, "%s: no route reflector left draining", topo.Type)
		require.Empty(t, renumbered(h.rrs(), planIDs(h)), "%s: every planned cluster ID applied", topo.Type)
	}
}

// planIDs is the last plan's cluster ID by route reflector.
func planIDs(h *harness) map[string]string {
	out := map[string]string{}
	for _, rr := range h.r.last[h.policyNm].RouteReflectors {
		out[rr.Node] = rr.ClusterID
	}
	return out
}
