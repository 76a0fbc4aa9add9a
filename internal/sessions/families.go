// Package sessions is the session verifier: it owns every CalicoNodeStatus the product creates
// (one per node it reads, named, labelled and listed per policy: Owner) and reads the BGP sessions
// calico-node reports there, per address family. It decides nothing: which sessions to await and
// what a wait decides are the reconciler's.
package sessions

import (
	"net"
	"slices"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// Sessions per address family.
//
// calico-node reports a node's BGP sessions in two lists of its CalicoNodeStatus: peersV4 (BIRD,
// bird.cfg) and peersV6 (BIRD6, bird6.cfg). Calico renders a session in a family wherever both ends
// have an address of it (README: Dual-stack and IPv6), so the sessions of one family say nothing of
// the other: BIRD6 may be down, or a node's IPv6 address gone, while every IPv4 session is up. The
// BGP health and the BGPSessions handover therefore read each family from its own list, and judge
// only the families both ends have.

// IPFamily is the family of an address (0 when it does not parse).
func IPFamily(ip string) extender.Families {
	a := net.ParseIP(ip)
	switch {
	case a == nil:
		return 0
	case a.To4() != nil:
		return extender.FamilyIPv4
	default:
		return extender.FamilyIPv6
	}
}

// IPsFamilies are the families of a node's addresses.
func IPsFamilies(ips []string) extender.Families {
	var f extender.Families
	for _, ip := range ips {
		f |= IPFamily(ip)
	}
	return f
}

// familyPeers is a status's list of sessions of one family.
func familyPeers(cns *apiv3.CalicoNodeStatus, fam extender.Families) []apiv3.CalicoNodePeer {
	if fam == extender.FamilyIPv6 {
		return cns.Status.BGP.PeersV6
	}
	return cns.Status.BGP.PeersV4
}

// listedFamilies are the families a status lists sessions of.
func listedFamilies(cns *apiv3.CalicoNodeStatus) extender.Families {
	return familiesWith(cns, func(apiv3.CalicoNodePeer) bool { return true })
}

// establishedFamilies are the families a status has at least one Established session in.
func establishedFamilies(cns *apiv3.CalicoNodeStatus) extender.Families {
	return familiesWith(cns, func(p apiv3.CalicoNodePeer) bool { return p.State == apiv3.BGPSessionStateEstablished })
}

// familiesWith are the families a status lists a session of that match takes.
func familiesWith(cns *apiv3.CalicoNodeStatus, match func(apiv3.CalicoNodePeer) bool) extender.Families {
	var f extender.Families
	for _, fam := range extender.AllFamilies {
		if slices.ContainsFunc(familyPeers(cns, fam), match) {
			f |= fam
		}
	}
	return f
}

// establishedIPs are the peer addresses (parsed, so that spellings compare equal) of the
// Established sessions of each family's list: an IPv4 address counts in peersV4 only, an IPv6 one
// in peersV6 only.
func establishedIPs(cns *apiv3.CalicoNodeStatus) map[string]bool {
	up := map[string]bool{}
	for _, fam := range extender.AllFamilies {
		for _, p := range familyPeers(cns, fam) {
			if p.State != apiv3.BGPSessionStateEstablished {
				continue
			}
			if ip := net.ParseIP(p.PeerIP); ip != nil && IPFamily(p.PeerIP) == fam {
				up[ip.String()] = true
			}
		}
	}
	return up
}

// RRFamilies are the families a route reflector peers in: those of its addresses and those its
// status lists sessions of (cns may be nil). A route reflector whose addresses are unknown counts
// as having its clients' families (no session is skipped for want of its address), and IPv4,
// Calico's default, when nothing at all is known.
func RRFamilies(ips []string, cns *apiv3.CalicoNodeStatus, clients extender.Families) extender.Families {
	f := IPsFamilies(ips)
	if f == 0 {
		f = clients
	}
	if cns != nil {
		f |= listedFamilies(cns)
	}
	if f == 0 {
		f = extender.FamilyIPv4
	}
	return f
}

// missingFamilies returns the families of a client's addresses, among those the route reflector
// has (rr), in which the client has no Established session in the route reflector's status
// (up: establishedIPs). Every address of a family counts (one per family in practice).
func missingFamilies(ips []string, rr extender.Families, up map[string]bool) extender.Families {
	var out extender.Families
	for _, ip := range ips {
		fam := IPFamily(ip)
		if fam == 0 || !rr.Has(fam) {
			continue
		}
		if a := net.ParseIP(ip); !up[a.String()] {
			out |= fam
		}
	}
	return out
}

// downFamilies judges a route reflector's status per family (the status is fresh and filled in):
//
//   - nothing Established in any family (BIRD does not answer, the node is cut off): every family
//     it peers in is down, as before families were judged;
//   - else a family is judged when the route reflector has it and a client of it has an address of
//     it, or the status lists sessions of it; it is down when none of its sessions is Established
//     (not listed at all included: calico-node reports nothing of a BIRD6 that does not run).
//
// rr: the route reflector's families (RRFamilies); clients: the families of its clients'
// addresses. One broken client never makes a family down: its other sessions stay up.
func downFamilies(cns *apiv3.CalicoNodeStatus, rr, clients extender.Families) extender.Families {
	listed, up := listedFamilies(cns), establishedFamilies(cns)
	if up == 0 {
		return rr | listed
	}
	judged := rr&clients | listed
	return judged &^ up
}
