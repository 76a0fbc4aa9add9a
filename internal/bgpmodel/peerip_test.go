package bgpmodel

import (
	"testing"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/projectcalico/api/pkg/lib/numorstring"
	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// TestPeerIPOfANode: a BGPPeer from a node to a peerIP that is another node's BGP address is a
// session between the two (confd adds the reverse peering); one to an address of no node, or to
// another AS, is outside the model.
func TestPeerIPOfANode(t *testing.T) {
	nodes := []Node{
		NodeFromObject("a", map[string]string{"x": "1"}, map[string]string{extender.AnnotationCalicoIPv4: "10.0.0.1/24"}, ""),
		NodeFromObject("b", map[string]string{"x": "1"}, map[string]string{extender.AnnotationCalicoIPv4: "10.0.0.2/24"}, ""),
		NodeFromObject("c", map[string]string{"x": "1"}, map[string]string{extender.AnnotationCalicoIPv4: "10.0.0.3/24"}, ""),
	}
	require.Equal(t, "10.0.0.2", nodes[1].IP)
	for _, tc := range []struct {
		name string
		spec apiv3.BGPPeerSpec
		want int
	}{
		{"a node's address", apiv3.BGPPeerSpec{Node: "a", PeerIP: "10.0.0.2"}, 1},
		{"with a port", apiv3.BGPPeerSpec{Node: "a", PeerIP: "10.0.0.2:179"}, 1},
		{"Calico's AS", apiv3.BGPPeerSpec{Node: "a", PeerIP: "10.0.0.2", ASNumber: numorstring.ASNumber(64512)}, 1},
		{"another AS (eBGP)", apiv3.BGPPeerSpec{Node: "a", PeerIP: "10.0.0.2", ASNumber: numorstring.ASNumber(65000)}, 0},
		{"no node's address", apiv3.BGPPeerSpec{Node: "a", PeerIP: "192.0.2.1"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo, err := Build(nodes, []extender.BGPPeer{{Name: "p", Spec: tc.spec}}, Options{})
			require.NoError(t, err)
			require.Len(t, topo.Sessions, tc.want)
			if tc.want == 1 {
				require.Equal(t, [2]int32{0, 1}, topo.Sessions[0], "a-b only, not c (same labels as b)")
			}
		})
	}
}

// TestParseClusterID: an IPv4 address, or a strictly masked IPv4 network as Calico's validator
// accepts (confd writes it as is); anything else is ignored.
func TestParseClusterID(t *testing.T) {
	for in, want := range map[string]string{
		"224.0.0.1": "224.0.0.1", " 224.0.0.1 ": "224.0.0.1", "224.0.0.9/32": "224.0.0.9/32", "224.0.0.0/8": "224.0.0.0/8",
		"224.0.0.9/8": "", "fd00::1": "", "fd00::/64": "", "rr-1": "", "": "",
	} {
		require.Equal(t, want, ParseClusterID(in), in)
	}
}
