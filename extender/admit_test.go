package extender_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv/nodetest"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

var admitT0 = time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)

func admitNode(i int, zone string, ready bool) *extender.Node {
	n := nodetest.New(fmt.Sprintf("node-%04d", i), nodetest.Zone(zone), nodetest.Created(admitT0.Add(time.Duration(i)*time.Second)))
	if !ready {
		nodetest.NotReady(n)
	}
	return extender.FromNode(n)
}

// admitPolicy is the default policy changed by mut, in MultiCluster unless mut names another
// topology: the tests that use it were written for MultiCluster, the default before DualPlane.
func admitPolicy(t testing.TB, mut func(*v1alpha1.RouteReflectorPolicySpec)) *policy.Resolved {
	t.Helper()
	p := policy.Default("default")
	p.Spec.Topology = &v1alpha1.Topology{Type: v1alpha1.MultiCluster}
	if mut != nil {
		mut(&p.Spec)
	}
	r, errs := policy.Resolve(p)
	require.NoError(t, errs.ToAggregate())
	return r
}

// applyState writes a NodeState's owned keys onto a node.
func applyState(p *policy.Resolved, n *extender.Node, st extender.NodeState) {
	for _, k := range extender.OwnedLabelKeys(p.RRLabelKey) {
		delete(n.Labels, k)
	}
	for _, k := range extender.OwnedAnnotationKeys() {
		delete(n.Annotations, k)
	}
	for k, v := range st.Labels {
		n.Labels[k] = v
	}
	for k, v := range st.Annotations {
		n.Annotations[k] = v
	}
}

func rrOf(p *policy.Resolved, n *extender.Node) (string, bool) {
	if !p.IsRouteReflectorLabel(n.Labels) {
		return "", false
	}
	id, ok := n.Annotations[extender.AnnotationClusterID]
	return id, ok
}

// joinAll admits nodes one at a time onto the state of a plan of base, applying each decision.
func joinAll(t *testing.T, p *policy.Resolved, base, joining []*extender.Node) (*extender.AdmitState, []*extender.Node) {
	t.Helper()
	in := extender.Input{Policy: p, Nodes: base, Now: admitT0.Add(time.Hour)}
	st := extender.NewAdmitState(in, extender.Plan(in))
	all := slices.Clone(base)
	for _, n := range joining {
		a := st.Admit(n)
		if a.Role != extender.AdmitNone {
			applyState(p, n, a.State(p))
		}
		st.Record(&a)
		all = append(all, n)
	}
	return st, all
}

func TestAdmitEmptyClusterPromotesOnePerZone(t *testing.T) {
	p := admitPolicy(t, nil)
	var joining []*extender.Node
	for i := range 30 {
		joining = append(joining, admitNode(i, fmt.Sprintf("zone-%c", 'a'+i%3), true))
	}
	st, all := joinAll(t, p, nil, joining)
	ids := map[string]string{}
	for _, n := range all {
		if id, ok := rrOf(p, n); ok {
			ids[n.Name] = id
		}
	}
	want := map[string]string{"node-0000": "224.0.0.1", "node-0001": "224.0.0.2", "node-0002": "224.0.0.3"}
	require.Equalf(t, fmt.Sprint(want), fmt.Sprint(ids), "route reflectors %v, want %v", ids, want)
	require.Equal(t, 3, st.RouteReflectors(), "route reflectors the state counts")
	for _, n := range all[3:] {
		rrs := n.Annotations[extender.AnnotationRouteReflectors]
		if rrs != "node-0000,node-0001,node-0002" || n.Labels[extender.LabelPeeringSet] == "" {
			require.Fail(t, fmt.Sprintf("%s: route reflectors %q set %q", n.Name, rrs, n.Labels[extender.LabelPeeringSet]))
		}
	}
	// The full plan agrees: nothing to move.
	res := extender.Plan(extender.Input{Policy: p, Nodes: all, Now: admitT0.Add(time.Hour)})
	assertNoOvershoot(t, p, all, res)
}

// assertNoOvershoot checks that a full plan keeps every admitted route reflector and its cluster ID.
func assertNoOvershoot(t *testing.T, p *policy.Resolved, nodes []*extender.Node, res *extender.Result) {
	t.Helper()
	planned := map[string]extender.RouteReflector{}
	for _, rr := range res.RouteReflectors {
		planned[rr.Node] = rr
	}
	n := 0
	for _, node := range nodes {
		id, ok := rrOf(p, node)
		if !ok {
			continue
		}
		n++
		rr, kept := planned[node.Name]
		if !kept || rr.Draining {
			assert.Fail(t, fmt.Sprintf("admitted route reflector %s (zone %s) is demoted by the full plan", node.Name, node.Labels[corev1.LabelTopologyZone]))
		} else if p.Topology != v1alpha1.MultiCluster || p.ClusterIDMode == v1alpha1.PerRouteReflector {
			assert.Equalf(t, id, rr.ClusterID, "%s: the plan's cluster ID against the admitted one", node.Name)
		}
	}
	assert.LessOrEqualf(t, n, res.Summary.RouteReflectors, "%d route reflectors admitted, the plan wants %d", n, res.Summary.RouteReflectors)
}

func TestAdmitBurstNeverOvershoots(t *testing.T) {
	for _, tc := range []struct {
		name string
		mut  func(*v1alpha1.RouteReflectorPolicySpec)
	}{
		{"default", nil},
		{"ratio", func(s *v1alpha1.RouteReflectorPolicySpec) { s.Scaling = &v1alpha1.Scaling{Ratio: "0.05"} }},
		{"per-rr", func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.Scaling = &v1alpha1.Scaling{Ratio: "0.02"}
			s.Topology = &v1alpha1.Topology{ClusterIDs: v1alpha1.PerRouteReflector}
		}},
		{"single", func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.Scaling = &v1alpha1.Scaling{Ratio: "0.02"}
			s.Topology = &v1alpha1.Topology{Type: v1alpha1.SingleCluster}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := admitPolicy(t, tc.mut)
			for seed := range uint64(5) {
				rng := rand.New(rand.NewPCG(seed, 1))
				var base, joining []*extender.Node
				for i := range 240 {
					n := admitNode(i, fmt.Sprintf("zone-%c", 'a'+rng.IntN(3)), true)
					if i < 40 {
						base = append(base, n)
					} else {
						joining = append(joining, n)
					}
				}
				// The base cluster is settled on its plan.
				in := extender.Input{Policy: p, Nodes: base, Now: admitT0.Add(time.Hour)}
				res := extender.Plan(in)
				for i, n := range base {
					applyState(p, n, res.Nodes[i])
				}
				rng.Shuffle(len(joining), func(i, j int) { joining[i], joining[j] = joining[j], joining[i] })
				st, all := joinAll(t, p, base, joining)
				full := extender.Plan(extender.Input{Policy: p, Nodes: all, Now: admitT0.Add(time.Hour)})
				assertNoOvershoot(t, p, all, full)
				if seed == 0 {
					t.Logf("%d route reflectors admitted incrementally, full plan %d (desired %d)", st.RouteReflectors(), full.Summary.RouteReflectors, full.Summary.DesiredRouteReflectors)
				}
				if st.RouteReflectors() > p.Max {
					require.Fail(t, fmt.Sprintf("%d route reflectors, max %d", st.RouteReflectors(), p.Max))
				}
				if p.ClusterIDMode == v1alpha1.PerRouteReflector {
					seen := map[string]string{}
					for _, n := range all {
						if id, ok := rrOf(p, n); ok {
							if o, dup := seen[id]; dup {
								require.Fail(t, fmt.Sprintf("%s and %s share cluster ID %s", o, n.Name, id))
							}
							seen[id] = n.Name
						}
					}
				}
			}
		})
	}
}

func TestAdmitIneligibleAndReadiness(t *testing.T) {
	p := admitPolicy(t, nil)
	in := extender.Input{Policy: p, Now: admitT0}
	st := extender.NewAdmitState(in, extender.Plan(in))

	// A joining node that is not Ready yet has nobody to peer with: no decision.
	n := admitNode(1, "zone-a", false)
	a := st.Admit(n)
	require.Equalf(t, extender.AdmitNone, a.Role, "not-ready joiner: %+v", a)
	require.False(t, a.Eligible, "not-ready joiner: %+v", a)
	require.False(t, a.Healthy, "not-ready joiner: %+v", a)
	st.Record(&a)
	// Ready: promoted.
	n.Status.Conditions[0].Status = corev1.ConditionTrue
	a = st.Admit(n)
	require.Equalf(t, extender.AdmitRouteReflector, a.Role, "ready joiner: %+v", a)
	require.Equal(t, "224.0.0.1", a.ClusterID, "ready joiner")
	require.Equal(t, "zone zone-a below desired 1", a.Reason, "ready joiner")
	undo := st.Record(&a)
	require.Equal(t, 1, st.RouteReflectors(), "route reflectors")
	// A cordoned node becomes a client.
	c := admitNode(2, "zone-b", true)
	c.Spec.Unschedulable = true
	a2 := st.Admit(c)
	require.Equalf(t, extender.AdmitClient, a2.Role, "cordoned joiner: %+v", a2)
	require.NotEmpty(t, a2.PeeringSet, "cordoned joiner's peering set")
	require.Equal(t, []string{"node-0001"}, a2.RouteReflectors, "cordoned joiner's route reflectors")
	state := a2.State(p)
	require.Equalf(t, "node-0001", state.Annotations[extender.AnnotationRouteReflectors], "client state %+v", state)
	require.Equalf(t, a2.PeeringSet, state.Labels[extender.LabelPeeringSet], "client state %+v", state)
	// Undo takes the promotion back.
	undo()
	require.Zero(t, st.RouteReflectors(), "route reflectors after undo")
}

func TestAdmitKnownNodeAnswersFromPlan(t *testing.T) {
	p := admitPolicy(t, nil)
	var nodes []*extender.Node
	for i := range 12 {
		nodes = append(nodes, admitNode(i, fmt.Sprintf("zone-%c", 'a'+i%3), true))
	}
	in := extender.Input{Policy: p, Nodes: nodes, Now: admitT0}
	res := extender.Plan(in)
	st := extender.NewAdmitState(in, res)
	for i, n := range nodes {
		a := st.Admit(n)
		want := res.Nodes[i]
		got := a.State(p)
		require.Equal(t, fmt.Sprint(want.Labels, want.Annotations), fmt.Sprint(got.Labels, got.Annotations), "%s: admitted as planned", n.Name)
		require.Equal(t, "planned", a.Reason, "%s", n.Name)
	}
}

func TestAdmitSingleClusterZoneIDs(t *testing.T) {
	p := admitPolicy(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.Topology = &v1alpha1.Topology{Type: v1alpha1.SingleCluster}
		s.MinRouteReflectors = ptr(int32(2))
	})
	var joining []*extender.Node
	for i := range 12 {
		joining = append(joining, admitNode(i, fmt.Sprintf("zone-%c", 'a'+i%2), true))
	}
	_, all := joinAll(t, p, nil, joining)
	ids := map[string]map[string]bool{}
	for _, n := range all {
		if id, ok := rrOf(p, n); ok {
			z := n.Labels[corev1.LabelTopologyZone]
			if ids[z] == nil {
				ids[z] = map[string]bool{}
			}
			ids[z][id] = true
		}
	}
	require.Len(t, ids, 2, "cluster IDs per zone: %v", ids)
	require.Len(t, ids["zone-a"], 1, "cluster IDs per zone: %v", ids)
	require.Len(t, ids["zone-b"], 1, "cluster IDs per zone: %v", ids)
	require.NotEqual(t, fmt.Sprint(ids["zone-a"]), fmt.Sprint(ids["zone-b"]), "the zones share a cluster ID")
	for _, n := range all {
		if _, ok := rrOf(p, n); ok {
			continue
		}
		if got := n.Annotations[extender.AnnotationRouteReflectors]; got == "" {
			require.Fail(t, fmt.Sprintf("%s has no route reflectors", n.Name))
		}
	}
	assertNoOvershoot(t, p, all, extender.Plan(extender.Input{Policy: p, Nodes: all, Now: admitT0.Add(time.Hour)}))
}

func ptr[T any](v T) *T { return &v }

func BenchmarkAdmit5000(b *testing.B) {
	p := admitPolicy(b, nil)
	var nodes []*extender.Node
	for i := range 5000 {
		nodes = append(nodes, admitNode(i, fmt.Sprintf("zone-%c", 'a'+i%3), true))
	}
	in := extender.Input{Policy: p, Nodes: nodes, Now: admitT0}
	st := extender.NewAdmitState(in, extender.Plan(in))
	n := admitNode(9999, "zone-b", true)
	b.ReportAllocs()
	for b.Loop() {
		a := st.Admit(n)
		require.False(b, a.Role == extender.AdmitNone, "no decision")
	}
}

// TestCalicoNodeRegistered: with the etcd datastore's registered Calico Nodes, neither the plan nor
// an admission makes a node calico-node has not registered a route reflector while registered
// eligible nodes exist; a current route reflector keeps its role when its name is missing (the
// watch lags).
func TestCalicoNodeRegistered(t *testing.T) {
	p := admitPolicy(t, nil)
	var nodes []*extender.Node
	for i := range 12 {
		nodes = append(nodes, admitNode(i, fmt.Sprintf("zone-%c", 'a'+i%3), true))
	}
	registered := map[string]bool{}
	for _, n := range nodes[3:] { // the oldest three (the plan's first choice) are not registered
		registered[n.Name] = true
	}
	in := extender.Input{Policy: p, Nodes: nodes, Now: admitT0.Add(time.Hour),
		Filters: append(extender.DefaultFilters(), extender.NewCalicoNodeRegistered(registered))}
	res := extender.Plan(in)
	require.NotEmpty(t, res.RouteReflectors)
	for _, rr := range res.RouteReflectors {
		require.Truef(t, registered[rr.Node], "%s is planned as a route reflector without a Calico Node", rr.Node)
	}
	for _, ie := range res.Ineligible {
		require.Equal(t, extender.RuleUnregisteredNode, ie.Rule, ie.Node)
	}
	require.Len(t, res.Ineligible, 3)

	t.Run("admission", func(t *testing.T) {
		st := extender.NewAdmitState(extender.Input{Policy: p, Now: admitT0.Add(time.Hour), Filters: in.Filters}, extender.Plan(extender.Input{Policy: p, Now: admitT0.Add(time.Hour)}))
		a := st.Admit(nodes[0])
		require.NotEqual(t, extender.AdmitRouteReflector, a.Role, "%s without a Calico Node promoted at admission", nodes[0].Name)
		require.False(t, a.Eligible)
		b := st.Admit(nodes[3])
		require.Equal(t, extender.AdmitRouteReflector, b.Role, "%s with its Calico Node: %+v", nodes[3].Name, b)
	})

	t.Run("a current route reflector keeps its role", func(t *testing.T) {
		for _, st := range res.Nodes {
			for _, n := range nodes {
				if n.Name == st.Name {
					applyState(p, n, st)
				}
			}
		}
		delete(registered, res.RouteReflectors[0].Node)
		again := extender.Plan(extender.Input{Policy: p, Nodes: nodes, Now: admitT0.Add(2 * time.Hour), Filters: in.Filters})
		require.ElementsMatch(t, rrNodes(res), rrNodes(again))
	})
}

func rrNodes(r *extender.Result) []string {
	var out []string
	for _, rr := range r.RouteReflectors {
		out = append(out, rr.Node)
	}
	return out
}
