package bgpmodel

import (
	"fmt"
	"testing"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	validator "github.com/projectcalico/calico/libcalico-go/lib/validator/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// Every BGPPeer a plan writes passes Calico's own resource validator.
func TestPlanBGPPeersPassCalicoValidator(t *testing.T) {
	for _, layout := range Layouts {
		for _, n := range []int{3, 50, 1000} {
			_, res, err := SamplePlan(layout, n, 3)
			require.NoError(t, err)
			require.NotEmptyf(t, res.BGPPeers, "%s/%d: no BGPPeers", layout, n)
			for _, p := range res.BGPPeers {
				obj := &apiv3.BGPPeer{
					TypeMeta:   metav1.TypeMeta{Kind: apiv3.KindBGPPeer, APIVersion: apiv3.GroupVersionCurrent},
					ObjectMeta: metav1.ObjectMeta{Name: p.Name, Labels: p.Labels},
					Spec:       p.Spec,
				}
				assert.NoErrorf(t, validator.Validate(obj), "%s/%d: BGPPeer %s", layout, n, p.Name)
			}
		}
	}
}

// The validator does reject what Calico rejects, so the test above can fail.
func TestCalicoValidatorRejectsBadBGPPeers(t *testing.T) {
	for name, spec := range map[string]apiv3.BGPPeerSpec{
		"bad selector":               {NodeSelector: "has(", PeerSelector: "all()"},
		"node and selector":          {Node: "a", NodeSelector: "all()", PeerSelector: "all()"},
		"asNumber with peerSelector": {PeerSelector: "all()", ASNumber: 64512},
	} {
		obj := &apiv3.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: spec}
		if err := validator.Validate(obj); err == nil {
			assert.Fail(t, fmt.Sprintf("%s: accepted", name))
		}
	}
	if _, err := Build(nil, []extender.BGPPeer{{Name: "x", Spec: apiv3.BGPPeerSpec{NodeSelector: "has("}}}, Options{}); err == nil {
		assert.Fail(t, "Build accepted a bad selector")
	}
}
