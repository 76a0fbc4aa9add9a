package extender

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// Every BGPPeer a policy writes carries its spec.bgpPeer settings: the peering sets', the uplink
// sets', the route reflector mesh, the cross-policy and outside BGPPeers, in every layout, and the
// release BGPPeer of a deleted policy. Without settings, none carries any.
func TestBGPPeersCarryPolicySettings(t *testing.T) {
	ttl := uint8(1)
	settings := &v1alpha1.BGPPeerSettings{
		Password: &v1alpha1.BGPPassword{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "bgp-secrets"}, Key: "rr-password"}},
		MaxRestartTime: &metav1.Duration{Duration: 300 * time.Second},
		TTLSecurity:    &ttl,
		Filters:        []string{"only-pods"},
		SourceAddress:  v1alpha1.SourceAddressUseNodeIP,
	}
	for _, topo := range []v1alpha1.TopologyType{v1alpha1.DualPlane, v1alpha1.SingleCluster, v1alpha1.MultiCluster, v1alpha1.Hierarchical} {
		for _, with := range []bool{true, false} {
			spec := v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{Type: topo, MaxRackSize: i32(10)}}
			if with {
				spec.BGPPeer = settings
			}
			p := resolve(t, spec)
			want := policy.BGPPeerSettings(spec.BGPPeer)
			nodes := cluster(40, 3)
			res := Plan(Input{Policy: p, Nodes: nodes, Now: t0.Add(24 * time.Hour), CrossPolicy: true, OutsideSelector: "!(pool == 'a')"})
			peers := append(res.BGPPeers, ReleaseBGPPeer(p, "node-1"))
			require.Greater(t, len(peers), 3, "%s: %d BGPPeers", topo, len(peers))
			for _, b := range peers {
				got := b.Spec
				assert.NotEmpty(t, got.PeerSelector, "%s %s", topo, b.Name)
				got.Node, got.NodeSelector, got.PeerSelector = "", "", ""
				assert.Truef(t, equality.Semantic.DeepEqual(want, got), "%s settings=%v %s: spec %+v, want the settings %+v", topo, with, b.Name, b.Spec, want)
			}
		}
	}
}

// The settings are copies: changing one BGPPeer's spec changes no other BGPPeer nor the policy.
func TestBGPPeerSettingsAreCopies(t *testing.T) {
	ttl := uint8(3)
	p := resolve(t, v1alpha1.RouteReflectorPolicySpec{BGPPeer: &v1alpha1.BGPPeerSettings{TTLSecurity: &ttl, Filters: []string{"a"}}})
	res := plan(t, p, cluster(20, 3))
	require.GreaterOrEqual(t, len(res.BGPPeers), 2)
	*res.BGPPeers[0].Spec.TTLSecurity = 9
	res.BGPPeers[0].Spec.Filters[0] = "changed"
	assert.EqualValues(t, 3, *res.BGPPeers[1].Spec.TTLSecurity)
	assert.Equal(t, "a", res.BGPPeers[1].Spec.Filters[0])
	assert.EqualValues(t, 3, *p.BGPPeer.TTLSecurity)
}
