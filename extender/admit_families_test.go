package extender_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// TestAdmitFamilies: the node webhook's admission makes no route reflector of a node that lacks an
// address family the policy's nodes peer in, by the planner's own predicate (AddressFamilies on the
// union of the nodes' families, this one's included): on every row the joining node is eligible at
// admission exactly when the full plan of the same nodes finds it eligible. A node that carries no
// Calico address (the etcd datastore: its Calico Node has them) keeps the families the plan read.
func TestAdmitFamilies(t *testing.T) {
	const (
		none = iota
		v4only
		v6only
		dual
	)
	withFamilies := func(n *extender.Node, i, fam int) *extender.Node {
		if fam == v4only || fam == dual {
			n.Annotations[extender.AnnotationCalicoIPv4] = fmt.Sprintf("10.0.0.%d/24", i)
		}
		if fam == v6only || fam == dual {
			n.Annotations[extender.AnnotationCalicoIPv6] = fmt.Sprintf("fd00::%x/64", i)
		}
		return n
	}
	for _, tc := range []struct {
		name string
		// cluster are the families of the policy's two nodes (zones a and b), joining the
		// joining node's (zone c, below its desired count: promoted when eligible).
		cluster, joining int
		// etcd: the plan read the joining node (NotReady then) with its Calico addresses; the
		// request's node carries none.
		etcd   bool
		wantRR bool
	}{
		{"IPv4 cluster, IPv4 node", v4only, v4only, false, true},
		{"IPv4 cluster, no Calico address yet (IPv4, Calico's default)", v4only, none, false, true},
		{"dual-stack cluster, dual-stack node", dual, dual, false, true},
		{"dual-stack cluster, IPv4-only node: no IPv6 for its clients", dual, v4only, false, false},
		{"dual-stack cluster, IPv6-only node", dual, v6only, false, false},
		{"dual-stack cluster, no Calico address yet (IPv4)", dual, none, false, false},
		{"IPv4 cluster, dual-stack node: it has both", v4only, dual, false, true},
		{"IPv4 cluster, IPv6-only node: no IPv4 for the others", v4only, v6only, false, false},
		{"IPv6 cluster, IPv6 node", v6only, v6only, false, true},
		{"etcd: dual-stack cluster, dual-stack Calico Node, bare Kubernetes Node", dual, dual, true, true},
		{"etcd: dual-stack cluster, IPv4-only Calico Node, bare Kubernetes Node", dual, v4only, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := admitPolicy(t, nil)
			var nodes []*extender.Node
			for i := range 2 {
				nodes = append(nodes, withFamilies(admitNode(i, fmt.Sprintf("zone-%c", 'a'+i%2), true), i+1, tc.cluster))
			}
			joining := withFamilies(admitNode(6, "zone-c", true), 7, tc.joining)
			in := extender.Input{Policy: p, Nodes: nodes, Now: admitT0}
			if tc.etcd {
				seen := joining.DeepCopy()
				seen.Status.Conditions[0].Status = corev1.ConditionFalse // NotReady when the plan read it
				in.Nodes = append(nodes, seen)
				joining.Annotations = map[string]string{}
			}
			st := extender.NewAdmitState(in, extender.Plan(in))
			a := extender.AdmitNodeRequest(p, extender.AdmitRequest{Node: joining, Now: admitT0, State: st})
			require.Equal(t, extender.AdmitDecide, a.Action, "%+v", a)
			assert.Equal(t, tc.wantRR, a.Role == extender.AdmitRouteReflector, "%+v", a.Admission)
			assert.Equal(t, tc.wantRR, a.Eligible, "%+v", a.Admission)

			// The full plan of the same nodes agrees on the joining node's eligibility.
			planned := joining
			if tc.etcd {
				planned = withFamilies(joining.DeepCopy(), 7, tc.joining)
			}
			full := extender.Input{Policy: p, Nodes: append(append([]*extender.Node{}, nodes...), planned), Now: admitT0}
			res := extender.Plan(full)
			ineligible := false
			for _, n := range res.Ineligible {
				if n.Node == joining.Name {
					ineligible = true
					assert.Equal(t, extender.RuleMissingAddressFamily, n.Rule)
				}
			}
			assert.Equal(t, a.Eligible, !ineligible, "admission and the plan disagree on %s: %+v", joining.Name, res.Ineligible)
		})
	}
}
