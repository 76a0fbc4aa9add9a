package reconciler

import (
	"context"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// TestPolicyDeletion: a policy that turned the node-to-node mesh off is deleted. Its finalizer
// writes the release BGPPeer to one route reflector (the keeper) and keeps every role for
// removalDelay, releases the other route reflectors one at a time, turns the mesh back on once
// only the keeper is left, keeps it for removalDelay, then releases it and the clients, deletes the
// BGPPeers and goes. The graph model (with the mesh as the BGPConfiguration says) finds every
// route after every reconcile.
func TestPolicyDeletion(t *testing.T) {
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.RemovalDelay = &metav1.Duration{Duration: time.Minute}
		s.MigrateFromNodeMesh = true
	}, ipCluster(12))
	h.reconcile()
	h.now = h.now.Add(time.Minute + time.Second)
	h.reconcile()
	require.True(t, meshOff(h), "the policy turned the mesh off")
	require.Zero(t, h.modelMissingMesh(false))
	pol := &v1alpha1.RouteReflectorPolicy{}
	require.NoError(t, h.client.Get(context.Background(), client.ObjectKey{Name: h.policyNm}, pol))
	require.Contains(t, pol.Finalizers, Finalizer)
	rrs := h.rrs()

	require.NoError(t, h.client.Delete(context.Background(), pol))
	h.reconcile()
	require.True(t, meshOff(h), "the mesh stays off while the route reflectors go through the keeper")
	require.Equal(t, rrs, h.rrs(), "every role stays while the release BGPPeer's sessions come up")
	require.Contains(t, h.peers(), extender.BGPPeerPrefix+"release."+h.policyNm)
	require.Zero(t, h.modelMissingMesh(false))

	h.now = h.now.Add(time.Minute + time.Second)
	for range len(rrs) - 1 {
		// calico-node reports the keeper's sessions up (releasesessions.go) after each step.
		h.now = h.now.Add(transitions.DefaultMin)
		h.calicoNodeAllUp()
		h.reconcile()
		require.True(t, meshOff(h))
		require.Zero(t, h.modelMissingMesh(false))
	}
	require.Len(t, h.rrs(), 1, "the keeper is left")
	h.reconcile()
	require.False(t, meshOff(h), "the mesh is back on once only the keeper is left")
	require.Len(t, h.rrs(), 1, "the keeper stays while the mesh sessions come up")
	require.Zero(t, h.modelMissingMesh(true))

	h.now = h.now.Add(30 * time.Second)
	h.reconcile()
	require.Len(t, h.rrs(), 1, "still within removalDelay")

	h.now = h.now.Add(31 * time.Second)
	h.reconcile()
	require.Empty(t, h.rrs(), "route reflectors released")
	require.Empty(t, h.peers(), "BGPPeers deleted")
	// The cache may still show the released policy (finalizer and all): a reconcile of that stale
	// copy writes nothing (it once wrote the release BGPPeer again, left for good).
	stale, ok, _ := h.polIdx.GetByKey(h.policyNm)
	require.True(t, ok)
	require.Contains(t, stale.(*v1alpha1.RouteReflectorPolicy).Finalizers, Finalizer)
	h.writes.Store(0)
	_, err := h.r.Reconcile(context.Background(), request(h.policyNm))
	require.NoError(t, err)
	require.Zero(t, h.writes.Load(), "writes by a reconcile of a released policy's stale copy")
	require.Empty(t, h.peers(), "BGPPeers after a reconcile of the stale copy")
	for _, n := range h.nodes() {
		for _, k := range extender.OwnedLabelKeys("calico-route-reflector") {
			require.NotContains(t, n.Labels, k, n.Name)
		}
		for _, k := range extender.OwnedAnnotationKeys() {
			require.NotContains(t, n.Annotations, k, n.Name)
		}
	}
	require.Zero(t, h.modelMissingMesh(true), "every node on the mesh")
	err = h.client.Get(context.Background(), client.ObjectKey{Name: h.policyNm}, pol)
	require.True(t, apierrors.IsNotFound(err), "the policy is gone: %v", err)
}

// TestPolicyDeletionMeshOffByHand: with the mesh off and not by this policy, deleting it keeps the
// route reflectors (its nodes have no other routes) and says so.
func TestPolicyDeletionMeshOffByHand(t *testing.T) {
	h := newHarness(t, nil, ipCluster(12))
	h.reconcile()
	h.meshOffByHand()
	pol := &v1alpha1.RouteReflectorPolicy{}
	require.NoError(t, h.client.Get(context.Background(), client.ObjectKey{Name: h.policyNm}, pol))
	rrs := h.rrs()
	require.NoError(t, h.client.Delete(context.Background(), pol))
	h.reconcile()
	require.Equal(t, rrs, h.rrs())
	require.NotEmpty(t, h.peers())
	require.Zero(t, h.modelMissingMesh(false))
	require.Contains(t, h.events(), "Warning "+EventRouteReflectorsKept+" the node-to-node mesh is off and no policy turned it off: its route reflectors, labels and BGPPeers stay, or its nodes would lose their routes; remove them by hand once the nodes have other peers")
	err := h.client.Get(context.Background(), client.ObjectKey{Name: h.policyNm}, pol)
	require.True(t, apierrors.IsNotFound(err), "the policy is gone: %v", err)
}

func (h *harness) nodes() []corev1.Node {
	h.t.Helper()
	list := &corev1.NodeList{}
	require.NoError(h.t, h.client.List(context.Background(), list))
	return list.Items
}

// meshOffByHand turns the mesh off in the BGPConfiguration, as a user would (no policy's mark).
func (h *harness) meshOffByHand() {
	h.t.Helper()
	require.NoError(h.t, h.client.Create(context.Background(), &apiv3.BGPConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: calico.CRD.String(), Kind: apiv3.KindBGPConfiguration},
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec:       apiv3.BGPConfigurationSpec{NodeToNodeMeshEnabled: ptrTo(false)},
	}))
}
