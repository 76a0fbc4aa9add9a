package reconciler

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// TestEventsAdmittedPromotions: route reflectors the previous plan did not have were promoted at
// admission. One the plan keeps is reported Promoted with the plan's reason; one the plan drains at
// once (an admission counted more nodes than the plan read) is reported Promoted, then Draining,
// and both before the reconcile's own changes, so that no Draining lacks its Promoted.
func TestEventsAdmittedPromotions(t *testing.T) {
	resolved := policy.MustResolve(policy.Default("default"))
	node := func(name string) *extender.Node {
		return &extender.Node{ObjectMeta: extender.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelTopologyZone: "zone-a"}}}
	}
	for _, tc := range []struct {
		name    string
		changes []RoleChange // the reconcile's own
		want    []string
	}{
		{"the plan's drain is among the reconcile's changes", []RoleChange{{Node: "c", Kind: KindDraining, Message: "Draining: not needed (2 route reflectors desired); clients moving to a"}}, []string{
			"Normal RouteReflectorPromoted Promoted to route reflector: zone zone-a below desired 2 (at admission)",
			"Normal RouteReflectorPromoted Promoted to route reflector (at admission)",
			"Normal RouteReflectorDraining Draining: not needed (2 route reflectors desired); clients moving to a",
		}},
		{"the plan's drain is not", nil, []string{
			"Normal RouteReflectorPromoted Promoted to route reflector: zone zone-a below desired 2 (at admission)",
			"Normal RouteReflectorPromoted Promoted to route reflector (at admission)",
			"Normal RouteReflectorDraining Draining: not needed (2 route reflectors desired); clients moving to a, b",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := record.NewFakeRecorder(20)
			r := &Reconciler{Recorder: rec}
			st := &State{Name: "default", Policy: &v1alpha1.RouteReflectorPolicy{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, Managed: state.Managed{Resolved: resolved},
				Previous: &PreviousPlan{RouteReflectors: []extender.RouteReflector{{Node: "a"}}},
				Result: &extender.Result{
					RouteReflectors: []extender.RouteReflector{{Node: "a", Zone: "zone-a"}, {Node: "b", Zone: "zone-a"}, {Node: "c", Zone: "zone-a", Draining: true}},
					Zones:           []extender.ZoneCount{{Zone: "zone-a", Desired: 2}},
					Summary:         extender.Summary{DesiredRouteReflectors: 2},
				},
				View:    map[string]*extender.Node{"a": node("a"), "b": node("b"), "c": node("c")},
				Changes: tc.changes,
			}
			require.NoError(t, r.events(context.Background(), st))
			close(rec.Events)
			var onNodes []string
			for e := range rec.Events {
				// Type, reason, message; the policy's Event repeats the node's after its name ("c: ").
				if f := strings.SplitN(e, " ", 4); len(f) == 4 && !slices.Contains([]string{"a:", "b:", "c:"}, f[2]) {
					onNodes = append(onNodes, e)
				}
			}
			require.Equal(t, tc.want, onNodes)
		})
	}
}
