package reconciler

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"weak"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// TestPreviousPlanNotHeldThroughStatus: once a reconcile's plan step has replaced the policy's
// previous plan, nothing holds the previous result: not the reconcile (only its route reflectors,
// for the events step), not the quiet plan that absorbed events (retired to its node count when
// the full plan began). So the status step's graph model (the route cost, 37 MB at 65,000 nodes)
// does not run with the previous plan still live beside the new one.
func TestPreviousPlanNotHeldThroughStatus(t *testing.T) {
	var nodes []*corev1.Node
	for i := range 30 {
		nodes = append(nodes, node(fmt.Sprintf("node-%02d", i), fmt.Sprintf("zone-%c", 'a'+i%3), i))
	}
	h := newHarness(t, nil, nodes)
	// Settled: the last plan is quiet, kept to absorb node events (its view and result).
	for range 3 {
		h.reconcile()
	}
	require.NotNil(t, h.r.last[h.policyNm], "the first plan")
	q := h.r.quiet[h.policyNm]
	require.True(t, q != nil && !q.retired && q.result == h.r.last[h.policyNm], "the last plan is the quiet plan")
	q = nil
	prev := weak.Make(h.r.last[h.policyNm])
	prevRRs := len(h.r.last[h.policyNm].RouteReflectors)

	var collected, checked bool
	var seen *PreviousPlan
	steps := h.r.Steps()
	for i, s := range steps {
		if s.Name == "status" {
			check := Step{Name: "check", Run: func(_ context.Context, st *State) error {
				runtime.GC()
				runtime.GC()
				collected, checked, seen = prev.Value() == nil, true, st.Previous
				return nil
			}}
			steps = append(steps[:i], append([]Step{check}, steps[i:]...)...)
			break
		}
	}
	h.r.steps = steps
	h.editPolicy(func(s *v1alpha1.RouteReflectorPolicySpec) { s.MinRouteReflectors = ptrTo(int32(4)) })
	h.reconcile()
	require.True(t, checked, "the check step ran")
	require.NotNil(t, seen, "the reconcile kept the previous plan's route reflectors")
	require.Len(t, seen.RouteReflectors, prevRRs)
	require.NotSame(t, h.r.last[h.policyNm], prev.Value(), "a new plan replaced the first")
	require.True(t, collected, "the previous plan's result was still live when the status step began")
}
