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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	client2 "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// TestBGPHealthRouteReflectorsOfAClientDownAtOnce (issue 52, item 4; calico#9259): every route
// reflector of a client reported with no Established session (their BIRDs stopped, the Nodes
// Ready) is replaced in the first reconcile that reads it, without bgpHealth.gracePeriod (2 min
// here), all of them in that one plan, the Event saying why; with one of them still up, the grace
// applies as before. It is the fast case of test/transitions' TestTwoRouteReflectorsLostOnRealBIRDLarge.
func TestBGPHealthRouteReflectorsOfAClientDownAtOnce(t *testing.T) {
	for _, allDown := range []bool{true, false} {
		t.Run(map[bool]string{true: "all down", false: "one still up"}[allDown], func(t *testing.T) {
			on := true
			h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
				s.BGPHealth = &v1alpha1.BGPHealth{Enabled: &on, GracePeriod: &metav1.Duration{Duration: 2 * time.Minute}}
				s.Behavior = &v1alpha1.Behavior{ScaleDown: &v1alpha1.ScaleDown{StabilizationWindowSeconds: ptr(int32(0))}}
			}, dualCluster(12))
			h.r.Ledger.BGPHealth = h.r.BGPHealthRecords
			h.reconcile()
			h.reconcile()
			before := h.rrs()
			require.GreaterOrEqual(t, len(before), 3)
			// Settled: every session up, past the new route reflectors' settle time.
			allUp := func(string, string, extender.Families) bool { return true }
			start := h.now
			for h.now.Sub(start) <= transitions.DefaultMax {
				h.now = h.now.Add(5 * time.Second)
				h.calicoNodeBy(allUp)
				h.reconcile()
			}
			h.events()
			// A client and its route reflectors.
			var client string
			var set []string
			for _, n := range h.nodes() {
				if a := n.Annotations[extender.AnnotationRouteReflectors]; a != "" && client == "" {
					client, set = n.Name, strings.Split(a, ",")
				}
			}
			require.NotEmpty(t, client)
			require.GreaterOrEqual(t, len(set), 2, "%s's route reflectors", client)
			down := slices.Clone(set)
			if !allDown {
				down = down[1:]
			}
			h.calicoNodeBy(func(rr, peer string, _ extender.Families) bool {
				return !slices.Contains(down, rr) && !slices.Contains(down, peer)
			})
			h.now = h.now.Add(time.Second)
			h.reconcile()
			for _, rr := range set {
				drained := h.node(rr).Annotations[extender.AnnotationDrainingSince] != ""
				want := allDown
				require.Equalf(t, want, drained, "%s (of %s's %v, down %v) draining in the first reconcile; route reflectors %v", rr, client, set, down, h.rrs())
				if want {
					require.Equal(t, extender.DrainingReasonBGPDown, h.node(rr).Annotations[extender.AnnotationDrainingReason])
				}
			}
			ev := strings.Join(h.events(), "\n")
			if allDown {
				require.Contains(t, ev, "without waiting for bgpHealth.gracePeriod", "events:\n%s", ev)
				// The replacements were promoted in the same plan, and the client peers with one.
				after := h.rrs()
				require.Greater(t, len(after), len(before), "replacements promoted: %v", slices.Sorted(maps.Keys(after)))
				now := strings.Split(h.node(client).Annotations[extender.AnnotationRouteReflectors], ",")
				require.True(t, slices.ContainsFunc(now, func(rr string) bool { return !slices.Contains(set, rr) }),
					"%s peers with no new route reflector: %v", client, now)
			} else {
				require.NotContains(t, ev, "RouteReflectorBGPDown", "within gracePeriod")
			}
		})
	}
}

// TestOrphaningNow: which route reflectors the both-down rule finds down, from the statuses alone:
// a rack's a and b (clients c1, c2), spine member s peering with both. A fresh status with no
// Established session is down; a stale one is down while another status is fresh; a late one
// (calico-node missed its report, as when it stopped) is down when a route reflector that reported
// since sees its sessions to it down (sessions.WitnessedDown).
func TestOrphaningNow(t *testing.T) {
	now := time.Date(2026, 11, 28, 20, 0, 0, 0, time.UTC)
	ips := map[string][]string{"a": {"10.0.0.1"}, "b": {"10.0.0.2"}, "s": {"10.0.0.3"}, "c1": {"10.0.0.11"}, "c2": {"10.0.0.12"}}
	clients := map[string][]string{"a": {"c1", "c2"}, "b": {"c1", "c2"}}
	st := func(node string, age time.Duration, peers map[string]bool) *apiv3.CalicoNodeStatus {
		s := &apiv3.CalicoNodeStatus{Spec: apiv3.CalicoNodeStatusSpec{Node: node}}
		s.Status.LastUpdated = metav1.NewTime(now.Add(-age))
		for _, p := range slices.Sorted(maps.Keys(peers)) {
			s.Status.BGP.PeersV4 = append(s.Status.BGP.PeersV4, peer(ips[p][0], peers[p]))
		}
		return s
	}
	up := map[string]bool{"c1": true, "c2": true, "s": true}
	spineUp := map[string]bool{"a": true, "b": true}
	spineDown := map[string]bool{"a": false, "b": false}
	both := map[string][]string{"a": {"c1", "c2"}, "b": {"c1", "c2"}}
	for _, tc := range []struct {
		name      string
		a, b, s   *apiv3.CalicoNodeStatus
		want      map[string][]string
		witnessed []string
	}{
		{"all up", st("a", time.Second, up), st("b", time.Second, up), st("s", time.Second, spineUp), nil, nil},
		{"a's BIRD down (reported: no session), b up", st("a", time.Second, nil), st("b", time.Second, up), st("s", time.Second, spineUp), nil, nil},
		{"both BIRDs down (reported: no session)", st("a", time.Second, nil), st("b", time.Second, nil), st("s", time.Second, spineDown), both, nil},
		{"both stale, s fresh", st("a", 31*time.Second, up), st("b", 31*time.Second, up), st("s", time.Second, spineDown), both, nil},
		{"every status stale: the reports failed, not BIRD", st("a", 31*time.Second, up), st("b", 31*time.Second, up), st("s", 31*time.Second, spineUp), nil, nil},
		{"both late, s sees them down", st("a", 16*time.Second, up), st("b", 16*time.Second, up), st("s", time.Second, spineDown), both, []string{"a", "b"}},
		{"both late, s sees them up", st("a", 16*time.Second, up), st("b", 16*time.Second, up), st("s", time.Second, spineUp), nil, nil},
		{"both late, no witness", st("a", 16*time.Second, up), st("b", 16*time.Second, up), st("s", time.Second, nil), nil, nil},
		{"both late, s late too", st("a", 16*time.Second, up), st("b", 16*time.Second, up), st("s", 16*time.Second, spineDown), nil, nil},
		{"a late and seen down, b's BIRD down", st("a", 16*time.Second, up), st("b", time.Second, nil), st("s", time.Second, spineDown), both, []string{"a"}},
		{"both within their period (not late), s sees them down", st("a", 9*time.Second, up), st("b", 9*time.Second, up), st("s", time.Second, spineDown), nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			have := map[string]*apiv3.CalicoNodeStatus{"a": tc.a, "b": tc.b, "s": tc.s}
			got, witnessed := orphaningNow([]string{"a", "b", "s"}, have, clients, nil, ips, now, func(string) bool { return false })
			require.Equal(t, tc.want, got)
			require.ElementsMatch(t, tc.witnessed, slices.Collect(maps.Keys(witnessed)))
		})
	}
	// A route reflector whose sessions are starting is not judged.
	have := map[string]*apiv3.CalicoNodeStatus{"a": st("a", time.Second, nil), "b": st("b", time.Second, nil), "s": st("s", time.Second, spineDown)}
	got, _ := orphaningNow([]string{"a", "b", "s"}, have, clients, nil, ips, now, func(rr string) bool { return rr == "b" })
	require.Nil(t, got)
}

// TestClientMoveKeepsDownRouteReflectorsForTheRestartTime: every route reflector of a client
// down at once (BIRD killed, Nodes Ready) in a topology whose clients move between peering sets
// as their route reflectors are replaced (MultiCluster: a set per group of route reflectors). The
// client's BIRD holds the routes it learnt over the dead ones as stale for the graceful-restart
// time (bgpPeer.maxRestartTime, 30 s here), and drops a removed protocol's routes at once: so
// whatever set it is in keeps the dead ones until the restart time has passed since they were
// seen down, and it leaves them after (staleHold).
func TestClientMoveKeepsDownRouteReflectorsForTheRestartTime(t *testing.T) {
	on := true
	const restart = 30 * time.Second
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.Topology = &v1alpha1.Topology{Type: v1alpha1.MultiCluster}
		s.BGPHealth = &v1alpha1.BGPHealth{Enabled: &on, GracePeriod: &metav1.Duration{Duration: 2 * time.Minute}}
		s.BGPPeer = &v1alpha1.BGPPeerSettings{MaxRestartTime: &metav1.Duration{Duration: restart}}
		s.RemovalDelay = &metav1.Duration{Duration: 3 * time.Minute}
	}, dualCluster(12))
	h.r.Ledger.BGPHealth = h.r.BGPHealthRecords
	h.reconcile()
	h.reconcile()
	allUp := func(string, string, extender.Families) bool { return true }
	for start := h.now; h.now.Sub(start) <= transitions.DefaultMax; {
		h.now = h.now.Add(5 * time.Second)
		h.calicoNodeBy(allUp)
		h.reconcile()
	}
	// The clients of one set of route reflectors; the one followed is one not promoted in its
	// replacement.
	var clients []string
	var set []string
	for _, n := range h.nodes() {
		a := n.Annotations[extender.AnnotationRouteReflectors]
		if a == "" || n.Labels[extender.LabelPeeringSet] == "" {
			continue
		}
		if set == nil {
			set = strings.Split(a, ",")
		}
		if a == strings.Join(set, ",") {
			clients = append(clients, n.Name)
		}
	}
	require.NotEmpty(t, clients)
	var client string
	// peersOf: the route reflector IDs the client's peering set's BGPPeer selects.
	peersOf := func() []string {
		name := extender.SetBGPPeerName(extender.LabelPeeringSet, h.node(client).Labels[extender.LabelPeeringSet])
		p := &apiv3.BGPPeer{}
		require.NoError(t, h.client.Get(context.Background(), client2.ObjectKey{Name: name}, p))
		ids, _ := extender.PeerRouteReflectorIDs(p.Spec.PeerSelector)
		return ids
	}
	var downIDs []string
	for _, rr := range set {
		downIDs = append(downIDs, extender.RouteReflectorID(rr))
	}
	dead := func(rr, peer string, _ extender.Families) bool {
		return !slices.Contains(set, rr) && !slices.Contains(set, peer)
	}
	h.now = h.now.Add(time.Second)
	downAt := h.now
	h.calicoNodeBy(dead)
	h.reconcile()
	for _, c := range clients {
		if h.node(c).Labels[extender.LabelPeeringSet] != "" && client == "" {
			client = c
		}
	}
	require.NotEmptyf(t, client, "every client of %v promoted: %v", set, h.rrs())
	moved := false
	for h.now.Sub(downAt) < restart-time.Second {
		h.now = h.now.Add(time.Second)
		h.calicoNodeBy(dead)
		h.reconcile()
		ids := peersOf()
		for _, id := range downIDs {
			require.Containsf(t, ids, id, "%v after they went down: %s's set dropped a down route reflector within the restart time: %v", h.now.Sub(downAt), client, ids)
		}
		moved = moved || len(ids) > len(downIDs)
	}
	require.True(t, moved, "%s never peered with a replacement within the restart time: %v", client, peersOf())
	for h.now.Sub(downAt) < restart+20*time.Second {
		h.now = h.now.Add(time.Second)
		h.calicoNodeBy(dead)
		h.reconcile()
	}
	for _, id := range downIDs {
		require.NotContainsf(t, peersOf(), id, "%s still peers with a down route reflector 20 s past the restart time", client)
	}
}
