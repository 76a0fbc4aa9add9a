package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoetcd"
)

// TestEtcdPlanNodesTakeTheRoleFromEtcd: with --nodes, a Kubernetes Node keeps its own labels and
// health but carries the route reflector role of its Calico Node in etcd (owned labels and the
// cluster ID), also where etcd has none, and its BGP addresses (address families); a node etcd
// does not know is kept as it is.
func TestEtcdPlanNodesTakeTheRoleFromEtcd(t *testing.T) {
	const rrKey = "calico-route-reflector"
	kube := []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "was-rr", Labels: map[string]string{"zone": "a", rrKey: ""},
			Annotations: map[string]string{extender.AnnotationClusterID: "224.0.0.9", "other": "x"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "now-rr", Labels: map[string]string{"zone": "b", extender.LabelPeeringSet: "s1"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "not-in-etcd", Labels: map[string]string{rrKey: ""},
			Annotations: map[string]string{extender.AnnotationClusterID: "224.0.0.3"}}},
	}
	st := &calicoetcd.State{Nodes: []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "was-rr", Labels: map[string]string{extender.LabelPeeringSet: "s2", "calico-only": "y"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "now-rr", Labels: map[string]string{rrKey: ""},
			Annotations: map[string]string{extender.AnnotationClusterID: "224.0.0.1",
				extender.AnnotationCalicoIPv4: "10.1.0.2/24", extender.AnnotationCalicoIPv6: "fd00::2/64"}}},
	}}
	got := etcdPlanNodes(st, kube, rrKey)
	require.Len(t, got, 3)

	assert.Equal(t, map[string]string{"zone": "a", extender.LabelPeeringSet: "s2"}, got[0].Labels)
	assert.Equal(t, map[string]string{"other": "x"}, got[0].Annotations, "etcd has no cluster ID for was-rr")
	assert.Equal(t, map[string]string{"zone": "b", rrKey: ""}, got[1].Labels)
	assert.Equal(t, "224.0.0.1", got[1].Annotations[extender.AnnotationClusterID])
	assert.Equal(t, extender.FromNode(kube[2]), got[2], "a node etcd does not know is kept")
	assert.Equal(t, extender.FamilyIPv4|extender.FamilyIPv6, extender.NodeFamilies(got[1]), "the Calico Node's BGP addresses: %v", got[1].Annotations)
	assert.Equal(t, "fd00::2/64", got[1].Annotations[extender.AnnotationCalicoIPv6])

	assert.Equal(t, "224.0.0.9", kube[0].Annotations[extender.AnnotationClusterID], "the input is not changed")
	assert.Contains(t, kube[0].Labels, rrKey, "the input is not changed")
}
