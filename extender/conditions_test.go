package extender

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// notReadyFor makes a node NotReady since d before now.
func notReadyFor(now time.Time, d time.Duration) nodeOpt {
	return func(n *corev1.Node) {
		n.Status.Conditions[0].Status = corev1.ConditionFalse
		n.Status.Conditions[0].LastTransitionTime = metav1.NewTime(now.Add(-d))
	}
}

func withCondition(t corev1.NodeConditionType) nodeOpt {
	return func(n *corev1.Node) {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: t, Status: corev1.ConditionTrue})
	}
}

// TestNotReadyGracePeriod: a route reflector NotReady for less than notReadyGracePeriod keeps its
// role with no draining mark, and the plan says when to look again; past the grace period it is
// replaced and drains. A node that is not a route reflector gets no grace.
func TestNotReadyGracePeriod(t *testing.T) {
	now := t0.Add(240 * time.Hour)
	for _, top := range []*v1alpha1.Topology{nil, dual} {
		p := resolve(t, v1alpha1.RouteReflectorPolicySpec{Topology: top, NotReadyGracePeriod: &metav1.Duration{Duration: time.Minute}})
		base := cluster(30, 3)
		first := Plan(Input{Policy: p, Nodes: base, Now: now})
		apply(p, base, first)
		rr := first.RouteReflectors[0].Node
		tests := []struct {
			name     string
			down     time.Duration
			keeps    bool
			recheck  bool
			draining int
		}{
			{"a 30 s blip keeps the role", 30 * time.Second, true, true, 0},
			{"past the grace period it drains", 90 * time.Second, false, false, 1},
		}
		for _, tt := range tests {
			t.Run(string(p.Topology)+"/"+tt.name, func(t *testing.T) {
				nodes := make([]*Node, len(base))
				for i, n := range base {
					nodes[i] = n.DeepCopy()
					if n.Name == rr {
						with(nodes[i], notReadyFor(now, tt.down))
					}
				}
				res := Plan(Input{Policy: p, Nodes: nodes, Now: now})
				require.Empty(t, checkInvariants(p, nodes, res))
				got := rrNames(res)[rr]
				assert.Equal(t, tt.keeps, got.Node == rr && !got.Draining, "role of %s: %+v", rr, got)
				assert.Equal(t, tt.draining, res.Summary.DrainingRouteReflectors)
				assert.Equal(t, tt.recheck, !res.RecheckAt.IsZero())
				if tt.recheck {
					assert.Equal(t, now.Add(-tt.down).Add(time.Minute), res.RecheckAt)
				}
			})
		}
		t.Run(string(p.Topology)+"/a client NotReady gets no grace", func(t *testing.T) {
			n := node("x", "zone-a", 0, notReadyFor(now, time.Second))
			ni := NewNodeInfo(n, p)
			ni.Now = now
			RunFilters(DefaultFilters(), p, ni)
			assert.False(t, ni.Eligible)
			assert.Equal(t, ReasonNotReady, ni.Reason)
		})
	}
}

// TestNodeConditions: a node under memory, disk or PID pressure or with an unavailable network is
// not made a route reflector; a route reflector that reports one keeps its role.
func TestNodeConditions(t *testing.T) {
	p := resolve(t, v1alpha1.RouteReflectorPolicySpec{})
	for _, c := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeNetworkUnavailable} {
		t.Run(string(c), func(t *testing.T) {
			ni := NewNodeInfo(node("x", "zone-a", 0, withCondition(c)), p)
			RunFilters(DefaultFilters(), p, ni)
			assert.False(t, ni.Eligible)
			assert.Equal(t, "node condition "+string(c)+" is True", ni.Reason)

			rr := NewNodeInfo(node("y", "zone-a", 0, withCondition(c), asRR("224.0.0.1")), p)
			RunFilters(DefaultFilters(), p, rr)
			assert.True(t, rr.Eligible, "an existing route reflector keeps its role")
		})
	}
	// The oldest nodes would be picked first; under pressure they are passed over.
	nodes := cluster(12, 3)
	nodes[0].Status.Conditions = append(nodes[0].Status.Conditions, corev1.NodeCondition{Type: corev1.NodeDiskPressure, Status: corev1.ConditionTrue})
	res := Plan(Input{Policy: p, Nodes: nodes, Now: t0})
	_, picked := rrNames(res)[nodes[0].Name]
	assert.False(t, picked)
}

// TestReadyAgainTakesRoleBack: a route reflector NotReady past the grace period drains (marked
// NotReady) and is replaced; Ready again before its removalDelay ends, it takes its role back (in
// DualPlane its plane) without the draining mark, and the replacement drains instead. A route
// reflector drained for another reason (cordon) does not come back when Ready.
func TestReadyAgainTakesRoleBack(t *testing.T) {
	now := t0.Add(240 * time.Hour)
	for _, top := range []*v1alpha1.Topology{nil, dual} {
		p := resolve(t, v1alpha1.RouteReflectorPolicySpec{Topology: top, NotReadyGracePeriod: &metav1.Duration{Duration: time.Minute},
			RemovalDelay: &metav1.Duration{Duration: 5 * time.Minute}})
		t.Run(string(p.Topology), func(t *testing.T) {
			nodes := cluster(30, 3)
			apply(p, nodes, Plan(Input{Policy: p, Nodes: nodes, Now: now}))
			before := rrNames(Plan(Input{Policy: p, Nodes: nodes, Now: now}))
			var rr *Node
			for _, n := range nodes {
				if r, ok := before[n.Name]; ok && !r.Spine {
					rr = n
					break
				}
			}
			plane := rr.Annotations[AnnotationPlane]
			with(rr, notReadyFor(now, 90*time.Second))
			res := Plan(Input{Policy: p, Nodes: nodes, Now: now})
			apply(p, nodes, res)
			require.True(t, rrNames(res)[rr.Name].Draining, "NotReady past the grace period: draining")
			require.Equal(t, DrainingReasonNotReady, rr.Annotations[AnnotationDrainingReason])
			var replacement string
			for name, r := range rrNames(res) {
				if _, was := before[name]; !was && !r.Draining {
					replacement = name
				}
			}
			require.NotEmpty(t, replacement, "a replacement")

			// Ready again two minutes later (removalDelay 5m): the role comes back.
			rr.Status.Conditions[0].Status = corev1.ConditionTrue
			later := now.Add(2 * time.Minute)
			res = Plan(Input{Policy: p, Nodes: nodes, Now: later})
			require.Empty(t, checkInvariants(p, nodes, res))
			apply(p, nodes, res)
			got := rrNames(res)
			require.False(t, got[rr.Name].Draining, "%s takes its role back: %+v", rr.Name, got[rr.Name])
			require.Empty(t, rr.Annotations[AnnotationDrainingSince])
			require.Empty(t, rr.Annotations[AnnotationDrainingReason])
			require.Equal(t, plane, rr.Annotations[AnnotationPlane], "its plane")
			require.True(t, got[replacement].Draining, "the replacement drains: %+v", got[replacement])
			active := 0
			for _, r := range got {
				if !r.Draining {
					active++
				}
			}
			require.Equal(t, len(before), active, "as many active route reflectors as before")

			// Cordoned, it drains; uncordoned before its removalDelay ends, it stays draining.
			rr.Spec.Unschedulable = true
			res = Plan(Input{Policy: p, Nodes: nodes, Now: later})
			apply(p, nodes, res)
			require.True(t, rrNames(res)[rr.Name].Draining)
			require.Empty(t, rr.Annotations[AnnotationDrainingReason])
			rr.Spec.Unschedulable = false
			res = Plan(Input{Policy: p, Nodes: nodes, Now: later.Add(time.Minute)})
			require.True(t, rrNames(res)[rr.Name].Draining, "a cordon's drain is not taken back")
		})
	}
}
