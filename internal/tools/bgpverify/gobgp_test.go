package bgpverify

import (
	"context"
	"net/netip"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/stretchr/testify/require"
)

// A stuck session is started over whatever state its ends are in: here one end is held out of
// Established (administratively down, as no ResetPeer can bring back), and resetStuck brings the
// session up again.
func TestGoBGPResetStuckStartsBothEndsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("real BGP speakers (port 179 on 127.x addresses) run without -short")
	}
	t.Parallel()
	net := nextNet()
	opts, err := prepare(Options{Net: net, Log: testLog{t}}, 2)
	require.NoError(t, err)
	a, b := Address(net, 1), Address(net, 2)
	nodes := []speakerNode{
		{name: "node-a", addr: a, block: netip.MustParsePrefix("10.244.1.0/26"), clusterID: "224.0.0.1", peers: []speakerPeer{{idx: 1, addr: b, rrClient: true}}},
		{name: "node-b", addr: b, block: netip.MustParsePrefix("10.244.2.0/26"), peers: []speakerPeer{{idx: 0, addr: a, passive: true}}},
	}
	fl, err := newGoBGPFleet(nodes, opts)
	require.NoError(t, err)
	f := fl.(*gobgpFleet)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	defer f.close()
	require.NoError(t, f.start(ctx))

	established := func(i int) bool {
		st, err := f.poll(ctx, i)
		require.NoError(t, err)
		return st.established == 1
	}
	require.Eventually(t, func() bool { return established(0) && established(1) }, 30*time.Second, 100*time.Millisecond, "the session never came up")

	require.NoError(t, f.server(0).DisablePeer(ctx, &api.DisablePeerRequest{Address: b.String()}))
	require.Eventually(t, func() bool { return !established(0) && !established(1) }, 30*time.Second, 100*time.Millisecond, "the session stayed up")

	f.resetStuck(ctx, 0, b.String())
	require.Eventually(t, func() bool { return established(0) && established(1) }, 30*time.Second, 100*time.Millisecond, "the session did not come back after its reset")
}
