package bgpverify

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLabSetConfigGivesTheWatchItsPeers: a bird.cfg a lab node loads names its peers to the
// fleet's watch, so that a session of two running BIRDs that stays down is opened again
// (reopenStuck); a new configuration replaces them (a peer gone is not watched any more), and an
// address outside the lab is no peer.
func TestLabSetConfigGivesTheWatchItsPeers(t *testing.T) {
	names := []string{"node-00", "node-01", "node-02"}
	l := &Lab{names: names, byAddr: map[netip.Addr]int{}, cfgs: make([][]byte, len(names)), f: &birdFleet{nodes: make([]speakerNode, len(names)), conns: make([]*birdConn, len(names))}}
	for i, n := range names {
		l.f.nodes[i] = speakerNode{name: n, addr: NodeAddress(i).Addr()}
		l.byAddr[NodeAddress(i).Addr()] = i
	}
	proto := func(i int) string {
		return "protocol bgp Node_" + protoID(NodeAddress(i).Addr()) + " from bgp_template {\n  neighbor " + NodeAddress(i).Addr().String() + " as 64512;\n}\n"
	}
	outside := "protocol bgp Global_192_0_2_1 from bgp_template {\n  neighbor 192.0.2.1 as 64512;\n}\n"
	l.setConfig(0, []byte(proto(1)+proto(2)+outside))
	require.Equal(t, []speakerPeer{{idx: 1, addr: NodeAddress(1).Addr()}, {idx: 2, addr: NodeAddress(2).Addr()}}, l.f.nodes[0].peers)

	// The watch maps node 0's protocols to its peers; with both ends running, a session down
	// for birdStuckAfter would be opened again (here only the first sighting is noted).
	l.f.conns[0], l.f.conns[1] = &birdConn{}, &birdConn{}
	now := time.Now()
	l.f.watch(0, "Node_"+protoID(NodeAddress(1).Addr()), false, now)
	require.Contains(t, l.f.notUp, gateKey{0, NodeAddress(1).Addr()})

	// A new configuration without node 1: its protocol is no peer of node 0 any more.
	l.setConfig(0, []byte(proto(2)))
	require.Equal(t, []speakerPeer{{idx: 2, addr: NodeAddress(2).Addr()}}, l.f.nodes[0].peers)
	delete(l.f.notUp, gateKey{0, NodeAddress(1).Addr()})
	l.f.watch(0, "Node_"+protoID(NodeAddress(1).Addr()), false, now)
	require.NotContains(t, l.f.notUp, gateKey{0, NodeAddress(1).Addr()})
}
