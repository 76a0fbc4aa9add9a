package reconciler

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// TestReplanDoesNotHoldPromotionsAtFirst: an admission during a plan promotes a node into the gap
// the plan fills with another (a conflict), so the plan is computed again; an admission during that
// second plan, into another zone's gap, is still promoted (promotions are held only from the third
// plan on), and the second plan commits with it.
func TestReplanDoesNotHoldPromotionsAtFirst(t *testing.T) {
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.Topology = &v1alpha1.Topology{Type: v1alpha1.SingleCluster}
		s.MinRouteReflectors, s.MaxRouteReflectors = ptrTo(int32(1)), ptrTo(int32(2))
	}, nil)
	h.reconcile() // an empty plan, whose state admissions decide on
	// A node that joined while the webhooks were down: the next plan promotes it.
	require.NoError(t, h.client.Create(context.Background(), node("node-0", "zone-a", 0)))

	var during []extender.AdmitAnswer
	h.r.Ledger.Drills = func(extender.Input, *extender.Result) ([]extender.Drill, error) {
		if k := len(during) + 1; k <= 2 {
			zone := map[int]string{1: "zone-a", 2: "zone-b"}[k]
			_, ans, _ := h.r.Ledger.AdmitNode(h.r.Policies, state.NodeAdmission{Node: extender.FromNode(node(fmt.Sprintf("join-%d", k), zone, 10+k)), Now: h.now})
			during = append(during, ans)
		}
		return nil, nil
	}
	conflicts := func() float64 { return testutil.ToFloat64(plansTotal.WithLabelValues(h.policyNm, "conflict")) }
	before := conflicts()
	h.reconcile()

	require.Len(t, during, 2, "plans computed")
	require.Equal(t, extender.AdmitRouteReflector, during[0].Role, "join-1, during the first plan: %+v", during[0])
	require.Equal(t, 1.0, conflicts()-before, "the first plan promoted node-0 into join-1's gap")
	require.False(t, during[1].Held, "join-2 was held during the second plan: %+v", during[1])
	require.Equal(t, extender.AdmitRouteReflector, during[1].Role, "join-2, during the second plan: %+v", during[1])
	rrs := map[string]bool{}
	for _, rr := range h.r.last[h.policyNm].RouteReflectors {
		rrs[rr.Node] = true
	}
	require.Equal(t, map[string]bool{"join-1": true}, rrs, "the second plan keeps join-1 (it saw it), not node-0")
}
