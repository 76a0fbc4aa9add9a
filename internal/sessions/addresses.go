package sessions

import (
	"net"

	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// Addresses are a node's BGP addresses: Calico's (calicoIPs, the etcd datastore), else the
// Node's (NodeIPs).
func Addresses(calicoIPs map[string][]string, view map[string]*extender.Node, name string) []string {
	if a, ok := calicoIPs[name]; ok {
		return a
	}
	return NodeIPs(view[name])
}

// NodeIPs are the addresses a node's BGP peers see, at most one per family, IPv4 first: Calico's
// BGP addresses (the projectcalico.org/IPv4Address and IPv6Address annotations calico-node writes);
// a node with neither annotation (calico-node has not written them) has its first InternalIP of
// each family instead. A node with Calico's IPv4 address only peers in IPv4 only, whatever
// InternalIPs it has (a dual-stack Kubernetes cluster whose Calico runs IPv4 BGP): its IPv6
// InternalIP is no BGP address, so no IPv6 session is waited for or judged.
func NodeIPs(n *extender.Node) []string {
	if n == nil {
		return nil
	}
	// The same test the cache's strip makes: a node it keeps no InternalIP of has an annotation.
	calico := extender.HasCalicoAddress(n)
	var out []string
	for _, fam := range [...]struct {
		annotation string
		v4         bool
	}{{extender.AnnotationCalicoIPv4, true}, {extender.AnnotationCalicoIPv6, false}} {
		if ip := annotatedIP(n.Annotations[fam.annotation]); ip != nil && (ip.To4() != nil) == fam.v4 {
			out = append(out, ip.String())
			continue
		}
		if calico {
			continue
		}
		for _, a := range n.Status.Addresses {
			if ip := net.ParseIP(a.Address); a.Type == corev1.NodeInternalIP && ip != nil && (ip.To4() != nil) == fam.v4 {
				out = append(out, ip.String())
				break
			}
		}
	}
	return out
}

// annotatedIP parses Calico's address annotation ("10.0.0.1/24" or a bare address).
func annotatedIP(v string) net.IP {
	if ip, _, err := net.ParseCIDR(v); err == nil {
		return ip
	}
	return net.ParseIP(v)
}
