// Package calico is the product's access to Calico's datastore: the BGPPeer API, served either as
// the crd.projectcalico.org/v1 CRDs of the Kubernetes datastore (with the projectcalico.org/v3
// spec inside) or as projectcalico.org/v3 by the Calico API server (or Calico 3.31+ installed with
// v3 CRDs). Detect picks one by discovery at start; AddToScheme registers the projectcalico.org/v3
// Go types under that group only (registering the same Go types under both groups in one scheme
// would make their kind ambiguous). PeerStore and ConfigStore are where the reconciler reads and
// writes BGPPeers and BGPConfigurations (stores.go; etcd's are internal/calicoetcd's).
//
// Running product: serve, the reconciler, clusterstatus, bgpverify and the commands call it.
package calico

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// The API groups that serve BGPPeers.
var (
	// CRD is the Kubernetes datastore's group (classic installs).
	CRD = schema.GroupVersion{Group: "crd.projectcalico.org", Version: "v1"}
	// V3 is the Calico API server's group (or Calico 3.31+ with v3 CRDs).
	V3 = schema.GroupVersion{Group: "projectcalico.org", Version: "v3"}
)

// ErrNotServed: neither group serves bgppeers (Calico is not installed).
var ErrNotServed = errors.New("neither projectcalico.org/v3 nor crd.projectcalico.org/v1 serves bgppeers: is Calico installed?")

// ParseAPI reads the --calico-api flag: auto, crd or v3.
func ParseAPI(s string) (gv schema.GroupVersion, auto bool, err error) {
	switch s {
	case "", "auto":
		return schema.GroupVersion{}, true, nil
	case "crd", CRD.String():
		return CRD, false, nil
	case "v3", V3.String():
		return V3, false, nil
	}
	return schema.GroupVersion{}, false, fmt.Errorf("calico API %q is not auto, crd or v3", s)
}

// Detect returns the group version that serves bgppeers: projectcalico.org/v3 when served,
// else crd.projectcalico.org/v1.
func Detect(d discovery.DiscoveryInterface) (schema.GroupVersion, error) {
	for _, gv := range []schema.GroupVersion{V3, CRD} {
		rl, err := d.ServerResourcesForGroupVersion(gv.String())
		if err != nil {
			continue
		}
		for _, r := range rl.APIResources {
			if r.Name == "bgppeers" {
				return gv, nil
			}
		}
	}
	return schema.GroupVersion{}, ErrNotServed
}

// AddToScheme registers BGPPeer, BGPConfiguration and CalicoNodeStatus with their lists (the
// projectcalico.org/v3 Go types) under gv.
func AddToScheme(s *runtime.Scheme, gv schema.GroupVersion) error {
	s.AddKnownTypes(gv, &apiv3.BGPPeer{}, &apiv3.BGPPeerList{},
		&apiv3.BGPConfiguration{}, &apiv3.BGPConfigurationList{},
		&apiv3.CalicoNodeStatus{}, &apiv3.CalicoNodeStatusList{})
	metav1.AddToGroupVersion(s, gv)
	return nil
}

// NewScheme returns a scheme of its own with the Calico types under gv.
func NewScheme(gv schema.GroupVersion) *runtime.Scheme {
	s := runtime.NewScheme()
	_ = AddToScheme(s, gv)
	return s
}

// BGPPeer returns the Calico object of a planned BGPPeer, of API gv.
func BGPPeer(gv schema.GroupVersion, p extender.BGPPeer) *apiv3.BGPPeer {
	return &apiv3.BGPPeer{
		TypeMeta:   metav1.TypeMeta{APIVersion: gv.String(), Kind: apiv3.KindBGPPeer},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Labels: maps.Clone(p.Labels)},
		Spec:       p.Spec,
	}
}

// NeedsUpdate reports whether cur differs from want in what this product owns: the spec and the
// labels want carries. It returns the object to write (cur with want's spec and labels).
func NeedsUpdate(cur, want *apiv3.BGPPeer) (*apiv3.BGPPeer, bool) {
	changed := !equality.Semantic.DeepEqual(cur.Spec, want.Spec)
	for k, v := range want.Labels {
		if w, ok := cur.Labels[k]; !ok || w != v {
			changed = true
		}
	}
	if !changed {
		return cur, false
	}
	out := cur.DeepCopy()
	out.Spec = want.Spec
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	maps.Copy(out.Labels, want.Labels)
	return out, true
}

// Differs: NeedsUpdate finds a change between a and b.
func Differs(a, b *apiv3.BGPPeer) bool {
	_, changed := NeedsUpdate(a, b)
	return changed
}

// Diff names the spec fields and owned labels in which have differs from want.
func Diff(have, want *apiv3.BGPPeer) []string {
	var out []string
	h, w := fields(have.Spec), fields(want.Spec)
	union := map[string]string{}
	maps.Copy(union, h)
	maps.Copy(union, w)
	for _, k := range slices.Sorted(maps.Keys(union)) {
		if h[k] != w[k] {
			out = append(out, fmt.Sprintf("spec.%s %s (want %s)", k, orNone(h[k]), orNone(w[k])))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want.Labels)) {
		if have.Labels[k] != want.Labels[k] {
			out = append(out, fmt.Sprintf("label %s=%q (want %q)", k, have.Labels[k], want.Labels[k]))
		}
	}
	return out
}

// fields is a BGPPeer spec as its JSON fields, each value as JSON.
func fields(s apiv3.BGPPeerSpec) map[string]string {
	b, _ := json.Marshal(s)
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	out := map[string]string{}
	for k, v := range m {
		out[k] = string(v)
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
