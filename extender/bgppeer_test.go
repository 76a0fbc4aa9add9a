package extender

import (
	"slices"
	"testing"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/assert"
)

func TestRouteReflectorIDsRoundTrip(t *testing.T) {
	for _, ids := range [][]string{{"a"}, {"node-1", "node-2"}, {"h-0123456789", "x.y"}} {
		got, ok := routeReflectorIDs(routeReflectorIDSelector(ids))
		assert.True(t, ok, "%v", ids)
		assert.Equal(t, ids, got)
	}
	for _, sel := range []string{"", "all()", "has(x)", LabelRouteReflectorID + " in {}", LabelRouteReflectorID + " in {a}", LabelRouteReflectorID + " == 'a'"} {
		_, ok := routeReflectorIDs(sel)
		assert.False(t, ok, "%q", sel)
	}
}

func TestMakeBeforeBreak(t *testing.T) {
	peer := func(ids ...string) BGPPeer {
		return BGPPeer{Name: "rr-autoscaler-rack-x", Spec: peerSpec(routeReflectorIDSelector(ids))}
	}
	tests := []struct {
		name     string
		want     BGPPeer
		have     string
		labelled []string
		out      BGPPeer
		wait     bool
	}{
		{"new route reflector labelled: the plan's", peer("a", "c"), routeReflectorIDSelector([]string{"a", "b"}), []string{"a", "b", "c"}, peer("a", "c"), false},
		{"new route reflector not labelled yet: the old one stays", peer("a", "c"), routeReflectorIDSelector([]string{"a", "b"}), []string{"a", "b"}, peer("a", "b", "c"), true},
		{"both replaced, neither labelled: both old ones stay", peer("c", "d"), routeReflectorIDSelector([]string{"a", "b"}), []string{"a", "b"}, peer("a", "b", "c", "d"), true},
		{"the old one gone already: nothing to keep", peer("a", "c"), routeReflectorIDSelector([]string{"a", "b"}), []string{"a"}, peer("a", "c"), false},
		{"another kind of selector: the plan's", peer("a"), "all()", nil, peer("a"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, wait := MakeBeforeBreak(tt.want, tt.have, func(id string) bool { return slices.Contains(tt.labelled, id) })
			assert.Equal(t, tt.wait, wait)
			assert.Equal(t, tt.out, out)
		})
	}
}

func peerSpec(peerSelector string) apiv3.BGPPeerSpec {
	return apiv3.BGPPeerSpec{NodeSelector: "x == 'y'", PeerSelector: peerSelector}
}
