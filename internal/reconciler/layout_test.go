package reconciler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// modelMissing feeds the fake API server's nodes and BGPPeers to the graph model, with Calico's
// node-to-node mesh off, and returns the node pairs that miss each other's routes.
func (h *harness) modelMissing() int64 { return h.modelMissingMesh(false) }

// modelMissingMesh is modelMissing with the node-to-node mesh on or off.
func (h *harness) modelMissingMesh(mesh bool) int64 {
	h.t.Helper()
	nodes := &corev1.NodeList{}
	require.NoError(h.t, h.client.List(context.Background(), nodes))
	peers := &apiv3.BGPPeerList{}
	require.NoError(h.t, h.client.List(context.Background(), peers))
	ptrs := make([]*extender.Node, len(nodes.Items))
	for i := range nodes.Items {
		ptrs[i] = extender.FromNode(&nodes.Items[i])
	}
	topo, err := bgpmodel.FromCluster(ptrs, peers.Items, corev1.LabelTopologyZone, bgpmodel.Options{NodeToNodeMesh: mesh})
	require.NoError(h.t, err)
	m, err := topo.Propagate(nil)
	require.NoError(h.t, err)
	return m.Summary.MissingPairs
}

// editPolicy changes the policy's spec in the fake API server (a new generation).
func (h *harness) editPolicy(edit func(*v1alpha1.RouteReflectorPolicySpec)) {
	h.t.Helper()
	pol := &v1alpha1.RouteReflectorPolicy{}
	require.NoError(h.t, h.client.Get(context.Background(), client.ObjectKey{Name: h.policyNm}, pol))
	edit(&pol.Spec)
	pol.Generation++
	require.NoError(h.t, h.client.Update(context.Background(), pol))
}

// TestReconcileLayoutSwitchKeepsRoutes switches a settled 90-node cluster from MultiCluster (the
// old default) to DualPlane and back. After every reconcile the cluster's own nodes and BGPPeers,
// fed to the graph model, give 0 missing node pairs; within a reconcile every patch that makes a
// route reflector comes before the patches that move clients onto it.
func TestReconcileLayoutSwitchKeepsRoutes(t *testing.T) {
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.Topology = &v1alpha1.Topology{Type: v1alpha1.MultiCluster, MaxRackSize: ptrTo(int32(20))}
	}, cluster(90))
	h.reconcile()
	require.Zero(t, h.modelMissing(), "settled on MultiCluster")

	for _, topo := range []*v1alpha1.Topology{{Type: v1alpha1.DualPlane, MaxRackSize: ptrTo(int32(20))}, {Type: v1alpha1.MultiCluster}} {
		h.editPolicy(func(s *v1alpha1.RouteReflectorPolicySpec) { s.Topology = topo })
		for step := 0; step < 12; step++ {
			h.mu.Lock()
			h.nodePatches = nil
			h.mu.Unlock()
			h.reconcile()
			require.Zero(t, h.modelMissing(), "%s, reconcile %d", topo.Type, step)
			checkPatchOrder(t, h.nodePatches)
			h.now = h.now.Add(time.Minute) // past removalDelay: the old route reflectors go
		}
		pol := &v1alpha1.RouteReflectorPolicy{}
		require.NoError(t, h.client.Get(context.Background(), client.ObjectKey{Name: h.policyNm}, pol))
		require.Equal(t, h.r.last[h.policyNm].Summary.RouteReflectors, int(pol.Status.RouteReflectors), "%s settled", topo.Type)
		require.Zero(t, h.r.last[h.policyNm].Summary.DrainingRouteReflectors, "%s: no route reflector left draining", topo.Type)
	}
}

// checkPatchOrder: no patch that gives a node a cluster ID comes after a patch that gives a client
// a new peering set.
func checkPatchOrder(t *testing.T, patches []string) {
	t.Helper()
	clientSeen := ""
	for _, p := range patches {
		name, body, _ := strings.Cut(p, " ")
		promotes := strings.Contains(body, `"`+extender.AnnotationClusterID+`":"`)
		movesClient := strings.Contains(body, `"`+extender.AnnotationRouteReflectors+`":"`) // a client's new route reflectors
		switch {
		case promotes && clientSeen != "":
			require.Fail(t, fmt.Sprintf("%s made a route reflector after client %s was moved:\n%s", name, clientSeen, strings.Join(patches, "\n")))
		case movesClient && clientSeen == "":
			clientSeen = name
		}
	}
}

func ptrTo[T any](v T) *T { return &v }
