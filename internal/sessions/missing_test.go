package sessions

import (
	"fmt"
	"strings"
	"testing"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
)

func TestMissingSessions(t *testing.T) {
	est := func(ip string) apiv3.CalicoNodePeer {
		return apiv3.CalicoNodePeer{PeerIP: ip, Type: apiv3.BGPPeerTypeNodePeer, State: apiv3.BGPSessionStateEstablished}
	}
	active := func(ip string) apiv3.CalicoNodePeer {
		return apiv3.CalicoNodePeer{PeerIP: ip, Type: apiv3.BGPPeerTypeNodePeer, State: apiv3.BGPSessionStateActive}
	}
	mesh := func(ip string) apiv3.CalicoNodePeer {
		return apiv3.CalicoNodePeer{PeerIP: ip, Type: apiv3.BGPPeerTypeNodeMesh, State: apiv3.BGPSessionStateEstablished}
	}
	one := func(kv ...string) map[string][]string {
		m := map[string][]string{}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				m[kv[i]] = nil
			} else {
				m[kv[i]] = strings.Split(kv[i+1], ",")
			}
		}
		return m
	}
	v4 := func(p ...apiv3.CalicoNodePeer) []apiv3.CalicoNodePeer { return p }
	v6 := v4
	dual := []string{"10.0.0.100", "fd00::100"}
	for _, tc := range []struct {
		name     string
		clients  map[string][]string
		rr       []string // the route reflector's addresses (nil: unknown)
		pv4, pv6 []apiv3.CalicoNodePeer
		want     string
	}{
		{"all up", one("a", "10.0.0.1", "b", "10.0.0.2"), nil, v4(est("10.0.0.2"), est("10.0.0.1")), nil, "map[]"},
		{"one down", one("a", "10.0.0.1", "b", "10.0.0.2"), nil, v4(est("10.0.0.1"), active("10.0.0.2")), nil, "map[b:IPv4]"},
		// A report made before confd rendered the promotion: the mesh session is no route reflector's.
		{"a mesh session counts for nothing", one("a", "10.0.0.1", "b", "10.0.0.2"), nil, v4(mesh("10.0.0.1"), est("10.0.0.2")), nil, "map[a:IPv4]"},
		{"not listed yet", one("a", "10.0.0.1", "b", "10.0.0.2"), nil, nil, nil, "map[a:IPv4 b:IPv4]"},
		{"no IP known", one("a", ""), nil, v4(est("10.0.0.1")), nil, "map[a:none]"},
		{"IPs compared parsed", one("a", "10.0.0.1"), nil, v4(est("10.000.0.1")), nil, "map[a:IPv4]"},
		{"IPv6 only", one("a", "fd00::1", "b", "fd00::2"), nil, nil, v6(est("fd00:0::1")), "map[b:IPv6]"},
		{"dual stack: both families up", one("a", "10.0.0.1,fd00::1"), dual, v4(est("10.0.0.1")), v6(est("fd00::1")), "map[]"},
		{"dual stack: IPv6 still down", one("a", "10.0.0.1,fd00::1"), dual, v4(est("10.0.0.1")), v6(active("fd00::1")), "map[a:IPv6]"},
		{"dual stack: IPv6 not listed", one("a", "10.0.0.1,fd00::1"), dual, v4(est("10.0.0.1")), nil, "map[a:IPv6]"},
		{"dual stack: IPv4 still down, IPv6 up", one("a", "10.0.0.1,fd00::1"), dual, v4(active("10.0.0.1")), v6(est("fd00::1")), "map[a:IPv4]"},
		{"dual stack: none up", one("a", "10.0.0.1,fd00::1"), dual, nil, nil, "map[a:IPv4+IPv6]"},
		{"an address counts in its family's list only", one("a", "10.0.0.1,fd00::1"), dual, v4(est("10.0.0.1"), est("fd00::1")), nil, "map[a:IPv6]"},
		{"route reflector without IPv6: IPv4 is all both ends have", one("a", "10.0.0.1,fd00::1"), []string{"10.0.0.100"}, v4(est("10.0.0.1")), nil, "map[]"},
		{"route reflector without IPv6 that lists IPv6 sessions: judged", one("a", "10.0.0.1,fd00::1"), []string{"10.0.0.100"}, v4(est("10.0.0.1")), v6(active("fd00::1")), "map[a:IPv6]"},
		{"IPv4-only client of a dual-stack route reflector", one("a", "10.0.0.1", "b", "10.0.0.2,fd00::2"), dual, v4(est("10.0.0.1"), est("10.0.0.2")), v6(est("fd00::2")), "map[]"},
		{"route reflector address unknown: every family of the clients", one("a", "10.0.0.1,fd00::1"), nil, v4(est("10.0.0.1")), nil, "map[a:IPv6]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cns := &apiv3.CalicoNodeStatus{}
			cns.Status.BGP.PeersV4, cns.Status.BGP.PeersV6 = tc.pv4, tc.pv6
			if got := fmt.Sprint(Missing(tc.clients, tc.rr, cns)); got != tc.want {
				require.Fail(t, fmt.Sprintf("got %s want %s", got, tc.want))
			}
		})
	}
}
