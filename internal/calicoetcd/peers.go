//go:build !slim

package calicoetcd

import (
	"context"
	"sort"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico/libcalico-go/lib/options"
)

const peers = "bgppeers"

// Peers is the BGPPeers in etcd, with the errors of the Kubernetes API (not found, already exists,
// conflict), so that the reconciler handles both datastores alike.
type Peers struct{ s *Store }

// Peers returns the BGPPeers of s.
func (s *Store) Peers() Peers { return Peers{s} }

// List returns the BGPPeers in etcd that carry every label of match (all of them when match is
// empty), by name. Calico's client lists by name only: the labels are matched here.
func (p Peers) List(ctx context.Context, match map[string]string) ([]*apiv3.BGPPeer, error) {
	s := p.s
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	l, err := s.client.BGPPeers().List(ctx, options.ListOptions{})
	if err != nil {
		return nil, kubeError(err, peers, "")
	}
	out := make([]*apiv3.BGPPeer, 0, len(l.Items))
	for i := range l.Items {
		if hasLabels(l.Items[i].Labels, match) {
			out = append(out, &l.Items[i])
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Create creates b (its resource version is ignored).
func (p Peers) Create(ctx context.Context, b *apiv3.BGPPeer) error {
	ctx, cancel := p.s.ctx(ctx)
	defer cancel()
	obj := &apiv3.BGPPeer{TypeMeta: typeMeta(), ObjectMeta: metav1.ObjectMeta{Name: b.Name, Labels: b.Labels}, Spec: b.Spec}
	_, err := p.s.client.BGPPeers().Create(ctx, obj, options.SetOptions{})
	return kubeError(err, peers, b.Name)
}

// Update writes b at its resource version (a conflict if it changed since).
func (p Peers) Update(ctx context.Context, b *apiv3.BGPPeer) error {
	ctx, cancel := p.s.ctx(ctx)
	defer cancel()
	obj := b.DeepCopy()
	obj.TypeMeta = typeMeta()
	_, err := p.s.client.BGPPeers().Update(ctx, obj, options.SetOptions{})
	return kubeError(err, peers, b.Name)
}

// Delete deletes b if it is still at its resource version.
func (p Peers) Delete(ctx context.Context, b *apiv3.BGPPeer) error {
	ctx, cancel := p.s.ctx(ctx)
	defer cancel()
	_, err := p.s.client.BGPPeers().Delete(ctx, b.Name, options.DeleteOptions{ResourceVersion: b.ResourceVersion})
	return kubeError(err, peers, b.Name)
}

func typeMeta() metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiv3.GroupVersionCurrent, Kind: apiv3.KindBGPPeer}
}

func hasLabels(have, match map[string]string) bool {
	for k, v := range match {
		if w, ok := have[k]; !ok || w != v {
			return false
		}
	}
	return true
}
