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

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// clientSessions is, for every client (a node that is no route reflector), the route reflector IDs
// its peering set's BGPPeer selects in the fake API server: the BGP sessions Calico renders for it.
func (h *harness) clientSessions() map[string][]string {
	h.t.Helper()
	ctx := context.Background()
	peers := &apiv3.BGPPeerList{}
	require.NoError(h.t, h.client.List(ctx, peers))
	bySet := map[string][]string{}
	for _, p := range peers.Items {
		if key, set, ok := extender.SetLabelOf(p.Name); ok && key == extender.LabelPeeringSet {
			bySet[set], _ = extender.PeerRouteReflectorIDs(p.Spec.PeerSelector)
		}
	}
	rrs := h.rrs()
	nodes := &corev1.NodeList{}
	require.NoError(h.t, h.client.List(ctx, nodes))
	out := map[string][]string{}
	for _, n := range nodes.Items {
		if _, rr := rrs[n.Name]; rr {
			continue
		}
		out[n.Name] = bySet[n.Labels[extender.LabelPeeringSet]]
	}
	return out
}

// transitionalLeft names the nodes still in a transitional peering or uplink set and the
// transitional BGPPeers left in the fake API server.
func (h *harness) transitionalLeft() []string {
	h.t.Helper()
	var out []string
	for _, p := range h.peers() {
		if _, set, ok := extender.SetLabelOf(p); ok && extender.IsTransitionalSet(set) {
			out = append(out, p)
		}
	}
	for _, n := range h.nodes() {
		if extender.IsTransitionalSet(n.Labels[extender.LabelPeeringSet]) || extender.IsTransitionalSet(n.Labels[extender.LabelUplinkSet]) {
			out = append(out, n.Name)
		}
	}
	return out
}

// TestReconcileClientMovesMakeBeforeBreak: a rack split at 90 nodes (DualPlane racks of 30 halved,
// Hierarchical racks of 30 split to 12) moves clients to route reflectors the same plan promotes or
// renumbers. Calico renders a client's change of peering set in one write: before, a client dropped
// its sessions to its old route reflectors and got sessions to the new ones, promoted in the same
// reconcile, in one render (BIRD then has no session up for it for seconds, and the new route
// reflectors' own uplinks are not up either: 10,543 pair-samples lost between nodes keeping their
// role on real BIRD); in the Hierarchical split a client kept only a route reflector renumbered in
// the same reconcile. Now, after every reconcile (4 s apart): no client loses a session unless a
// route reflector it keeps was labelled (or renumbered) at least transitions.DefaultSettle before
// and has had its session with the client for transitions.DefaultSettle (the client first peers
// with both its old and one of its new route reflectors, then moves keeping that one); the graph
// model finds 0 missing pairs; and the split completes within 20 reconciles, no transitional
// peering set left.
func TestReconcileClientMovesMakeBeforeBreak(t *testing.T) {
	for _, tc := range []struct {
		topo     v1alpha1.TopologyType
		from, to int32
	}{{v1alpha1.DualPlane, 30, 15}, {v1alpha1.Hierarchical, 30, 12}} {
		t.Run(fmt.Sprintf("%s %d to %d", tc.topo, tc.from, tc.to), func(t *testing.T) {
			h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
				s.Topology = &v1alpha1.Topology{Type: tc.topo, MaxRackSize: ptrTo(tc.from)}
			}, cluster(90))
			h.reconcile()
			h.now = h.now.Add(5 * time.Minute)
			h.reconcile()
			h.reconcile()
			require.Zero(t, h.modelMissing(), "settled")
			require.Empty(t, h.transitionalLeft(), "settled")
			h.events()

			long := h.now.Add(-time.Hour)
			labelled := map[string]time.Time{} // route reflector -> labelled or renumbered
			for n := range h.rrs() {
				labelled[n] = long
			}
			since := map[string]map[string]time.Time{} // client -> route reflector -> session since
			for c, ids := range h.clientSessions() {
				since[c] = map[string]time.Time{}
				for _, id := range ids {
					since[c][id] = long
				}
			}
			h.editPolicy(func(s *v1alpha1.RouteReflectorPolicySpec) {
				s.Topology = &v1alpha1.Topology{Type: tc.topo, MaxRackSize: ptrTo(tc.to)}
			})
			moved, transitional, direct, doneAt := 0, 0, 0, -1
			for step := 0; step < 40; step++ {
				rrsBefore, before := h.rrs(), h.clientSessions()
				h.reconcile()
				rrsAfter, after := h.rrs(), h.clientSessions()
				for n, id := range rrsAfter {
					if was, ok := rrsBefore[n]; !ok || was != id {
						labelled[n] = h.now
					}
				}
				for c, ids := range after {
					old, ok := before[c]
					if !ok {
						continue // a route reflector until now
					}
					var added, removed []string
					for _, id := range ids {
						if !slices.Contains(old, id) {
							added = append(added, id)
						}
					}
					for _, id := range old {
						if !slices.Contains(ids, id) {
							removed = append(removed, id)
						}
					}
					if len(added) > 0 && len(removed) == 0 && len(old) > 0 {
						transitional++
						// A transitional set adds one route reflector: a client never holds each
						// route from both whole sets.
						require.Len(t, added, 1, "reconcile %d: client %s: sessions %v -> %v", step, c, old, ids)
					}
					if len(removed) > 0 {
						moved++
						var why []string
						for _, id := range ids {
							if s, ok := since[c][id]; ok && h.now.Sub(labelled[id]) >= transitions.DefaultSettle && h.now.Sub(s) >= transitions.DefaultSettle {
								why = nil
								break
							}
							why = append(why, fmt.Sprintf("%s labelled or renumbered %v ago, session %v old", id, h.now.Sub(labelled[id]), h.now.Sub(since[c][id])))
						}
						require.Empty(t, why, "reconcile %d: client %s dropped %v keeping no settled route reflector (sessions %v -> %v)", step, c, removed, old, ids)
						require.NotEmpty(t, ids, "reconcile %d: client %s lost every session (%v)", step, c, old)
						// On every plane it peers on, it keeps a settled session: a session that is
						// still establishing is not its plane's only one (a plane whose only session
						// is new has a gap on real BIRD until it is up).
						settled := map[string]bool{}
						for _, id := range ids {
							if s, ok := since[c][id]; ok && h.now.Sub(labelled[id]) >= transitions.DefaultSettle && h.now.Sub(s) >= transitions.DefaultSettle {
								settled[h.node(id).Annotations[extender.AnnotationPlane]] = true
							}
						}
						for _, id := range ids {
							plane := h.node(id).Annotations[extender.AnnotationPlane]
							require.True(t, settled[plane], "reconcile %d: client %s dropped %v keeping no settled session on plane %q, where %s is new or settling (sessions %v -> %v)",
								step, c, removed, plane, id, old, ids)
						}
					}
					if len(added) > 0 && h.node(c).Labels[extender.LabelPeeringSet] != "" && !extender.IsTransitionalSet(h.node(c).Labels[extender.LabelPeeringSet]) && len(removed) > 0 {
						direct++
					}
					if since[c] == nil {
						since[c] = map[string]time.Time{}
					}
					for _, id := range added {
						since[c][id] = h.now
					}
					for _, id := range removed {
						delete(since[c], id)
					}
				}
				require.Zero(t, h.modelMissing(), "reconcile %d", step)
				// A transitional client's route reflectors annotation lists the route reflectors of
				// its set and its planned ones, no other (not the old ones its set has left).
				planned := map[string][]string{}
				for _, pc := range h.r.last[h.policyNm].Clients {
					planned[pc.Node] = pc.RouteReflectors
				}
				for _, n := range h.nodes() {
					if !extender.IsTransitionalSet(n.Labels[extender.LabelPeeringSet]) {
						continue
					}
					listed := strings.Split(n.Annotations[extender.AnnotationRouteReflectors], ",")
					for _, id := range after[n.Name] {
						require.Contains(t, listed, id, "reconcile %d: client %s's annotation %v", step, n.Name, listed)
					}
					for _, rr := range listed {
						require.True(t, slices.Contains(after[n.Name], rr) || slices.Contains(planned[n.Name], rr),
							"reconcile %d: client %s's annotation lists %s (set %v, planned %v)", step, n.Name, rr, after[n.Name], planned[n.Name])
					}
				}
				if doneAt < 0 && step > 0 && len(h.transitionalLeft()) == 0 && clientsAsPlanned(h) {
					doneAt = step
				}
				h.now = h.now.Add(4 * time.Second)
			}
			t.Logf("%d clients moved, %d of them first to a transitional set, %d in one write (keeping a settled route reflector); clients as planned after reconcile %d", moved, transitional, direct, doneAt)
			require.Positive(t, moved, "the split moves clients")
			require.Positive(t, transitional, "clients peer with both sets first")
			require.GreaterOrEqual(t, doneAt, 0, "the split never completed: %v", h.transitionalLeft())
			require.Less(t, doneAt, 20, "the split completes in bounded reconciles")
			ev := strings.Join(h.events(), "\n")
			require.Contains(t, ev, "ClientMovesHeld", "an Event says the moves")
			h.now = h.now.Add(5 * time.Minute)
			h.reconcile()
			h.reconcile()
			require.Zero(t, h.r.last[h.policyNm].Summary.DrainingRouteReflectors, "no route reflector left draining")
			require.Empty(t, h.transitionalLeft(), "no transitional set left")
			require.True(t, clientsAsPlanned(h), "every client as planned")
		})
	}
}

// clientsAsPlanned: every client of the last plan carries its planned peering set.
func clientsAsPlanned(h *harness) bool {
	res := h.r.last[h.policyNm]
	want := map[string]string{}
	for _, c := range res.Clients {
		want[c.Node] = c.PeeringSet
	}
	for _, n := range h.nodes() {
		if set, ok := want[n.Name]; ok && n.Labels[extender.LabelPeeringSet] != set {
			return false
		}
	}
	return true
}

// TestReconcileClientMovesWaitForSessions: with handover BGPSessions a client in a transitional set
// takes its next new route reflector, and at last leaves its old ones, once the CalicoNodeStatus of
// each new one, reported at least transitions.DefaultMin after it was added, shows every client
// that lists it Established: before transitions.DefaultSettle for the two new route reflectors of a
// DualPlane split when calico-node reports them up; when one moving client's sessions stay down,
// the clients moving to the same route reflectors keep their old ones until transitions.DefaultMax
// for each new one (the second is added only once the first has settled).
func TestReconcileClientMovesWaitForSessions(t *testing.T) {
	for _, tc := range []struct {
		name     string
		down     bool
		min, max time.Duration
	}{{"sessions up", false, 2 * transitions.DefaultMin, transitions.DefaultSettle}, {"a session down", true, 2 * transitions.DefaultMax, 2*transitions.DefaultMax + 5*time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
				sessionsPolicy(time.Minute)(s)
				s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: ptrTo(int32(30))}
			}, ipCluster(90))
			h.reconcile()
			h.now = h.now.Add(5 * time.Minute)
			h.reconcile()
			h.reconcile()
			require.Empty(t, h.transitionalLeft(), "settled")
			h.editPolicy(func(s *v1alpha1.RouteReflectorPolicySpec) {
				s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: ptrTo(int32(15))}
			})
			h.reconcile()
			start := h.now
			var down []string
			for _, n := range h.nodes() {
				if extender.IsTransitionalSet(n.Labels[extender.LabelPeeringSet]) {
					down = append(down, n.Name)
				}
			}
			require.NotEmpty(t, down, "clients in a transitional set")
			if !tc.down {
				down = nil
			} else {
				down = down[:1]
			}
			for h.now.Sub(start) < 3*transitions.DefaultMax && len(h.transitionalLeft()) > 0 {
				h.now = h.now.Add(time.Second)
				h.calicoNode(down...)
				h.reconcile()
				require.Zero(t, h.modelMissing())
			}
			took := h.now.Sub(start)
			t.Logf("moved to the planned sets %v after the transitional ones", took)
			require.Empty(t, h.transitionalLeft())
			require.GreaterOrEqual(t, took, tc.min)
			require.Less(t, took, tc.max)
		})
	}
}

// TestReconcileClientMovesAfterFailover: a leader that finds clients in a transitional set it did
// not write (the last leader's, at a time it does not know) gives their route reflectors
// transitions.DefaultSettle from then before they leave the old ones.
func TestReconcileClientMovesAfterFailover(t *testing.T) {
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: ptrTo(int32(30))}
	}, cluster(90))
	h.reconcile()
	h.now = h.now.Add(5 * time.Minute)
	h.reconcile()
	h.editPolicy(func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: ptrTo(int32(15))}
	})
	h.reconcile()
	require.NotEmpty(t, h.transitionalLeft(), "clients in a transitional set")
	h.now = h.now.Add(transitions.DefaultSettle)
	h.r.mu.Lock()
	h.r.memos = nil // a new leader
	h.r.mu.Unlock()
	failover := h.now
	for len(h.transitionalLeft()) > 0 && h.now.Sub(failover) < transitions.DefaultMax {
		h.reconcile()
		require.Zero(t, h.modelMissing())
		h.now = h.now.Add(2 * time.Second)
	}
	require.Empty(t, h.transitionalLeft())
	require.GreaterOrEqual(t, h.now.Sub(failover), transitions.DefaultSettle, "released before transitions.DefaultSettle after the failover")
}
