package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

var policyKind = metav1.GroupVersionKind{Group: "routereflector.io", Version: "v1alpha1", Kind: "RouteReflectorPolicy"}

func TestPolicyValidator(t *testing.T) {
	sel := func(k, v string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
	existing := mkPolicy("racks", func(s *v1alpha1.RouteReflectorPolicySpec) { s.NodeSelector = sel("pool", "racks") })
	tests := []struct {
		name     string
		policy   *v1alpha1.RouteReflectorPolicy
		want     string
		warnings string
	}{
		{name: "valid, apart from the other", policy: mkPolicy("edge", func(s *v1alpha1.RouteReflectorPolicySpec) { s.NodeSelector = sel("pool", "edge") })},
		{name: "what the layout costs, beside the default", policy: mkPolicy("zone-b", func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.NodeSelector = sel("topology.kubernetes.io/zone", "zone-b")
		}), warnings: "on the 2 nodes it selects, MultiCluster/Grouped stores 1.0 paths per prefix on the busiest node and 1.0 on the mean node; the default layout (DualPlane) 1.0 and 1.0"},
		{name: "invalid fields with paths", policy: mkPolicy("bad", func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.NodeSelector = sel("pool", "bad")
			s.MinRouteReflectors, s.MaxRouteReflectors = i32(5), i32(2)
			s.Topology = &v1alpha1.Topology{ClusterID: "not-an-ip"}
		}), want: `spec.minRouteReflectors: Invalid value: 5: must not be greater than maxRouteReflectors (2)
spec.topology.clusterID: Invalid value: "not-an-ip": must be an IPv4 address`},
		{name: "BGPPeer settings checked with Calico's validator", policy: mkPolicy("bad-peers", func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.NodeSelector = sel("pool", "bad-peers")
			s.BGPPeer = &v1alpha1.BGPPeerSettings{Password: &v1alpha1.BGPPassword{SecretKeyRef: &corev1.SecretKeySelector{Key: "pw"}},
				Filters: []string{"Bad_Filter"}, ReachableBy: "10.0.0.1"}
		}), want: `spec.bgpPeer.password.secretKeyRef.name: Required value: the Secret's name
spec.bgpPeer.filters[0]: Invalid value: "Bad_Filter": must name a BGPFilter: lower case alphanumeric characters, '-' or '.' (Calico's validator: failed to validate Field: Filters[0] because of Tag: name)
spec.bgpPeer.reachableBy: Invalid value: "10.0.0.1": Calico's validator: ReachablyBy field must be empty when PeerIP is empty: the BGPPeers a policy writes select their peers (peerSelector), they have no peerIP`},
		{name: "BGPPeer settings accepted", policy: mkPolicy("peers", func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.NodeSelector = sel("pool", "peers")
			s.BGPPeer = &v1alpha1.BGPPeerSettings{Password: &v1alpha1.BGPPassword{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "bgp-secrets"}, Key: "pw"}},
				MaxRestartTime: &metav1.Duration{Duration: 300 * time.Second}}
		})},
		{name: "selects every node", policy: mkPolicy("all", nil),
			want: `spec.nodeSelector: Invalid value: [policy-overlap] policy "all" selects every node or policy "racks" does; a node may match at most one policy: give both a nodeSelector that tells their nodes apart`},
		{name: "same selector", policy: mkPolicy("twin", func(s *v1alpha1.RouteReflectorPolicySpec) { s.NodeSelector = sel("pool", "racks") }),
			want: `spec.nodeSelector: Invalid value: [policy-overlap] policy "racks" has the same nodeSelector (pool=racks); a node may match at most one policy`},
		{name: "a node matches both", policy: mkPolicy("zone-a", func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.NodeSelector = sel("topology.kubernetes.io/zone", "zone-a")
		}),
			want: `spec.nodeSelector: Invalid value: [policy-overlap] node node-a1 matches both this nodeSelector and policy "racks"'s (pool=racks); a node may match at most one policy`},
		{name: "update of itself", policy: existing, warnings: "on the 1 nodes it selects"},
		{name: "warnings", policy: mkPolicy("edge", func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.NodeSelector = sel("pool", "edge")
			s.MinRouteReflectors = i32(2)
		}), warnings: "spec.minRouteReflectors: 2 is below 3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes := threeZones()
			nodes[0].Labels["pool"] = "racks"
			f := newFixture(t, []*v1alpha1.RouteReflectorPolicy{existing}, nodes)
			resp, err := f.polVal.Handle(context.Background(), request(t, admissionv1.Create, policyKind, "", alice, tc.policy, nil))
			require.NoError(t, err)
			got := causes(resp)
			require.Equal(t, tc.want, got, "causes (allowed=%v)", resp.Allowed)
			require.Equal(t, tc.want == "", resp.Allowed, "allowed; causes:\n%s", got)
			w := strings.Join(resp.Warnings, "\n")
			require.Contains(t, w, tc.warnings, "warnings")
			if tc.warnings == "" {
				require.Empty(t, w, "warnings, want none")
			}
		})
	}
}
