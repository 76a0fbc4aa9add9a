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
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

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
	// calico-node reports every second; a report counts once made transitions.DefaultMin after
	// the replacement's promotion (its SessionsRestart record).
	for range 5 {
		h.calicoNode()
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
	// A new leader keeps the condition from the policy's status for removalDelay (a minute here)
	// after the timeout, then drops it.
	degraded := func() *metav1.Condition {
		pol := &v1alpha1.RouteReflectorPolicy{}
		require.NoError(t, h.client.Get(context.Background(), client.ObjectKey{Name: "default"}, pol))
		return findCondition(pol.Status.Conditions, ConditionDegraded)
	}
	h.failover()
	h.now = h.now.Add(50 * time.Second)
	h.reconcile()
	require.Equal(t, ReasonHandoverTimeout, degraded().Reason, "a new leader, 50 s after the timeout: %+v", degraded())
	require.Equal(t, c.LastTransitionTime.Unix(), degraded().LastTransitionTime.Unix(), "the timeout's time kept")
	h.now = h.now.Add(15 * time.Second)
	h.reconcile()
	require.Equal(t, metav1.ConditionFalse, degraded().Status, "65 s after the timeout: %+v", degraded())
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
