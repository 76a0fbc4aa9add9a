package sessions

import (
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestHealthFingerprint: watchBGPHealth plans a policy again only when what the statuses say
// changes: calico-node's periodic updates (new timestamps, the same sessions) change nothing.
func TestHealthFingerprint(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	status := func(node string, updated time.Time, states ...apiv3.BGPSessionState) *apiv3.CalicoNodeStatus {
		s := &apiv3.CalicoNodeStatus{Spec: apiv3.CalicoNodeStatusSpec{Node: node}}
		s.Status.LastUpdated = metav1.NewTime(updated)
		for _, st := range states {
			s.Status.BGP.PeersV4 = append(s.Status.BGP.PeersV4, apiv3.CalicoNodePeer{PeerIP: "10.0.0.1", State: st})
		}
		return s
	}
	// with6 adds IPv6 sessions to a status.
	with6 := func(s *apiv3.CalicoNodeStatus, states ...apiv3.BGPSessionState) *apiv3.CalicoNodeStatus {
		for _, st := range states {
			s.Status.BGP.PeersV6 = append(s.Status.BGP.PeersV6, apiv3.CalicoNodePeer{PeerIP: "fd00::1", State: st})
		}
		return s
	}
	up, down := apiv3.BGPSessionStateEstablished, apiv3.BGPSessionStateActive
	base := Fingerprint([]*apiv3.CalicoNodeStatus{status("a", now, up, down), status("b", now, up)}, now)
	for _, tt := range []struct {
		name string
		list []*apiv3.CalicoNodeStatus
		at   time.Time
		same bool
	}{
		{"a later update, same sessions", []*apiv3.CalicoNodeStatus{status("a", now.Add(10*time.Second), up), status("b", now.Add(10*time.Second), up, down)}, now.Add(12 * time.Second), true},
		{"listed in another order", []*apiv3.CalicoNodeStatus{status("b", now, up), status("a", now, down, up)}, now, true},
		{"every session of a down", []*apiv3.CalicoNodeStatus{status("a", now, down), status("b", now, up)}, now, false},
		{"a's status stale", []*apiv3.CalicoNodeStatus{status("a", now, up), status("b", now.Add(time.Minute), up)}, now.Add(time.Minute), false},
		{"a new route reflector's status, not filled in", []*apiv3.CalicoNodeStatus{status("a", now, up), status("b", now, up), status("c", time.Time{})}, now, false},
		{"b's status gone", []*apiv3.CalicoNodeStatus{status("a", now, up)}, now, false},
		{"a's IPv6 sessions listed, all down (IPv4 up)", []*apiv3.CalicoNodeStatus{with6(status("a", now, up, down), down), status("b", now, up)}, now, false},
		{"a's IPv6 sessions up too", []*apiv3.CalicoNodeStatus{with6(status("a", now, up, down), up), status("b", now, up)}, now, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Fingerprint(tt.list, tt.at) == base; got != tt.same {
				t.Errorf("same fingerprint = %v, want %v", got, tt.same)
			}
		})
	}
}
