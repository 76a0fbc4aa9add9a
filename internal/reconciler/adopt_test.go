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
	kptr "k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// handBuilt is a 12-node cluster as operators build it by hand: the mesh off, node-03..05 labelled
// route reflectors sharing one cluster ID, a full mesh among them and every other node peering
// with all of them, and a BGPPeer to a top-of-rack router.
func handBuilt(t *testing.T, spec func(*v1alpha1.RouteReflectorPolicySpec)) *harness {
	nodes := ipCluster(12)
	for _, n := range nodes[3:6] {
		n.Labels["calico-route-reflector"] = ""
		n.Annotations = map[string]string{extender.AnnotationClusterID: "244.0.0.1"}
	}
	h := newHarness(t, spec, nodes)
	ctx := context.Background()
	peer := func(name string, s apiv3.BGPPeerSpec) {
		require.NoError(t, h.client.Create(ctx, &apiv3.BGPPeer{TypeMeta: metav1.TypeMeta{APIVersion: calico.CRD.String(), Kind: "BGPPeer"},
			ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: s}))
	}
	peer("rr-mesh", apiv3.BGPPeerSpec{NodeSelector: "has(calico-route-reflector)", PeerSelector: "has(calico-route-reflector)"})
	peer("peer-to-rrs", apiv3.BGPPeerSpec{NodeSelector: "!has(calico-route-reflector)", PeerSelector: "has(calico-route-reflector)"})
	peer("tor", apiv3.BGPPeerSpec{PeerIP: "192.0.2.1", ASNumber: 64513})
	require.NoError(t, h.client.Create(ctx, &apiv3.BGPConfiguration{TypeMeta: metav1.TypeMeta{APIVersion: calico.CRD.String(), Kind: "BGPConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: apiv3.BGPConfigurationSpec{NodeToNodeMeshEnabled: kptr.To(false)}}))
	return h
}

func foreignPeers(h *harness) []string {
	var out []string
	for _, p := range h.peers() {
		if !strings.HasPrefix(p, extender.BGPPeerPrefix) {
			out = append(out, p)
		}
	}
	return out
}

// TestAdoptBGPPeers: hand-written BGPPeers are deleted only with adoptBGPPeers, in Enforce, after
// removalDelay from the moment the product's plan covers their nodes; a BGPPeer to an address is
// never deleted; an Event names each deleted one.
func TestAdoptBGPPeers(t *testing.T) {
	all := []string{"peer-to-rrs", "rr-mesh", "tor"}
	for _, tc := range []struct {
		name  string
		adopt bool
		mode  v1alpha1.Mode
		// after the first reconcile, and after removalDelay
		first, later []string
	}{
		{"without adoptBGPPeers nothing is deleted", false, v1alpha1.Enforce, all, all},
		{"Observe deletes nothing", true, v1alpha1.Observe, all, all},
		{"Paused deletes nothing", true, v1alpha1.Paused, all, all},
		{"Enforce deletes the node peerings after removalDelay", true, v1alpha1.Enforce, all, []string{"tor"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := handBuilt(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
				s.AdoptBGPPeers, s.Mode = tc.adopt, tc.mode
				s.RemovalDelay = &metav1.Duration{Duration: 30 * time.Second}
			})
			h.reconcile()
			h.reconcile()
			require.Equal(t, tc.first, foreignPeers(h), "before removalDelay")
			s := h.status()
			msg := findCondition(s.Conditions, ConditionForeignBGPPeers).Message
			pending := strings.Join(s.PendingChanges, "\n")
			switch {
			case tc.adopt && tc.mode == v1alpha1.Enforce:
				require.Equal(t, "3 BGPPeers not written by calico-rr-autoscaler; adoptBGPPeers deletes each once calico-rr-autoscaler's cover it: "+
					"peer-to-rrs (waiting for removalDelay), rr-mesh (waiting for removalDelay), tor (kept: peers with an address, not with nodes by selector)", msg)
			case tc.adopt:
				require.Contains(t, pending, "delete hand-written BGPPeer peer-to-rrs once calico-rr-autoscaler's BGPPeers cover it (adoptBGPPeers)")
				require.NotContains(t, pending, "BGPPeer tor")
				fallthrough
			default:
				require.Contains(t, msg, "left as they are: peer-to-rrs, rr-mesh, tor")
			}
			for range 3 {
				h.now = h.now.Add(20 * time.Second)
				h.reconcile()
			}
			require.Equal(t, tc.later, foreignPeers(h))
			events := strings.Join(h.events(), "\n")
			for _, gone := range []string{"peer-to-rrs", "rr-mesh"} {
				want := "Normal " + EventBGPPeerAdopted + " deleted hand-written BGPPeer " + gone + ": calico-rr-autoscaler's BGPPeers cover"
				require.Equal(t, len(tc.later) == 1, strings.Contains(events, want), "event %q in\n%s", want, events)
			}
			if tc.mode == v1alpha1.Enforce {
				rrs := h.rrs()
				require.ElementsMatch(t, []string{"node-03", "node-04", "node-05"}, slices.Collect(maps.Keys(rrs)),
					"the hand-picked route reflectors keep their role")
				require.Equal(t, "244.0.0.1", rrs["node-03"], "a hand-set cluster ID is kept where the layout allows")
			}
		})
	}
}

// TestAdoptBGPPeersWaitsForCoverage: a hand-written BGPPeer whose sessions reach a node outside the
// policy is kept (the product's plan does not cover that node); one among the policy's nodes goes.
func TestAdoptBGPPeersWaitsForCoverage(t *testing.T) {
	h := handBuilt(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.AdoptBGPPeers = true
		s.RemovalDelay = &metav1.Duration{Duration: time.Second}
		s.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: corev1.LabelTopologyZone, Operator: metav1.LabelSelectorOpIn, Values: []string{"zone-a", "zone-b", "zone-c"}}}}
	})
	h.update("node-11", func(n *corev1.Node) { n.Labels[corev1.LabelTopologyZone] = "zone-x" })
	for range 4 {
		h.now = h.now.Add(2 * time.Second)
		h.reconcile()
	}
	require.Equal(t, []string{"peer-to-rrs", "tor"}, foreignPeers(h), "node-11 is in no policy: peer-to-rrs is kept, rr-mesh goes")
}

// TestAdoptBGPPeersKeepsWhatTheModelNeeds: when the product's own BGPPeers are missing (their
// creation lost), the nodes look wired but the graph model without the hand-written BGPPeers
// misses routes: they are kept.
func TestAdoptBGPPeersKeepsWhatTheModelNeeds(t *testing.T) {
	h := handBuilt(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.AdoptBGPPeers = true
		s.RemovalDelay = &metav1.Duration{Duration: time.Second}
	})
	h.r.Client = interceptor.NewClient(h.client.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*apiv3.BGPPeer); ok {
				return nil // lost
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	for range 4 {
		h.now = h.now.Add(2 * time.Second)
		h.reconcile()
	}
	require.Len(t, h.rrs(), 3)
	require.Equal(t, []string{"peer-to-rrs", "rr-mesh", "tor"}, h.peers(), "no BGPPeer of the product: every hand-written one is needed")
}

// TestAdoptBGPPeersBGPSessions: with handover: BGPSessions the BGPPeer that peers the clients with
// the route reflectors goes once every client is seen Established with its route reflectors (a
// CalicoNodeStatus per route reflector), long before removalDelay; the objects are then deleted.
func TestAdoptBGPPeersBGPSessions(t *testing.T) {
	h := handBuilt(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.AdoptBGPPeers = true
		sessionsPolicy(time.Hour)(s)
	})
	for range 3 {
		h.now = h.now.Add(time.Second)
		h.reconcile()
	}
	require.Equal(t, []string{"node-03", "node-04", "node-05"}, h.nodeStatuses(), "the sessions of the clients' route reflectors are read")
	require.Contains(t, foreignPeers(h), "peer-to-rrs", "kept before any session is seen")
	h.calicoNode("node-07")
	h.reconcile()
	h.reconcile()
	require.Contains(t, foreignPeers(h), "peer-to-rrs", "kept while node-07 is not Established")
	for range 3 {
		h.calicoNode()
		h.now = h.now.Add(time.Second)
		h.reconcile()
	}
	require.Equal(t, []string{"tor"}, foreignPeers(h))
	require.Empty(t, h.nodeStatuses(), "no CalicoNodeStatus left")
}

func TestSessionNodes(t *testing.T) {
	nodes := cluster(4)
	nodes[0].Labels["rr"] = ""
	nodes[1].Annotations = map[string]string{extender.AnnotationCalicoLabels: `{"rr":""}`} // a Calico-only label
	for _, tc := range []struct {
		name      string
		spec      apiv3.BGPPeerSpec
		want, why string
	}{
		{"selectors", apiv3.BGPPeerSpec{NodeSelector: "!has(rr)", PeerSelector: "has(rr)"}, "node-00 node-01 node-02 node-03", ""},
		{"a mesh among the selected", apiv3.BGPPeerSpec{NodeSelector: "has(rr)", PeerSelector: "has(rr)"}, "node-00 node-01", ""},
		{"an empty nodeSelector is every node", apiv3.BGPPeerSpec{PeerSelector: "has(rr)"}, "node-00 node-01 node-02 node-03", ""},
		{"one node", apiv3.BGPPeerSpec{Node: "node-03", PeerSelector: "has(rr)"}, "node-00 node-01 node-03", ""},
		{"an address", apiv3.BGPPeerSpec{PeerIP: "192.0.2.1", ASNumber: 64513}, "", "peers with an address, not with nodes by selector"},
		{"a session option", apiv3.BGPPeerSpec{PeerSelector: "has(rr)", KeepOriginalNextHop: true}, "", "sets session options besides node, nodeSelector and peerSelector"},
		{"no session", apiv3.BGPPeerSpec{NodeSelector: "has(rr)", PeerSelector: "has(nothing)"}, "", "makes no session"},
		{"a node with itself only", apiv3.BGPPeerSpec{Node: "node-00", PeerSelector: "has(rr) && topology.kubernetes.io/zone == 'zone-a'"}, "", "makes no session"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := sessionNodes(&apiv3.BGPPeer{Spec: tc.spec}, extender.FromNodes(nodes), corev1.LabelTopologyZone)
			require.Equal(t, tc.why, why)
			require.Equal(t, tc.want, strings.Join(got, " "))
		})
	}
}
