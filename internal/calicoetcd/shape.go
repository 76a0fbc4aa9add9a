package calicoetcd

import (
	"maps"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	libapiv3 "github.com/projectcalico/calico/libcalico-go/lib/apis/v3"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// State is what Calico's confd reads from etcd for BGP: the Nodes, the BGPPeers and the
// BGPConfigurations. Nodes are given the shape of the Kubernetes datastore's (labels; the cluster
// ID and BGP addresses as Calico's annotations), so that the graph model and the speakers read
// both datastores alike.
type State struct {
	Nodes   []*corev1.Node // by name
	Peers   []apiv3.BGPPeer
	Configs []apiv3.BGPConfiguration
}

// KubernetesShape returns a Calico Node as the Kubernetes datastore stores it: its labels, and
// spec.bgp's route reflector cluster ID and addresses as the projectcalico.org annotations.
func KubernetesShape(n *libapiv3.Node) *corev1.Node {
	out := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: maps.Clone(n.Labels), Annotations: map[string]string{}}}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	if b := n.Spec.BGP; b != nil && b.RouteReflectorClusterID != "" {
		out.Annotations[extender.AnnotationClusterID] = b.RouteReflectorClusterID
	}
	AddressesOf(n).Annotate(out.Annotations)
	return out
}

// AddressesOf returns a Calico Node's BGP addresses (spec.bgp.ipv4Address and ipv6Address): what
// the Kubernetes datastore's projectcalico.org/IPv4Address and IPv6Address annotations hold.
func AddressesOf(n *libapiv3.Node) extender.CalicoAddresses {
	if n == nil || n.Spec.BGP == nil {
		return extender.CalicoAddresses{}
	}
	return extender.CalicoAddresses{IPv4: n.Spec.BGP.IPv4Address, IPv6: n.Spec.BGP.IPv6Address}
}

// Addresses returns the Calico Nodes' BGP addresses, by node name (nodes without any are absent).
func (st *State) Addresses() map[string]extender.CalicoAddresses {
	out := map[string]extender.CalicoAddresses{}
	for _, n := range st.Nodes {
		a := extender.CalicoAddresses{IPv4: n.Annotations[extender.AnnotationCalicoIPv4], IPv6: n.Annotations[extender.AnnotationCalicoIPv6]}
		if a != (extender.CalicoAddresses{}) {
			out[n.Name] = a
		}
	}
	return out
}

// NodeToNodeMesh is whether Calico's node-to-node mesh is on in st: the default
// BGPConfiguration's nodeToNodeMeshEnabled, on when unset (Calico's default).
func (st *State) NodeToNodeMesh() bool {
	for _, c := range st.Configs {
		if c.Name == "default" && c.Spec.NodeToNodeMeshEnabled != nil {
			return *c.Spec.NodeToNodeMeshEnabled
		}
	}
	return true
}
