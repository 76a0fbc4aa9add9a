package extender

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

var (
	perRR  = &v1alpha1.Topology{Type: v1alpha1.MultiCluster, ClusterIDs: v1alpha1.PerRouteReflector}
	single = &v1alpha1.Topology{Type: v1alpha1.SingleCluster}
	hier   = &v1alpha1.Topology{Type: v1alpha1.Hierarchical}
	dual   = &v1alpha1.Topology{Type: v1alpha1.DualPlane}
	steps  = &v1alpha1.Scaling{Steps: []v1alpha1.Step{{MaxNodes: 200, RouteReflectors: 3}, {MaxNodes: 1000, RouteReflectors: 5}, {MaxNodes: 5000, RouteReflectors: 25}}}
)

func TestDesignTables(t *testing.T) {
	tests := []struct {
		name    string
		scaling *v1alpha1.Scaling
		nodes   int
		want    int
	}{
		{"ratio 1 node", nil, 1, 3},
		{"ratio 200", nil, 200, 3},
		{"ratio 1000", nil, 1000, 5},
		{"ratio 5000", nil, 5000, 25},
		{"ratio 20000 capped at max", nil, 20000, 25},
		{"steps 1", steps, 1, 3},
		{"steps 200", steps, 200, 3},
		{"steps 201", steps, 201, 5},
		{"steps 1000", steps, 1000, 5},
		{"steps 1001", steps, 1001, 25},
		{"steps 5000", steps, 5000, 25},
		{"steps beyond last", steps, 9000, 25},
		{"clients per RR 500, 2000 nodes", &v1alpha1.Scaling{ClientsPerRouteReflector: i32(500)}, 2000, 4},
		{"clients per RR 100, 2000 nodes", &v1alpha1.Scaling{ClientsPerRouteReflector: i32(100)}, 2000, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := resolve(t, v1alpha1.RouteReflectorPolicySpec{Scaling: tt.scaling})
			assert.Equal(t, tt.want, DesiredCount(p, tt.nodes))
		})
	}
	// The same through the whole planner (PerRouteReflector: no rounding to equal groups).
	for _, tt := range []struct{ nodes, want int }{{1, 1}, {200, 3}, {1000, 5}, {5000, 25}} {
		t.Run(fmt.Sprintf("plan %d nodes", tt.nodes), func(t *testing.T) {
			p := resolve(t, v1alpha1.RouteReflectorPolicySpec{Topology: perRR})
			r := plan(t, p, cluster(tt.nodes, 3))
			assert.Equal(t, tt.want, r.Summary.RouteReflectors)
			assert.Empty(t, checkInvariants(p, cluster(tt.nodes, 3), r))
		})
	}
}

func TestStatisticsTables(t *testing.T) {
	t.Run("single cluster, 500 nodes", func(t *testing.T) {
		p := resolve(t, v1alpha1.RouteReflectorPolicySpec{Topology: single})
		s := plan(t, p, cluster(500, 1)).Summary
		assert.Equal(t, []int{3, 497, 2, 499, 3}, []int{s.RouteReflectors, s.MaxClientsPerRouteReflector, s.MaxRouteReflectorsPerRR, s.MaxConnectionsPerRouteReflector, s.Redundancy})
	})
	t.Run("multi cluster grouped, 2000 nodes, min 11", func(t *testing.T) {
		p := resolve(t, v1alpha1.RouteReflectorPolicySpec{MinRouteReflectors: i32(11)})
		s := plan(t, p, cluster(2000, 3)).Summary
		assert.Equal(t, 12, s.RouteReflectors)
		assert.Equal(t, 3, s.ClusterIDs)
		assert.LessOrEqual(t, s.MaxClientsPerRouteReflector, 497)
		assert.LessOrEqual(t, s.MaxConnectionsPerRouteReflector, 508)
	})
	t.Run("multi cluster per RR, 2000 nodes, min 11", func(t *testing.T) {
		p := resolve(t, v1alpha1.RouteReflectorPolicySpec{MinRouteReflectors: i32(11), Topology: perRR})
		s := plan(t, p, cluster(2000, 3)).Summary
		assert.Equal(t, 11, s.RouteReflectors)
		assert.Equal(t, 11, s.ClusterIDs)
		assert.LessOrEqual(t, s.MaxClientsPerRouteReflector, 543)
		assert.LessOrEqual(t, s.MaxConnectionsPerRouteReflector, 553)
	})
	t.Run("hierarchical, 5000 nodes in 10 racks", func(t *testing.T) {
		p := resolve(t, v1alpha1.RouteReflectorPolicySpec{MaxRouteReflectors: i32(50), Topology: hier})
		r := plan(t, p, cluster(5000, 10))
		assert.Equal(t, 33, r.Summary.RouteReflectors)
		assert.Equal(t, 11, r.Summary.ClusterIDs)
		assert.Empty(t, r.Conditions)
		assert.Empty(t, checkInvariants(p, cluster(5000, 10), r))
	})
	t.Run("grouped rounds to equal groups", func(t *testing.T) {
		p := resolve(t, v1alpha1.RouteReflectorPolicySpec{})
		assert.Equal(t, 6, plan(t, p, cluster(1000, 3)).Summary.RouteReflectors)
		assert.Equal(t, 24, plan(t, p, cluster(5000, 3)).Summary.RouteReflectors, "27 exceeds max 25: round down")
	})
}

func TestZones(t *testing.T) {
	t.Run("balanced across zones", func(t *testing.T) {
		p := resolve(t, v1alpha1.RouteReflectorPolicySpec{MinRouteReflectors: i32(7), Topology: perRR})
		r := plan(t, p, cluster(300, 3))
		counts := zoneCounts(r)
		assert.Equal(t, map[string]int{"zone-a": 3, "zone-b": 2, "zone-c": 2}, counts)
	})
	t.Run("a zone short of eligible nodes spills into the others", func(t *testing.T) {
		nodes := cluster(90, 3)
		for _, n := range nodes {
			if n.Labels[corev1.LabelTopologyZone] == "zone-c" && n.Name != "node-00003" {
				n.Spec.Unschedulable = true
			}
		}
		p := resolve(t, v1alpha1.RouteReflectorPolicySpec{MinRouteReflectors: i32(9), Topology: perRR})
		r := plan(t, p, nodes)
		assert.Equal(t, 9, r.Summary.RouteReflectors)
		assert.Equal(t, map[string]int{"zone-a": 4, "zone-b": 4, "zone-c": 1}, zoneCounts(r))
		assert.Empty(t, checkInvariants(p, nodes, r))
	})
	t.Run("every client spans two zones", func(t *testing.T) {
		for _, top := range []*v1alpha1.Topology{nil, perRR} {
			p := resolve(t, v1alpha1.RouteReflectorPolicySpec{Topology: top})
			r := plan(t, p, cluster(200, 2))
			rrs := rrNames(r)
			for _, c := range r.Clients {
				zs := map[string]bool{}
				for _, name := range c.RouteReflectors {
					zs[rrs[name].Zone] = true
				}
				require.Len(t, zs, 2, "client %s: %v", c.Node, c.RouteReflectors)
				assert.Equal(t, true, zs[c.Zone], "client %s has no route reflector in its own zone", c.Node)
			}
		}
	})
	t.Run("single cluster: one cluster ID per zone, clients on their zone's route reflectors", func(t *testing.T) {
		p := resolve(t, v1alpha1.RouteReflectorPolicySpec{Topology: single})
		r := plan(t, p, cluster(60, 3))
		assert.Equal(t, 9, r.Summary.RouteReflectors)
		assert.Equal(t, 3, r.Summary.ClusterIDs)
		rrs := rrNames(r)
		for _, c := range r.Clients {
			require.Len(t, c.RouteReflectors, 3)
			for _, name := range c.RouteReflectors {
				assert.Equal(t, c.Zone, rrs[name].Zone)
			}
		}
		assert.Empty(t, checkInvariants(p, cluster(60, 3), r))
	})
	t.Run("nodes without a zone label are in zone \"\"", func(t *testing.T) {
		nodes := cluster(10, 1)
		for _, n := range nodes {
			delete(n.Labels, corev1.LabelTopologyZone)
		}
		r := plan(t, resolve(t, v1alpha1.RouteReflectorPolicySpec{}), nodes)
		assert.Equal(t, map[string]int{"": 3}, zoneCounts(r))
	})
}

func TestEdgeCases(t *testing.T) {
	t.Run("all nodes forbidden", func(t *testing.T) {
		p := resolve(t, v1alpha1.RouteReflectorPolicySpec{ForbiddenNodeSelector: &metav1.LabelSelector{}})
		r := plan(t, p, cluster(20, 3))
		assert.Equal(t, 0, r.Summary.RouteReflectors)
		require.NotNil(t, r.Degraded())
		assert.Equal(t, ReasonNotEnoughEligibleNodes, r.Degraded().Reason)
		assert.Len(t, r.Ineligible, 20)
		assert.Equal(t, ReasonForbidden, r.Ineligible[0].Reason)
		assert.Empty(t, r.BGPPeers)
	})
	t.Run("one node", func(t *testing.T) {
		r := plan(t, resolve(t, v1alpha1.RouteReflectorPolicySpec{}), cluster(1, 1))
		assert.Equal(t, 1, r.Summary.RouteReflectors)
		assert.Empty(t, r.Clients)
		assert.NotNil(t, r.Degraded())
	})
	t.Run("no nodes", func(t *testing.T) {
		r := plan(t, resolve(t, v1alpha1.RouteReflectorPolicySpec{}), nil)
		assert.Equal(t, 0, r.Summary.Nodes)
		assert.Empty(t, r.RouteReflectors)
	})
	t.Run("nodes outside the nodeSelector are ignored", func(t *testing.T) {
		nodes := cluster(30, 3)
		for _, n := range nodes[:10] {
			n.Labels["pool"] = "edge"
		}
		p := resolve(t, v1alpha1.RouteReflectorPolicySpec{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "edge"}}})
		r := plan(t, p, nodes)
		assert.Equal(t, 10, r.Summary.Nodes)
		assert.Len(t, r.Nodes, 10)
	})
	t.Run("preferred nodes first, then older ones", func(t *testing.T) {
		nodes := cluster(30, 1)
		nodes[29].Labels["rr"] = "yes"
		p := resolve(t, v1alpha1.RouteReflectorPolicySpec{PreferredNodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"rr": "yes"}}, Topology: single})
		r := plan(t, p, nodes)
		assert.ElementsMatch(t, []string{"node-00030", "node-00001", "node-00002"}, keys(rrNames(r)))
	})
	t.Run("untolerated taint", func(t *testing.T) {
		nodes := cluster(6, 1)
		for _, n := range nodes[:3] {
			n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}
		}
		p := resolve(t, v1alpha1.RouteReflectorPolicySpec{Tolerations: []corev1.Toleration{{Key: "other", Operator: corev1.TolerationOpExists}}})
		r := plan(t, p, nodes)
		assert.ElementsMatch(t, []string{"node-00004", "node-00005", "node-00006"}, keys(rrNames(r)))
	})
}

func TestHandover(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change nodeOpt
	}{
		{"cordoned", cordoned},
		{"forbidden label added", label("no-rr", "true")},
		{"NotReady", notReady},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := resolve(t, v1alpha1.RouteReflectorPolicySpec{
				ForbiddenNodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"no-rr": "true"}},
				RemovalDelay:          &metav1.Duration{Duration: 5 * time.Minute},
			})
			nodes := cluster(60, 3)
			now := t0.Add(24 * time.Hour)
			r1 := Plan(Input{Policy: p, Nodes: nodes, Now: now})
			apply(p, nodes, r1)
			victim := r1.RouteReflectors[0]
			oldID := victim.ClusterID
			var vn *Node
			for _, n := range nodes {
				if n.Name == victim.Node {
					vn = n
				}
			}
			with(vn, tc.change)

			r2 := Plan(Input{Policy: p, Nodes: nodes, Now: now.Add(time.Minute)})
			rr2 := rrNames(r2)
			require.Contains(t, rr2, victim.Node, "the old route reflector keeps its role while draining")
			assert.True(t, rr2[victim.Node].Draining)
			assert.Equal(t, oldID, rr2[victim.Node].ClusterID)
			assert.Equal(t, r1.Summary.RouteReflectors, r2.Summary.RouteReflectors, "a replacement is active")
			for _, c := range r2.Clients {
				assert.NotContains(t, c.RouteReflectors, victim.Node, "clients moved off the draining route reflector")
			}
			var replacement string
			for name, rr := range rr2 {
				if _, was := rrNames(r1)[name]; !was {
					replacement = name
					assert.Equal(t, victim.Zone, rr.Zone, "replacement in the same zone")
					assert.Equal(t, oldID, rr.ClusterID, "replacement joins the same group")
				}
			}
			require.NotEmpty(t, replacement)
			assert.Empty(t, checkInvariants(p, nodes, r2))
			apply(p, nodes, r2)

			// Before the delay, applying again changes nothing.
			r3 := Plan(Input{Policy: p, Nodes: nodes, Now: now.Add(4 * time.Minute)})
			assert.Equal(t, r2.Nodes, r3.Nodes)
			// After the delay, the old route reflector loses its role.
			r4 := Plan(Input{Policy: p, Nodes: nodes, Now: now.Add(7 * time.Minute)})
			assert.NotContains(t, rrNames(r4), victim.Node)
			assert.Contains(t, rrNames(r4), replacement)
			assert.Empty(t, checkInvariants(p, nodes, r4))
		})
	}
	t.Run("deleted route reflector", func(t *testing.T) {
		p := resolve(t, v1alpha1.RouteReflectorPolicySpec{})
		nodes := cluster(60, 3)
		r1 := plan(t, p, nodes)
		apply(p, nodes, r1)
		victim := r1.RouteReflectors[1].Node
		nodes = slices.DeleteFunc(nodes, func(n *Node) bool { return n.Name == victim })
		r2 := plan(t, p, nodes)
		assert.Equal(t, r1.Summary.RouteReflectors, r2.Summary.RouteReflectors)
		assert.Empty(t, checkInvariants(p, nodes, r2))
		// Only the clients of the lost route reflector move.
		before := clientRRs(r1)
		moved := 0
		for _, c := range r2.Clients {
			if !slices.Equal(before[c.Node], c.RouteReflectors) {
				moved++
				assert.Contains(t, before[c.Node], victim, "client %s moved without losing a route reflector", c.Node)
			}
		}
		assert.Positive(t, moved)
	})
	t.Run("every route reflector ineligible: clients keep the draining ones", func(t *testing.T) {
		p := resolve(t, v1alpha1.RouteReflectorPolicySpec{ForbiddenNodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"no-rr": "true"}}})
		nodes := cluster(30, 3)
		apply(p, nodes, plan(t, p, nodes))
		for _, n := range nodes {
			n.Labels["no-rr"] = "true"
		}
		r := Plan(Input{Policy: p, Nodes: nodes, Now: t0.Add(48 * time.Hour)})
		require.NotNil(t, r.Degraded())
		for _, c := range r.Clients {
			assert.NotEmpty(t, c.RouteReflectors, "client %s", c.Node)
		}
	})
}

func TestStability(t *testing.T) {
	for _, top := range []*v1alpha1.Topology{nil, perRR, single, hier} {
		name := "MultiCluster"
		if top != nil {
			name = string(top.Type) + string(top.ClusterIDs)
		}
		t.Run(name, func(t *testing.T) {
			p := resolve(t, v1alpha1.RouteReflectorPolicySpec{Topology: top})
			nodes := cluster(400, 3)
			r1 := plan(t, p, nodes)
			apply(p, nodes, r1)
			r2 := plan(t, p, nodes)
			assert.Equal(t, r1.Nodes, r2.Nodes, "re-planning an applied plan changes nothing")

			// A new node joins: no route reflector role moves and no client changes its set.
			nodes = append(nodes, node("node-99999", "zone-b", 9999))
			r3 := plan(t, p, nodes)
			assert.Equal(t, keys(rrNames(r1)), keys(rrNames(r3)))
			before := clientRRs(r1)
			for _, c := range r3.Clients {
				if old, ok := before[c.Node]; ok {
					assert.Equal(t, old, c.RouteReflectors, "client %s", c.Node)
				}
			}
		})
	}
}

func TestShuffledInputSamePlan(t *testing.T) {
	for _, top := range []*v1alpha1.Topology{nil, perRR, single, hier} {
		p := resolve(t, v1alpha1.RouteReflectorPolicySpec{Topology: top})
		nodes := cluster(500, 4)
		want, _ := json.Marshal(plan(t, p, nodes))
		rng := rand.New(rand.NewPCG(1, 2))
		for i := 0; i < 5; i++ {
			rng.Shuffle(len(nodes), func(a, b int) { nodes[a], nodes[b] = nodes[b], nodes[a] })
			got, _ := json.Marshal(plan(t, p, nodes))
			require.JSONEq(t, string(want), string(got))
		}
	}
}

func TestScaleDownStabilization(t *testing.T) {
	p := resolve(t, v1alpha1.RouteReflectorPolicySpec{Topology: perRR})
	nodes := cluster(2000, 3) // 10 route reflectors
	now := t0.Add(24 * time.Hour)
	r1 := Plan(Input{Policy: p, Nodes: nodes, Now: now})
	require.Equal(t, 10, r1.Summary.RouteReflectors)
	apply(p, nodes, r1)
	small := nodes[:1000] // desired 5
	r2 := Plan(Input{Policy: p, Nodes: small, Now: now.Add(time.Minute), Recommendations: r1.Recommendations})
	assert.Equal(t, 10, r2.Summary.DesiredRouteReflectors, "within the window the highest recommendation holds")
	r3 := Plan(Input{Policy: p, Nodes: small, Now: now.Add(6 * time.Minute), Recommendations: r2.Recommendations})
	assert.Equal(t, 5, r3.Summary.DesiredRouteReflectors, "after the window the count follows the nodes")
	// Scaling up is immediate.
	r4 := Plan(Input{Policy: p, Nodes: cluster(3000, 3), Now: now.Add(7 * time.Minute), Recommendations: r3.Recommendations})
	assert.Equal(t, 15, r4.Summary.DesiredRouteReflectors)
}

func TestHierarchicalRacks(t *testing.T) {
	t.Run("large racks split stably", func(t *testing.T) {
		p := resolve(t, v1alpha1.RouteReflectorPolicySpec{MaxRouteReflectors: i32(100), Topology: &v1alpha1.Topology{Type: v1alpha1.Hierarchical, MaxRackSize: i32(50), Redundancy: i32(2)}})
		nodes := cluster(300, 3) // 3 zones of 100: 2 racks each
		r := plan(t, p, nodes)
		racks := map[string]int{}
		for _, c := range r.Clients {
			racks[c.Rack]++
		}
		assert.Len(t, racks, 6)
		assert.Equal(t, 2+6*2, r.Summary.RouteReflectors)
		assert.Empty(t, checkInvariants(p, nodes, r))
		apply(p, nodes, r)
		// New nodes do not move existing ones between racks.
		nodes = append(nodes, node("node-99999", "zone-a", 9999))
		r2 := plan(t, p, nodes)
		old := map[string]string{}
		for _, c := range r.Clients {
			old[c.Node] = c.Rack
		}
		for _, c := range r2.Clients {
			if rack, ok := old[c.Node]; ok {
				assert.Equal(t, rack, c.Rack, c.Node)
			}
		}
	})
	t.Run("maxRouteReflectors caps the racks, Degraded", func(t *testing.T) {
		p := resolve(t, v1alpha1.RouteReflectorPolicySpec{MaxRouteReflectors: i32(10), Topology: hier})
		nodes := cluster(1000, 10)
		r := plan(t, p, nodes)
		assert.LessOrEqual(t, r.Summary.RouteReflectors, 10)
		require.NotNil(t, r.Degraded())
		assert.Equal(t, ReasonMaxRouteReflectors, r.Degraded().Reason)
		for _, c := range r.Clients {
			assert.NotEmpty(t, c.RouteReflectors)
		}
	})
}

func TestBGPPeers(t *testing.T) {
	p := resolve(t, v1alpha1.RouteReflectorPolicySpec{})
	r := plan(t, p, cluster(300, 3))
	require.NotEmpty(t, r.BGPPeers)
	assert.Equal(t, MeshBGPPeerName("default"), r.BGPPeers[0].Name)
	assert.Equal(t, "has(calico-route-reflector)", r.BGPPeers[0].Spec.NodeSelector)
	sets := map[string]bool{}
	for _, c := range r.Clients {
		sets[c.PeeringSet] = true
	}
	assert.Len(t, r.BGPPeers, 1+len(sets), "one BGPPeer per distinct peering set, not one per client")
	for _, b := range r.BGPPeers {
		assert.Equal(t, ManagedByValue, b.Labels[LabelManagedBy])
		assert.True(t, len(b.Name) > len(BGPPeerPrefix) && b.Name[:len(BGPPeerPrefix)] == BGPPeerPrefix)
	}
}

func zoneCounts(r *Result) map[string]int {
	m := map[string]int{}
	for _, rr := range r.RouteReflectors {
		if !rr.Draining {
			m[rr.Zone]++
		}
	}
	return m
}

func clientRRs(r *Result) map[string][]string {
	m := map[string][]string{}
	for _, c := range r.Clients {
		m[c.Node] = c.RouteReflectors
	}
	return m
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// A small zone whose only route reflectors carry one cluster ID: the second-zone pick of every
// client elsewhere can only take that ID, so the own-zone pick must take the other one, or two
// clients on disjoint route reflectors of one ID lose each other's routes (projectcalico/calico#2735;
// found by FuzzPlan).
func TestClientsNeverOnOneClusterID(t *testing.T) {
	p := resolve(t, v1alpha1.RouteReflectorPolicySpec{
		MinRouteReflectors: i32(8), MaxRouteReflectors: i32(8),
		Topology: &v1alpha1.Topology{Type: v1alpha1.MultiCluster, ClusterIDs: v1alpha1.Grouped, ClusterIDGroups: i32(2), Redundancy: i32(2)},
	})
	nodes := []*Node{node("small-1", "", 0), node("small-2", "", 1)}
	for i := range 46 {
		nodes = append(nodes, node(fmt.Sprintf("big-%02d", i), "zone-a", 10+i))
	}
	r := plan(t, p, nodes)
	require.Empty(t, checkInvariants(p, nodes, r))
	ids := map[string]string{}
	for _, rr := range r.RouteReflectors {
		ids[rr.Node] = rr.ClusterID
	}
	for _, c := range r.Clients {
		if len(c.RouteReflectors) == 2 && ids[c.RouteReflectors[0]] == ids[c.RouteReflectors[1]] {
			assert.Fail(t, fmt.Sprintf("client %s peers with %v, both cluster ID %s", c.Node, c.RouteReflectors, ids[c.RouteReflectors[0]]))
		}
	}
}

// With one cluster ID per route reflector, a new route reflector never gets an ID that a node the
// plan demotes still carries: the reconciler would hold the new one back until the ID is released,
// while the demotion waits for every planned route reflector to be in place (a deadlock seen after
// a leader change in TestTwoReplicasBurst).
func TestPerRRNewIDNotHeldByDemotion(t *testing.T) {
	p := resolve(t, v1alpha1.RouteReflectorPolicySpec{
		MinRouteReflectors: i32(3), MaxRouteReflectors: i32(3), Topology: perRR,
		RemovalDelay: &metav1.Duration{Duration: time.Minute},
	})
	nodes := cluster(30, 3)
	// node-00001 was drained long ago (cordoned) and is due for demotion; it still carries 224.0.0.1.
	with(nodes[0], asRR("224.0.0.1"))
	with(nodes[0], annot(AnnotationDrainingSince, t0.Format(time.RFC3339)))
	with(nodes[0], cordoned)
	with(nodes[1], asRR("224.0.0.2"))
	with(nodes[2], asRR("224.0.0.3"))
	r := plan(t, p, nodes)
	rrs := rrNames(r)
	if _, ok := rrs["node-00001"]; ok {
		require.Fail(t, fmt.Sprintf("node-00001 is still a route reflector in the plan: %+v", rrs["node-00001"]))
	}
	for name, rr := range rrs {
		require.Falsef(t, rr.ClusterID == "224.0.0.1", "%s gets 224.0.0.1, which node-00001 still carries until its demotion", name)
	}
	require.Lenf(t, rrs, 3, "route reflectors %v, want 3", rrs)
	require.Empty(t, checkInvariants(p, nodes, r))
}
