package reconciler

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/sessions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

const (
	v4   = extender.FamilyIPv4
	v6   = extender.FamilyIPv6
	both = extender.FamilyIPv4 | extender.FamilyIPv6
)

func peer(ip string, up bool) apiv3.CalicoNodePeer {
	s := apiv3.BGPSessionStateActive
	if up {
		s = apiv3.BGPSessionStateEstablished
	}
	return apiv3.CalicoNodePeer{PeerIP: ip, Type: "NodePeer", State: s}
}

func statusOf(pv4, pv6 []apiv3.CalicoNodePeer) *apiv3.CalicoNodeStatus {
	cns := &apiv3.CalicoNodeStatus{}
	cns.Status.BGP.PeersV4, cns.Status.BGP.PeersV6 = pv4, pv6
	return cns
}

func TestBGPDownMessage(t *testing.T) {
	h := extender.BGPHealth{DownSince: t0, Sessions: []string{"c1 (fd00::1, Active)"}, Families: v6}
	msg := bgpDownMessage("rr-1", h, both, 5*time.Second)
	require.Equal(t, "rr-1: Node Ready, IPv4 sessions Established but IPv6 sessions down since 2025-06-01T12:00:00Z (bgpHealth.gracePeriod 5s): its IPv6 clients have no routes through it, its replacement is promoted; down: c1 (fd00::1, Active)", msg)
	h.Families = both
	require.Contains(t, bgpDownMessage("rr-1", h, both, 5*time.Second), "rr-1: Node Ready but no BGP session Established since")
	h.Families = v4
	require.Contains(t, bgpDownMessage("rr-1", h, v4, 5*time.Second), "rr-1: Node Ready but no BGP session Established since", "an IPv4-only route reflector: as before")
}

// dualCluster is ipCluster(n) with an IPv6 address too (InternalIP fd00::i), and Calico's address
// annotations of both families, as calico-node writes them.
func dualCluster(n int) []*corev1.Node {
	nodes := ipCluster(n)
	for i, nd := range nodes {
		nd.Status.Addresses = append(nd.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("fd00::%x", i+1)})
		if nd.Annotations == nil {
			nd.Annotations = map[string]string{}
		}
		nd.Annotations[extender.AnnotationCalicoIPv4] = fmt.Sprintf("10.0.0.%d/24", i+1)
		nd.Annotations[extender.AnnotationCalicoIPv6] = fmt.Sprintf("fd00::%x/64", i+1)
	}
	return nodes
}

// calicoNodeBy writes every CalicoNodeStatus's BGP peers as calico-node would in a dual-stack
// cluster: one session per address family with each client that lists the node and each other
// route reflector (peersV4, peersV6), in the state up says.
func (h *harness) calicoNodeBy(up func(rr, client string, fam extender.Families) bool) {
	h.t.Helper()
	h.calicoNodeSince(up, nil)
}

// calicoNodeSince is calicoNodeBy with each session's since column (BIRD's `show protocols`) as
// since gives it for the reporting node (nil: none).
func (h *harness) calicoNodeSince(up func(rr, client string, fam extender.Families) bool, since func(rr string) string) {
	h.t.Helper()
	h.reportStatuses(func(cns *apiv3.CalicoNodeStatus, nodes []corev1.Node) {
		cns.Status.BGP.PeersV4, cns.Status.BGP.PeersV6 = nil, nil
		for _, n := range nodes {
			_, rr := n.Labels["calico-route-reflector"]
			if n.Name == cns.Spec.Node || !rr && !slices.Contains(strings.Split(n.Annotations[extender.AnnotationRouteReflectors], ","), cns.Spec.Node) {
				continue
			}
			for _, a := range n.Status.Addresses {
				fam := sessions.IPFamily(a.Address)
				if a.Type != corev1.NodeInternalIP || fam == 0 {
					continue
				}
				p := peer(a.Address, up(cns.Spec.Node, n.Name, fam))
				if since != nil {
					p.Since = since(cns.Spec.Node)
				}
				if fam == v6 {
					cns.Status.BGP.PeersV6 = append(cns.Status.BGP.PeersV6, p)
				} else {
					cns.Status.BGP.PeersV4 = append(cns.Status.BGP.PeersV4, p)
				}
			}
		}
	})
}

// dualHealthHarness is a dual-stack cluster of 12 under a policy with BGP health on (gracePeriod
// 5 s, no scale-down stabilization), reconciled twice: its route reflectors placed.
func dualHealthHarness(t *testing.T) *harness {
	on := true
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.BGPHealth = &v1alpha1.BGPHealth{Enabled: &on, GracePeriod: &metav1.Duration{Duration: 5 * time.Second}}
		s.Behavior = &v1alpha1.Behavior{ScaleDown: &v1alpha1.ScaleDown{StabilizationWindowSeconds: ptr(int32(0))}}
	}, dualCluster(12))
	h.r.Ledger.BGPHealth = h.r.BGPHealthRecords
	h.reconcile()
	h.reconcile()
	return h
}

// TestBGPHealthIPv6DownReplaced: in a dual-stack cluster, a route reflector whose IPv6 sessions are
// all down while its IPv4 ones are up is down for its IPv6 clients: past gracePeriod it is
// replaced (draining, reason BGPDown), the Event says "IPv6 sessions down", and the gauge counts it
// under family="ipv6".
func TestBGPHealthIPv6DownReplaced(t *testing.T) {
	h := dualHealthHarness(t)
	before := h.rrs()
	require.Len(t, before, 3)
	require.Len(t, h.nodeStatuses(), 3, "one CalicoNodeStatus per route reflector")
	allUp := func(string, string, extender.Families) bool { return true }
	h.calicoNodeBy(allUp)
	h.now = h.now.Add(time.Second)
	h.reconcile()
	victim := slices.Sorted(func(yield func(string) bool) {
		for rr := range before {
			if !yield(rr) {
				return
			}
		}
	})[0]
	h.events()
	ipv6Down := func(rr, _ string, fam extender.Families) bool { return rr != victim || fam != v6 }
	h.calicoNodeBy(ipv6Down)
	h.now = h.now.Add(time.Second)
	h.reconcile()
	require.Equal(t, float64(1), testutil.ToFloat64(bgpDownGauge.WithLabelValues("default", "grace", "ipv6")), "within gracePeriod")
	require.NotEmpty(t, h.node(victim).Annotations[extender.AnnotationClusterID])
	require.Empty(t, h.node(victim).Annotations[extender.AnnotationDrainingSince], "drained within gracePeriod")

	h.now = h.now.Add(6 * time.Second)
	h.calicoNodeBy(ipv6Down)
	for range 3 {
		h.reconcile()
	}
	v := h.node(victim)
	require.NotEmpty(t, v.Annotations[extender.AnnotationDrainingSince], "not draining past gracePeriod: %v", h.rrs())
	require.Equal(t, extender.DrainingReasonBGPDown, v.Annotations[extender.AnnotationDrainingReason])
	require.Equal(t, float64(1), testutil.ToFloat64(bgpDownGauge.WithLabelValues("default", "failed", "ipv6")))
	require.Equal(t, float64(0), testutil.ToFloat64(bgpDownGauge.WithLabelValues("default", "failed", "ipv4+ipv6")))
	ev := strings.Join(h.events(), "\n")
	require.Contains(t, ev, "Warning RouteReflectorBGPDown "+victim+": Node Ready, IPv4 sessions Established but IPv6 sessions down since", "events:\n%s", ev)
	require.Contains(t, ev, "its IPv6 clients have no routes through it")
	after := h.rrs()
	require.Len(t, after, 4, "the replacement is promoted while the victim drains: %v", after)

	// IPv6 back: after the hold (0 s window, so at once) it may take its role back.
	h.calicoNodeBy(allUp)
	h.now = h.now.Add(time.Second)
	for range 3 {
		h.reconcile()
	}
	require.Contains(t, strings.Join(h.events(), "\n"), "Normal RouteReflectorBGPUp "+victim)
	require.Equal(t, float64(0), testutil.ToFloat64(bgpDownGauge.WithLabelValues("default", "failed", "ipv6")))
}

// TestHandoverBGPSessionsDualStack: a cordoned route reflector of a dual-stack cluster hands over
// only once its clients are Established with the replacement in both families; a client whose
// IPv6 session never comes up is named with its family at the timeout.
func TestHandoverBGPSessionsDualStack(t *testing.T) {
	t.Run("waits for both families", func(t *testing.T) {
		h := newHarness(t, sessionsPolicy(time.Hour), dualCluster(30))
		h.reconcile()
		h.now = h.now.Add(transitions.DefaultMax) // the route reflectors' sessions have settled (moves.go)
		h.update("node-01", func(n *corev1.Node) { n.Spec.Unschedulable = true })
		for range 3 {
			h.reconcile()
		}
		require.Equal(t, "[node-04]", fmt.Sprint(h.nodeStatuses()), "the replacement's status")
		h.calicoNodeBy(func(_, _ string, fam extender.Families) bool { return fam == v4 })
		for range 3 {
			h.now = h.now.Add(time.Second)
			h.reconcile()
		}
		require.Contains(t, h.rrs(), "node-01", "demoted with IPv4 up and IPv6 down")
		h.calicoNodeBy(func(_, c string, fam extender.Families) bool { return fam == v4 || c != "node-07" })
		for range 3 {
			h.now = h.now.Add(time.Second)
			h.reconcile()
		}
		require.Contains(t, h.rrs(), "node-01", "demoted with node-07's IPv6 session down")
		h.calicoNodeBy(func(string, string, extender.Families) bool { return true })
		for range 3 {
			h.now = h.now.Add(time.Second)
			h.reconcile()
		}
		require.NotContains(t, h.rrs(), "node-01", "not demoted with both families up")
		h.checkClients()
		require.Empty(t, h.nodeStatuses())
	})
	t.Run("the timeout names the family", func(t *testing.T) {
		h := newHarness(t, sessionsPolicy(time.Minute), dualCluster(30))
		h.reconcile()
		h.update("node-01", func(n *corev1.Node) { n.Spec.Unschedulable = true })
		h.reconcile()
		h.reconcile()
		h.calicoNodeBy(func(_, c string, fam extender.Families) bool { return fam == v4 || c != "node-07" })
		h.reconcile()
		require.Contains(t, h.rrs(), "node-01")
		h.now = h.now.Add(time.Minute + time.Second)
		h.reconcile()
		h.reconcile()
		require.NotContains(t, h.rrs(), "node-01", "not demoted after the timeout")
		ev := strings.Join(h.events(), "\n")
		require.Contains(t, ev, "Warning HandoverTimeout node-01: handover timed out after 1m0s; clients that never established a BGP session with node-04: node-07 (IPv6)", "events:\n%s", ev)
	})
}

// TestBGPHealthGivesNewRouteReflectorsTheirSettleTime: a route reflector just promoted has no
// session up until confd rendered its peers and BIRD established them (longer on a loaded node):
// BGP health does not judge it for transitions.DefaultMax after the promotion, unless one of its
// sessions was seen Established since. On the live lab's mesh migration (gracePeriod 5 s) three of
// the eight new route reflectors were replaced before their first sessions came up, and their
// clients moved again.
func TestBGPHealthGivesNewRouteReflectorsTheirSettleTime(t *testing.T) {
	h := dualHealthHarness(t)
	before := h.rrs()
	require.Len(t, before, 3)
	none := func(string, string, extender.Families) bool { return false }
	start := h.now
	for range 12 { // past gracePeriod and transitions.DefaultSettle, within transitions.DefaultMax of the promotion
		h.now = h.now.Add(time.Second)
		h.calicoNodeBy(none)
		h.reconcile()
	}
	for rr := range before {
		require.Emptyf(t, h.node(rr).Annotations[extender.AnnotationDrainingSince], "%s replaced before its first sessions could come up", rr)
	}
	for range 8 { // past transitions.DefaultMax and gracePeriod: down is down
		h.now = h.now.Add(time.Second)
		if h.now.Sub(start) < transitions.DefaultMax {
			h.now = start.Add(transitions.DefaultMax)
		}
		h.calicoNodeBy(none)
		h.reconcile()
	}
	draining := 0
	for rr := range before {
		if h.node(rr).Annotations[extender.AnnotationDrainingSince] != "" {
			draining++
		}
	}
	require.NotZerof(t, draining, "no route reflector replaced with its sessions down past transitions.DefaultSettle and gracePeriod: %v", h.rrs())
}

// TestBGPHealthSeesSettledRouteReflectorsAlive: new route reflectors first reported with only their
// sessions to an outside peer (a top-of-rack router) Established are not judged yet (their role's
// sessions are establishing), and when their role's sessions come up nothing that watchBGPHealth
// reads changes (each status still shows Established sessions of both families): the reconciler
// then runs only when it asks to. It must ask to read those statuses again while they settle, so
// that a BIRD dying once its role's sessions were up is replaced within gracePeriod. Before,
// nothing read them: a rack route reflector killed 30 s after a move gave it clients was replaced
// only transitions.DefaultMax after the move (make test, TestBGPHealthOnRealBIRD, 2026-11-27).
func TestBGPHealthSeesSettledRouteReflectorsAlive(t *testing.T) {
	h := dualHealthHarness(t)
	rrs := h.rrs()
	require.Len(t, rrs, 3)
	victim := slices.Sorted(maps.Keys(rrs))[0]
	// report writes the statuses as calico-node does (up says which sessions are Established; each
	// route reflector's session to the router is up while up(rr, "", 0)).
	report := func(up func(rr, peer string, fam extender.Families) bool) {
		h.calicoNodeBy(up)
		h.reportStatuses(func(cns *apiv3.CalicoNodeStatus, _ []corev1.Node) {
			if up(cns.Spec.Node, "", 0) {
				cns.Status.BGP.PeersV4 = append(cns.Status.BGP.PeersV4, peer("192.0.2.1", true))
				cns.Status.BGP.PeersV6 = append(cns.Status.BGP.PeersV6, peer("2001:db8::1", true))
			}
		})
	}
	// The controller: a reconcile when the watch sees a status change (trigger), else when the
	// last reconcile asked (wake); advance runs it until the clock reaches until (or stop).
	var wake time.Time
	trigger := func(up func(string, string, extender.Families) bool) {
		report(up)
		wake = h.now.Add(h.reconcile())
	}
	advance := func(up func(string, string, extender.Families) bool, until time.Time, stop func() bool) {
		for !stop() && !wake.After(until) {
			h.now = wake
			trigger(up)
		}
		h.now = until
		report(up)
	}
	never := func() bool { return false }
	routerOnly := func(_, peer string, _ extender.Families) bool { return peer == "" }
	allUp := func(string, string, extender.Families) bool { return true }
	h.now = h.now.Add(time.Second)
	trigger(routerOnly) // their first reports
	advance(routerOnly, h.now.Add(2*time.Second), never)
	advance(allUp, h.now.Add(15*time.Second), never) // their role's sessions up: no status change the watch sees

	dead := func(rr, peer string, _ extender.Families) bool { return rr != victim && peer != victim }
	kill := h.now
	trigger(dead)
	bound := 5*time.Second + healthEvery + time.Second // gracePeriod, the watch's period, a report
	advance(dead, kill.Add(bound), func() bool { return h.node(victim).Annotations[extender.AnnotationDrainingSince] != "" })
	require.NotEmptyf(t, h.node(victim).Annotations[extender.AnnotationDrainingSince],
		"%s, BIRD dead since %v, not replaced within %v (route reflectors %v)", victim, kill.Format(time.RFC3339), bound, h.rrs())
	require.Less(t, h.now.Sub(kill), transitions.DefaultMax)
}

// TestBGPHealthJudgesPromotedClientsByTheirNewSessions: a client promoted by a rack split was
// reported by calico-node with its client sessions to its old route reflectors Established until
// its BIRD loaded its new role (confd renders it seconds later on a loaded node); then those
// sessions are gone and its new ones (to its clients, to its spine member) are establishing. Those
// old sessions are no sign that its new ones are up: BGP health leaves it unjudged until a session
// of its new role (to a client that lists it, or to a rack route reflector whose uplink set selects
// it) is seen Established, transitions.DefaultMax at most. Before, the first report's old sessions
// made it "alive" at once, and with its new sessions slower than gracePeriod it was judged down and
// replaced: on the live lab's rack split at load 54, two kept clients were promoted in place of the
// new route reflectors of a rack and back.
func TestBGPHealthJudgesPromotedClientsByTheirNewSessions(t *testing.T) {
	on := true
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.BGPHealth = &v1alpha1.BGPHealth{Enabled: &on, GracePeriod: &metav1.Duration{Duration: 5 * time.Second}}
		s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: ptrTo(int32(30))}
	}, ipCluster(90))
	h.r.Ledger.BGPHealth = h.r.BGPHealthRecords
	h.reconcile()
	h.now = h.now.Add(5 * time.Minute)
	h.reconcile()
	h.reconcile()
	allUp := func(string, string, extender.Families) bool { return true }
	h.calicoNodeBy(allUp)
	h.now = h.now.Add(time.Second)
	h.reconcile()
	old := h.rrs()
	oldRRsOf := map[string][]string{} // client -> the route reflectors it peers with
	for _, n := range h.nodes() {
		oldRRsOf[n.Name] = strings.Split(n.Annotations[extender.AnnotationRouteReflectors], ",")
	}
	h.editPolicy(func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: ptrTo(int32(15))}
	})
	h.reconcile()
	promoted := map[string]bool{}
	for n := range h.rrs() {
		if _, ok := old[n]; !ok {
			promoted[n] = true
		}
	}
	require.NotEmpty(t, promoted, "the split promotes clients")
	h.now = h.now.Add(time.Second)
	h.reconcile() // their CalicoNodeStatuses
	// Reported before their BIRD loaded the new role: their sessions to their old route
	// reflectors, as clients, Established.
	h.now = h.now.Add(time.Second)
	h.calicoNodeBy(func(rr, peer string, _ extender.Families) bool {
		return !promoted[rr] || slices.Contains(oldRRsOf[rr], peer)
	})
	h.reconcile()
	// Then loaded: the old sessions gone, the new ones establishing, past gracePeriod.
	for range 12 {
		h.now = h.now.Add(time.Second)
		h.calicoNodeBy(func(rr, _ string, _ extender.Families) bool { return !promoted[rr] })
		h.reconcile()
	}
	rrs := h.rrs()
	for n := range promoted {
		require.Containsf(t, rrs, n, "%s replaced before its new sessions could come up (route reflectors %v)", n, rrs)
		require.Emptyf(t, h.node(n).Annotations[extender.AnnotationDrainingSince], "%s replaced before its new sessions could come up", n)
	}
	for n := range rrs {
		_, wasRR := old[n]
		require.Truef(t, wasRR || promoted[n], "%s promoted in place of a new route reflector whose sessions were establishing", n)
	}
	// Once a session of the new role is up, it is judged: all down past gracePeriod, replaced.
	h.now = h.now.Add(time.Second)
	h.calicoNodeBy(allUp)
	h.reconcile()
	for range 8 {
		h.now = h.now.Add(time.Second)
		h.calicoNodeBy(func(rr, _ string, _ extender.Families) bool { return !promoted[rr] })
		h.reconcile()
	}
	replaced := 0
	for n := range promoted {
		if h.node(n).Annotations[extender.AnnotationDrainingSince] != "" || h.rrs()[n] == "" {
			replaced++
		}
	}
	require.NotZerof(t, replaced, "no promoted route reflector replaced with its sessions down past gracePeriod, once up: %v", h.rrs())
}
