package calico

import (
	"testing"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico/crds"
)

func TestSchemeHasOneGroup(t *testing.T) {
	for _, gv := range []struct {
		name string
		gv   func() *runtime.Scheme
		want string
	}{
		{"crd", func() *runtime.Scheme { return NewScheme(CRD) }, "crd.projectcalico.org/v1, Kind=BGPPeer"},
		{"v3", func() *runtime.Scheme { return NewScheme(V3) }, "projectcalico.org/v3, Kind=BGPPeer"},
	} {
		gvk, err := apiutil.GVKForObject(&apiv3.BGPPeer{}, gv.gv())
		require.NoError(t, err, gv.name)
		require.Equal(t, gv.want, gvk.String(), gv.name)
	}
	// Both groups in one scheme: the kind of the Go type is ambiguous, which is why each scheme
	// holds one.
	s := NewScheme(CRD)
	_ = AddToScheme(s, V3)
	_, err := apiutil.GVKForObject(&apiv3.BGPPeer{}, s)
	require.Error(t, err, "expected an ambiguity error with both groups registered")
}

func TestDetect(t *testing.T) {
	peers := []metav1.APIResource{{Name: "bgppeers", Kind: "BGPPeer"}}
	for _, tc := range []struct {
		name      string
		resources []*metav1.APIResourceList
		want      string
	}{
		{"crd", []*metav1.APIResourceList{{GroupVersion: "crd.projectcalico.org/v1", APIResources: peers}}, "crd.projectcalico.org/v1"},
		{"v3 wins", []*metav1.APIResourceList{{GroupVersion: "crd.projectcalico.org/v1", APIResources: peers}, {GroupVersion: "projectcalico.org/v3", APIResources: peers}}, "projectcalico.org/v3"},
		{"none", nil, ""},
	} {
		d := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: tc.resources}}
		gv, err := Detect(d)
		if tc.want == "" {
			require.Same(t, ErrNotServed, err, "%s: %v", tc.name, gv) // the same error value, not one with the same text
			continue
		}
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, gv.String(), tc.name)
	}
}

func TestNeedsUpdate(t *testing.T) {
	want := BGPPeer(CRD, extender.BGPPeer{Name: "p", Labels: map[string]string{extender.LabelManagedBy: extender.ManagedByValue},
		Spec: apiv3.BGPPeerSpec{NodeSelector: "a == 'b'", PeerSelector: "has(x)"}})
	cur := want.DeepCopy()
	cur.ResourceVersion = "7"
	cur.Labels["extra"] = "kept"
	_, changed := NeedsUpdate(cur, want)
	require.False(t, changed, "equal peers need an update")
	cur.Spec.PeerSelector = "has(y)"
	out, changed := NeedsUpdate(cur, want)
	require.True(t, changed, "%+v", out)
	assert.Equal(t, "has(x)", out.Spec.PeerSelector, "%+v", out)
	assert.Equal(t, "7", out.ResourceVersion, "%+v", out)
	assert.Equal(t, "kept", out.Labels["extra"], "%+v", out)
}

func TestParseAPI(t *testing.T) {
	_, auto, err := ParseAPI("auto")
	require.NoError(t, err, "auto")
	require.True(t, auto, "auto")
	gv, _, err := ParseAPI("crd")
	require.NoError(t, err, "crd")
	require.Equal(t, CRD, gv, "crd")
	_, _, err = ParseAPI("v2")
	require.Error(t, err, "v2 accepted")
}

func TestCRDsFound(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	d, err := crds.Dir()
	require.NoError(t, err)
	t.Log(d)
}

func TestDiff(t *testing.T) {
	want := &apiv3.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"routereflector.io/policy": "a"}},
		Spec: apiv3.BGPPeerSpec{NodeSelector: "all()", PeerSelector: "has(rr)"}}
	for _, tc := range []struct {
		name string
		edit func(*apiv3.BGPPeer)
		want []string
	}{
		{name: "same", edit: func(*apiv3.BGPPeer) {}},
		{name: "a hand-written foreign label is no difference", edit: func(p *apiv3.BGPPeer) { p.Labels["team"] = "x" }},
		{name: "selector changed", edit: func(p *apiv3.BGPPeer) { p.Spec.PeerSelector = "all()" },
			want: []string{`spec.peerSelector "all()" (want "has(rr)")`}},
		{name: "field added and label dropped", edit: func(p *apiv3.BGPPeer) { p.Spec.PeerIP = "10.0.0.1"; delete(p.Labels, "routereflector.io/policy") },
			want: []string{`spec.peerIP "10.0.0.1" (want (none))`, `label routereflector.io/policy="" (want "a")`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			have := want.DeepCopy()
			tc.edit(have)
			require.Equal(t, tc.want, Diff(have, want))
			require.Equal(t, len(tc.want) > 0, Differs(have, want))
		})
	}
}
