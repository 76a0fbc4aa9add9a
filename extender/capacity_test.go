package extender

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

func TestStableCapacityScore(t *testing.T) {
	p := resolve(t, v1alpha1.RouteReflectorPolicySpec{})
	s := NewStableCapacity()
	for _, tc := range []struct {
		name   string
		opts   []nodeOpt
		reason ScoreReason
		detail string
	}{
		{"on-demand", nil, "", ""},
		{"Karpenter on-demand", []nodeOpt{label("karpenter.sh/capacity-type", "on-demand")}, "", ""},
		{"Karpenter spot", []nodeOpt{label("karpenter.sh/capacity-type", "spot")}, ScoreReasonSpot, "label karpenter.sh/capacity-type=spot"},
		{"EKS spot", []nodeOpt{label("eks.amazonaws.com/capacityType", "SPOT")}, ScoreReasonSpot, "label eks.amazonaws.com/capacityType=SPOT"},
		{"EKS on-demand", []nodeOpt{label("eks.amazonaws.com/capacityType", "ON_DEMAND")}, "", ""},
		{"GKE spot", []nodeOpt{label("cloud.google.com/gke-spot", "true")}, ScoreReasonSpot, "label cloud.google.com/gke-spot=true"},
		{"GKE preemptible", []nodeOpt{label("cloud.google.com/gke-preemptible", "true")}, ScoreReasonSpot, "label cloud.google.com/gke-preemptible=true"},
		{"AKS spot", []nodeOpt{label("kubernetes.azure.com/scalesetpriority", "spot")}, ScoreReasonSpot, "label kubernetes.azure.com/scalesetpriority=spot"},
		{"AKS regular", []nodeOpt{label("kubernetes.azure.com/scalesetpriority", "regular")}, "", ""},
		{"cluster-autoscaler's deletion candidate", []nodeOpt{taint(corev1.Taint{Key: policy.TaintDeletionCandidateOfClusterAutoscaler, Value: "1700000000", Effect: corev1.TaintEffectPreferNoSchedule})},
			ScoreReasonDeletionCandidate, "taint DeletionCandidateOfClusterAutoscaler"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := NewNodeInfo(node("n", "a", 0, tc.opts...), p)
			r, d := s.Explain(p, n)
			assert.Equal(t, tc.reason, r)
			assert.Equal(t, tc.detail, d)
			want := int64(1)
			if tc.reason != "" {
				want = 0
			}
			assert.Equal(t, want, s.Score(p, n))
		})
	}
}

// spotFirst labels the first k nodes (the oldest: cluster creates them a minute apart) spot.
func spotFirst(nodes []*Node, k int) map[string]bool {
	spot := map[string]bool{}
	for _, n := range nodes[:k] {
		with(n, label("karpenter.sh/capacity-type", "spot"))
		spot[n.Name] = true
	}
	return spot
}

// allSpotClients returns the clients whose route reflectors are all spot.
func allSpotClients(r *Result, spot map[string]bool) []string {
	var out []string
	for _, c := range r.Clients {
		all := len(c.RouteReflectors) > 0
		for _, rr := range c.RouteReflectors {
			all = all && spot[rr]
		}
		if all {
			out = append(out, c.Node)
		}
	}
	return out
}

// TestSpotNeverAllOfAClientsRouteReflectors: the cluster (30 nodes, 3 zones, the 15
// oldest spot) in every topology, and DualPlane with racks: no client's route reflectors are all
// spot, where NodeAge alone picks the oldest (spot) nodes. The guarantee: each place a topology
// fills (a zone's share, a rack's plane, the spine) takes its best-ranked free node, so a rack
// (DualPlane, Hierarchical) or a zone (SingleCluster) with an eligible on-demand node gets one
// among the route reflectors picked in one plan; MultiCluster's clients peer across zones. A
// score, not a filter: an all-spot cluster gets its route reflectors, and spot labels added
// later move none (CurrentRole first).
func TestSpotNeverAllOfAClientsRouteReflectors(t *testing.T) {
	now := t0.Add(24 * time.Hour)
	rack := int32(5)
	for _, tc := range []struct {
		name string
		spec v1alpha1.RouteReflectorPolicySpec
		n    int
	}{
		{"DualPlane, one rack (the default layout)", v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{Type: v1alpha1.DualPlane}}, 30},
		{"DualPlane, racks of 5", v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: &rack}}, 30},
		{"DualPlane, 300 nodes, racks of 5", v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: &rack}}, 300},
		{"MultiCluster", v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{Type: v1alpha1.MultiCluster}}, 30},
		{"SingleCluster", v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{Type: v1alpha1.SingleCluster}}, 30},
		{"Hierarchical", v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{Type: v1alpha1.Hierarchical}}, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := resolve(t, tc.spec)
			nodes := cluster(tc.n, 3)
			plain := Plan(Input{Policy: p, Nodes: nodes, Now: now})
			spot := spotFirst(nodes, tc.n/2)
			require.NotEmpty(t, allSpotClients(plain, spot), "without the score the oldest (spot) nodes are picked: the test would prove nothing")

			r := Plan(Input{Policy: p, Nodes: nodes, Now: now})
			require.NotEmpty(t, r.RouteReflectors)
			assert.Empty(t, allSpotClients(r, spot), "clients whose route reflectors are all spot")
			assert.Equal(t, Plan(Input{Policy: p, Nodes: nodes, Now: now}), r, "deterministic")
			down := 0
			for _, s := range r.ScoredDown {
				require.True(t, spot[s.Node], s.Node)
				assert.Equal(t, StableCapacityName, s.Score)
				assert.Equal(t, ScoreReasonSpot, s.Reason)
				down++
			}
			assert.Equal(t, tc.n/2, down, "every spot node is listed as scored down")
		})
	}
	t.Run("all spot still gets route reflectors", func(t *testing.T) {
		p := resolve(t, v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{Type: v1alpha1.DualPlane}})
		nodes := cluster(30, 3)
		spotFirst(nodes, 30)
		r := Plan(Input{Policy: p, Nodes: nodes, Now: now})
		assert.Equal(t, 2, r.Summary.RouteReflectors)
		assert.False(t, r.Summary.Degraded)
	})
	t.Run("spot labels added later move no route reflector", func(t *testing.T) {
		p := resolve(t, v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{Type: v1alpha1.DualPlane}})
		nodes := cluster(30, 3)
		first := Plan(Input{Policy: p, Nodes: nodes, Now: now})
		apply(p, nodes, first)
		spotFirst(nodes, 15)
		r := Plan(Input{Policy: p, Nodes: nodes, Now: now})
		assert.Equal(t, fmt.Sprint(rrNames(first)), fmt.Sprint(rrNames(r)))
	})
}
