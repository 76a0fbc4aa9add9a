package sessions

import (
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSessionSince(t *testing.T) {
	reported := time.Date(2026, 12, 2, 0, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		since string
		want  time.Time
		ok    bool
	}{
		{"00:29:58", time.Date(2026, 12, 2, 0, 29, 58, 0, time.UTC), true},
		{"00:30:30", time.Date(2026, 12, 2, 0, 30, 30, 0, time.UTC), true},  // clocks a little apart
		{"23:59:59", time.Date(2026, 12, 1, 23, 59, 59, 0, time.UTC), true}, // before midnight
		{"00:29:58.250", time.Date(2026, 12, 2, 0, 29, 58, 250e6, time.UTC), true},
		{"2026-11-21", time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC), true},
		{"", time.Time{}, false},
		{"Nov21", time.Time{}, false},
	} {
		t.Run(tc.since, func(t *testing.T) {
			got, ok := sessionSince(tc.since, reported)
			require.Equal(t, tc.ok, ok)
			require.True(t, tc.want.Equal(got), "got %v", got)
		})
	}
}

func TestRestartedAfter(t *testing.T) {
	reported := time.Date(2026, 12, 2, 10, 0, 30, 0, time.UTC)
	start := time.Date(2026, 12, 2, 10, 0, 20, 0, time.UTC)
	est := func(ip, since string) apiv3.CalicoNodePeer {
		return apiv3.CalicoNodePeer{PeerIP: ip, Type: "NodePeer", State: apiv3.BGPSessionStateEstablished, Since: since}
	}
	cns := statusOf([]apiv3.CalicoNodePeer{
		est("10.0.0.1", "10:00:25"),   // came up after the change
		est("10.0.0.2", "09:12:00"),   // the old session
		est("10.0.0.3", "10:00:18"),   // within the slack
		est("10.0.0.4", ""),           // no since: kept
		peer("10.0.0.5", false),       // not Established: kept as it is
		est("10.0.0.6", "2026-11-30"), // a date: older
	}, []apiv3.CalicoNodePeer{est("fd00::1", "10:00:26"), est("fd00::2", "10:00:01")})
	cns.Status.LastUpdated = metav1.NewTime(reported)
	out := RestartedAfter(cns, start, 2*time.Second)
	var ips []string
	for _, p := range append(out.Status.BGP.PeersV4, out.Status.BGP.PeersV6...) {
		ips = append(ips, p.PeerIP)
	}
	require.Equal(t, []string{"10.0.0.1", "10.0.0.3", "10.0.0.4", "10.0.0.5", "fd00::1"}, ips)
	require.Len(t, cns.Status.BGP.PeersV4, 6, "cns itself unchanged")
}
