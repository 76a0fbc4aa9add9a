package policy_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoselector"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// TestCalicoNodeSelector: the policy's nodeSelector in Calico's syntax selects exactly the nodes
// the Kubernetes selector does, checked with Calico's own parser on a set of label maps.
func TestCalicoNodeSelector(t *testing.T) {
	nodes := []map[string]string{
		{}, {"pool": "a"}, {"pool": "b"}, {"pool": "c", "tier": "edge"}, {"tier": "core"},
		{"example.com/gpu": "true", "pool": "a"}, {"pool": "a", "tier": "edge"},
	}
	for _, tc := range []struct {
		name string
		sel  *metav1.LabelSelector
		want string
	}{
		{"nil", nil, "all()"},
		{"empty", &metav1.LabelSelector{}, "all()"},
		{"matchLabels", &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}, "pool == 'a'"},
		{"in", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: metav1.LabelSelectorOpIn, Values: []string{"b", "a"}}}}, "pool in {'a', 'b'}"},
		{"notIn", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"a"}}}}, "pool not in {'a'}"},
		{"exists and not", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "example.com/gpu", Operator: metav1.LabelSelectorOpExists}, {Key: "tier", Operator: metav1.LabelSelectorOpDoesNotExist}}},
			"has(example.com/gpu) && !has(tier)"},
		{"labels and expressions", &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"edge"}}}},
			"pool == 'a' && tier in {'edge'}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := policy.Default("p")
			p.Spec.NodeSelector = tc.sel
			r, errs := policy.Resolve(p)
			require.Empty(t, errs, "Resolve: %v", errs.ToAggregate())
			got := r.CalicoNodeSelector()
			require.Equal(t, tc.want, got)
			cs, err := calicoselector.Parse(got)
			require.NoError(t, err, "Calico does not parse %q", got)
			for _, l := range nodes {
				k8s, calico := r.NodeSelector.Matches(labels.Set(l)), cs.Matches(l)
				require.Equal(t, k8s, calico, "%v: Kubernetes selector (expected) vs Calico's %q (actual)", l, got)
			}
		})
	}
}
