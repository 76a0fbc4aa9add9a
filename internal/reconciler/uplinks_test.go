package reconciler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv/nodetest"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// uplinkSessions is, for every node with an uplink set, the nodes its uplink set's BGPPeer selects
// that carry a route reflector ID (sorted): the uplink sessions Calico renders for it.
func (h *harness) uplinkSessions() map[string][]string {
	h.t.Helper()
	peers := &apiv3.BGPPeerList{}
	require.NoError(h.t, h.client.List(context.Background(), peers))
	bySet := map[string][]string{}
	for _, p := range peers.Items {
		if key, set, ok := extender.SetLabelOf(p.Name); ok && key == extender.LabelUplinkSet {
			bySet[set], _ = extender.PeerRouteReflectorIDs(p.Spec.PeerSelector)
		}
	}
	nodes := h.nodes()
	byID := map[string]string{}
	for _, n := range nodes {
		if id := n.Labels[extender.LabelRouteReflectorID]; id != "" {
			byID[id] = n.Name
		}
	}
	out := map[string][]string{}
	for _, n := range nodes {
		set := n.Labels[extender.LabelUplinkSet]
		if set == "" {
			continue
		}
		rrs := []string{}
		for _, id := range bySet[set] {
			if rr := byID[id]; rr != "" {
				rrs = append(rrs, rr)
			}
		}
		slices.Sort(rrs)
		out[n.Name] = rrs
	}
	return out
}

// uplinksAsPlanned: every node of the last plan with an uplink set carries it, and no other node
// carries one.
func uplinksAsPlanned(h *harness) bool {
	want := map[string]string{}
	for _, s := range h.r.last[h.policyNm].Nodes {
		want[s.Name] = s.Labels[extender.LabelUplinkSet]
	}
	for _, n := range h.nodes() {
		if n.Labels[extender.LabelUplinkSet] != want[n.Name] {
			return false
		}
	}
	return true
}

// TestReconcileUplinkMovesMakeBeforeBreak: a DualPlane rack route reflector peers with its plane's
// spine member through its uplink set. When a plan gives the plane another member (a member
// relabelled into the other member's zone: a rack route reflector of the plane joins the spine,
// renumbered, in the same reconcile; a member cordoned: a node promoted into the spine in the same
// reconcile), Calico used to drop the rack route reflectors' sessions to the old member and open
// ones to the new in one render, so each lacked every other rack's routes until the new session was
// up (the rack mate's routes carry its own cluster ID); on real BIRD that lost 171 pair-samples
// between nodes keeping their role in a spine relabel. Now, after every reconcile (4 s apart, at 90
// nodes in racks of 15): no rack route reflector keeping its role and cluster ID drops an uplink
// session unless a spine member it keeps was labelled (or renumbered) at least
// transitions.DefaultSettle before and its session to it is transitions.DefaultSettle old (it first
// peers with its old member and the new one, then with the new one); a transitional uplink set adds
// one spine member, whose cluster ID an earlier reconcile wrote; the old member is neither
// renumbered nor demoted (removalDelay 3 s) while an uplink set selects it; the graph model finds 0
// missing pairs; the move completes, no transitional set left. A member NotReady past the grace (a
// standby already in the uplink sets) moves without a transitional set.
func TestReconcileUplinkMovesMakeBeforeBreak(t *testing.T) {
	relabel := func(h *harness, member, other extender.RouteReflector) {
		h.update(member.Node, func(n *corev1.Node) { n.Labels[corev1.LabelTopologyZone] = other.Zone })
	}
	cordon := func(h *harness, member, _ extender.RouteReflector) {
		h.update(member.Node, func(n *corev1.Node) { n.Spec.Unschedulable = true })
	}
	notReady := func(h *harness, member, _ extender.RouteReflector) {
		n := h.node(member.Node)
		nodetest.NotReadySince(h.now)(n)
		require.NoError(h.t, h.client.Status().Update(context.Background(), n))
	}
	for _, tc := range []struct {
		name         string
		rack         int32
		act          func(h *harness, member, other extender.RouteReflector)
		transitional bool // the move goes through a transitional uplink set
	}{
		{"spine member relabelled", 15, relabel, true},
		{"spine member relabelled, racks of 30", 30, relabel, true},
		{"spine member cordoned", 15, cordon, true},
		{"spine member NotReady past the grace", 15, notReady, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
				s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: ptrTo(tc.rack)}
				s.RemovalDelay = &metav1.Duration{Duration: 3 * time.Second}
				s.NotReadyGracePeriod = &metav1.Duration{Duration: 10 * time.Second}
				s.Behavior = &v1alpha1.Behavior{ScaleDown: &v1alpha1.ScaleDown{StabilizationWindowSeconds: ptrTo(int32(3))}}
			}, cluster(90))
			// The relabel is acted on by the plan's failure drills (both members in one zone).
			h.r.Ledger.Drills = new(bgpmodel.DrillMemo).Drills
			h.reconcile()
			h.now = h.now.Add(5 * time.Minute)
			h.reconcile()
			h.reconcile()
			require.Zero(t, h.modelMissing(), "settled")
			require.Empty(t, h.transitionalLeft(), "settled")
			require.True(t, uplinksAsPlanned(h), "settled")
			h.events()
			var spine []extender.RouteReflector
			for _, rr := range h.r.last[h.policyNm].RouteReflectors {
				if rr.Spine && !rr.Draining {
					spine = append(spine, rr)
				}
			}
			slices.SortFunc(spine, func(a, b extender.RouteReflector) int { return a.Plane - b.Plane })
			require.Len(t, spine, 2)

			long := h.now.Add(-time.Hour)
			labelled := map[string]time.Time{} // route reflector -> labelled or renumbered
			for n := range h.rrs() {
				labelled[n] = long
			}
			since := map[string]map[string]time.Time{} // rack route reflector -> spine member -> session since
			for n, rrs := range h.uplinkSessions() {
				since[n] = map[string]time.Time{}
				for _, rr := range rrs {
					since[n][rr] = long
				}
			}
			t.Logf("%s: plane %d's spine member %s (%s)", tc.name, spine[0].Plane, spine[0].Node, spine[0].Zone)
			tc.act(h, spine[0], spine[1])
			moved, transitional, doneAt := 0, 0, -1
			for step := 0; step < 40; step++ {
				rrsBefore, before := h.rrs(), h.uplinkSessions()
				h.reconcile()
				rrsAfter, after := h.rrs(), h.uplinkSessions()
				inTransitional := map[string]bool{}
				for _, n := range h.nodes() {
					inTransitional[n.Name] = extender.IsTransitionalSet(n.Labels[extender.LabelUplinkSet])
				}
				for n, id := range rrsAfter {
					if was, ok := rrsBefore[n]; !ok || was != id {
						labelled[n] = h.now
					}
					if was, ok := rrsBefore[n]; ok && was != id {
						// Renumbered: a spine member leaving the spine takes its new ID only once
						// no uplink set selects it.
						for m, rrs := range before {
							require.NotContains(t, rrs, n, "reconcile %d: %s renumbered %s -> %s while %s's uplink set selects it", step, n, was, id, m)
						}
					}
				}
				for n, rrs := range after {
					old, ok := before[n]
					if !ok || rrsBefore[n] != rrsAfter[n] {
						// A rack route reflector from now on (promoted, or a spine member no longer),
						// or renumbered: every session it has (re)starts.
						since[n] = map[string]time.Time{}
						for _, rr := range rrs {
							since[n][rr] = h.now
						}
						continue
					}
					added, removed := minus(rrs, old), minus(old, rrs)
					if len(added) > 0 && len(removed) == 0 && len(old) > 0 && inTransitional[n] {
						transitional++
						// A transitional uplink set adds one spine member to the old ones, one whose
						// cluster ID an earlier reconcile wrote.
						require.Len(t, added, 1, "reconcile %d: %s: uplinks %v -> %v", step, n, old, rrs)
						require.True(t, labelled[added[0]].Before(h.now), "reconcile %d: %s's transitional uplink set adds %s, promoted or renumbered in the same reconcile", step, n, added[0])
					}
					if len(removed) > 0 {
						moved++
						require.NotEmpty(t, rrs, "reconcile %d: %s lost every uplink (%v)", step, n, old)
						var why []string
						for _, rr := range rrs {
							if s, ok := since[n][rr]; ok && h.now.Sub(labelled[rr]) >= transitions.DefaultSettle && h.now.Sub(s) >= transitions.DefaultSettle {
								why = nil
								break
							}
							age := "new"
							if s, ok := since[n][rr]; ok {
								age = fmt.Sprintf("%v old", h.now.Sub(s))
							}
							why = append(why, fmt.Sprintf("%s labelled or renumbered %v ago, session %s", rr, h.now.Sub(labelled[rr]), age))
						}
						require.Empty(t, why, "reconcile %d: %s dropped %v keeping no settled spine member (uplinks %v -> %v)", step, n, removed, old, rrs)
					}
					for _, rr := range added {
						since[n][rr] = h.now
					}
					for _, rr := range removed {
						delete(since[n], rr)
					}
				}
				require.Zero(t, h.modelMissing(), "reconcile %d", step)
				if doneAt < 0 && step > 0 && len(h.transitionalLeft()) == 0 && uplinksAsPlanned(h) {
					doneAt = step
				}
				h.now = h.now.Add(4 * time.Second)
			}
			t.Logf("%d uplink moves that drop a session, %d rack route reflectors first in a transitional uplink set; uplinks as planned after reconcile %d", moved, transitional, doneAt)
			require.Positive(t, moved, "the spine member changes")
			require.GreaterOrEqual(t, doneAt, 0, "the move never completed: %v", h.transitionalLeft())
			ev := strings.Join(h.events(), "\n")
			if tc.transitional {
				require.Positive(t, transitional, "rack route reflectors peer with the old and the new spine member first")
				require.Contains(t, ev, EventUplinkMovesHeld, "an Event says the moves")
			} else {
				require.Zero(t, transitional, "the rack route reflectors keep a settled spine member (the standby): one write")
			}
			h.now = h.now.Add(5 * time.Minute)
			h.reconcile()
			h.reconcile()
			require.Zero(t, h.r.last[h.policyNm].Summary.DrainingRouteReflectors, "no route reflector left draining")
			require.Empty(t, h.transitionalLeft(), "no transitional set left")
			require.True(t, uplinksAsPlanned(h), "every uplink set as planned")
			require.Zero(t, h.modelMissing())
		})
	}
}

// TestReconcileUplinkMovesWaitForSessions: with handover BGPSessions a rack route reflector in a
// transitional uplink set leaves its old spine member once the new member's CalicoNodeStatus,
// reported at least transitions.DefaultMin after the move, shows every rack route reflector whose
// uplink set selects it Established: before transitions.DefaultSettle when calico-node reports them
// up; when one of those sessions stays down, the rack route reflectors moving to the same member
// keep the old one until transitions.DefaultMax (the new member has no clients that list it:
// before, it counted as settled at transitions.DefaultMin whatever its sessions).
func TestReconcileUplinkMovesWaitForSessions(t *testing.T) {
	for _, tc := range []struct {
		name     string
		down     bool
		min, max time.Duration
	}{{"sessions up", false, transitions.DefaultMin, transitions.DefaultSettle}, {"a session down", true, transitions.DefaultMax, transitions.DefaultMax + 5*time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
				sessionsPolicy(3 * time.Second)(s)
				s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: ptrTo(int32(15))}
			}, ipCluster(90))
			h.reconcile()
			h.now = h.now.Add(5 * time.Minute)
			h.reconcile()
			h.reconcile()
			require.Empty(t, h.transitionalLeft(), "settled")
			var member string
			for _, rr := range h.r.last[h.policyNm].RouteReflectors {
				if rr.Spine && rr.Plane == 1 {
					member = rr.Node
				}
			}
			require.NotEmpty(t, member)
			h.update(member, func(n *corev1.Node) { n.Spec.Unschedulable = true })
			// The reconcile that promotes the new member, then the one that adds it to the rack
			// route reflectors' uplinks.
			var moving []string
			for range 3 {
				h.reconcile()
				h.calicoNode()
				for _, n := range h.nodes() {
					if extender.IsTransitionalSet(n.Labels[extender.LabelUplinkSet]) {
						moving = append(moving, n.Name)
					}
				}
				if len(moving) > 0 {
					break
				}
				h.now = h.now.Add(time.Second)
			}
			start := h.now
			require.NotEmpty(t, moving, "rack route reflectors in a transitional uplink set")
			var down []string
			if tc.down {
				down = moving[:1]
			}
			for h.now.Sub(start) < 2*transitions.DefaultMax && len(h.transitionalLeft()) > 0 {
				h.now = h.now.Add(time.Second)
				h.calicoNode(down...)
				h.reconcile()
				require.Zero(t, h.modelMissing())
			}
			took := h.now.Sub(start)
			t.Logf("%d rack route reflectors moved to the planned uplink set %v after the transitional one", len(moving), took)
			require.Empty(t, h.transitionalLeft())
			require.GreaterOrEqual(t, took, tc.min)
			require.Less(t, took, tc.max)
		})
	}
}
