package webhook

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// threeZones: one route reflector per zone, and clients peering with all three (or as given).
func threeZones(extra ...*corev1.Node) []*corev1.Node {
	nodes := []*corev1.Node{
		mkNode("node-a1", "zone-a", rr("224.0.0.1")),
		mkNode("node-b1", "zone-b", rr("224.0.0.2")),
		mkNode("node-c1", "zone-c", rr("224.0.0.3")),
		mkNode("node-a2", "zone-a", clientOf("node-a1", "node-b1", "node-c1")),
		mkNode("node-b2", "zone-b", clientOf("node-a1", "node-b1", "node-c1")),
		mkNode("node-c2", "zone-c", clientOf("node-a1", "node-b1", "node-c1")),
	}
	return append(nodes, extra...)
}

func TestNodeValidator(t *testing.T) {
	def := func(*v1alpha1.RouteReflectorPolicySpec) {}
	minN := func(n int32) func(*v1alpha1.RouteReflectorPolicySpec) {
		return func(s *v1alpha1.RouteReflectorPolicySpec) { s.MinRouteReflectors = i32(n) }
	}
	unlabel := func(n *corev1.Node) { delete(n.Labels, "calico-route-reflector") }
	noID := func(n *corev1.Node) { delete(n.Annotations, extender.AnnotationClusterID) }
	label := func(n *corev1.Node) { n.Labels["calico-route-reflector"] = "" }
	tests := []struct {
		name   string
		spec   func(*v1alpha1.RouteReflectorPolicySpec)
		extra  []*corev1.Node
		user   authenticationv1.UserInfo
		node   string
		change func(*corev1.Node)
		want   string // "" allowed; else the causes, exactly
		sameID bool   // every route reflector has 224.0.0.1
		// prepare changes the cluster's nodes (threeZones and extra) before the fixture is built.
		prepare func(nodes []*corev1.Node)
	}{
		{name: "below min", spec: def, user: alice, node: "node-a1", change: unlabel,
			want: `metadata.labels[calico-route-reflector]: Invalid value: [min-route-reflectors] removing the route reflector label from node-a1 would leave 2 route reflectors; policy "default" requires at least 3`},
		{name: "cluster ID below min", spec: def, user: alice, node: "node-b1", change: noID,
			want: `metadata.annotations[projectcalico.org/RouteReflectorClusterID]: Invalid value: [min-route-reflectors] removing the cluster ID from node-b1 would leave 2 route reflectors; policy "default" requires at least 3`},
		{name: "kubelet never denied", spec: def, user: kubelet, node: "node-a1", change: unlabel},
		{name: "service account never denied", spec: def, user: sa, node: "node-a1", change: unlabel},
		{name: "above min", spec: minN(2), user: alice, node: "node-a1", change: unlabel},
		{name: "quorum: a client would keep none", spec: minN(1), user: alice, node: "node-a1", change: unlabel,
			extra: []*corev1.Node{mkNode("node-x", "zone-a", clientOf("node-a1"))},
			want:  `metadata.labels[calico-route-reflector]: Invalid value: [quorum] removing the route reflector label from node-a1 would leave client node-x without a route reflector`},
		{name: "quorum: shared cluster ID", user: alice, node: "node-a1", change: unlabel,
			spec: func(s *v1alpha1.RouteReflectorPolicySpec) { s.MinRouteReflectors = i32(1) },
			extra: []*corev1.Node{
				mkNode("node-d1", "zone-a", rr("224.0.0.1")),
				mkNode("node-x", "zone-a", clientOf("node-a1", "node-b1")),
				mkNode("node-y", "zone-a", clientOf("node-a1", "node-c1")),
			},
			// node-b1 and node-c1 have other IDs: no shared-ID quorum issue.
		},
		{name: "quorum: one cluster ID, clients would share none", user: alice, node: "node-a1", change: unlabel,
			spec: minN(1),
			extra: []*corev1.Node{
				mkNode("node-x", "zone-a", clientOf("node-a1", "node-b1")),
				mkNode("node-y", "zone-a", clientOf("node-a1", "node-c1")),
			},
			sameID: true,
			want:   `metadata.labels[calico-route-reflector]: Invalid value: [quorum] removing the route reflector label from node-a1 would leave clients of node-b1 and clients of node-c1 without a common route reflector, and all route reflectors share cluster ID 224.0.0.1 (projectcalico/calico#2735)`},
		// In each address family: the removed route reflector was the only one with an IPv6
		// address, and the clients are dual-stack.
		{name: "quorum: dual-stack clients would keep no IPv6 route reflector", spec: minN(1), user: alice, node: "node-a1", change: unlabel,
			prepare: func(nodes []*corev1.Node) { addresses(nodes, "node-a1", "node-a2", "node-b2", "node-c2") },
			want:    `metadata.labels[calico-route-reflector]: Invalid value: [quorum] removing the route reflector label from node-a1 would leave 3 clients (node-a2, node-b2, node-c2) without a route reflector in IPv6`},
		{name: "quorum: another IPv6 route reflector stays", spec: minN(1), user: alice, node: "node-a1", change: unlabel,
			prepare: func(nodes []*corev1.Node) { addresses(nodes, "node-a1", "node-b1", "node-a2", "node-b2", "node-c2") }},
		{name: "quorum: the removed route reflector served no IPv6", spec: minN(1), user: alice, node: "node-a1", change: unlabel,
			prepare: func(nodes []*corev1.Node) { addresses(nodes, "node-b1", "node-a2", "node-b2", "node-c2") }},
		{name: "unrelated change", spec: def, user: alice, node: "node-a1", change: func(n *corev1.Node) { n.Labels["team"] = "net" }},
		{name: "forbidden node", user: alice, node: "node-a2", change: label,
			spec: func(s *v1alpha1.RouteReflectorPolicySpec) {
				s.ForbiddenNodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"role": "db"}}
			},
			extra: nil,
			// node-a2 (threeZones()[3]) matches the forbiddenNodeSelector.
			prepare: func(nodes []*corev1.Node) { nodes[3].Labels["role"] = "db" },
			want:    `metadata.labels[calico-route-reflector]: Invalid value: [forbidden-node] node-a2 may not be a route reflector of policy "default": node matches the policy's forbiddenNodeSelector`},
		{name: "cordoned node", spec: def, user: alice, node: "node-a2", change: func(n *corev1.Node) { label(n); cordon(n) },
			want: `metadata.labels[calico-route-reflector]: Invalid value: [cordoned-node] node-a2 may not be a route reflector of policy "default": node is cordoned (spec.unschedulable)`},
		{name: "not ready node", spec: def, user: alice, node: "node-a2", change: func(n *corev1.Node) { label(n); notReady(n) },
			want: `metadata.labels[calico-route-reflector]: Invalid value: [not-ready-node] node-a2 may not be a route reflector of policy "default": node is not Ready`},
		{name: "beyond max", user: alice, node: "node-a2", change: label,
			spec: func(s *v1alpha1.RouteReflectorPolicySpec) { s.MaxRouteReflectors = i32(3) },
			want: `metadata.labels[calico-route-reflector]: Invalid value: [max-route-reflectors] adding the route reflector label to node-a2 would make 4 route reflectors; policy "default" allows at most 3`},
		{name: "label within max", spec: def, user: alice, node: "node-a2", change: label},
		{name: "labelling a node under memory pressure", spec: def, user: alice, node: "node-a2", change: func(n *corev1.Node) {
			label(n)
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue})
		}, want: `metadata.labels[calico-route-reflector]: Invalid value: [node-condition] node-a2 may not be a route reflector of policy "default": node condition MemoryPressure is True`},
		{name: "cluster ID not IPv4", spec: def, user: alice, node: "node-a1", change: func(n *corev1.Node) { n.Annotations[extender.AnnotationClusterID] = "rack-1" },
			want: `metadata.annotations[projectcalico.org/RouteReflectorClusterID]: Invalid value: [cluster-id] "rack-1" is not an IPv4 address
metadata.annotations[projectcalico.org/RouteReflectorClusterID]: Invalid value: [min-route-reflectors] removing the cluster ID from node-a1 would leave 2 route reflectors; policy "default" requires at least 3`},
		{name: "cluster ID collision", user: alice, node: "node-a1", change: func(n *corev1.Node) { n.Annotations[extender.AnnotationClusterID] = "224.0.0.2" },
			spec: func(s *v1alpha1.RouteReflectorPolicySpec) {
				s.Topology = &v1alpha1.Topology{ClusterIDs: v1alpha1.PerRouteReflector}
			},
			want: `metadata.annotations[projectcalico.org/RouteReflectorClusterID]: Invalid value: [cluster-id-collision] cluster ID 224.0.0.2 of node-a1 is already held by node-b1; policy "default" gives each route reflector its own (clusterIDs: PerRouteReflector)`},
		{name: "grouped IDs may be shared", spec: def, user: alice, node: "node-a1", change: func(n *corev1.Node) { n.Annotations[extender.AnnotationClusterID] = "224.0.0.2" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes := threeZones(tc.extra...)
			if tc.prepare != nil {
				tc.prepare(nodes)
			}
			if tc.sameID {
				for _, n := range nodes[:3] {
					n.Annotations[extender.AnnotationClusterID] = "224.0.0.1"
				}
			}
			f := newFixture(t, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", tc.spec)}, nodes)
			old := f.nodes.Get(tc.node).ToNode()
			for _, n := range nodes {
				if n.Name == tc.node {
					old = n.DeepCopy()
				}
			}
			n := old.DeepCopy()
			tc.change(n)
			resp, err := f.nodeVal.Handle(context.Background(), nodeReq(t, tc.user, n, old))
			require.NoError(t, err)
			got := causes(resp)
			require.Equal(t, tc.want, got, "causes (allowed=%v)", resp.Allowed)
			require.Equal(t, tc.want == "", resp.Allowed, "allowed; causes:\n%s", got)
			if !resp.Allowed {
				require.Equal(t, int32(422), resp.Result.Code, "status %+v", resp.Result)
				require.Equal(t, metav1.StatusReasonInvalid, resp.Result.Reason, "status %+v", resp.Result)
			}
			// The rules travel typed in the audit annotation, the same as the messages show.
			var named []string
			for _, m := range bracketed.FindAllStringSubmatch(tc.want, -1) {
				named = append(named, m[1])
			}
			if wantRules := strings.Join(named, ","); !resp.Allowed {
				rules := resp.AuditAnnotations["rules"]
				require.Equal(t, wantRules, "["+strings.ReplaceAll(rules, ",", "],[")+"]", "audit annotation rules=%q, against the rules the messages name", rules)
			}
		})
	}
}

// addresses gives every node Calico's IPv4 address annotation, and the named ones an IPv6 address
// too (dual-stack).
func addresses(nodes []*corev1.Node, dual ...string) {
	for i, n := range nodes {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[extender.AnnotationCalicoIPv4] = fmt.Sprintf("10.0.0.%d/24", i+1)
		if slices.Contains(dual, n.Name) {
			n.Annotations[extender.AnnotationCalicoIPv6] = fmt.Sprintf("fd00::%x/64", i+1)
		}
	}
}

// bracketed finds the rule a denial's message starts with, as kubectl prints it.
var bracketed = regexp.MustCompile(`(?:Invalid value|Forbidden): (\[[a-z0-9-]+\])`)

func TestNodeValidatorDeleteWarns(t *testing.T) {
	f := newFixture(t, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, threeZones())
	old := mkNode("node-a1", "zone-a", rr("224.0.0.1"))
	resp, err := f.nodeVal.Handle(context.Background(), nodeReq(t, alice, nil, old))
	require.NoError(t, err)
	want := `node node-a1 is a route reflector of policy "default" with 3 clients; 2 route reflectors remain (minimum 3); the reconciler promotes a replacement and moves its clients`
	require.True(t, resp.Allowed, "allowed; warnings=%q", resp.Warnings)
	require.Equal(t, []string{want}, resp.Warnings, "warnings")
	// A client's deletion: no warning.
	resp, _ = f.nodeVal.Handle(context.Background(), nodeReq(t, alice, nil, mkNode("node-a2", "zone-a")))
	require.True(t, resp.Allowed, "client delete: %+v", resp)
	require.Empty(t, resp.Warnings, "client delete: %+v", resp)
}

func TestNodeValidatorNoPolicy(t *testing.T) {
	f := newFixture(t, nil, threeZones())
	old := mkNode("node-a1", "zone-a", rr("224.0.0.1"))
	n := old.DeepCopy()
	delete(n.Labels, "calico-route-reflector")
	resp, err := f.nodeVal.Handle(context.Background(), nodeReq(t, alice, n, old))
	require.NoError(t, err)
	require.True(t, resp.Allowed, "%+v", resp)
}

func TestNodeValidatorDeniedMessageForKubectl(t *testing.T) {
	f := newFixture(t, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, threeZones())
	old := mkNode("node-a1", "zone-a", rr("224.0.0.1"))
	n := old.DeepCopy()
	delete(n.Labels, "calico-route-reflector")
	resp, _ := f.nodeVal.Handle(context.Background(), nodeReq(t, alice, n, old))
	msg := statusMessage(resp.Result)
	require.Truef(t, strings.HasPrefix(msg, `Node "node-a1" is invalid: metadata.labels[calico-route-reflector]: Invalid value: [min-route-reflectors] removing`),
		"message %q", msg)
	d := resp.Result.Details
	require.NotNil(t, d, "details")
	require.Equal(t, "Node", d.Kind, "details %+v", d)
	require.Equal(t, "node-a1", d.Name, "details %+v", d)
	require.Len(t, d.Causes, 1, "details %+v", d)
}
