//go:build !slim

package calicoetcd

import (
	"context"
	"sort"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico/libcalico-go/lib/options"
)

const nodeStatuses = "caliconodestatuses"

// NodeStatuses is the CalicoNodeStatuses in etcd (calico-node on etcd reports BGP sessions there),
// with the errors of the Kubernetes API.
type NodeStatuses struct{ s *Store }

// NodeStatuses returns the CalicoNodeStatuses of s.
func (s *Store) NodeStatuses() NodeStatuses { return NodeStatuses{s} }

// List returns the CalicoNodeStatuses that carry every label of match, with their status.
func (n NodeStatuses) List(ctx context.Context, match map[string]string) ([]*apiv3.CalicoNodeStatus, error) {
	ctx, cancel := n.s.ctx(ctx)
	defer cancel()
	l, err := n.s.client.CalicoNodeStatus().List(ctx, options.ListOptions{})
	if err != nil {
		return nil, kubeError(err, nodeStatuses, "")
	}
	var out []*apiv3.CalicoNodeStatus
	for i := range l.Items {
		if hasLabels(l.Items[i].Labels, match) {
			out = append(out, &l.Items[i])
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Create creates c.
func (n NodeStatuses) Create(ctx context.Context, c *apiv3.CalicoNodeStatus) error {
	ctx, cancel := n.s.ctx(ctx)
	defer cancel()
	obj := &apiv3.CalicoNodeStatus{TypeMeta: metav1.TypeMeta{APIVersion: apiv3.GroupVersionCurrent, Kind: apiv3.KindCalicoNodeStatus},
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Labels: c.Labels}, Spec: c.Spec}
	_, err := n.s.client.CalicoNodeStatus().Create(ctx, obj, options.SetOptions{})
	return kubeError(err, nodeStatuses, c.Name)
}

// Delete deletes c.
func (n NodeStatuses) Delete(ctx context.Context, c *apiv3.CalicoNodeStatus) error {
	ctx, cancel := n.s.ctx(ctx)
	defer cancel()
	_, err := n.s.client.CalicoNodeStatus().Delete(ctx, c.Name, options.DeleteOptions{})
	return kubeError(err, nodeStatuses, c.Name)
}
