package reconciler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// twoPools returns 2 x n nodes over three zones, labelled pool-a and pool-b.
func twoPools(n int) []*corev1.Node {
	var nodes []*corev1.Node
	for _, pool := range []string{"a", "b"} {
		for i := range n {
			nd := node(fmt.Sprintf("%s-%02d", pool, i), fmt.Sprintf("zone-%c", 'a'+i%3), i)
			nd.Labels["pool-"+pool] = "true"
			nodes = append(nodes, nd)
		}
	}
	return nodes
}

// twoPolicies is a harness with policy "default" over pool-a and policy "b" over pool-b, both
// changed by spec.
func twoPolicies(t *testing.T, nodes []*corev1.Node, spec func(*v1alpha1.RouteReflectorPolicySpec)) *harness {
	pool := func(name string) func(*v1alpha1.RouteReflectorPolicySpec) {
		return func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool-" + name: "true"}}
			spec(s)
		}
	}
	h := newHarness(t, pool("a"), nodes)
	b := policy.Default("b")
	b.Generation = 1
	b.Spec.Topology = &v1alpha1.Topology{Type: v1alpha1.MultiCluster}
	pool("b")(&b.Spec)
	require.NoError(t, h.client.Create(context.Background(), b))
	return h
}

// reconcileBoth reconciles both policies of twoPolicies, twice each, in turn.
func (h *harness) reconcileBoth() {
	for _, name := range []string{"default", "b", "default", "b"} {
		h.policyNm = name
		h.reconcile()
	}
}

// TestTwoPolicies: two policies over two node pools (both MultiCluster, one cluster ID per route
// reflector) hand out cluster IDs that are unique across them, and a node that comes to match both
// gets the OverlappingNodes condition and a Warning Event on each policy.
func TestTwoPolicies(t *testing.T) {
	h := twoPolicies(t, twoPools(9), func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.Topology.ClusterIDs = v1alpha1.PerRouteReflector
	})
	h.reconcileBoth()
	ids := map[string]string{}
	for name, id := range h.rrs() {
		require.Empty(t, ids[id], "cluster ID %s on %s and %s", id, ids[id], name)
		ids[id] = name
	}
	require.Len(t, ids, 6, "three route reflectors per policy: %v", ids)

	// a-00 comes to match policy b too: managed by neither, both say so.
	h.update("a-00", func(n *corev1.Node) { n.Labels["pool-b"] = "true" })
	h.events()
	h.reconcileBoth()
	events := strings.Join(h.events(), "\n")
	for _, name := range []string{"default", "b"} {
		h.policyNm = name
		c := meta.FindStatusCondition(h.status().Conditions, ConditionOverlappingNodes)
		require.NotNil(t, c, name)
		require.Equal(t, metav1.ConditionTrue, c.Status, name)
		require.Contains(t, c.Message, "a-00 (also ", name)
	}
	require.Equal(t, 2, strings.Count(events, "Warning "+EventOverlappingNodes), "one Event per policy, once:\n%s", events)
}

// TestTwoPoliciesRouteAcrossPools: with the node-to-node mesh off, every node of one pool learns
// every node of the other (the graph model on the nodes and BGPPeers the two policies wrote): the
// top-level route reflectors of both policies peer through their mesh-all BGPPeers. Every
// topology, DualPlane with two racks per pool (so each has a spine).
func TestTwoPoliciesRouteAcrossPools(t *testing.T) {
	for _, topo := range []v1alpha1.TopologyType{v1alpha1.DualPlane, v1alpha1.Hierarchical, v1alpha1.MultiCluster, v1alpha1.SingleCluster} {
		t.Run(string(topo), func(t *testing.T) {
			h := twoPolicies(t, twoPools(24), func(s *v1alpha1.RouteReflectorPolicySpec) {
				s.Topology.Type = topo
				s.Topology.MaxRackSize = ptr(int32(10))
				if topo == v1alpha1.DualPlane || topo == v1alpha1.Hierarchical {
					s.RouteReflectorLabel = &v1alpha1.Label{Key: "rr-" + strings.ToLower(string(topo))}
				}
			})
			if topo == v1alpha1.DualPlane {
				// Different route reflector labels in the two policies.
				h.policyNm = "b"
				h.editPolicy(func(s *v1alpha1.RouteReflectorPolicySpec) { s.RouteReflectorLabel = &v1alpha1.Label{Key: "rr-b"} })
			}
			h.reconcileBoth()
			h.reconcileBoth()
			require.Zero(t, h.modelMissing(), "node pairs across the pools without routes; BGPPeers %v", h.peers())
			require.Contains(t, h.peers(), "rr-autoscaler-mesh.all.default")
		})
	}
}

// TestLeaderChangeKeepsStabilizationWindow: the scale-down window outlives the leader. A policy
// wants 6 route reflectors at 200 nodes; 100 nodes go, and the window holds 6. A new leader (a
// reconciler with no memory) still holds 6 until a window has passed, then scales down to 3.
func TestLeaderChangeKeepsStabilizationWindow(t *testing.T) {
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.Scaling = &v1alpha1.Scaling{Ratio: "0.03"}
	}, cluster(200))
	h.reconcile()
	require.EqualValues(t, 6, h.status().DesiredRouteReflectors)
	for i := 100; i < 200; i++ {
		n := h.node(fmt.Sprintf("node-%02d", i))
		require.NoError(t, h.client.Delete(context.Background(), n))
	}
	h.now = h.now.Add(time.Minute)
	h.reconcile()
	require.EqualValues(t, 6, h.status().DesiredRouteReflectors, "held by the window")

	old := h.r
	h.r = &Reconciler{Client: old.Client, Nodes: old.Nodes, Policies: old.Policies, Ledger: old.Ledger,
		Recorder: old.Recorder, PeerAPI: old.PeerAPI, Now: old.Now}
	h.now = h.now.Add(time.Minute)
	h.reconcile()
	require.EqualValues(t, 6, h.status().DesiredRouteReflectors, "the new leader keeps the window")
	h.now = h.now.Add(5*time.Minute + time.Second)
	h.reconcile()
	require.EqualValues(t, 3, h.status().DesiredRouteReflectors, "a window later")
}

// TestNodesOutsidePoliciesKeepRoutes: a policy over one pool and nodes in no policy. With Calico's
// node-to-node mesh on, the route reflectors leave the mesh (Calico's template) and the outside
// nodes would miss their routes; the top-level route reflectors take the outside nodes as clients
// (the mesh.outside BGPPeer), so the graph model on the cluster's nodes and BGPPeers shows 0
// missing pairs with the mesh on, and with it off.
func TestNodesOutsidePoliciesKeepRoutes(t *testing.T) {
	for _, topo := range []v1alpha1.TopologyType{v1alpha1.DualPlane, v1alpha1.MultiCluster} {
		t.Run(string(topo), func(t *testing.T) {
			nodes := twoPools(24)[:24] // pool a
			for i := range 6 {
				nodes = append(nodes, node(fmt.Sprintf("x-%02d", i), fmt.Sprintf("zone-%c", 'a'+i%3), i))
			}
			h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
				s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool-a": "true"}}
				s.Topology.Type = topo
				s.Topology.MaxRackSize = ptr(int32(10))
			}, nodes)
			h.reconcile()
			h.reconcile()
			require.Zero(t, h.modelMissingMesh(true), "mesh on")
			require.Zero(t, h.modelMissing(), "mesh off")
			require.Contains(t, h.peers(), "rr-autoscaler-mesh.outside.default")
		})
	}
}
