package reconciler

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// TestBGPHealthRouteReflectorsOfAClientDownAtOnce (issue 52, item 4; calico#9259): every route
// reflector of a client reported with no Established session (their BIRDs stopped, the Nodes
// Ready) is replaced in the first reconcile that reads it, without bgpHealth.gracePeriod (2 min
// here), all of them in that one plan, the Event saying why; with one of them still up, the grace
// applies as before. It is the fast case of test/transitions' TestTwoRouteReflectorsLostOnRealBIRDLarge.
func TestBGPHealthRouteReflectorsOfAClientDownAtOnce(t *testing.T) {
	for _, allDown := range []bool{true, false} {
		t.Run(map[bool]string{true: "all down", false: "one still up"}[allDown], func(t *testing.T) {
			on := true
			h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
				s.BGPHealth = &v1alpha1.BGPHealth{Enabled: &on, GracePeriod: &metav1.Duration{Duration: 2 * time.Minute}}
				s.Behavior = &v1alpha1.Behavior{ScaleDown: &v1alpha1.ScaleDown{StabilizationWindowSeconds: ptr(int32(0))}}
			}, dualCluster(12))
			h.r.Ledger.BGPHealth = h.r.BGPHealthRecords
			h.reconcile()
			h.reconcile()
			before := h.rrs()
			require.GreaterOrEqual(t, len(before), 3)
			// Settled: every session up, past the new route reflectors' settle time.
			allUp := func(string, string, extender.Families) bool { return true }
			start := h.now
			for h.now.Sub(start) <= idSettleMax {
				h.now = h.now.Add(5 * time.Second)
				h.calicoNodeBy(allUp)
				h.reconcile()
			}
			h.events()
			// A client and its route reflectors.
			var client string
			var set []string
			for _, n := range h.nodes() {
				if a := n.Annotations[extender.AnnotationRouteReflectors]; a != "" && client == "" {
					client, set = n.Name, strings.Split(a, ",")
				}
			}
			require.NotEmpty(t, client)
			require.GreaterOrEqual(t, len(set), 2, "%s's route reflectors", client)
			down := slices.Clone(set)
			if !allDown {
				down = down[1:]
			}
			h.calicoNodeBy(func(rr, peer string, _ extender.Families) bool {
				return !slices.Contains(down, rr) && !slices.Contains(down, peer)
			})
			h.now = h.now.Add(time.Second)
			h.reconcile()
			for _, rr := range set {
				drained := h.node(rr).Annotations[extender.AnnotationDrainingSince] != ""
				want := allDown
				require.Equalf(t, want, drained, "%s (of %s's %v, down %v) draining in the first reconcile; route reflectors %v", rr, client, set, down, h.rrs())
				if want {
					require.Equal(t, extender.DrainingReasonBGPDown, h.node(rr).Annotations[extender.AnnotationDrainingReason])
				}
			}
			ev := strings.Join(h.events(), "\n")
			if allDown {
				require.Contains(t, ev, "without waiting for bgpHealth.gracePeriod", "events:\n%s", ev)
				// The replacements were promoted in the same plan, and the client peers with one.
				after := h.rrs()
				require.Greater(t, len(after), len(before), "replacements promoted: %v", slices.Sorted(maps.Keys(after)))
				now := strings.Split(h.node(client).Annotations[extender.AnnotationRouteReflectors], ",")
				require.True(t, slices.ContainsFunc(now, func(rr string) bool { return !slices.Contains(set, rr) }),
					"%s peers with no new route reflector: %v", client, now)
			} else {
				require.NotContains(t, ev, "RouteReflectorBGPDown", "within gracePeriod")
			}
		})
	}
}
