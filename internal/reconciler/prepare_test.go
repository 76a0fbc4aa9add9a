package reconciler

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// TestFirstReconcileAdoptsPreparedPlan: a new leader's first reconcile commits the plan Prepare
// computed before it led, when nothing the planner reads changed since, and that plan is the one
// the first reconcile of a leader without it computes (the same roles, no write); after a node
// changed in between, the first reconcile plans again and sees the change.
func TestFirstReconcileAdoptsPreparedPlan(t *testing.T) {
	for _, topo := range []v1alpha1.TopologyType{v1alpha1.DualPlane, v1alpha1.MultiCluster} {
		t.Run(string(topo), func(t *testing.T) {
			var nodes []*corev1.Node
			for i := range 60 {
				nodes = append(nodes, node(fmt.Sprintf("node-%05d", i), fmt.Sprintf("zone-%c", 'a'+i%3), i))
			}
			h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
				s.Topology = &v1alpha1.Topology{Type: topo}
			}, nodes)
			for range 4 {
				h.now = h.now.Add(20 * time.Second)
				h.reconcile()
			}
			h.now = h.now.Add(time.Minute)
			// restart is the reconciler of a new process on the same stores, its ledger not leading yet.
			restart := func() *Reconciler {
				l := state.NewLedger(0, func() time.Time { return h.now })
				return &Reconciler{Client: h.client, Nodes: h.r.Nodes, Policies: h.r.Policies, Ledger: l,
					Recorder: h.rec, PeerAPI: h.r.PeerAPI, Now: h.r.Now}
			}
			first := func(r *Reconciler) {
				t.Helper()
				r.Ledger.SetLeader(true)
				_, err := r.Reconcile(context.Background(), request(h.policyNm))
				require.NoError(t, err)
			}
			h.sync()
			plain := restart()
			first(plain)

			prepared := restart()
			prepared.Prepare(context.Background())
			h.now = h.now.Add(2 * time.Second) // the version read
			patches := len(h.nodePatches)
			before := testutil.ToFloat64(plansPrepared.WithLabelValues(h.policyNm))
			first(prepared)
			require.Equal(t, before+1, testutil.ToFloat64(plansPrepared.WithLabelValues(h.policyNm)), "the prepared plan is committed")
			require.Len(t, h.nodePatches, patches, "a settled cluster: no write")
			got, want := prepared.last[h.policyNm], plain.last[h.policyNm]
			require.Equal(t, want.Nodes, got.Nodes, "the roles of a first plan computed after the lead")
			require.Equal(t, want.RouteReflectors, got.RouteReflectors)
			require.Equal(t, 0, len(prepared.prepared), "taken")

			changed := restart()
			changed.Prepare(context.Background())
			h.update("node-00007", func(n *corev1.Node) { n.Labels[corev1.LabelTopologyZone] = "zone-z" })
			h.sync()
			before = testutil.ToFloat64(plansPrepared.WithLabelValues(h.policyNm))
			first(changed)
			require.Equal(t, before, testutil.ToFloat64(plansPrepared.WithLabelValues(h.policyNm)), "a node changed: planned again")
			require.True(t, slices.ContainsFunc(changed.last[h.policyNm].Zones, func(z extender.ZoneCount) bool { return z.Zone == "zone-z" }),
				"the plan sees the change")
		})
	}
}
