package extender

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// pool returns n Ready nodes named <prefix>-NN labelled pool=<prefix>, over three zones.
func pool(prefix string, n int) []*Node {
	out := make([]*Node, n)
	for i := range out {
		out[i] = node(fmt.Sprintf("%s-%02d", prefix, i), fmt.Sprintf("zone-%c", 'a'+i%3), i, label("pool", prefix))
	}
	return out
}

func poolPolicy(t *testing.T, name string, topo v1alpha1.TopologyType) *policy.Resolved {
	t.Helper()
	p := policy.Default(name)
	p.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": name}}
	p.Spec.Topology = &v1alpha1.Topology{Type: topo}
	if topo == v1alpha1.MultiCluster {
		p.Spec.Topology.ClusterIDs = v1alpha1.PerRouteReflector
	}
	if topo == v1alpha1.DualPlane {
		p.Spec.Topology.MaxRackSize = i32(10) // two racks per pool: a spine of its own
	}
	r, errs := policy.Resolve(p)
	require.NoError(t, errs.ToAggregate())
	return r
}

func activeIDs(r *Result) []string {
	var ids []string
	for _, rr := range r.RouteReflectors {
		if !rr.Draining && !slices.Contains(ids, rr.ClusterID) {
			ids = append(ids, rr.ClusterID)
		}
	}
	slices.Sort(ids)
	return ids
}

// TestClusterIDsUniqueAcrossPolicies: two policies over two node pools, each planned with the
// other's cluster IDs as foreign, never share one (route reflectors of two policies that share a
// cluster ID drop each other's routes). When they already collide (planned without the other),
// the policy whose node sorts first keeps the ID and the other moves: both come to the same
// answer, so exactly one side changes.
func TestClusterIDsUniqueAcrossPolicies(t *testing.T) {
	for _, topo := range []v1alpha1.TopologyType{v1alpha1.DualPlane, v1alpha1.MultiCluster, v1alpha1.SingleCluster, v1alpha1.Hierarchical} {
		t.Run(string(topo), func(t *testing.T) {
			a, b := pool("a", 24), pool("b", 24)
			pa, pb := poolPolicy(t, "a", topo), poolPolicy(t, "b", topo)
			all := slices.Concat(a, b)
			planWith := func(p *policy.Resolved, own []*Node, foreign bool) *Result {
				in := Input{Policy: p, Nodes: all, Now: t0.Add(24 * 3600e9)}
				if foreign {
					in.ForeignClusterIDs = ForeignClusterIDs(all, own)
				}
				r := Plan(in)
				apply(p, own, r)
				return r
			}
			// Planned without each other: the same IDs (the collision to resolve).
			ra, rb := planWith(pa, a, false), planWith(pb, b, false)
			before := activeIDs(ra)
			if len(before) == 0 || !slices.Equal(before, activeIDs(rb)) {
				require.Fail(t, fmt.Sprintf("setup: a %v, b %v: want the same IDs", before, activeIDs(rb)))
			}
			// Each re-planned with the other's IDs as foreign, in either order.
			rb = planWith(pb, b, true)
			ra = planWith(pa, a, true)
			rb = planWith(pb, b, true)
			if got := activeIDs(ra); !slices.Equal(got, before) {
				require.Fail(t, fmt.Sprintf("policy a (first by name) changed its IDs: %v -> %v", before, got))
			}
			for _, id := range activeIDs(rb) {
				if slices.Contains(activeIDs(ra), id) {
					require.Fail(t, fmt.Sprintf("cluster ID %s in both policies: a %v, b %v", id, activeIDs(ra), activeIDs(rb)))
				}
			}
			// Stable: planning again changes nothing.
			if again := planWith(pb, b, true); !slices.Equal(activeIDs(again), activeIDs(rb)) {
				require.Fail(t, fmt.Sprintf("b not stable: %v -> %v", activeIDs(rb), activeIDs(again)))
			}
			// The admission path hands out no foreign ID either.
			in := Input{Policy: pb, Nodes: all, Now: t0.Add(24 * 3600e9), ForeignClusterIDs: ForeignClusterIDs(all, b)}
			st := NewAdmitState(in, Plan(in))
			for id := range in.ForeignClusterIDs {
				if st.freeID() == id {
					require.Fail(t, fmt.Sprintf("freeID %s is policy a's", policy.ClusterIDString(id)))
				}
			}
		})
	}
}
