package sessions

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// Down reads a route reflector's CalicoNodeStatus per address family (downFamilies): the
// families down (every one when the status is stale; 0: up), with the sessions of those families
// that are not Established: its clients' first (by name and address), then its other peers'.
// rrIPs are the route reflector's BGP addresses.
func Down(cns *apiv3.CalicoNodeStatus, rrIPs []string, clients []string, view map[string]*extender.Node, calicoIPs map[string][]string, now time.Time) (extender.Families, []string) {
	addrs := make(map[string][]string, len(clients))
	var clientFams extender.Families
	for _, c := range clients {
		addrs[c] = Addresses(calicoIPs, view, c)
		clientFams |= IPsFamilies(addrs[c])
	}
	rr := RRFamilies(rrIPs, cns, clientFams)
	if last := cns.Status.LastUpdated.Time; now.Sub(last) > StaleAfter {
		return rr, []string{fmt.Sprintf("all (calico-node has not reported since %s)", last.UTC().Format(time.RFC3339))}
	}
	down := downFamilies(cns, rr, clientFams)
	if down == 0 {
		return 0, nil
	}
	state := map[string]apiv3.BGPSessionState{}
	var peers []apiv3.CalicoNodePeer
	for _, fam := range extender.AllFamilies {
		if !down.Has(fam) {
			continue
		}
		for _, p := range familyPeers(cns, fam) {
			peers = append(peers, p)
			if ip := net.ParseIP(p.PeerIP); ip != nil {
				state[ip.String()] = p.State
			}
		}
	}
	var out []string
	seen := map[string]bool{}
	for _, c := range clients {
		for _, ip := range addrs[c] {
			if !down.Has(IPFamily(ip)) {
				continue
			}
			seen[ip] = true
			s := string(state[ip])
			if s == "" {
				s = "no session"
			}
			out = append(out, fmt.Sprintf("%s (%s, %s)", c, ip, s))
		}
	}
	for _, p := range peers {
		if ip := net.ParseIP(p.PeerIP); ip != nil && !seen[ip.String()] {
			out = append(out, fmt.Sprintf("%s (%s)", ip, p.State))
		}
	}
	if len(out) == 0 {
		out = []string{"all (no BGP session reported)"}
	}
	return down, out
}

// RoleUp: cns shows an Established session (not a mesh one, see withoutMesh) to one of
// peers, the nodes rr peers with in its present role (the reconciler's rolePeers). A session to another node is no
// sign that the role's sessions came up: a client just promoted is reported with its client
// sessions to its old route reflectors Established until its BIRD loads its new role, which
// removes them. On the live lab's rack split at load 54 (confd/BIRD rounds of 19 s), the new route
// reflectors of a rack, taken for alive from those sessions, were then judged down before their
// clients' sessions came up and replaced by two kept clients, and back.
func RoleUp(cns *apiv3.CalicoNodeStatus, peers []string, view map[string]*extender.Node, calicoIPs map[string][]string) bool {
	up := establishedIPs(withoutMesh(cns))
	if len(up) == 0 {
		return false
	}
	for _, n := range peers {
		for _, a := range Addresses(calicoIPs, view, n) {
			if ip := net.ParseIP(a); ip != nil && up[ip.String()] {
				return true
			}
		}
	}
	return false
}

// WitnessedDown: route reflector rr's calico-node missed its last report (late, not stale yet), and
// the statuses of other route reflectors written since, on time, list their sessions to rr as not
// Established and none as Established (calico-node stopped: its last report still shows its
// sessions up). It names the witnesses ("" when none). A rack route reflector's witnesses are its
// spine members and the other way round, and route reflectors that peer with each other.
func WitnessedDown(rr string, have map[string]*apiv3.CalicoNodeStatus, view map[string]*extender.Node, ips map[string][]string, now time.Time) string {
	addr := map[string]bool{}
	for _, a := range Addresses(ips, view, rr) {
		if ip := net.ParseIP(a); ip != nil {
			addr[ip.String()] = true
		}
	}
	last := have[rr].Status.LastUpdated.Time
	var saw []string
	for _, other := range slices.Sorted(maps.Keys(have)) {
		o := have[other]
		if other == rr || o == nil || !o.Status.LastUpdated.Time.After(last) || now.Sub(o.Status.LastUpdated.Time) > LateAfter {
			continue
		}
		for _, fam := range extender.AllFamilies {
			for _, p := range familyPeers(o, fam) {
				ip := net.ParseIP(p.PeerIP)
				if ip == nil || !addr[ip.String()] {
					continue
				}
				if p.State == apiv3.BGPSessionStateEstablished {
					return ""
				}
				saw = append(saw, fmt.Sprintf("%s (%s)", other, p.State))
			}
		}
	}
	if len(saw) == 0 {
		return ""
	}
	return fmt.Sprintf("all (calico-node has not reported since %s; %s report their sessions to it down)", last.UTC().Format(time.RFC3339), strings.Join(saw, ", "))
}

// Fingerprint is what the statuses say that the plan reads: per route reflector, whether its
// status is filled in, late (LateAfter), stale, and which families have an Established session and which are listed
// (an IPv6 family gone down or unlisted while IPv4 stays up is a change).
func Fingerprint(list []*apiv3.CalicoNodeStatus, now time.Time) string {
	parts := make([]string, 0, len(list))
	for _, o := range list {
		last := o.Status.LastUpdated.Time
		parts = append(parts, fmt.Sprintf("%s:%t:%t:%t:%s:%s", o.Spec.Node, last.IsZero(), now.Sub(last) > LateAfter, now.Sub(last) > StaleAfter,
			establishedFamilies(o).Key(), listedFamilies(o).Key()))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// StaleAfter: a status not updated for three periods.
const StaleAfter = 3 * Period * time.Second

// LateAfter: a status not updated for a period and a half missed its last report (calico-node
// writes it every period).
const LateAfter = Period * time.Second * 3 / 2
