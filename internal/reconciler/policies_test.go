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

// TestTwoPolicies: two policies over two node pools (both MultiCluster, one cluster ID per route
// reflector) hand out cluster IDs that are unique across them, and a node that comes to match both
// gets the OverlappingNodes condition and a Warning Event on each policy.
func TestTwoPolicies(t *testing.T) {
	var nodes []*corev1.Node
	for _, pool := range []string{"a", "b"} {
		for i := range 9 {
			n := node(fmt.Sprintf("%s-%d", pool, i), fmt.Sprintf("zone-%c", 'a'+i%3), i)
			n.Labels["pool-"+pool] = "true"
			nodes = append(nodes, n)
		}
	}
	perRR := func(pool string) func(*v1alpha1.RouteReflectorPolicySpec) {
		return func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool-" + pool: "true"}}
			s.Topology.ClusterIDs = v1alpha1.PerRouteReflector
		}
	}
	h := newHarness(t, perRR("a"), nodes)
	b := policy.Default("b")
	b.Generation = 1
	b.Spec.Topology = &v1alpha1.Topology{Type: v1alpha1.MultiCluster}
	perRR("b")(&b.Spec)
	require.NoError(t, h.client.Create(context.Background(), b))
	both := func() {
		for _, name := range []string{"default", "b", "default", "b"} {
			h.policyNm = name
			h.reconcile()
		}
	}
	both()
	ids := map[string]string{}
	for name, id := range h.rrs() {
		require.Empty(t, ids[id], "cluster ID %s on %s and %s", id, ids[id], name)
		ids[id] = name
	}
	require.Len(t, ids, 6, "three route reflectors per policy: %v", ids)

	// a-0 comes to match policy b too: managed by neither, both say so.
	h.update("a-0", func(n *corev1.Node) { n.Labels["pool-b"] = "true" })
	h.events()
	both()
	events := strings.Join(h.events(), "\n")
	for _, name := range []string{"default", "b"} {
		h.policyNm = name
		c := meta.FindStatusCondition(h.status().Conditions, ConditionOverlappingNodes)
		require.NotNil(t, c, name)
		require.Equal(t, metav1.ConditionTrue, c.Status, name)
		require.Contains(t, c.Message, "a-0 (also ", name)
	}
	require.Equal(t, 2, strings.Count(events, "Warning "+EventOverlappingNodes), "one Event per policy, once:\n%s", events)
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
