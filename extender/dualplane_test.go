package extender_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/nodesource"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// TestDualPlaneDefaultLayout: the empty policy at the sizes the default-layout issue names. Every
// plan keeps the invariants (CheckInvariants runs the graph model's drills: every node up, each zone
// lost, each route reflector lost, a sample beyond 5,000 nodes), is not Degraded, gives every client
// two route reflectors and no route reflector more than 500 clients, and the graph model puts at most
// 10 paths per prefix on the busiest node and 8 on the mean one (the layout gives 2: one per plane).
func TestDualPlaneDefaultLayout(t *testing.T) {
	tests := []struct{ nodes, zones int }{
		{100, 1}, {100, 3}, {100, 10}, {300, 3}, {1000, 3}, {5000, 1}, {5000, 3}, {5000, 10}, {20000, 3}, {65000, 3},
	}
	p := policy.MustResolve(policy.Default("default"))
	require.Equal(t, v1alpha1.DualPlane, p.Topology)
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d nodes in %d zones", tt.nodes, tt.zones), func(t *testing.T) {
			if tt.nodes > 5000 && testing.Short() {
				t.Skip("-short")
			}
			sim, err := nodesource.Simulate(tt.nodes, tt.zones)
			nodes := extender.FromNodes(sim)
			require.NoError(t, err)
			in := extender.Input{Policy: p, Nodes: nodes, Now: nodesource.SimulationStart.Add(time.Hour)}
			res := extender.Plan(in)
			require.Empty(t, res.Conditions, "not Degraded")
			bad := extender.CheckInvariants(p, nodes, res)
			require.Empty(t, bad, strings.Join(bad[:min(len(bad), 3)], "\n"))
			assert.LessOrEqual(t, res.Summary.MaxClientsPerRouteReflector, 500)
			for _, c := range res.Clients {
				require.GreaterOrEqual(t, len(c.RouteReflectors), 2, "client %s", c.Node)
			}
			m, err := bgpmodel.Evaluate(in, res, bgpmodel.Options{})
			require.NoError(t, err)
			n := float64(m.Summary.Nodes)
			busiest, mean := m.Summary.MaxRoutesPerNode/n, m.Summary.TotalRoutes/n/n
			t.Logf("%d route reflectors, %d clients per route reflector at most, %d BGPPeers; paths per prefix: busiest %.2f, mean %.2f",
				res.Summary.RouteReflectors, res.Summary.MaxClientsPerRouteReflector, res.Summary.BGPPeers, busiest, mean)
			assert.LessOrEqual(t, busiest, 10.0)
			assert.LessOrEqual(t, mean, 8.0)
			assert.Zero(t, m.Summary.MissingPairs)
		})
	}
}

// TestDualPlaneInvariantsCatchBrokenWiring: the invariants fail on a plan whose wiring loses routes
// (the uplink BGPPeers removed: racks no longer reach the spine) and on one that gives a client a
// single route reflector.
func TestDualPlaneInvariantsCatchBrokenWiring(t *testing.T) {
	p := policy.MustResolve(policy.Default("default"))
	sim, err := nodesource.Simulate(1500, 3) // racks and a spine (300 nodes are one rack)
	nodes := extender.FromNodes(sim)
	require.NoError(t, err)
	res := extender.Plan(extender.Input{Policy: p, Nodes: nodes, Now: nodesource.SimulationStart})
	require.Empty(t, extender.CheckInvariants(p, nodes, res))

	noUplinks := *res
	noUplinks.BGPPeers = nil
	for _, b := range res.BGPPeers {
		if !strings.HasPrefix(b.Name, extender.UplinkBGPPeerPrefix) {
			noUplinks.BGPPeers = append(noUplinks.BGPPeers, b)
		}
	}
	require.Less(t, len(noUplinks.BGPPeers), len(res.BGPPeers))
	bad := extender.CheckInvariants(p, nodes, &noUplinks)
	require.NotEmpty(t, bad)
	assert.Contains(t, bad[0], "node pairs missing")

	oneRR := *res
	oneRR.Clients = append([]extender.Client(nil), res.Clients...)
	oneRR.Clients[0].RouteReflectors = oneRR.Clients[0].RouteReflectors[:1]
	bad = extender.CheckInvariants(p, nodes, &oneRR)
	require.NotEmpty(t, bad)
	assert.Contains(t, bad[0], "has 1 route reflectors")
}

// TestZoneRacks: a zone splits as soon as it outgrows its racks and merges only a margin (a tenth
// of a rack) below the boundary, so a zone that hovers at a boundary keeps its racks.
func TestZoneRacks(t *testing.T) {
	tests := []struct{ n, cur, want int }{
		{1, 0, 1}, {500, 0, 1}, {501, 0, 2}, {1000, 0, 2}, {1001, 0, 3},
		{501, 1, 2},  // outgrown: split
		{500, 2, 2},  // back at the boundary: keep two
		{451, 2, 2},  // within the margin: keep
		{450, 2, 1},  // a margin below: merge
		{900, 3, 2},  // 900 <= 2*500-50: merge to two racks
		{951, 3, 3},  // 951 > 2*500-50: keep
		{2000, 3, 4}, // outgrown by more than one rack
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d nodes, %d racks", tt.n, tt.cur), func(t *testing.T) {
			assert.Equal(t, tt.want, extender.ZoneRacks(tt.n, tt.cur, 500))
		})
	}
}

// TestMaxClientsPerRouteReflector: an explicit topology honours the bound when it is set (more
// route reflectors in MultiCluster, smaller racks in Hierarchical) and says Degraded when
// maxRouteReflectors or the zones leave no way to keep it; unset, the seed's tables stand.
func TestMaxClientsPerRouteReflector(t *testing.T) {
	sim, err := nodesource.Simulate(2000, 3)
	nodes := extender.FromNodes(sim)
	require.NoError(t, err)
	tests := []struct {
		name     string
		spec     v1alpha1.RouteReflectorPolicySpec
		degraded string
	}{
		{"MultiCluster adds route reflectors", v1alpha1.RouteReflectorPolicySpec{MaxClientsPerRouteReflector: ptr(int32(300)), MaxRouteReflectors: ptr(int32(40)),
			Topology: &v1alpha1.Topology{Type: v1alpha1.MultiCluster}}, ""},
		{"MultiCluster capped by maxRouteReflectors", v1alpha1.RouteReflectorPolicySpec{MaxClientsPerRouteReflector: ptr(int32(300)), MaxRouteReflectors: ptr(int32(12)),
			Topology: &v1alpha1.Topology{Type: v1alpha1.MultiCluster}}, extender.ReasonMaxClients},
		{"Hierarchical splits racks", v1alpha1.RouteReflectorPolicySpec{MaxClientsPerRouteReflector: ptr(int32(300)), MaxRouteReflectors: ptr(int32(60)),
			Topology: &v1alpha1.Topology{Type: v1alpha1.Hierarchical}}, ""},
		{"SingleCluster cannot", v1alpha1.RouteReflectorPolicySpec{MaxClientsPerRouteReflector: ptr(int32(300)),
			Topology: &v1alpha1.Topology{Type: v1alpha1.SingleCluster}}, extender.ReasonMaxClients},
		{"DualPlane", v1alpha1.RouteReflectorPolicySpec{MaxClientsPerRouteReflector: ptr(int32(300))}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol := policy.Default("p")
			pol.Spec = tt.spec
			p := policy.MustResolve(pol)
			res := extender.Plan(extender.Input{Policy: p, Nodes: nodes, Now: nodesource.SimulationStart})
			if tt.degraded != "" {
				require.NotEmpty(t, res.Conditions)
				assert.Equal(t, tt.degraded, res.Conditions[0].Reason)
				return
			}
			require.Empty(t, res.Conditions)
			assert.LessOrEqual(t, res.Summary.MaxClientsPerRouteReflector, 300)
		})
	}
}

// TestDualPlaneAdmissionAgreesWithThePlan feeds the same joins to the admission path and to the
// planner: each joiner is admitted into its zone's emptiest rack as a client of the rack's route
// reflectors, and the full plan over the whole cluster then gives every joiner exactly the state
// admission gave it (no node moves, no role changes).
func TestDualPlaneAdmissionAgreesWithThePlan(t *testing.T) {
	p := policy.MustResolve(func() *v1alpha1.RouteReflectorPolicy {
		pol := policy.Default("default")
		pol.Spec.Topology = &v1alpha1.Topology{MaxRackSize: ptr(int32(40))}
		return pol
	}())
	var base, joining []*extender.Node
	for i := range 150 {
		base = append(base, admitNode(i, fmt.Sprintf("zone-%c", 'a'+i%3), true))
	}
	in := extender.Input{Policy: p, Nodes: base, Now: admitT0.Add(time.Hour)}
	res := extender.Plan(in)
	for i, st := range res.Nodes {
		applyState(p, base[i], st)
	}
	for i := 150; i < 180; i++ {
		joining = append(joining, admitNode(i, fmt.Sprintf("zone-%c", 'a'+i%3), true))
	}
	st, all := joinAll(t, p, base, joining)
	admitted := map[string]extender.NodeState{}
	for _, n := range joining {
		a := st.Admit(n)
		require.Equal(t, extender.AdmitClient, a.Role, "%s: %s", n.Name, a.Reason)
		require.NotEmpty(t, a.Rack)
		admitted[n.Name] = a.State(p)
	}
	full := extender.Plan(extender.Input{Policy: p, Nodes: all, Now: admitT0.Add(time.Hour)})
	for _, want := range full.Nodes {
		got, ok := admitted[want.Name]
		if !ok {
			continue
		}
		assert.Equal(t, want.Labels, got.Labels, want.Name)
		assert.Equal(t, want.Annotations, got.Annotations, want.Name)
	}
	assert.Equal(t, res.Summary.RouteReflectors, full.Summary.RouteReflectors, "no role changes")
}
