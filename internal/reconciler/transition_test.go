package reconciler

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// TestReconcileTransitionEvent: a cordoned route reflector's replacement is a plan that sets a
// cluster ID; the transition step models it on the cluster as it is and says in an Event how many
// sessions restart and that no pair between nodes that keep their role is at risk (the surviving
// route reflectors keep their IDs). A plan that changes no cluster ID says nothing.
func TestReconcileTransitionEvent(t *testing.T) {
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.RemovalDelay = &metav1.Duration{Duration: 2 * time.Second}
	}, cluster(30))
	h.reconcile()
	h.reconcile()
	h.events()
	h.update("node-05", func(n *corev1.Node) { n.Labels["unrelated"] = "x" })
	h.reconcile()
	for _, e := range h.events() {
		require.NotContains(t, e, EventTransition, "a plan that changes no cluster ID")
	}
	var rr string
	for n := range h.rrs() {
		if rr == "" || n < rr {
			rr = n
		}
	}
	h.update(rr, func(n *corev1.Node) { n.Spec.Unschedulable = true })
	h.reconcile()
	var got []string
	for _, e := range h.events() {
		if strings.Contains(e, EventTransition) {
			got = append(got, e)
		}
	}
	require.Len(t, got, 1, "one transition Event for the replacement")
	require.Contains(t, got[0], "Normal")
	require.Contains(t, got[0], "BGP sessions restart")
	require.Contains(t, got[0], ", 0 between nodes that keep their role", got[0])
	t.Log(got[0])
}
