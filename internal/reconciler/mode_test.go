package reconciler

import (
	"context"
	"strings"
	"testing"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
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
