package reconciler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

func TestPlanNodeStatuses(t *testing.T) {
	for _, tc := range []struct {
		name        string
		want, have  []string
		create, del []string
		bound       int
	}{
		{name: "none", bound: 3},
		{name: "fill up to the bound in name order", want: []string{"e", "d", "c", "b", "a"}, bound: 3, create: []string{"a", "b", "c"}},
		{name: "present ones stay, new ones fill", want: []string{"a", "b", "c", "d", "e"}, have: []string{"d"}, bound: 3, create: []string{"a", "b"}},
		{name: "done ones go first", want: []string{"c", "d"}, have: []string{"a", "b", "c"}, bound: 3, create: []string{"d"}, del: []string{"a", "b"}},
		{name: "over the bound (another writer): extras go", want: []string{"a", "b", "c", "d"}, have: []string{"a", "b", "c", "d"}, bound: 3, del: []string{"d"}},
		{name: "handover ended", have: []string{"x"}, bound: 3, del: []string{"x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			create, del := planNodeStatuses(tc.want, tc.have, tc.bound)
			require.Equal(t, fmt.Sprint(tc.create), fmt.Sprint(create), "create")
			require.Equal(t, fmt.Sprint(tc.del), fmt.Sprint(del), "del")
			if n := len(tc.have) - len(del) + len(create); n > tc.bound {
				require.Fail(t, fmt.Sprintf("%d objects after the change", n))
			}
		})
	}
}

func TestMissingSessions(t *testing.T) {
	est := func(ip string) apiv3.CalicoNodePeer {
		return apiv3.CalicoNodePeer{PeerIP: ip, Type: apiv3.BGPPeerTypeNodePeer, State: apiv3.BGPSessionStateEstablished}
	}
	active := func(ip string) apiv3.CalicoNodePeer {
		return apiv3.CalicoNodePeer{PeerIP: ip, Type: apiv3.BGPPeerTypeNodePeer, State: apiv3.BGPSessionStateActive}
	}
	mesh := func(ip string) apiv3.CalicoNodePeer {
		return apiv3.CalicoNodePeer{PeerIP: ip, Type: apiv3.BGPPeerTypeNodeMesh, State: apiv3.BGPSessionStateEstablished}
	}
	one := func(kv ...string) map[string][]string {
		m := map[string][]string{}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				m[kv[i]] = nil
			} else {
				m[kv[i]] = strings.Split(kv[i+1], ",")
			}
		}
		return m
	}
	v4 := func(p ...apiv3.CalicoNodePeer) []apiv3.CalicoNodePeer { return p }
	v6 := v4
	dual := []string{"10.0.0.100", "fd00::100"}
	for _, tc := range []struct {
		name     string
		clients  map[string][]string
		rr       []string // the route reflector's addresses (nil: unknown)
		pv4, pv6 []apiv3.CalicoNodePeer
		want     string
	}{
		{"all up", one("a", "10.0.0.1", "b", "10.0.0.2"), nil, v4(est("10.0.0.2"), est("10.0.0.1")), nil, "map[]"},
		{"one down", one("a", "10.0.0.1", "b", "10.0.0.2"), nil, v4(est("10.0.0.1"), active("10.0.0.2")), nil, "map[b:IPv4]"},
		// A report made before confd rendered the promotion: the mesh session is no route reflector's.
		{"a mesh session counts for nothing", one("a", "10.0.0.1", "b", "10.0.0.2"), nil, v4(mesh("10.0.0.1"), est("10.0.0.2")), nil, "map[a:IPv4]"},
		{"not listed yet", one("a", "10.0.0.1", "b", "10.0.0.2"), nil, nil, nil, "map[a:IPv4 b:IPv4]"},
		{"no IP known", one("a", ""), nil, v4(est("10.0.0.1")), nil, "map[a:none]"},
		{"IPs compared parsed", one("a", "10.0.0.1"), nil, v4(est("10.000.0.1")), nil, "map[a:IPv4]"},
		{"IPv6 only", one("a", "fd00::1", "b", "fd00::2"), nil, nil, v6(est("fd00:0::1")), "map[b:IPv6]"},
		{"dual stack: both families up", one("a", "10.0.0.1,fd00::1"), dual, v4(est("10.0.0.1")), v6(est("fd00::1")), "map[]"},
		{"dual stack: IPv6 still down", one("a", "10.0.0.1,fd00::1"), dual, v4(est("10.0.0.1")), v6(active("fd00::1")), "map[a:IPv6]"},
		{"dual stack: IPv6 not listed", one("a", "10.0.0.1,fd00::1"), dual, v4(est("10.0.0.1")), nil, "map[a:IPv6]"},
		{"dual stack: IPv4 still down, IPv6 up", one("a", "10.0.0.1,fd00::1"), dual, v4(active("10.0.0.1")), v6(est("fd00::1")), "map[a:IPv4]"},
		{"dual stack: none up", one("a", "10.0.0.1,fd00::1"), dual, nil, nil, "map[a:IPv4+IPv6]"},
		{"an address counts in its family's list only", one("a", "10.0.0.1,fd00::1"), dual, v4(est("10.0.0.1"), est("fd00::1")), nil, "map[a:IPv6]"},
		{"route reflector without IPv6: IPv4 is all both ends have", one("a", "10.0.0.1,fd00::1"), []string{"10.0.0.100"}, v4(est("10.0.0.1")), nil, "map[]"},
		{"route reflector without IPv6 that lists IPv6 sessions: judged", one("a", "10.0.0.1,fd00::1"), []string{"10.0.0.100"}, v4(est("10.0.0.1")), v6(active("fd00::1")), "map[a:IPv6]"},
		{"IPv4-only client of a dual-stack route reflector", one("a", "10.0.0.1", "b", "10.0.0.2,fd00::2"), dual, v4(est("10.0.0.1"), est("10.0.0.2")), v6(est("fd00::2")), "map[]"},
		{"route reflector address unknown: every family of the clients", one("a", "10.0.0.1,fd00::1"), nil, v4(est("10.0.0.1")), nil, "map[a:IPv6]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cns := &apiv3.CalicoNodeStatus{}
			cns.Status.BGP.PeersV4, cns.Status.BGP.PeersV6 = tc.pv4, tc.pv6
			if got := fmt.Sprint(missingSessions(tc.clients, tc.rr, cns)); got != tc.want {
				require.Fail(t, fmt.Sprintf("got %s want %s", got, tc.want))
			}
		})
	}
}

func TestNodeIPs(t *testing.T) {
	n := func(ann map[string]string, addrs ...corev1.NodeAddress) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: ann}, Status: corev1.NodeStatus{Addresses: addrs}}
	}
	internal := corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.1.0.1"}
	internal6 := corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "fd00::1"}
	for _, tc := range []struct {
		node *corev1.Node
		want string
	}{
		{n(map[string]string{extender.AnnotationCalicoIPv4: "192.168.0.5/24"}, internal), "[192.168.0.5]"},
		{n(nil, internal), "[10.1.0.1]"},
		{n(nil, internal6, internal), "[10.1.0.1 fd00::1]"},
		{n(map[string]string{extender.AnnotationCalicoIPv6: "fd00::5/64"}), "[fd00::5]"},
		{n(map[string]string{extender.AnnotationCalicoIPv4: "192.168.0.5/24", extender.AnnotationCalicoIPv6: "fd00::5/64"}, internal, internal6), "[192.168.0.5 fd00::5]"},
		// Calico peers in IPv4 only: the IPv6 InternalIP of a dual-stack Kubernetes node is no BGP address.
		{n(map[string]string{extender.AnnotationCalicoIPv4: "192.168.0.5/24"}, internal, internal6), "[192.168.0.5]"},
		{n(map[string]string{extender.AnnotationCalicoIPv6: "fd00::5/64"}, internal, internal6), "[fd00::5]"},
		{n(nil, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "1.2.3.4"}), "[]"},
		{nil, "[]"},
	} {
		if got := fmt.Sprint(nodeIPs(extender.FromNode(tc.node))); got != tc.want {
			assert.Fail(t, fmt.Sprintf("%+v: %s want %s", tc.node, got, tc.want))
		}
	}
}

// The cache keeps what nodeIPs reads: Calico's BGP address when the node carries it (and then no
// InternalIP, which nodeIPs does not read), the InternalIPs when it does not.
func TestStripNodeKeepsBGPAddress(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{extender.AnnotationCalicoIPv4: "192.168.0.5/24", "other": "x"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "n"},
			{Type: corev1.NodeInternalIP, Address: "10.1.0.1"}, {Type: corev1.NodeExternalIP, Address: "1.2.3.4"}}},
	}
	s := state.StripNode(n.DeepCopy())
	require.Equal(t, "map[projectcalico.org/IPv4Address:192.168.0.5/24]", fmt.Sprint(s.Annotations), "stripped annotations")
	require.Empty(t, s.Status.Addresses, "stripped addresses")
	require.Equal(t, []string{"192.168.0.5"}, nodeIPs(s))
	without := n.DeepCopy()
	delete(without.Annotations, extender.AnnotationCalicoIPv4)
	s = state.StripNode(without)
	require.Len(t, s.Status.Addresses, 1, "stripped addresses")
	require.Equal(t, "10.1.0.1", s.Status.Addresses[0].Address, "stripped addresses")
	require.Equal(t, []string{"10.1.0.1"}, nodeIPs(s))
}

func TestMeshReady(t *testing.T) {
	p, _ := policy.Resolve(policy.Default("default"))
	rr := func(name string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels:      map[string]string{p.RRLabelKey: p.RRLabelValue},
			Annotations: map[string]string{extender.AnnotationClusterID: "224.0.0.1"}}}
		return n
	}
	cl := func(name, rrs string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: map[string]string{}}}
		if rrs != "" {
			n.Labels[extender.LabelPeeringSet] = "s1"
			n.Annotations[extender.AnnotationRouteReflectors] = rrs
		}
		return n
	}
	view := func(ns ...*corev1.Node) map[string]*corev1.Node {
		m := map[string]*corev1.Node{}
		for _, n := range ns {
			m[n.Name] = n
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		view   map[string]*corev1.Node
		others []*corev1.Node
		ok     bool
		why    string
	}{
		{"every client has route reflectors", view(rr("r1"), cl("c1", "r1")), nil, true, ""},
		{"no route reflector", view(cl("c1", "")), nil, false, "no route reflector"},
		{"a client without", view(rr("r1"), cl("c1", "r1"), cl("c2", "")), nil, false, "client c2 has no route reflectors"},
		{"a listed one not in place", view(rr("r1"), cl("c1", "r1,r2")), nil, false, "client c1: r2 is not a route reflector yet"},
		{"a node in no policy", view(rr("r1"), cl("c1", "r1")), []*corev1.Node{cl("x", "")}, false, "node x has no route reflectors (in no policy)"},
		{"another policy's client", view(rr("r1"), cl("c1", "r1")), []*corev1.Node{cl("x", "q1")}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := meshReady(p, records(tc.view), extender.FromNodes(tc.others))
			require.Equal(t, tc.ok, ok, "ok")
			require.Equal(t, tc.why, why, "why")
		})
	}
}

// ipCluster is cluster(n) with InternalIPs 10.0.0.i.
func ipCluster(n int) []*corev1.Node {
	nodes := cluster(n)
	for i, nd := range nodes {
		nd.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.0.0.%d", i+1)}}
	}
	return nodes
}

// calicoNode writes every CalicoNodeStatus's BGP peers as calico-node would: an Established
// session with each client that lists the node and each rack route reflector whose uplink set
// selects it, except with the nodes in down.
func (h *harness) calicoNode(down ...string) {
	h.t.Helper()
	uplinks := h.uplinkSessions()
	h.reportStatuses(func(cns *apiv3.CalicoNodeStatus, nodes []corev1.Node) {
		var peers []apiv3.CalicoNodePeer
		for _, n := range nodes {
			if !slices.Contains(strings.Split(n.Annotations[extender.AnnotationRouteReflectors], ","), cns.Spec.Node) &&
				!slices.Contains(uplinks[n.Name], cns.Spec.Node) {
				continue
			}
			state := apiv3.BGPSessionStateEstablished
			if slices.Contains(down, n.Name) {
				state = apiv3.BGPSessionStateActive
			}
			peers = append(peers, apiv3.CalicoNodePeer{PeerIP: n.Status.Addresses[0].Address, Type: "NodePeer", State: state})
		}
		cns.Status.BGP.PeersV4 = peers
	})
}

// reportStatuses writes every CalicoNodeStatus as calico-node reports it now: fill sets its
// sessions from the cluster's nodes, and the report is stamped with the harness's clock.
func (h *harness) reportStatuses(fill func(cns *apiv3.CalicoNodeStatus, nodes []corev1.Node)) {
	h.t.Helper()
	ctx := context.Background()
	list := &apiv3.CalicoNodeStatusList{}
	require.NoError(h.t, h.client.List(ctx, list))
	nodes := &corev1.NodeList{}
	require.NoError(h.t, h.client.List(ctx, nodes))
	for i := range list.Items {
		cns := &list.Items[i]
		fill(cns, nodes.Items)
		cns.Status.LastUpdated = metav1.NewTime(h.now)
		require.NoError(h.t, h.client.Update(ctx, cns))
	}
}

func (h *harness) nodeStatuses() []string {
	h.t.Helper()
	list := &apiv3.CalicoNodeStatusList{}
	require.NoError(h.t, h.client.List(context.Background(), list, client.MatchingLabels{extender.LabelManagedBy: extender.ManagedByValue}))
	var out []string
	for _, o := range list.Items {
		out = append(out, o.Spec.Node)
	}
	slices.Sort(out)
	return out
}

func sessionsPolicy(delay time.Duration) func(*v1alpha1.RouteReflectorPolicySpec) {
	return func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.RemovalDelay = &metav1.Duration{Duration: delay}
		s.Handover = v1alpha1.HandoverBGPSessions
	}
}

func TestHandoverBGPSessionsEstablished(t *testing.T) {
	h := newHarness(t, sessionsPolicy(time.Hour), ipCluster(30))
	h.reconcile()
	if s := h.nodeStatuses(); len(s) != 0 {
		require.Fail(t, fmt.Sprintf("statuses without a handover: %v", s))
	}
	h.now = h.now.Add(transitions.DefaultMax) // the route reflectors' sessions have settled (moves.go)
	h.update("node-01", func(n *corev1.Node) { n.Spec.Unschedulable = true })
	for range 3 {
		h.reconcile()
	}
	if s := h.nodeStatuses(); fmt.Sprint(s) != "[node-04]" {
		require.Fail(t, fmt.Sprintf("statuses %v, want the replacement's", s))
	}
	if _, ok := h.rrs()["node-01"]; !ok {
		require.Fail(t, "demoted before the sessions are up")
	}
	h.calicoNode()
	for range 3 {
		h.now = h.now.Add(time.Second)
		h.reconcile()
	}
	if _, ok := h.rrs()["node-01"]; ok {
		require.Fail(t, fmt.Sprintf("not demoted with every session up: %v", h.rrs()))
	}
	h.checkClients()
	if s := h.nodeStatuses(); len(s) != 0 {
		require.Fail(t, fmt.Sprintf("statuses left after the handover: %v", s))
	}
	ev := strings.Join(h.events(), "\n")
	if !strings.Contains(ev, "RouteReflectorHandedOver node-01: every moving client has an Established BGP session with node-04") ||
		!strings.Contains(ev, "RouteReflectorDemoted Demoted: cordoned; clients moved to node-04") {
		require.Fail(t, fmt.Sprintf("events:\n%s", ev))
	}
}

func TestHandoverBGPSessionsTimeout(t *testing.T) {
	h := newHarness(t, sessionsPolicy(time.Minute), ipCluster(30))
	h.reconcile()
	h.update("node-01", func(n *corev1.Node) { n.Spec.Unschedulable = true })
	h.reconcile()
	h.reconcile()
	h.calicoNode("node-07", "node-13")
	h.reconcile()
	if _, ok := h.rrs()["node-01"]; !ok {
		require.Fail(t, "demoted with sessions down")
	}
	h.now = h.now.Add(time.Minute + time.Second)
	h.reconcile()
	h.reconcile()
	if _, ok := h.rrs()["node-01"]; ok {
		require.Fail(t, "not demoted after the timeout")
	}
	if s := h.nodeStatuses(); len(s) != 0 {
		require.Fail(t, fmt.Sprintf("statuses left after the timeout: %v", s))
	}
	ev := strings.Join(h.events(), "\n")
	if !strings.Contains(ev, "Warning HandoverTimeout node-01: handover timed out after 1m0s; clients that never established a BGP session with node-04: node-07, node-13") {
		require.Fail(t, fmt.Sprintf("events:\n%s", ev))
	}
	pol := &v1alpha1.RouteReflectorPolicy{}
	_ = h.client.Get(context.Background(), client.ObjectKey{Name: "default"}, pol)
	c := findCondition(pol.Status.Conditions, ConditionDegraded)
	require.NotNil(t, c, "no Degraded condition")
	require.Equal(t, metav1.ConditionTrue, c.Status, "Degraded %+v", c)
	require.Equal(t, ReasonHandoverTimeout, c.Reason, "Degraded %+v", c)
	require.Contains(t, c.Message, "node-07, node-13", "Degraded %+v", c)
}

func TestHandoverBGPSessionsBounded(t *testing.T) {
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		sessionsPolicy(time.Hour)(s)
		s.MinRouteReflectors = ptr(int32(9))
	}, ipCluster(30))
	h.reconcile()
	before := h.rrs()
	require.Lenf(t, before, 9, "route reflectors %v", before)
	var drained []string
	for rr := range before {
		if len(drained) < 4 {
			drained = append(drained, rr)
			h.update(rr, func(n *corev1.Node) { n.Spec.Unschedulable = true })
		}
	}
	seen := map[string]bool{}
	for i := 0; i < 60; i++ {
		h.now = h.now.Add(time.Second)
		h.reconcile()
		s := h.nodeStatuses()
		require.Falsef(t, len(s) > MaxNodeStatuses, "%d CalicoNodeStatuses at once: %v", len(s), s)
		for _, n := range s {
			seen[n] = true
		}
		h.calicoNode()
		done := true
		for _, d := range drained {
			if _, ok := h.rrs()[d]; ok {
				done = false
			}
		}
		if done && len(s) == 0 {
			t.Logf("handed over in %d passes; statuses used for %d nodes", i+1, len(seen))
			h.checkClients()
			require.Falsef(t, len(seen) <= MaxNodeStatuses, "only %d replacements checked: the test does not exercise the bound", len(seen))
			return
		}
	}
	require.Fail(t, fmt.Sprintf("not handed over: route reflectors %v, statuses %v", h.rrs(), h.nodeStatuses()))
}

func TestMigrateFromNodeMesh(t *testing.T) {
	for _, mode := range []v1alpha1.HandoverMode{v1alpha1.HandoverDelay, v1alpha1.HandoverBGPSessions} {
		t.Run(string(mode), func(t *testing.T) {
			h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
				s.RemovalDelay = &metav1.Duration{Duration: time.Minute}
				s.Handover = mode
				s.MigrateFromNodeMesh = true
			}, ipCluster(12))
			h.reconcile()
			h.reconcile()
			require.False(t, meshOff(h), "mesh turned off at once")
			if mode == v1alpha1.HandoverBGPSessions {
				h.calicoNode("node-05")
				h.reconcile()
				require.False(t, meshOff(h), "mesh turned off with a session down")
				for range 6 {
					h.now = h.now.Add(time.Second) // a report counts transitions.DefaultMin after the promotions
					h.calicoNode()
					h.reconcile()
				}
			} else {
				h.now = h.now.Add(time.Minute + time.Second)
				h.reconcile()
			}
			require.True(t, meshOff(h), "mesh still on")
			if s := h.nodeStatuses(); len(s) != 0 {
				require.Fail(t, fmt.Sprintf("statuses left: %v", s))
			}
		})
	}
}

// TestMeshOffWaitsForSettledSessions: the mesh goes off only once every client's own sessions to
// its route reflectors are up. Delay: removalDelay after the layout is no wait for them (the live
// lab's clients got their first sessions in the render that removed the mesh, and missed each other
// for 15-27 s); the route reflectors' sessions must have settled (transitions.DefaultSettle after
// the promotions). BGPSessions: a CalicoNodeStatus that shows the clients' node-to-node mesh
// sessions Established (reported before confd rendered the promotion) verifies nothing; the route
// reflector's own sessions to them, reported transitions.DefaultMin after the promotion, do.
func TestMeshOffWaitsForSettledSessions(t *testing.T) {
	spec := func(mode v1alpha1.HandoverMode) func(*v1alpha1.RouteReflectorPolicySpec) {
		return func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane}
			s.RemovalDelay = &metav1.Duration{Duration: 3 * time.Second}
			s.Handover = mode
			s.MigrateFromNodeMesh = true
		}
	}
	t.Run("Delay", func(t *testing.T) {
		h := newHarness(t, spec(v1alpha1.HandoverDelay), ipCluster(12))
		h.reconcile()
		require.NotEmpty(t, h.rrs(), "no route reflector promoted")
		for range 4 {
			h.now = h.now.Add(time.Second) // past removalDelay
			h.reconcile()
		}
		require.False(t, meshOff(h), "mesh turned off removalDelay after the promotions, before their sessions have settled")
		h.now = h.now.Add(transitions.DefaultSettle)
		h.reconcile()
		require.True(t, meshOff(h), "mesh still on once the sessions have settled")
	})
	t.Run("BGPSessions", func(t *testing.T) {
		h := newHarness(t, spec(v1alpha1.HandoverBGPSessions), ipCluster(12))
		h.reconcile()
		h.reconcile()
		require.NotEmpty(t, h.nodeStatuses(), "no CalicoNodeStatus for the mesh's wait")
		for range 5 {
			h.now = h.now.Add(time.Second)
			h.meshSessions()
			h.reconcile()
		}
		require.False(t, meshOff(h), "mesh turned off on the clients' mesh sessions")
		for range 4 {
			h.now = h.now.Add(time.Second)
			h.calicoNode()
			h.reconcile()
		}
		require.True(t, meshOff(h), "mesh still on with every client's session to its route reflectors Established")
	})
}

// meshSessions writes every CalicoNodeStatus as calico-node reports a node still in the
// node-to-node mesh: an Established mesh session with every other node.
func (h *harness) meshSessions() {
	h.t.Helper()
	h.reportStatuses(func(cns *apiv3.CalicoNodeStatus, nodes []corev1.Node) {
		var peers []apiv3.CalicoNodePeer
		for _, n := range nodes {
			if n.Name != cns.Spec.Node {
				peers = append(peers, apiv3.CalicoNodePeer{PeerIP: n.Status.Addresses[0].Address, Type: apiv3.BGPPeerTypeNodeMesh, State: apiv3.BGPSessionStateEstablished})
			}
		}
		cns.Status.BGP.PeersV4 = peers
	})
}

func meshOff(h *harness) bool {
	cfg := &apiv3.BGPConfiguration{}
	if err := h.client.Get(context.Background(), client.ObjectKey{Name: "default"}, cfg); err != nil {
		return false
	}
	return cfg.Spec.NodeToNodeMeshEnabled != nil && !*cfg.Spec.NodeToNodeMeshEnabled
}

func findCondition(cs []metav1.Condition, t string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}
