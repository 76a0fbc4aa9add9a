package reconciler

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// TestDualPlaneRackLostKeepsFailedInClientSet (issue 52 item 4): a DualPlane rack's two route
// reflectors down at once (BIRD killed, Nodes Ready) are replaced in one reconcile, and the rack's
// set BGPPeer keeps selecting them beside their replacements until those have settled: the
// clients keep their sessions to the failed ones, over which graceful restart holds the routes.
// Before, the reconcile after the promotion narrowed it (the new route reflectors, in the union
// the first reconcile wrote, counted as kept), and on the live lab the clients' BIRDs dropped the
// stale routes 0.9 s after the plan, 17-20 s before the replacements' sessions were up.
func TestDualPlaneRackLostKeepsFailedInClientSet(t *testing.T) {
	on := true
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: ptr(int32(10))}
		s.BGPHealth = &v1alpha1.BGPHealth{Enabled: &on, GracePeriod: &metav1.Duration{Duration: 2 * time.Minute}}
		s.RemovalDelay = &metav1.Duration{Duration: 75 * time.Second}
	}, dualCluster(30))
	h.r.Ledger.BGPHealth = h.r.BGPHealthRecords
	h.reconcile()
	h.reconcile()
	allUp := func(string, string, extender.Families) bool { return true }
	start := h.now
	for h.now.Sub(start) <= transitions.DefaultMax+5*time.Second {
		h.now = h.now.Add(5 * time.Second)
		h.calicoNodeBy(allUp)
		h.reconcile()
	}
	// A rack's set BGPPeer and its two route reflectors.
	list := &apiv3.BGPPeerList{}
	require.NoError(t, h.client.List(context.Background(), list))
	var name string
	var old []string
	for _, p := range list.Items {
		if ids, ok := extender.PeerRouteReflectorIDs(p.Spec.PeerSelector); ok && strings.HasPrefix(p.Name, extender.BGPPeerPrefix+"rack-") && len(ids) == 2 {
			name, old = p.Name, ids
			break
		}
	}
	require.NotEmpty(t, name, "no rack set BGPPeer")
	selected := func() []string {
		p := &apiv3.BGPPeer{}
		require.NoError(t, h.client.Get(context.Background(), client.ObjectKey{Name: name}, p))
		ids, _ := extender.PeerRouteReflectorIDs(p.Spec.PeerSelector)
		return ids
	}
	dead := func(rr, peer string, _ extender.Families) bool {
		return !slices.Contains(old, rr) && !slices.Contains(old, peer)
	}
	h.now = h.now.Add(time.Second)
	downAt := h.now
	h.calicoNodeBy(dead)
	h.reconcile()
	for _, rr := range old {
		require.NotEmpty(t, h.node(rr).Annotations[extender.AnnotationDrainingSince], "%s replaced in the first reconcile: %v", rr, h.rrs())
	}
	// keepsFailed reconciles once a second for n seconds, the statuses as up says, and asserts
	// that the set keeps the failed route reflectors beside their replacements throughout.
	keepsFailed := func(n int, up func(rr, peer string, f extender.Families) bool, before string) {
		t.Helper()
		for i := range n {
			h.now = h.now.Add(time.Second)
			h.calicoNodeBy(up)
			h.reconcile()
			ids := selected()
			for _, rr := range old {
				require.Containsf(t, ids, rr, "%d s on: the rack set %s dropped failed %s before %s: %v", i+1, name, rr, before, ids)
			}
			require.Greaterf(t, len(ids), 2, "%d s on: the replacements in the set %s: %v", i+1, name, ids)
		}
	}
	// The replacements' sessions are not up yet (their statuses list none Established): the set
	// keeps the failed route reflectors.
	keepsFailed(8, dead, "its replacements settled")
	// The replacements' sessions with the spine and every other route reflector are up, but not
	// yet with the rack's clients (their BIRDs not reconfigured, or slow to connect): BGP health
	// sees the replacements' role up, and their settle time passes, but the set keeps the failed
	// route reflectors until the clients' sessions with the replacements are Established (on the
	// live lab under CI load they came up 20 s after the promotion).
	var repl []string
	for _, id := range selected() {
		if !slices.Contains(old, id) {
			repl = append(repl, id)
		}
	}
	require.Len(t, repl, 2, "the replacements in the set %s", name)
	_, set, _ := extender.SetLabelOf(name)
	member := func(n string) bool { return h.node(n).Labels[extender.LabelPeeringSet] == set }
	byID := map[string]string{}
	nodes := &corev1.NodeList{}
	require.NoError(t, h.client.List(context.Background(), nodes))
	for _, n := range nodes.Items {
		byID[extender.RouteReflectorID(n.Name)] = n.Name
	}
	toClientsDown := func(rr, peer string, f extender.Families) bool {
		return dead(rr, peer, f) && !(slices.ContainsFunc(repl, func(id string) bool { return byID[id] == rr }) && member(peer))
	}
	keepsFailed(20, toClientsDown, "its clients' sessions with the replacements were up")
	// The clients' sessions come up, but the failed ones went down less than the restart time
	// (BIRD's 120 s, the policy sets none) ago: their members' BIRDs still hold the stale routes
	// learnt over them, which narrowing would flush (staleHold), so the set keeps them until then.
	// A new leader takes over here (a failover, or a `helm upgrade` rolling the replicas) with none
	// of the old one's memory: with the replacements in place it would no longer see the clients
	// orphaned, nor the failed ones failed (its grace would start again), and narrowed the set to
	// the dead ones at once. The policy's BGPDown records carry the judgement and the hold over.
	bgpDownEvents := func() (n int) { // the Events recorded since the last call
		for _, e := range h.events() {
			if strings.Contains(e, EventBGPDown) {
				n++
			}
		}
		return n
	}
	announced := bgpDownEvents()
	require.Positive(t, announced, "the failures announced")
	h.failover()
	// Before its first reconcile (and on a replica without the lease, whose webhooks plan too),
	// the plans read BGP health's judgement from the policy's status.
	seen, p := h.r.BGPHealthRecords(), h.r.Policies.Valid()[0].Resolved
	for _, id := range old {
		require.Truef(t, seen[byID[id]].Failed(h.now, p), "%s not failed for a replica that has not reconciled: %+v", id, seen[byID[id]])
	}
	keepsFailed(5, dead, "the restart time since they went down, after a leader change")
	require.Zero(t, bgpDownEvents(), "a new leader announced the failures again")
	for h.now.Sub(downAt) < bgpRestartTime {
		h.now = h.now.Add(5 * time.Second)
		h.calicoNodeBy(dead)
		h.reconcile()
	}
	// Past it BIRD has dropped those routes itself: the set narrows to the replacements.
	h.now = h.now.Add(time.Second)
	h.calicoNodeBy(dead)
	h.reconcile()
	require.ElementsMatch(t, repl, selected(), "the rack set %s once its clients' sessions with the replacements are up and the restart time has passed", name)
}
