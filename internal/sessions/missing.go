package sessions

import (
	"slices"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// Missing returns the clients (name -> their BGP addresses) that lack an Established
// session with the route reflector whose status is cns (rrIPs: its BGP addresses) in a family both
// ends have, with the families they lack: an IPv4 address needs an Established session in peersV4,
// an IPv6 one in peersV6 (a dual-stack client is verified only once both are up). A family the
// route reflector has no address of is not waited for (Calico renders no session there). A client
// without an address is missing (families 0).
func Missing(clients map[string][]string, rrIPs []string, cns *apiv3.CalicoNodeStatus) map[string]extender.Families {
	var all extender.Families
	for _, ips := range clients {
		all |= IPsFamilies(ips)
	}
	rr := RRFamilies(rrIPs, cns, all)
	up := establishedIPs(withoutMesh(cns))
	out := map[string]extender.Families{}
	for name, ips := range clients {
		if len(ips) == 0 {
			out[name] = 0
			continue
		}
		if f := missingFamilies(ips, rr, up); f != 0 {
			out[name] = f
		}
	}
	return out
}

// withoutMesh is cns without its node-to-node mesh sessions: a client's session with a route
// reflector is a BGPPeer's (confd renders no mesh session to or from a node with a cluster ID), so
// a mesh session seen Established is the one the promotion replaces (a report made before confd
// rendered it), and verifies nothing.
func withoutMesh(cns *apiv3.CalicoNodeStatus) *apiv3.CalicoNodeStatus {
	keep := func(ps []apiv3.CalicoNodePeer) []apiv3.CalicoNodePeer {
		return slices.DeleteFunc(slices.Clone(ps), func(p apiv3.CalicoNodePeer) bool { return p.Type == apiv3.BGPPeerTypeNodeMesh })
	}
	out := *cns
	out.Status.BGP.PeersV4, out.Status.BGP.PeersV6 = keep(cns.Status.BGP.PeersV4), keep(cns.Status.BGP.PeersV6)
	return &out
}
