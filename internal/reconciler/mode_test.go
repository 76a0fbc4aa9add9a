package reconciler

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

func (h *harness) setMode(mode v1alpha1.Mode) {
	h.editPolicy(func(s *v1alpha1.RouteReflectorPolicySpec) { s.Mode = mode })
}

func (h *harness) status() v1alpha1.RouteReflectorPolicyStatus {
	h.t.Helper()
	pol := &v1alpha1.RouteReflectorPolicy{}
	require.NoError(h.t, h.client.Get(context.Background(), client.ObjectKey{Name: h.policyNm}, pol))
	return pol.Status
}

// TestObserveMode: in Observe the reconciler writes no node and no BGPPeer, reports what Enforce
// would change in the status and, once each, as Events; switched to Enforce it applies the plan.
func TestObserveMode(t *testing.T) {
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) { s.Mode = v1alpha1.Observe }, cluster(30))
	h.reconcile()
	require.Empty(t, h.nodePatches, "no node written")
	require.Empty(t, h.peers(), "no BGPPeer written")
	require.Empty(t, h.rrs())
	s := h.status()
	require.Equal(t, v1alpha1.Observe, s.Mode)
	require.Contains(t, s.PendingChanges, "promote node-00 in zone zone-a (cluster ID 224.0.0.1)")
	require.Contains(t, strings.Join(s.PendingChanges, "\n"), "move 27 clients")
	ready := findCondition(s.Conditions, ConditionReady)
	require.Equal(t, "Observe", ready.Reason)
	events := strings.Join(h.events(), "\n")
	require.Contains(t, events, "Normal "+EventWouldChange+" Observe: Enforce would promote node-00 in zone zone-a (cluster ID 224.0.0.1)")
	n := len(h.events())
	h.reconcile()
	require.Len(t, h.events(), n, "each pending change announced once")

	h.setMode(v1alpha1.Enforce)
	h.reconcile()
	require.Len(t, h.rrs(), 3)
	require.Empty(t, h.status().PendingChanges)
}

// TestPausedMode: paused, a cordoned route reflector keeps its role and nothing is written; the
// pending handover is in the status; back to Enforce the normal handover runs.
func TestPausedMode(t *testing.T) {
	h := newHarness(t, nil, cluster(30))
	h.reconcile()
	rrs := h.rrs()
	require.Len(t, rrs, 3)
	h.setMode(v1alpha1.Paused)
	h.reconcile()
	victim := "node-00"
	node := h.node(victim)
	node.Spec.Unschedulable = true
	require.NoError(t, h.client.Update(context.Background(), node))
	h.nodePatches = nil
	h.reconcile()
	require.Empty(t, h.nodePatches, "no node written while paused")
	require.Equal(t, rrs, h.rrs(), "no role change")
	s := h.status()
	require.Equal(t, v1alpha1.Paused, s.Mode)
	require.Contains(t, strings.Join(s.PendingChanges, "\n"), "hand node-00 over (cordoned)")

	h.setMode(v1alpha1.Enforce)
	h.reconcile()
	require.NotEmpty(t, h.node(victim).Annotations["routereflector.io/draining-since"], "handed over once enforced")
}

// TestForeignBGPPeers: hand-written BGPPeers are named in the ForeignBGPPeers condition and left
// as they are.
func TestForeignBGPPeers(t *testing.T) {
	h := newHarness(t, nil, cluster(12))
	hand := &apiv3.BGPPeer{TypeMeta: metav1.TypeMeta{APIVersion: calico.CRD.String(), Kind: "BGPPeer"},
		ObjectMeta: metav1.ObjectMeta{Name: "hand-made"}, Spec: apiv3.BGPPeerSpec{NodeSelector: "all()", PeerSelector: "has(rr)"}}
	require.NoError(t, h.client.Create(context.Background(), hand))
	h.reconcile()
	c := findCondition(h.status().Conditions, ConditionForeignBGPPeers)
	require.NotNil(t, c)
	require.Equal(t, metav1.ConditionTrue, c.Status)
	require.Equal(t, "1 BGPPeers not written by calico-rr-autoscaler, left as they are: hand-made", c.Message)
	require.Contains(t, h.peers(), "hand-made")
}

// TestObserveWritesOnlyStatus runs every step in Observe, with BGP health on, through what makes
// Enforce write most (a layout switch, a cordoned route reflector, a relabel, new and deleted
// nodes, BGP sessions reported down) and finds no write but the policy's status: no Node, no
// BGPPeer, no CalicoNodeStatus, no BGPConfiguration created or changed. What Enforce would do is
// in the status and the Events.
func TestObserveWritesOnlyStatus(t *testing.T) {
	on := true
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.BGPHealth = &v1alpha1.BGPHealth{Enabled: &on, GracePeriod: &metav1.Duration{Duration: 5 * time.Second}}
	}, cluster(30))
	h.reconcile() // Enforce: route reflectors, BGPPeers
	h.now = h.now.Add(time.Second)
	h.reconcile() // and their CalicoNodeStatuses
	rrs := slices.Sorted(maps.Keys(h.rrs()))
	require.NotEmpty(t, rrs)
	ctx := context.Background()
	cnss := &apiv3.CalicoNodeStatusList{}
	require.NoError(t, h.client.List(ctx, cnss))
	require.NotEmpty(t, cnss.Items, "bgpHealth is on: Enforce keeps one per route reflector")
	for i := range cnss.Items { // what Observe would need to create
		require.NoError(t, h.client.Delete(ctx, &cnss.Items[i]))
	}
	h.setMode(v1alpha1.Observe)

	onlyStatus := func(what string) {
		t.Helper()
		h.mu.Lock()
		h.writeLog = nil
		h.mu.Unlock()
		for range 4 {
			h.reconcile()
			h.now = h.now.Add(20 * time.Second)
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, w := range h.writeLog {
			require.Equal(t, "patch RouteReflectorPolicy "+h.policyNm+" status", w, "%s: Observe wrote more than the status", what)
		}
	}
	onlyStatus("switched to Observe")
	h.update(rrs[0], func(n *corev1.Node) { n.Spec.Unschedulable = true })
	onlyStatus("a route reflector cordoned")
	h.editPolicy(func(s *v1alpha1.RouteReflectorPolicySpec) { s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane} })
	onlyStatus("a layout switch")
	require.NoError(t, h.client.Create(ctx, node("node-30", "zone-a", 30)))
	require.NoError(t, h.client.Delete(ctx, h.node(rrs[1])))
	onlyStatus("a node joined, a route reflector deleted")
	h.update("node-05", func(n *corev1.Node) { n.Labels["topology.kubernetes.io/zone"] = "zone-c" })
	onlyStatus("a relabel")

	require.NoError(t, h.client.List(ctx, cnss))
	require.Empty(t, cnss.Items, "no CalicoNodeStatus created in Observe")
	s := h.status()
	require.Equal(t, v1alpha1.Observe, s.Mode)
	require.NotEmpty(t, s.PendingChanges)
	require.Contains(t, strings.Join(h.events(), "\n"), EventWouldChange)
	require.Empty(t, s.Transitions, "no move made, none recorded")
}
