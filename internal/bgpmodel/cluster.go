package bgpmodel

import (
	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// FromCluster builds the topology of a cluster's actual state: its nodes (labels and annotations as
// Calico reads them; equal label sets share a map, as in FromPlan) and its BGPPeers, as the tests,
// the tools and the reconciler's release and adoption checks read them.
func FromCluster(nodes []*extender.Node, peers []apiv3.BGPPeer, zoneLabel string, opts Options) (*Topology, error) {
	ns := make([]Node, 0, len(nodes))
	var labelSets labelSets
	for _, n := range nodes {
		node := NodeFromObject(n.Name, n.Labels, n.Annotations, zoneLabel)
		node.Labels = labelSets.share(node.Labels)
		ns = append(ns, node)
	}
	ps := make([]extender.BGPPeer, 0, len(peers))
	for _, p := range peers {
		ps = append(ps, extender.BGPPeer{Name: p.Name, Labels: p.Labels, Spec: p.Spec})
	}
	return Build(ns, ps, opts)
}
