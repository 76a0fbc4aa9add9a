package bgpmodel

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/nodesource"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// applied returns the nodes with the plan's owned labels and annotations, as the reconciler
// writes them.
func applied(in extender.Input, res *extender.Result) []*extender.Node {
	want := map[string]extender.NodeState{}
	for _, st := range res.Nodes {
		want[st.Name] = st
	}
	lk, ak := extender.OwnedLabelKeys(in.Policy.RRLabelKey), extender.OwnedAnnotationKeys()
	out := make([]*extender.Node, len(in.Nodes))
	for i, n := range in.Nodes {
		c := n.DeepCopy()
		if st, ok := want[n.Name]; ok {
			c.Labels = extender.ApplyOwned(c.Labels, lk, st.Labels)
			c.Annotations = extender.ApplyOwned(c.Annotations, ak, st.Annotations)
		}
		out[i] = c
	}
	return out
}

// TestTransitionOfARackReplacement: a rack route reflector dead past its grace period is replaced;
// the transition from the cluster as it is to the plan restarts only the sessions of the promoted
// node (its sessions change from client to route reflector whatever the IDs), and the pairs at
// risk are its own. With the surviving mate's cluster ID changed (what the planner did before the
// transitions issue), every session of the mate restarts and pairs between nodes that keep their
// role are at risk: the measure sees it.
func TestTransitionOfARackReplacement(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes int
		rack  int32
		zones int
	}{{"one rack", 30, 300, 3}, {"racks of 10", 60, 10, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			p := policy.Default("dual")
			p.Spec.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: &tc.rack}
			p.Spec.NotReadyGracePeriod = &metav1.Duration{Duration: time.Minute}
			r, errs := policy.Resolve(p)
			require.NoError(t, errs.ToAggregate())
			nodes, err := nodesource.Simulate(tc.nodes, tc.zones)
			require.NoError(t, err)
			now := nodesource.SimulationStart.Add(24 * time.Hour)
			in := extender.Input{Policy: r, Nodes: extender.FromNodes(nodes), Now: now}
			res := extender.Plan(in)
			for range 3 { // settle
				in.Nodes, in.Now = applied(in, res), in.Now.Add(time.Minute)
				res = extender.Plan(in)
			}
			in.Nodes = applied(in, res)
			before, err := FromPlan(in, res, Options{})
			require.NoError(t, err)
			var victim, mate extender.RouteReflector
			for _, rr := range res.RouteReflectors {
				if !rr.Spine && rr.Plane == 1 && victim.Node == "" {
					victim = rr
				}
			}
			for _, rr := range res.RouteReflectors {
				if !rr.Spine && rr.Rack == victim.Rack && rr.Plane == 2 {
					mate = rr
				}
			}
			require.NotEmpty(t, mate.Node)
			// The victim dies: NotReady since ten minutes (past the grace and graceful restart).
			next := extender.Input{Policy: r, Now: in.Now.Add(time.Minute)}
			for _, n := range in.Nodes {
				c := n.DeepCopy()
				if c.Name == victim.Node {
					c.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(in.Now.Add(-10 * time.Minute))}}
				}
				next.Nodes = append(next.Nodes, c)
			}
			res2 := extender.Plan(next)
			after, err := FromPlan(next, res2, Options{})
			require.NoError(t, err)
			var promoted []string
			was := map[string]bool{}
			for _, rr := range res.RouteReflectors {
				was[rr.Node] = true
			}
			for _, rr := range res2.RouteReflectors {
				if !was[rr.Node] {
					promoted = append(promoted, rr.Node)
				}
				if rr.Node == mate.Node {
					require.Equal(t, mate.ClusterID, rr.ClusterID, "the mate keeps its cluster ID")
				}
			}
			require.NotEmpty(t, promoted, "a replacement")
			down := map[string]bool{victim.Node: true}
			tr, err := NewTransition(before, after, down)
			require.NoError(t, err)
			t.Logf("%s: %s", tc.name, tr)
			assert.Zero(t, tr.MissingBefore+tr.MissingAfter, "before and after keep every pair of live nodes")
			assert.Zero(t, tr.KeptRolesAtRisk, "no pair between nodes that keep their role at risk")
			for _, nc := range tr.RestartsByNode {
				// A restart has two ends: one of them is a promoted node.
				if nc.Node == mate.Node {
					assert.LessOrEqual(t, nc.Count, len(promoted), "the mate restarts only its sessions to the promoted node")
				}
			}
			for _, p := range tr.AtRisk {
				assert.True(t, p[0] == promoted[0] || p[1] == promoted[0], "pair %v at risk does not involve the promoted node %s", p, promoted[0])
			}

			// The old behaviour: the mate gets a fresh ID in the same plan.
			bad := *after
			bad.Nodes = append([]Node(nil), after.Nodes...)
			for i := range bad.Nodes {
				if bad.Nodes[i].ClusterID == mate.ClusterID {
					bad.Nodes[i].ClusterID = "224.0.0.99"
				}
			}
			trBad, err := NewTransition(before, &bad, down)
			require.NoError(t, err)
			t.Logf("%s, the mate renumbered: %s", tc.name, trBad)
			assert.Greater(t, trBad.Restarted, tr.Restarted, "renumbering the mate restarts its sessions")
			assert.Greater(t, trBad.PairsAtRisk, tr.PairsAtRisk, "renumbering the mate puts more pairs at risk")
			assert.Positive(t, trBad.KeptRolesAtRisk, "pairs between nodes that keep their role among them")
		})
	}
}

// BenchmarkTransition65000: the transition of a rack route reflector's replacement at 65,000 nodes
// (the settled default layout, one rack route reflector NotReady past the grace): the two
// topologies from the plans and NewTransition. The plan with its drills is measured apart
// (BenchmarkPlanWithDrills).
func BenchmarkTransition65000(b *testing.B) { benchTransition65000(b, false) }

// BenchmarkPlanDrillsTransition65000 is the transitions issue's goal as the leader meets it: the
// plan of the replacement with its failure drills, then the transition from the cluster as it is.
func BenchmarkPlanDrillsTransition65000(b *testing.B) { benchTransition65000(b, true) }

func benchTransition65000(b *testing.B, plan bool) {
	p := policy.Default("dual")
	r, errs := policy.Resolve(p)
	require.NoError(b, errs.ToAggregate())
	nodes, err := nodesource.Simulate(65000, 3)
	require.NoError(b, err)
	in := extender.Input{Policy: r, Nodes: extender.FromNodes(nodes), Now: nodesource.SimulationStart.Add(24 * time.Hour)}
	res := extender.Plan(in)
	in.Nodes, in.Now = applied(in, res), in.Now.Add(time.Minute)
	res = extender.Plan(in)
	in.Nodes = applied(in, res)
	var victim string
	for _, rr := range res.RouteReflectors {
		if !rr.Spine && victim == "" {
			victim = rr.Node
		}
	}
	next := extender.Input{Policy: r, Now: in.Now.Add(time.Minute)}
	for _, n := range in.Nodes {
		if n.Name == victim {
			n = n.DeepCopy()
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(in.Now.Add(-10 * time.Minute))}}
		}
		next.Nodes = append(next.Nodes, n)
	}
	res2 := extender.Plan(next)
	down := map[string]bool{victim: true}
	next.Drills = PlanDrills
	b.ResetTimer()
	for b.Loop() {
		if plan {
			res2 = extender.Plan(next)
			require.NoError(b, res2.DrillsErr)
			require.Empty(b, extender.FailedDrills(res2.Drills))
		}
		before, err := FromPlan(in, res, Options{})
		require.NoError(b, err)
		after, err := FromPlan(next, res2, Options{})
		require.NoError(b, err)
		tr, err := NewTransition(before, after, down)
		require.NoError(b, err)
		require.Zero(b, tr.KeptRolesAtRisk)
	}
}
