package calico

import (
	"testing"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
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
		if err != nil || gvk.String() != gv.want {
			t.Fatalf("%s: %v %v", gv.name, gvk, err)
		}
	}
	// Both groups in one scheme: the kind of the Go type is ambiguous, which is why each scheme
	// holds one.
	s := NewScheme(CRD)
	_ = AddToScheme(s, V3)
	if _, err := apiutil.GVKForObject(&apiv3.BGPPeer{}, s); err == nil {
		t.Fatal("expected an ambiguity error with both groups registered")
	}
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
			if err != ErrNotServed {
				t.Fatalf("%s: %v %v", tc.name, gv, err)
			}
			continue
		}
		if err != nil || gv.String() != tc.want {
			t.Fatalf("%s: %v %v", tc.name, gv, err)
		}
	}
}

func TestNeedsUpdate(t *testing.T) {
	want := BGPPeer(CRD, extender.BGPPeer{Name: "p", Labels: map[string]string{extender.LabelManagedBy: extender.ManagedByValue},
		Spec: apiv3.BGPPeerSpec{NodeSelector: "a == 'b'", PeerSelector: "has(x)"}})
	cur := want.DeepCopy()
	cur.ResourceVersion = "7"
	cur.Labels["extra"] = "kept"
	if _, changed := NeedsUpdate(cur, want); changed {
		t.Fatal("equal peers need an update")
	}
	cur.Spec.PeerSelector = "has(y)"
	out, changed := NeedsUpdate(cur, want)
	if !changed || out.Spec.PeerSelector != "has(x)" || out.ResourceVersion != "7" || out.Labels["extra"] != "kept" {
		t.Fatalf("%v %+v", changed, out)
	}
}

func TestParseAPI(t *testing.T) {
	if _, auto, err := ParseAPI("auto"); !auto || err != nil {
		t.Fatal(auto, err)
	}
	if gv, _, err := ParseAPI("crd"); gv != CRD || err != nil {
		t.Fatal(gv, err)
	}
	if _, _, err := ParseAPI("v2"); err == nil {
		t.Fatal("v2 accepted")
	}
}

func TestCRDsFound(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	d, err := crds.Dir()
	if err != nil {
		t.Fatal(err)
	}
	t.Log(d)
}
