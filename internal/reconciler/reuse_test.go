package reconciler

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv/nodetest"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// TestReusedPlanIsFullPlan: a plan the reconciler reuses (state.Ledger.Reuse: nothing the planner
// reads changed since the last plan) is the plan a full computation gives for the same cluster at
// the same time, after each kind of change: a join, a client and a route reflector NotReady, a
// label a policy reads, a deletion, and the clock alone. After each change the reconciler plans
// whole (the change is seen), then reuses its plan once the cluster shows what it wrote; every
// reused plan is compared with a plan computed from scratch (a new ledger, the same cache, the
// same stabilization history). The clock moves 20 s per reconcile.
func TestReusedPlanIsFullPlan(t *testing.T) {
	type change struct {
		name string
		do   func(h *harness)
		// seen: the reconcile right after the change plans whole (the clock alone may not
		// change the plan).
		seen bool
	}
	firstClient := func(h *harness) string {
		nodes := h.r.Nodes.List()
		slices.SortFunc(nodes, func(a, b *extender.Node) int { return strings.Compare(a.Name, b.Name) })
		for _, n := range nodes {
			if _, rr := n.Labels["calico-route-reflector"]; !rr && n.Labels["tier"] == "" && extender.IsReady(n) {
				return n.Name
			}
		}
		require.FailNow(h.t, "no client")
		return ""
	}
	someRR := func(h *harness) string {
		rrs := slices.Sorted(maps.Keys(h.rrs()))
		require.NotEmpty(h.t, rrs)
		return rrs[0]
	}
	notReady := func(h *harness, name string) {
		n := h.node(name)
		nodetest.NotReadySince(h.now)(n)
		require.NoError(h.t, h.client.Status().Update(context.Background(), n))
	}
	changes := []change{
		{"join", func(h *harness) {
			require.NoError(h.t, h.client.Create(context.Background(), node("node-joined", "zone-b", 500)))
		}, true},
		{"client NotReady", func(h *harness) { notReady(h, firstClient(h)) }, true},
		{"route reflector NotReady", func(h *harness) { notReady(h, someRR(h)) }, true},
		{"preferred label", func(h *harness) {
			h.update(firstClient(h), func(n *corev1.Node) { n.Labels["tier"] = "edge" })
		}, true},
		{"zone label", func(h *harness) {
			h.update(firstClient(h), func(n *corev1.Node) {
				z := "zone-c"
				if n.Labels[corev1.LabelTopologyZone] == z {
					z = "zone-a"
				}
				n.Labels[corev1.LabelTopologyZone] = z
			})
		}, true},
		{"deletion", func(h *harness) {
			n := h.node(firstClient(h))
			require.NoError(h.t, h.client.Delete(context.Background(), n))
		}, true},
		{"route reflector deleted", func(h *harness) {
			n := h.node(someRR(h))
			require.NoError(h.t, h.client.Delete(context.Background(), n))
		}, true},
		{"clock only", func(h *harness) { h.now = h.now.Add(3 * time.Minute) }, false},
	}
	for _, topo := range []v1alpha1.TopologyType{v1alpha1.MultiCluster, v1alpha1.DualPlane, v1alpha1.SingleCluster} {
		t.Run(string(topo), func(t *testing.T) {
			var nodes []*corev1.Node
			for i := range 60 {
				nodes = append(nodes, node(fmt.Sprintf("node-%05d", i), fmt.Sprintf("zone-%c", 'a'+i%3), i))
			}
			h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
				s.Topology = &v1alpha1.Topology{Type: topo}
				s.PreferredNodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "edge"}}
			}, nodes)
			for range 5 {
				h.now = h.now.Add(20 * time.Second)
				h.reconcile()
			}
			for _, c := range changes {
				c.do(h)
				reused := 0
				for i := range 6 {
					h.now = h.now.Add(20 * time.Second)
					before := testutil.ToFloat64(plansReused.WithLabelValues(h.policyNm))
					h.r.mu.Lock()
					history := h.r.history[h.policyNm]
					h.r.mu.Unlock()
					h.reconcile()
					if testutil.ToFloat64(plansReused.WithLabelValues(h.policyNm)) == before {
						continue
					}
					if c.seen {
						require.NotZero(t, i, "%s: the reconcile right after the change reused the last plan", c.name)
					}
					reused++
					h.r.mu.Lock()
					got := h.r.last[h.policyNm]
					h.r.mu.Unlock()
					require.Equal(t, 0, h.r.Ledger.Pending(), "a plan reused over assumed changes")
					fresh := state.NewLedger(0, func() time.Time { return h.now })
					fresh.SetLeader(true)
					m, ok := h.r.Policies.Get(h.policyNm)
					require.True(t, ok)
					_, want, ok := fresh.Plan(h.r.Policies.Valid(), h.r.Nodes.List(), m, h.now, history)
					require.True(t, ok)
					if !reflect.DeepEqual(want, got) {
						require.Equal(t, want, got, "%s: reconcile %d reused a plan that is not the full plan", c.name, i)
					}
				}
				require.Positive(t, reused, "%s: no reconcile reused its plan", c.name)
			}
		})
	}
}
