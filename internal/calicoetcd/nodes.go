//go:build !slim

package calicoetcd

import (
	"context"
	"fmt"
	"net/netip"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	libapiv3 "github.com/projectcalico/calico/libcalico-go/lib/apis/v3"
	"github.com/projectcalico/calico/libcalico-go/lib/options"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

const nodes = "nodes"

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
