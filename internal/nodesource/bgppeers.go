package nodesource

import (
	"fmt"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
)

// ReadBGPPeersFile reads Calico BGPPeers (kind BGPPeer, BGPPeerList or List; projectcalico.org/v3
// or the crd.projectcalico.org/v1 CRDs, whose spec is the same), as `kubectl get bgppeers -o yaml`
// writes them.
func ReadBGPPeersFile(path string) ([]apiv3.BGPPeer, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	peers, err := DecodeBGPPeers(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return peers, nil
}

// DecodeBGPPeers decodes a stream of BGPPeer documents (DecodeState, which refuses other kinds
// than Node and BGPPeer, with no Node in it).
func DecodeBGPPeers(data []byte) ([]apiv3.BGPPeer, error) {
	nodes, peers, err := DecodeState(data)
	if err != nil {
		return nil, err
	}
	if len(nodes) > 0 {
		return nil, fmt.Errorf("node %q: want only BGPPeers", nodes[0].Name)
	}
	return peers, nil
}
