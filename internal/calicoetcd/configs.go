//go:build !slim

package calicoetcd

import (
	"context"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico/libcalico-go/lib/options"
)

const configs = "bgpconfigurations"

// Configs is the BGPConfigurations in etcd (the node-to-node mesh), with the errors of the
// Kubernetes API.
type Configs struct{ s *Store }

// Configs returns the BGPConfigurations of s.
func (s *Store) Configs() Configs { return Configs{s} }

// Get returns the named BGPConfiguration.
func (c Configs) Get(ctx context.Context, name string) (*apiv3.BGPConfiguration, error) {
	ctx, cancel := c.s.ctx(ctx)
	defer cancel()
	out, err := c.s.client.BGPConfigurations().Get(ctx, name, options.GetOptions{})
	if err != nil {
		return nil, kubeError(err, configs, name)
	}
	return out, nil
}

// Create creates b (its resource version is ignored).
func (c Configs) Create(ctx context.Context, b *apiv3.BGPConfiguration) error {
	ctx, cancel := c.s.ctx(ctx)
	defer cancel()
	obj := &apiv3.BGPConfiguration{TypeMeta: metav1.TypeMeta{APIVersion: apiv3.GroupVersionCurrent, Kind: apiv3.KindBGPConfiguration},
		ObjectMeta: metav1.ObjectMeta{Name: b.Name, Labels: b.Labels, Annotations: b.Annotations}, Spec: b.Spec}
	_, err := c.s.client.BGPConfigurations().Create(ctx, obj, options.SetOptions{})
	return kubeError(err, configs, b.Name)
}

// Patch writes b at the resource version orig was read at (a conflict if it changed since).
func (c Configs) Patch(ctx context.Context, orig, b *apiv3.BGPConfiguration) error {
	ctx, cancel := c.s.ctx(ctx)
	defer cancel()
	obj := b.DeepCopy()
	obj.ResourceVersion = orig.ResourceVersion
	obj.TypeMeta = metav1.TypeMeta{APIVersion: apiv3.GroupVersionCurrent, Kind: apiv3.KindBGPConfiguration}
	_, err := c.s.client.BGPConfigurations().Update(ctx, obj, options.SetOptions{})
	return kubeError(err, configs, b.Name)
}
