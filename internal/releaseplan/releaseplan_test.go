package releaseplan

import (
	"fmt"
	"slices"
	"testing"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/nodesource"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// planned is a plan applied: the nodes with the plan's labels and annotations, and its BGPPeers,
// as the release's simulation reads the cluster.
func planned(t testing.TB, in extender.Input, res *extender.Result) *Sim {
	t.Helper()
	byName := map[string]*extender.Node{}
	for _, n := range in.Nodes {
		byName[n.Name] = n
	}
	var nodes []*extender.Node
	for _, st := range res.Nodes {
		n := byName[st.Name].DeepCopy()
		n.Labels = extender.ApplyOwned(n.Labels, extender.OwnedLabelKeys(in.Policy.RRLabelKey), st.Labels)
		n.Annotations = extender.ApplyOwned(n.Annotations, extender.OwnedAnnotationKeys(), st.Annotations)
		nodes = append(nodes, n)
	}
	var peers []*apiv3.BGPPeer
	for _, b := range res.BGPPeers {
		peers = append(peers, &apiv3.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: b.Name, Labels: b.Labels}, Spec: b.Spec})
	}
	return New(in.Policy, in.Policy.Name, nodes, peers)
}

// TestReleaseFiguresRacksOf8: the case by the graph model: the product's DualPlane plan of
// 24 nodes in two zones, racks of 8 (10 route reflectors, 5 cluster IDs), migrated off the mesh,
// then deleted. The old release BGPPeer (every node with every route reflector, the mesh on)
// puts 117,124 routes on the busiest node (real BIRD: 117,111), 2,492 times its steady state; the
// release through a keeper peaks at 1.87 times the steady routes and 1 time the route
// reflectors' sessions, with no pair lost at any step.
func TestReleaseFiguresRacksOf8(t *testing.T) {
	p := policy.Default("racks")
	p.Spec.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: ptr.To(int32(8))}
	r, errs := policy.Resolve(p)
	require.NoError(t, errs.ToAggregate())
	nodes, err := nodesource.Simulate(24, 2)
	require.NoError(t, err)
	in := extender.Input{Policy: r, Nodes: extender.FromNodes(nodes), Now: nodesource.SimulationStart.Add(24 * 3600e9)}
	res := extender.Plan(in)
	s := planned(t, in, res)
	require.Len(t, s.PolicyRRs(), 10)
	ok, _ := RestoresMesh(r, len(s.nodes))
	require.True(t, ok, "24 nodes: the mesh comes back")

	before, err := s.Model(nil, false, "", false, false)
	require.NoError(t, err)
	after, err := s.Model(nil, true, "", true, true)
	require.NoError(t, err)
	// The old release BGPPeer: nodeSelector all(), every route reflector of the policy, mesh on.
	old := s.peers
	s.peers = append(slices.Clone(old), apiv3.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "old-release"},
		Spec: apiv3.BGPPeerSpec{NodeSelector: "all()", PeerSelector: extender.RouteReflectorSelector(r.RRLabelKey, r.RRLabelValue)}})
	exploded, err := s.Model(nil, false, "", false, true)
	require.NoError(t, err)
	s.peers = old
	oldPeak := 0.0
	for i, n := range exploded.Nodes {
		oldPeak = max(oldPeak, n.Routes/max(before.Nodes[i].Routes, after.Nodes[i].Routes))
	}
	require.Equal(t, 117124.0, exploded.Summary.MaxRoutesPerNode, "the old release's busiest node")

	plan := s.Plan(false)
	require.NotEmpty(t, plan.Keeper, plan.Why)
	t.Logf("24 nodes, racks of 8: busiest node %.0f routes before, %.0f after; old release %.0f (%.0f times the steady state); through %s: %d steps, peak %.2f times the steady routes, %.2f the route reflectors' sessions",
		before.Summary.MaxRoutesPerNode, after.Summary.MaxRoutesPerNode, exploded.Summary.MaxRoutesPerNode, oldPeak, plan.Keeper, plan.Steps, plan.PeakRoutes, plan.PeakSessions)
	require.Greater(t, oldPeak, 1000.0)
	require.LessOrEqual(t, plan.PeakRoutes, Bound)
	require.LessOrEqual(t, plan.PeakSessions, Bound)
	require.Equal(t, "1.87 1.00", fmt.Sprintf("%.2f %.2f", plan.PeakRoutes, plan.PeakSessions))
}

// TestReleaseFiguresAtScale: at 5,000 and (without -short) 65,000 nodes in three zones, the
// default DualPlane plan. Above maxMeshNodes (100) the deletion keeps the layout: peak = steady
// (the state does not change). Turning the mesh back on with the old release BGPPeer would have
// given every route reflector a session with every node: N-1 sessions against its steady state.
func TestReleaseFiguresAtScale(t *testing.T) {
	sizes := []int{5000}
	if !testing.Short() {
		sizes = append(sizes, 65000)
	}
	for _, n := range sizes {
		in, res, err := bgpmodel.SamplePlan("DualPlane", n, 3)
		require.NoError(t, err)
		s := planned(t, in, res)
		ok, why := RestoresMesh(in.Policy, len(s.nodes))
		require.False(t, ok)
		require.Equal(t, fmt.Sprintf("the cluster has %d nodes, more than spec.release.maxMeshNodes (100): a node-to-node mesh there would hold %d sessions per node", n, n-1), why)
		before, err := s.Model(nil, false, "", false, false)
		require.NoError(t, err)
		require.Zero(t, before.Summary.MissingPairs)
		maxRRSessions := 0
		for _, nr := range before.Nodes {
			if nr.ClusterID != "" {
				maxRRSessions = max(maxRRSessions, nr.Sessions)
			}
		}
		// The layout kept: the state after is the state before, so every node's peak is its
		// steady state.
		t.Logf("%d nodes: %d route reflectors; layout kept: busiest node %.0f routes (%.1f per prefix), busiest route reflector %d sessions, peak = steady (1.00); the old release: %d sessions per route reflector (%.0f times), the mesh back: %d per node",
			n, before.Summary.RouteReflectors, before.Summary.MaxRoutesPerNode, before.Summary.MaxRoutesPerNode/float64(n), maxRRSessions, n-1, float64(n-1)/float64(maxRRSessions), n-1)
		require.Greater(t, float64(n-1)/float64(maxRRSessions), Bound, "the old release exceeded the bound")
	}
}

func TestRestoresMesh(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mesh  v1alpha1.ReleaseMesh
		nodes int
		want  bool
		why   string
	}{
		{name: "Auto at maxMeshNodes", mesh: v1alpha1.ReleaseMeshAuto, nodes: 100, want: true},
		{name: "Auto above maxMeshNodes", mesh: v1alpha1.ReleaseMeshAuto, nodes: 101,
			why: "the cluster has 101 nodes, more than spec.release.maxMeshNodes (100): a node-to-node mesh there would hold 100 sessions per node"},
		{name: "Restore above maxMeshNodes", mesh: v1alpha1.ReleaseMeshRestore, nodes: 5000, want: true},
		{name: "Keep", mesh: v1alpha1.ReleaseMeshKeep, nodes: 3, why: "spec.release.nodeToNodeMesh is Keep"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, errs := policy.Resolve(policy.Default("p"))
			require.NoError(t, errs.ToAggregate())
			p.ReleaseMesh = tc.mesh
			ok, why := RestoresMesh(p, tc.nodes)
			require.Equal(t, tc.want, ok)
			require.Equal(t, tc.why, why)
		})
	}
}
