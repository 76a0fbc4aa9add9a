package calicoetcd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	libapiv3 "github.com/projectcalico/calico/libcalico-go/lib/apis/v3"
	"github.com/projectcalico/calico/libcalico-go/lib/options"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

const nodes = "nodes"

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

// ListNodes returns Calico's Nodes in etcd, by name.
func (s *Store) ListNodes(ctx context.Context) (map[string]*libapiv3.Node, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	l, err := s.client.Nodes().List(ctx, options.ListOptions{})
	if err != nil {
		return nil, kubeError(err, nodes, "")
	}
	out := make(map[string]*libapiv3.Node, len(l.Items))
	for i := range l.Items {
		out[l.Items[i].Name] = &l.Items[i]
	}
	return out, nil
}

// Roles returns the role each Calico Node in etcd carries, by node name.
func (s *Store) Roles(ctx context.Context, owned []string) (map[string]Role, error) {
	ns, err := s.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Role, len(ns))
	for name, n := range ns {
		out[name] = RoleOfCalicoNode(owned, n)
	}
	return out, nil
}

// ErrNoCalicoNode: Calico has not registered the node in etcd (calico-node has not started on it
// yet). The product never creates a Calico Node.
var ErrNoCalicoNode = errors.New("no Calico Node in etcd")

// SetRole makes the Calico Node name carry want: the owned labels as want has them and its
// cluster ID; everything else on the node stays. A write conflict (calico-node updating its own
// Node) is retried.
func (s *Store) SetRole(ctx context.Context, name string, owned []string, want Role) error {
	for attempt := 0; ; attempt++ {
		err := s.setRole(ctx, name, owned, want)
		switch {
		case err == nil:
			return nil
		case apierrors.IsConflict(err) && attempt < 4:
			continue
		case apierrors.IsNotFound(err):
			return fmt.Errorf("calico node %s: %w", name, ErrNoCalicoNode)
		}
		return fmt.Errorf("calico node %s: %s", name, oneLine(err))
	}
}

func (s *Store) setRole(ctx context.Context, name string, owned []string, want Role) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	n, err := s.client.Nodes().Get(ctx, name, options.GetOptions{})
	if err != nil {
		return kubeError(err, nodes, name)
	}
	if RoleOfCalicoNode(owned, n).Equal(want) {
		return nil
	}
	n.Labels = extender.ApplyOwned(n.Labels, owned, want.Labels)
	switch {
	case n.Spec.BGP != nil:
		n.Spec.BGP.RouteReflectorClusterID = want.ClusterID
	case want.ClusterID != "":
		n.Spec.BGP = &libapiv3.NodeBGPSpec{RouteReflectorClusterID: want.ClusterID}
	}
	_, err = s.client.Nodes().Update(ctx, n, options.SetOptions{})
	return kubeError(err, nodes, name)
}

// BGPAddresses returns each Calico Node's BGP addresses without their prefix length, IPv4 first,
// by node name (nodes without any are absent).
func (s *Store) BGPAddresses(ctx context.Context) (map[string][]string, error) {
	ns, err := s.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for name, n := range ns {
		if n.Spec.BGP == nil {
			continue
		}
		for _, a := range []string{n.Spec.BGP.IPv4Address, n.Spec.BGP.IPv6Address} {
			if p, err := netip.ParsePrefix(a); err == nil {
				out[name] = append(out[name], p.Addr().String())
			} else if ip, err := netip.ParseAddr(a); err == nil {
				out[name] = append(out[name], ip.String())
			}
		}
	}
	return out, nil
}
