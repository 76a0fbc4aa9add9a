package extender

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

func TestHealthNeutral(t *testing.T) {
	// Steps: up to 28 healthy nodes 3 route reflectors, more 4; a zone of 1 to 28 wants 3.
	p := resolve(t, v1alpha1.RouteReflectorPolicySpec{
		Scaling: &v1alpha1.Scaling{Steps: []v1alpha1.Step{{MaxNodes: 28, RouteReflectors: 3}, {MaxNodes: 1000, RouteReflectors: 4}}},
	})
	counts := func(total int, zones ...int) HealthCounts {
		h := HealthCounts{Total: total, ByZone: map[string]int{}}
		for i, n := range zones {
			h.ByZone[string(rune('a'+i))] = n
		}
		return h
	}
	before := counts(30, 10, 10, 10)
	for _, c := range []struct {
		name  string
		after HealthCounts
		want  bool
	}{
		{"unchanged", counts(30, 10, 10, 10), true},
		{"one NotReady, the same desired counts", counts(29, 9, 10, 10), true},
		{"the whole policy's desired count changes", counts(28, 9, 9, 10), false},
		{"a zone without a healthy node", counts(30, 0, 20, 10), false},
		{"a zone's desired count changes", counts(30, 10, 10, 29), false},
		{"a zone more", counts(30, 10, 10, 10, 0), false},
		{"a zone less", counts(30, 15, 15), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, HealthNeutral(p, before, c.after))
		})
	}
}
