package policy

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

func TestLabelKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec func(*v1alpha1.RouteReflectorPolicySpec)
		want []string
	}{
		{"defaults", nil, []string{DefaultRouteReflectorLabelKey, DefaultZoneLabel}},
		{"selectors, rack and label", func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}
			s.PreferredNodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpExists}}}
			s.ForbiddenNodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"gpu": "true", "pool": "b"}}
			s.ZoneLabel = "zone"
			s.RouteReflectorLabel = &v1alpha1.Label{Key: "rr", Value: "yes"}
			s.Topology = &v1alpha1.Topology{Type: v1alpha1.Hierarchical, RackLabel: "rack"}
		}, []string{"gpu", "pool", "rack", "rr", "tier", "zone"}},
		{"going labels", func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.GoingSignals = &v1alpha1.GoingSignals{Labels: []v1alpha1.NodeMark{{Key: "example.com/retiring"}},
				Taints: []v1alpha1.NodeMark{{Key: "example.com/draining-taint"}}}
		}, []string{DefaultRouteReflectorLabelKey, "example.com/retiring", DefaultZoneLabel}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Default("p")
			if tc.spec != nil {
				tc.spec(&p.Spec)
			}
			// Every policy reads the built-in going label and the spot labels; a going taint's key is
			// not a label key.
			want := append(slices.Clone(tc.want), KeyKarpenterDisruption)
			for _, m := range SpotLabels() {
				want = append(want, m.Key)
			}
			slices.Sort(want)
			require.Equal(t, want, MustResolve(p).LabelKeys(), "LabelKeys()")
		})
	}
}
