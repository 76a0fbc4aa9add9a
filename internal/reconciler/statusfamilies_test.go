package reconciler

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// TestStatusFamilies: the policy status's route figures, its failed drills and the Resilient
// condition read the plan's drills per address family (bgpmodel.PlanDrills, the reconciler's
// DrillFunc) when its nodes have IPv6 addresses: a plan whose drills pass in IPv4 (and
// family-blind) but fail in IPv6 is not Resilient.
func TestStatusFamilies(t *testing.T) {
	withAddrs := func(n *corev1.Node, i int, v6 bool) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[extender.AnnotationCalicoIPv4] = fmt.Sprintf("10.0.0.%d/24", i+1)
		if v6 {
			n.Annotations[extender.AnnotationCalicoIPv6] = fmt.Sprintf("fd00::%x/64", i+1)
		}
	}
	for _, tc := range []struct {
		name string
		dual bool // every node dual-stack from the start
		// turned: after the first plan (IPv4), every client gets an IPv6 address and is cordoned:
		// the IPv4-only route reflectors stay (nothing else is eligible) and reflect nothing in IPv6.
		turned       bool
		families     []string // the status's routes.families
		resilient    metav1.ConditionStatus
		message      string
		failedFamily string
	}{
		{name: "IPv4 cluster: family-blind, as before", resilient: metav1.ConditionTrue,
			message: "every node keeps every route after the loss of any of 3 zones and of any of 3 route reflectors"},
		{name: "dual-stack cluster: both families pass", dual: true, families: []string{"IPv4", "IPv6"}, resilient: metav1.ConditionTrue,
			message: "every node keeps every route after the loss of any of 3 zones and of any of 3 route reflectors, in IPv4 and IPv6"},
		{name: "IPv4-only route reflectors of dual-stack clients: IPv4 passes, IPv6 fails", turned: true, families: []string{"IPv4", "IPv6"},
			resilient: metav1.ConditionFalse, message: "missing in IPv6", failedFamily: "IPv6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := cluster(9)
			for i, n := range nodes {
				withAddrs(n, i, tc.dual)
			}
			h := newHarness(t, nil, nodes)
			h.r.Ledger.Drills = bgpmodel.PlanDrills
			h.reconcile()
			h.reconcile()
			if tc.turned {
				rrs := h.rrs()
				require.Len(t, rrs, 3)
				for i := range 9 {
					name := fmt.Sprintf("node-%02d", i)
					if _, rr := rrs[name]; !rr {
						h.update(name, func(n *corev1.Node) { withAddrs(n, i, true); n.Spec.Unschedulable = true })
					}
				}
				h.reconcile()
				h.reconcile()
				require.Equal(t, rrs, h.rrs(), "the IPv4-only route reflectors stay")
			}
			st := h.status()
			require.NotNil(t, st.Routes)
			var fams []string
			for _, f := range st.Routes.Families {
				fams = append(fams, f.Family)
			}
			assert.Equal(t, tc.families, fams)
			// The drill metrics per family: each family's worst drill of each kind, positive in
			// the failing family only; the family figures' missing pairs when there are families.
			metricFams := tc.families
			if metricFams == nil {
				metricFams = []string{"IPv4"}
			}
			worst, fails, famMissing := seriesOf(t, drillMissing, h.policyNm), seriesOf(t, drillsGauge, h.policyNm), seriesOf(t, familyMissingPairsGauge, h.policyNm)
			assert.Len(t, worst, 2*len(metricFams), "%v", worst)
			assert.Len(t, famMissing, len(tc.families), "%v", famMissing)
			for _, f := range metricFams {
				if f == tc.failedFamily {
					// Its route reflectors have no IPv6 address: no route reflector drill runs in IPv6.
					assert.Positive(t, worst[f+"/"+extender.DrillZone], "%s: %v", f, worst)
					assert.Positive(t, fails[f+"/"+extender.DrillZone+"/fail"], "%s: %v", f, fails)
				}
				for _, kind := range []string{extender.DrillZone, extender.DrillRouteReflector} {
					if f != tc.failedFamily {
						assert.Zero(t, worst[f+"/"+kind], "%s %s: %v", f, kind, worst)
						assert.Zero(t, fails[f+"/"+kind+"/fail"], "%s %s: %v", f, kind, fails)
						assert.Positive(t, fails[f+"/"+kind+"/pass"], "%s %s: %v", f, kind, fails)
					}
				}
				if tc.families != nil {
					assert.Equal(t, f == tc.failedFamily, famMissing[f] > 0, "%s: %v", f, famMissing)
				}
			}
			c := meta.FindStatusCondition(st.Conditions, ConditionResilient)
			require.NotNil(t, c)
			assert.Equal(t, tc.resilient, c.Status, c.Message)
			assert.Contains(t, c.Message, tc.message)
			if tc.failedFamily == "" {
				assert.Empty(t, st.Routes.FailedDrills)
				assert.Equal(t, 6, st.Routes.DrillsRun, "each zone and each route reflector once, whatever the families")
				return
			}
			require.NotEmpty(t, st.Routes.FailedDrills)
			for _, d := range st.Routes.FailedDrills {
				assert.Equal(t, tc.failedFamily, d.Family, "%+v", d)
			}
			var v4, v6 v1alpha1.FamilyRouteCost
			for _, f := range st.Routes.Families {
				if f.Family == "IPv4" {
					v4 = f
				} else {
					v6 = f
				}
			}
			assert.Zero(t, v4.MissingPairs, "%+v", v4)
			assert.Equal(t, 9, v4.Nodes)
			assert.Equal(t, 6, v6.Nodes)
			assert.Positive(t, v6.MissingPairs, "the dual-stack clients learn nothing in IPv6: %+v", v6)
			assert.Zero(t, st.Routes.MissingPairs, "family-blind, the plan misses nothing")
		})
	}
}
