//go:build !slim

package calicoetcd

import (
	"context"
	"maps"
	"slices"
	"strings"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico/libcalico-go/lib/options"
)

// ReadState reads the Nodes, BGPPeers and BGPConfigurations from etcd (read only).
func (s *Store) ReadState(ctx context.Context) (*State, error) {
	ns, err := s.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	st := &State{}
	for _, name := range slices.Sorted(maps.Keys(ns)) {
		st.Nodes = append(st.Nodes, KubernetesShape(ns[name]))
	}
	peers, err := s.Peers().List(ctx, nil)
	if err != nil {
		return nil, err
	}
	for _, p := range peers {
		st.Peers = append(st.Peers, apiv3.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Labels: p.Labels}, Spec: p.Spec})
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	cl, err := s.client.BGPConfigurations().List(cctx, options.ListOptions{})
	if err != nil {
		return nil, kubeError(err, "bgpconfigurations", "")
	}
	for _, c := range cl.Items {
		st.Configs = append(st.Configs, apiv3.BGPConfiguration{ObjectMeta: metav1.ObjectMeta{Name: c.Name}, Spec: c.Spec})
	}
	slices.SortFunc(st.Configs, func(a, b apiv3.BGPConfiguration) int { return strings.Compare(a.Name, b.Name) })
	return st, nil
}
