package calicoetcd

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	libapiv3 "github.com/projectcalico/calico/libcalico-go/lib/apis/v3"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// Role is what the product owns on a Calico Node: the labels of extender.OwnedLabelKeys (the
// route reflector label and the peering-set labels BGPPeer selectors read) and
// spec.bgp.routeReflectorClusterID.
type Role struct {
	Labels    map[string]string // owned keys only; a missing key is no label
	ClusterID string            // "" for no cluster ID
}

// Equal reports whether two roles are the same.
func (r Role) Equal(o Role) bool {
	return r.ClusterID == o.ClusterID && maps.Equal(r.Labels, o.Labels)
}

// RoleOfNode is the role a Kubernetes Node carries (its owned labels and the cluster ID
// annotation): what the reconciler wrote there, and what its Calico Node must carry.
func RoleOfNode(owned []string, n *extender.Node) Role {
	return Role{Labels: pick(n.Labels, owned), ClusterID: n.Annotations[extender.AnnotationClusterID]}
}

// RoleOfCalicoNode is the role a Calico Node carries.
func RoleOfCalicoNode(owned []string, n *libapiv3.Node) Role {
	r := Role{Labels: pick(n.Labels, owned)}
	if n.Spec.BGP != nil {
		r.ClusterID = n.Spec.BGP.RouteReflectorClusterID
	}
	return r
}

func pick(m map[string]string, keys []string) map[string]string {
	out := map[string]string{}
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

// Diff names, in a stable order, how have differs from want: "label calico-route-reflector
// removed", "spec.bgp.routeReflectorClusterID 10.9.9.9 (want 224.0.0.1)".
func Diff(have, want Role) []string {
	var out []string
	union := map[string]string{}
	maps.Copy(union, have.Labels)
	maps.Copy(union, want.Labels)
	for _, k := range slices.Sorted(maps.Keys(union)) {
		h, hok := have.Labels[k]
		w, wok := want.Labels[k]
		switch {
		case hok && wok && h != w:
			out = append(out, fmt.Sprintf("label %s=%q (want %q)", k, h, w))
		case !hok && wok:
			out = append(out, fmt.Sprintf("label %s removed", k))
		case hok && !wok:
			out = append(out, fmt.Sprintf("label %s=%q added", k, h))
		}
	}
	switch {
	case have.ClusterID == want.ClusterID:
	case have.ClusterID == "":
		out = append(out, fmt.Sprintf("spec.bgp.routeReflectorClusterID removed (want %s)", want.ClusterID))
	case want.ClusterID == "":
		out = append(out, fmt.Sprintf("spec.bgp.routeReflectorClusterID %s added", have.ClusterID))
	default:
		out = append(out, fmt.Sprintf("spec.bgp.routeReflectorClusterID %s (want %s)", have.ClusterID, want.ClusterID))
	}
	return out
}

// ErrNoCalicoNode: Calico has not registered the node in etcd (calico-node has not started on it
// yet). The product never creates a Calico Node.
var ErrNoCalicoNode = errors.New("no Calico Node in etcd")
