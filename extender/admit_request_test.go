package extender_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// TestAdmitRequestDecidesOnceAndRemembers: one call reads the node, decides on the state and
// remembers the decision in place of the node's earlier one; a decision equal to Prev is Prev
// again, not recorded twice; NoPromotion keeps the node from becoming a route reflector.
func TestAdmitRequestDecidesOnceAndRemembers(t *testing.T) {
	p := admitPolicy(t, nil)
	in := extender.Input{Policy: p, Now: admitT0}
	st := extender.NewAdmitState(in, extender.Plan(in))
	req := func(n *extender.Node, o extender.DecideOptions) extender.AdmitAnswer {
		return extender.AdmitNodeRequest(p, extender.AdmitRequest{Node: n, Now: admitT0, State: st, Decide: o})
	}
	n := admitNode(1, "zone-a", true)
	held := req(n, extender.DecideOptions{Record: true, NoPromotion: true})
	require.Equal(t, extender.AdmitDecide, held.Action, "%+v", held)
	require.NotEqual(t, extender.AdmitRouteReflector, held.Role, "promoted with promotions held: %+v", held)
	require.Equal(t, extender.AdmitNone, held.Role, "no route reflector yet, so no client either: %+v", held)
	require.True(t, held.Held, "Held says an eligible node got no role while promotions were held: %+v", held)

	a := req(n, extender.DecideOptions{Record: true})
	require.Equal(t, extender.AdmitRouteReflector, a.Role, "%+v", a)
	require.False(t, a.Held, "%+v", a)
	require.True(t, a.Recorded, "%+v", a)
	require.Equal(t, "224.0.0.1", *a.Annotations[extender.AnnotationClusterID], "the patch's cluster ID: %+v", a.Annotations)
	for _, k := range policy.ProtectionAnnotations() {
		require.NotNil(t, a.Annotations[k], "the promotion protects the node: %s", k)
		require.Equal(t, "true", *a.Annotations[k])
	}
	require.Equal(t, 1, st.RouteReflectors())

	again := req(n, extender.DecideOptions{Record: true, Prev: &a.Admission})
	require.True(t, again.Same, "%+v", again)
	require.False(t, again.Recorded, "%+v", again)
	require.Equal(t, 1, st.RouteReflectors())

	// The node turns NotReady before the cache showed its role: the new decision replaces the
	// promotion in the counts.
	n.Status.Conditions[0].Status = corev1.ConditionFalse
	down := req(n, extender.DecideOptions{Record: true, Prev: &a.Admission})
	require.NotEqual(t, extender.AdmitRouteReflector, down.Role, "%+v", down)
	require.False(t, down.Held, "a NotReady node is not eligible: %+v", down)
	require.Zero(t, st.RouteReflectors(), "the promotion still counts after the node's next decision")
}

// TestReplays: a promotion admitted while a plan was computed is taken again by the plan's state
// when the plan left its gap (a plan of the same nodes), and not when the plan filled the gap with
// another node (the new rack's first route reflector is that node).
func TestReplays(t *testing.T) {
	rack := int32(20)
	p := admitPolicy(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: &rack}
	})
	now := admitT0.Add(time.Hour)
	var base []*extender.Node
	for i := range 60 { // three zones of full racks
		base = append(base, admitNode(i, fmt.Sprintf("zone-%c", 'a'+i%3), true))
	}
	res := extender.Plan(extender.Input{Policy: p, Nodes: base, Now: now})
	for i, st := range res.Nodes {
		applyState(p, base[i], st)
	}
	stateOf := func(nodes ...*extender.Node) *extender.AdmitState {
		in := extender.Input{Policy: p, Nodes: append(slices.Clone(base), nodes...), Now: now}
		return extender.NewAdmitState(in, extender.Plan(in))
	}
	x := admitNode(100, "zone-a", true)
	a := stateOf().Admit(x)
	require.Equal(t, extender.AdmitRouteReflector, a.Role, "the first node of zone-a's new rack: %+v", a)
	admitted := x.DeepCopy()
	applyState(p, admitted, a.State(p))

	tests := []struct {
		name string
		st   *extender.AdmitState
		want bool
	}{
		{"a plan of the same nodes", stateOf(), true},
		{"a plan with another zone's NotReady joiner", stateOf(admitNode(101, "zone-b", false)), true},
		{"a plan whose new rack has another first node", stateOf(admitNode(102, "zone-a", true)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, tt.st.Replays(admitted, now, &a))
		})
	}
	require.False(t, stateOf().Replays(x, now, &extender.Admission{Node: x.Name, Role: extender.AdmitClient}), "a client is no promotion")
	require.False(t, stateOf().Replays(nil, now, &a), "no node")
}
