package extender

import (
	"slices"
	"testing"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/assert"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
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

// TestTransitionalBGPPeer: a transitional set is named after its route reflectors whatever their
// order, its BGPPeer selects them and the nodes labelled with the set, and its name reads back as
// a peering set (the prune step deletes it once no node carries it) apart from the plan's sets; a
// transitional uplink set's the same, under the uplink sets' label and BGPPeer prefix.
func TestTransitionalBGPPeer(t *testing.T) {
	p, errs := policy.Resolve(policy.Default("default"))
	assert.Empty(t, errs)
	a := TransitionalBGPPeer(p, LabelPeeringSet, []string{"node-3", "node-1", "node-2", "node-1"})
	b := TransitionalBGPPeer(p, LabelPeeringSet, []string{"node-2", "node-3", "node-1"})
	assert.Equal(t, a, b)
	key, set, ok := SetLabelOf(a.Name)
	assert.True(t, ok)
	assert.Equal(t, LabelPeeringSet, key)
	assert.True(t, IsTransitionalSet(set), set)
	assert.Equal(t, LabelPeeringSet+" == '"+set+"'", a.Spec.NodeSelector)
	ids, ok := PeerRouteReflectorIDs(a.Spec.PeerSelector)
	assert.True(t, ok)
	assert.Equal(t, []string{"node-1", "node-2", "node-3"}, ids)
	assert.Equal(t, map[string]string{LabelManagedBy: ManagedByValue, LabelPolicy: p.Name}, a.Labels)
	assert.False(t, IsTransitionalSet(RackSetName(p.Name, "zone-a-rack-1")))
	assert.False(t, IsTransitionalSet(peeringSetName([]string{"node-1"})))

	up := TransitionalBGPPeer(p, LabelUplinkSet, []string{"node-2", "node-1"})
	key, upSet, ok := SetLabelOf(up.Name)
	assert.True(t, ok)
	assert.Equal(t, LabelUplinkSet, key)
	assert.True(t, IsTransitionalSet(upSet), upSet)
	assert.Equal(t, UplinkBGPPeerPrefix+upSet, up.Name)
	assert.Equal(t, SetBGPPeerName(LabelUplinkSet, upSet), up.Name)
	assert.Equal(t, LabelUplinkSet+" == '"+upSet+"'", up.Spec.NodeSelector)
	ids, ok = PeerRouteReflectorIDs(up.Spec.PeerSelector)
	assert.True(t, ok)
	assert.Equal(t, []string{"node-1", "node-2"}, ids)
	assert.Equal(t, SetBGPPeerName(LabelPeeringSet, set), a.Name)
}
