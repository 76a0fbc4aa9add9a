package sessions

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
)

func TestNodeIPs(t *testing.T) {
	n := func(ann map[string]string, addrs ...corev1.NodeAddress) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: ann}, Status: corev1.NodeStatus{Addresses: addrs}}
	}
	internal := corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.1.0.1"}
	internal6 := corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "fd00::1"}
	for _, tc := range []struct {
		node *corev1.Node
		want string
	}{
		{n(map[string]string{extender.AnnotationCalicoIPv4: "192.168.0.5/24"}, internal), "[192.168.0.5]"},
		{n(nil, internal), "[10.1.0.1]"},
		{n(nil, internal6, internal), "[10.1.0.1 fd00::1]"},
		{n(map[string]string{extender.AnnotationCalicoIPv6: "fd00::5/64"}), "[fd00::5]"},
		{n(map[string]string{extender.AnnotationCalicoIPv4: "192.168.0.5/24", extender.AnnotationCalicoIPv6: "fd00::5/64"}, internal, internal6), "[192.168.0.5 fd00::5]"},
		// Calico peers in IPv4 only: the IPv6 InternalIP of a dual-stack Kubernetes node is no BGP address.
		{n(map[string]string{extender.AnnotationCalicoIPv4: "192.168.0.5/24"}, internal, internal6), "[192.168.0.5]"},
		{n(map[string]string{extender.AnnotationCalicoIPv6: "fd00::5/64"}, internal, internal6), "[fd00::5]"},
		{n(nil, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "1.2.3.4"}), "[]"},
		{nil, "[]"},
	} {
		if got := fmt.Sprint(NodeIPs(extender.FromNode(tc.node))); got != tc.want {
			assert.Fail(t, fmt.Sprintf("%+v: %s want %s", tc.node, got, tc.want))
		}
	}
}

// The cache keeps what NodeIPs reads: Calico's BGP address when the node carries it (and then no
// InternalIP, which NodeIPs does not read), the InternalIPs when it does not.
func TestStripNodeKeepsBGPAddress(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{extender.AnnotationCalicoIPv4: "192.168.0.5/24", "other": "x"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "n"},
			{Type: corev1.NodeInternalIP, Address: "10.1.0.1"}, {Type: corev1.NodeExternalIP, Address: "1.2.3.4"}}},
	}
	s := state.StripNode(n.DeepCopy())
	require.Equal(t, "map[projectcalico.org/IPv4Address:192.168.0.5/24]", fmt.Sprint(s.Annotations), "stripped annotations")
	require.Empty(t, s.Status.Addresses, "stripped addresses")
	require.Equal(t, []string{"192.168.0.5"}, NodeIPs(s))
	without := n.DeepCopy()
	delete(without.Annotations, extender.AnnotationCalicoIPv4)
	s = state.StripNode(without)
	require.Len(t, s.Status.Addresses, 1, "stripped addresses")
	require.Equal(t, "10.1.0.1", s.Status.Addresses[0].Address, "stripped addresses")
	require.Equal(t, []string{"10.1.0.1"}, NodeIPs(s))
}
