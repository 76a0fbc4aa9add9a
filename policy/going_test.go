package policy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

func TestValidateGoingSignals(t *testing.T) {
	many := make([]v1alpha1.NodeMark, 33)
	for i := range many {
		many[i] = v1alpha1.NodeMark{Key: "example.com/going"}
	}
	for _, tc := range []struct {
		name string
		in   *v1alpha1.GoingSignals
		want []string // each error's "field: substring", in order; none when valid
	}{
		{"none", nil, nil},
		{"key alone and key with value", &v1alpha1.GoingSignals{Taints: []v1alpha1.NodeMark{{Key: "example.com/retire"}},
			Labels: []v1alpha1.NodeMark{{Key: "lifecycle", Value: "retiring"}}}, nil},
		{"empty key", &v1alpha1.GoingSignals{Taints: []v1alpha1.NodeMark{{Value: "x"}}}, []string{"spec.goingSignals.taints[0].key: Required value"}},
		{"bad key", &v1alpha1.GoingSignals{Labels: []v1alpha1.NodeMark{{Key: "a/b/c"}}}, []string{"spec.goingSignals.labels[0].key: Invalid value: \"a/b/c\""}},
		{"bad value", &v1alpha1.GoingSignals{Labels: []v1alpha1.NodeMark{{Key: "k", Value: "not ok"}}}, []string{"spec.goingSignals.labels[0].value: Invalid value: \"not ok\""}},
		{"too many taints", &v1alpha1.GoingSignals{Taints: many}, []string{"spec.goingSignals.taints: Too many: 33: must have at most 32 items"}},
		{"taints before labels", &v1alpha1.GoingSignals{Labels: []v1alpha1.NodeMark{{}}, Taints: []v1alpha1.NodeMark{{}}},
			[]string{"spec.goingSignals.taints[0].key: Required", "spec.goingSignals.labels[0].key: Required"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := validateGoingSignals(tc.in, field.NewPath("spec", "goingSignals"))
			require.Len(t, errs, len(tc.want), "%v", errs)
			for i, w := range tc.want {
				assert.True(t, strings.HasPrefix(errs[i].Error(), w) || strings.Contains(errs[i].Error(), w), "error %d: %q, want %q", i, errs[i].Error(), w)
			}
			// Validate reports the same errors for the spec.
			p := Default("p")
			p.Spec.GoingSignals = tc.in
			assert.Equal(t, errs, Validate(p))
		})
	}
}

func TestResolveGoingAndProtection(t *testing.T) {
	f := false
	for _, tc := range []struct {
		name        string
		spec        v1alpha1.RouteReflectorPolicySpec
		wantGoing   []string
		wantProtect bool
	}{
		{"defaults: the built-in signals, protection on", v1alpha1.RouteReflectorPolicySpec{},
			[]string{"taint ToBeDeletedByClusterAutoscaler", "taint karpenter.sh/disrupted", "taint karpenter.sh/disruption=disrupting",
				"label karpenter.sh/disruption=disrupting", "taint node.kubernetes.io/out-of-service"}, true},
		{"the spec's after the built-in ones, protection off", v1alpha1.RouteReflectorPolicySpec{ProtectRouteReflectors: &f,
			GoingSignals: &v1alpha1.GoingSignals{Taints: []v1alpha1.NodeMark{{Key: "example.com/retire"}}, Labels: []v1alpha1.NodeMark{{Key: "lifecycle", Value: "retiring"}}}},
			[]string{"taint ToBeDeletedByClusterAutoscaler", "taint karpenter.sh/disrupted", "taint karpenter.sh/disruption=disrupting",
				"label karpenter.sh/disruption=disrupting", "taint node.kubernetes.io/out-of-service", "taint example.com/retire", "label lifecycle=retiring"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Default("p")
			p.Spec = tc.spec
			r := MustResolve(p)
			var got []string
			for _, g := range r.Going {
				got = append(got, g.String())
			}
			assert.Equal(t, tc.wantGoing, got)
			assert.Equal(t, tc.wantProtect, r.Protect)
		})
	}
}
