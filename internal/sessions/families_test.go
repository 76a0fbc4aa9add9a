package sessions

import (
	"fmt"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

const (
	v4   = extender.FamilyIPv4
	v6   = extender.FamilyIPv6
	both = extender.FamilyIPv4 | extender.FamilyIPv6
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

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

// records is a view of corev1 test nodes as the reconciler reads them (extender.FromNode).
func records(view map[string]*corev1.Node) map[string]*extender.Node {
	out := make(map[string]*extender.Node, len(view))
	for k, n := range view {
		out[k] = extender.FromNode(n)
	}
	return out
}

// TestDownFamilies: a route reflector's status judged per address family.
func TestDownFamilies(t *testing.T) {
	ps := func(p ...apiv3.CalicoNodePeer) []apiv3.CalicoNodePeer { return p }
	for _, tc := range []struct {
		name        string
		pv4, pv6    []apiv3.CalicoNodePeer
		rr, clients extender.Families
		want        extender.Families
	}{
		{"IPv4: all up", ps(peer("10.0.0.1", true), peer("10.0.0.2", true)), nil, v4, v4, 0},
		{"IPv4: one broken client", ps(peer("10.0.0.1", true), peer("10.0.0.2", false)), nil, v4, v4, 0},
		{"IPv4: all down", ps(peer("10.0.0.1", false), peer("10.0.0.2", false)), nil, v4, v4, v4},
		{"IPv4: nothing reported (BIRD does not answer)", nil, nil, v4, v4, v4},
		{"IPv6-only: all up", nil, ps(peer("fd00::1", true)), v6, v6, 0},
		{"IPv6-only: all down", nil, ps(peer("fd00::1", false)), v6, v6, v6},
		{"dual stack: both up", ps(peer("10.0.0.1", true)), ps(peer("fd00::1", true)), both, both, 0},
		{"dual stack: IPv6 down, IPv4 up", ps(peer("10.0.0.1", true)), ps(peer("fd00::1", false), peer("fd00::2", false)), both, both, v6},
		{"dual stack: IPv6 not reported, IPv4 up", ps(peer("10.0.0.1", true)), nil, both, both, v6},
		{"dual stack: one IPv6 session up is enough", ps(peer("10.0.0.1", true)), ps(peer("fd00::1", false), peer("fd00::2", true)), both, both, 0},
		{"dual stack: IPv4 down, IPv6 up", ps(peer("10.0.0.1", false)), ps(peer("fd00::1", true)), both, both, v4},
		{"dual stack: IPv4 not reported, IPv6 up", nil, ps(peer("fd00::1", true)), both, both, v4},
		{"dual stack: nothing up", ps(peer("10.0.0.1", false)), ps(peer("fd00::1", false)), both, both, both},
		{"dual stack: nothing reported", nil, nil, both, both, both},
		{"IPv4-only clients: IPv6 not reported is not judged", ps(peer("10.0.0.1", true)), nil, both, v4, 0},
		{"IPv4-only clients: IPv6 sessions listed, all down (other route reflectors)", ps(peer("10.0.0.1", true)), ps(peer("fd00::9", false)), both, v4, v6},
		{"IPv4-only route reflector: its clients' IPv6 is the planner's business", ps(peer("10.0.0.1", true)), nil, v4, both, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := downFamilies(statusOf(tc.pv4, tc.pv6), tc.rr, tc.clients)
			require.Equal(t, tc.want.String(), got.String())
		})
	}
}

// TestSessionsDownFamilies: the families down and the sessions named, from a status and the
// clients' addresses.
func TestSessionsDownFamilies(t *testing.T) {
	now := t0
	dualNode := func(name string, i int) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
			extender.AnnotationCalicoIPv4: fmt.Sprintf("10.0.0.%d/24", i), extender.AnnotationCalicoIPv6: fmt.Sprintf("fd00::%d/64", i)}}}
	}
	view := map[string]*corev1.Node{"c1": dualNode("c1", 1), "c2": dualNode("c2", 2)}
	rrIPs := []string{"10.0.0.9", "fd00::9"}
	for _, tc := range []struct {
		name     string
		cns      *apiv3.CalicoNodeStatus
		updated  time.Time
		families string
		sessions string
	}{
		{"all up", statusOf([]apiv3.CalicoNodePeer{peer("10.0.0.1", true), peer("10.0.0.2", true)}, []apiv3.CalicoNodePeer{peer("fd00::1", true), peer("fd00::2", true)}),
			now, "none", "[]"},
		{"IPv6 down: the IPv6 sessions are named", statusOf([]apiv3.CalicoNodePeer{peer("10.0.0.1", true), peer("10.0.0.2", true)}, []apiv3.CalicoNodePeer{peer("fd00::1", false)}),
			now, "IPv6", "[c1 (fd00::1, Active) c2 (fd00::2, no session)]"},
		{"everything down", statusOf([]apiv3.CalicoNodePeer{peer("10.0.0.1", false)}, nil),
			now, "IPv4+IPv6", "[c1 (10.0.0.1, Active) c1 (fd00::1, no session) c2 (10.0.0.2, no session) c2 (fd00::2, no session)]"},
		{"stale: every family", statusOf([]apiv3.CalicoNodePeer{peer("10.0.0.1", true)}, []apiv3.CalicoNodePeer{peer("fd00::1", true)}),
			now.Add(-time.Minute), "IPv4+IPv6", "[all (calico-node has not reported since 2025-06-01T11:59:00Z)]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cns.Status.LastUpdated = metav1.NewTime(tc.updated)
			down, sessions := Down(tc.cns, rrIPs, []string{"c1", "c2"}, records(view), nil, now)
			require.Equal(t, tc.families, down.String())
			require.Equal(t, tc.sessions, fmt.Sprint(sessions))
		})
	}
}

// TestSessionsDownCalicoIPv4Only: a dual-stack Kubernetes cluster whose Calico peers in IPv4 only
// (Calico's IPv4 address annotation, IPv6 InternalIPs): calico-node reports no IPv6 session, and
// none is judged.
func TestSessionsDownCalicoIPv4Only(t *testing.T) {
	n := func(name string, i int) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{extender.AnnotationCalicoIPv4: fmt.Sprintf("10.0.0.%d/24", i)}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.0.0.%d", i)},
				{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("fd00::%d", i)}}}}
	}
	view := map[string]*corev1.Node{"rr": n("rr", 9), "c1": n("c1", 1)}
	cns := statusOf([]apiv3.CalicoNodePeer{peer("10.0.0.1", true)}, nil)
	cns.Status.LastUpdated = metav1.NewTime(t0)
	down, sessions := Down(cns, NodeIPs(extender.FromNode(view["rr"])), []string{"c1"}, records(view), nil, t0)
	require.Equal(t, "none", down.String(), "sessions %v", sessions)
}
