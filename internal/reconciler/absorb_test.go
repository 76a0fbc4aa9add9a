package reconciler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// event changes node name in the API server and in the store as the informer delivers an update
// (the store first, then the update handler's NodeUpdated), and reconciles. It returns whether the
// reconcile absorbed the change ("") or the cause of its full plan, and how many writes it made.
func (h *harness) event(name string, f func(*corev1.Node)) (cause string, writes int32) {
	h.t.Helper()
	old := h.r.Nodes.Get(name)
	require.NotNil(h.t, old, name)
	ctx := context.Background()
	n := h.node(name)
	f(n)
	status := n.Status
	require.NoError(h.t, h.client.Update(ctx, n))
	n = h.node(name)
	n.Status = status
	require.NoError(h.t, h.client.Status().Update(ctx, n))
	h.sync()
	h.r.NodeUpdated(old)
	return h.reconcileMarked()
}

// reconcileMarked reconciles without syncing the stores first (the marks are already taken), and
// returns "" when the reconcile absorbed its events, else the cause its full plan counted
// (calico_rr_autoscaler_full_plan_causes_total), and how many writes it made.
func (h *harness) reconcileMarked() (cause string, writes int32) {
	h.t.Helper()
	plans := testutil.ToFloat64(plansTotal.WithLabelValues(h.policyNm, "committed"))
	events := testutil.ToFloat64(absorbedEvents.WithLabelValues(h.policyNm))
	causes := fullPlanCauseCounts(h.t, h.policyNm)
	h.writes.Store(0)
	_, err := h.r.Reconcile(context.Background(), request(h.policyNm))
	require.NoError(h.t, err)
	absorbed := testutil.ToFloat64(absorbedEvents.WithLabelValues(h.policyNm)) > events
	planned := testutil.ToFloat64(plansTotal.WithLabelValues(h.policyNm, "committed")) > plans
	require.NotEqual(h.t, absorbed, planned, "a reconcile either absorbs its events or plans")
	var counted []string
	for c, v := range fullPlanCauseCounts(h.t, h.policyNm) {
		if v > causes[c] {
			counted = append(counted, c)
		}
	}
	if absorbed {
		require.Empty(h.t, counted, "an absorbing reconcile counted a full plan's cause")
		return "", h.writes.Load()
	}
	require.Len(h.t, counted, 1, "a full plan counts one cause")
	return counted[0], h.writes.Load()
}

// fullPlanCauseCounts reads policy's calico_rr_autoscaler_full_plan_causes_total by cause.
func fullPlanCauseCounts(t require.TestingT, policy string) map[string]float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { fullPlanCauses.Collect(ch); close(ch) }()
	counts := map[string]float64{}
	for m := range ch {
		var pb dto.Metric
		require.NoError(t, m.Write(&pb))
		var pol, cause string
		for _, l := range pb.GetLabel() {
			switch l.GetName() {
			case "policy":
				pol = l.GetValue()
			case "cause":
				cause = l.GetValue()
			}
		}
		if pol == policy {
			counts[cause] = pb.GetCounter().GetValue()
		}
	}
	return counts
}

// quietHarness is a harness whose cluster of n nodes is settled and whose last reconcile was
// quiet (it wrote nothing and left nothing to do).
func quietHarness(t *testing.T, n int, spec func(*v1alpha1.RouteReflectorPolicySpec)) *harness {
	h := newHarness(t, spec, cluster(n))
	h.reconcile()
	h.now = h.now.Add(time.Minute)
	h.reconcile()
	h.writes.Store(0)
	h.reconcile()
	require.Zero(t, h.writes.Load(), "not settled")
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	require.NotNil(t, h.r.quiet[h.policyNm], "the settled reconcile is not quiet")
	return h
}

// aClient returns a client of the plan in zone (any zone when "").
func (h *harness) aClient(zone string) string {
	h.t.Helper()
	rrs := h.rrs()
	nodes := h.r.Nodes.List()
	slices.SortFunc(nodes, func(a, b *extender.Node) int { return strings.Compare(a.Name, b.Name) })
	for _, n := range nodes {
		if _, rr := rrs[n.Name]; !rr && (zone == "" || n.Labels["topology.kubernetes.io/zone"] == zone) {
			return n.Name
		}
	}
	require.Fail(h.t, "no client")
	return ""
}

func TestAbsorbNodeEvents(t *testing.T) {
	topologies := map[string]func(*v1alpha1.RouteReflectorPolicySpec){
		"MultiCluster": nil,
		"DualPlane": func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: ptr(int32(10))}
		},
	}
	cases := []struct {
		name string
		// node picks the node to change (h.aClient(""), a route reflector...).
		node   func(h *harness) string
		change func(*corev1.Node)
		// cause: "" when the reconcile absorbs the change, else the cause of its full plan.
		cause string
	}{
		{"a client cordoned", func(h *harness) string { return h.aClient("") },
			func(n *corev1.Node) { n.Spec.Unschedulable = true }, ""},
		{"a client under disk pressure", func(h *harness) string { return h.aClient("") },
			func(n *corev1.Node) {
				n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeDiskPressure, Status: corev1.ConditionTrue})
			}, ""},
		{"a client tainted", func(h *harness) string { return h.aClient("") },
			func(n *corev1.Node) {
				n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/maintenance", Effect: corev1.TaintEffectNoSchedule})
			}, ""},
		{"a client NotReady", func(h *harness) string { return h.aClient("") },
			func(n *corev1.Node) { setReadyCondition(n, corev1.ConditionFalse) }, ""},
		{"a route reflector NotReady", func(h *harness) string { return firstKey(h.rrs()) },
			func(n *corev1.Node) { setReadyCondition(n, corev1.ConditionFalse) }, causeNodeState},
		{"a client moved to another zone", func(h *harness) string { return h.aClient("zone-a") },
			func(n *corev1.Node) { n.Labels["topology.kubernetes.io/zone"] = "zone-b" }, causeNodeTopology},
		{"a client's peering set edited by hand", func(h *harness) string { return h.aClient("") },
			func(n *corev1.Node) { n.Labels[extender.LabelPeeringSet] = "by-hand" }, causeNodeRole},
		{"a client given the route reflector label by hand", func(h *harness) string { return h.aClient("") },
			func(n *corev1.Node) { n.Labels["calico-route-reflector"] = "" }, causeNodeRole},
		{"a route reflector cordoned", func(h *harness) string { return firstKey(h.rrs()) },
			func(n *corev1.Node) { n.Spec.Unschedulable = true }, causeRouteReflector},
		{"a route reflector tainted (the default tolerations tolerate it)", func(h *harness) string { return firstKey(h.rrs()) },
			func(n *corev1.Node) {
				n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/maintenance", Effect: corev1.TaintEffectNoSchedule})
			}, ""},
		{"a route reflector given the forbidden label", func(h *harness) string { return firstKey(h.rrs()) },
			func(n *corev1.Node) { n.Labels["example.com/no-rr"] = "true" }, causeRouteReflector},
		{"a client given the forbidden label", func(h *harness) string { return h.aClient("") },
			func(n *corev1.Node) { n.Labels["example.com/no-rr"] = "true" }, ""},
		{"a route reflector given the preferred label", func(h *harness) string { return firstKey(h.rrs()) },
			func(n *corev1.Node) { n.Labels["example.com/rr-preferred"] = "true" }, ""},
		{"a client given the preferred label", func(h *harness) string { return h.aClient("") },
			func(n *corev1.Node) { n.Labels["example.com/rr-preferred"] = "true" }, ""},
	}
	// The changes in the status's counts, which the full plan after them updates.
	counted := map[string]bool{"a client NotReady": true}
	for topo, topoSpec := range topologies {
		spec := func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.PreferredNodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"example.com/rr-preferred": "true"}}
			s.ForbiddenNodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"example.com/no-rr": "true"}}
			if topoSpec != nil {
				topoSpec(s)
			}
		}
		for _, c := range cases {
			t.Run(topo+"/"+c.name, func(t *testing.T) {
				h := quietHarness(t, 30, spec)
				name := c.node(h)
				cause, writes := h.event(name, c.change)
				require.Equal(t, c.cause, cause, "absorbed (\"\") or the cause of the full plan")
				if cause != "" {
					return
				}
				require.Zero(t, writes, "an absorbed event wrote")
				// The full plan that follows (at the latest absorbWindow after the quiet one)
				// agrees: it writes nothing either (but the status's counts of a counted change).
				h.now = h.now.Add(absorbWindow)
				h.r.markFull(h.policyNm)
				status := h.statusWrites.Load()
				cause, writes = h.reconcileMarked()
				require.Equal(t, causeEvent, cause)
				if counted[c.name] {
					writes -= min(h.statusWrites.Load()-status, 1)
				}
				require.Zero(t, writes, "the full plan after an absorbed %s wrote", c.name)
			})
		}
	}
}

// TestAbsorbNodeBeingDeleted: a client whose deletion waits for a finalizer is planned whole.
func TestAbsorbNodeBeingDeleted(t *testing.T) {
	h := quietHarness(t, 30, nil)
	name := h.aClient("")
	h.update(name, func(n *corev1.Node) { n.Finalizers = []string{"example.com/hold"} })
	h.reconcile() // a finalizer is no change a plan reads; this reconcile is quiet again
	old := h.r.Nodes.Get(name)
	require.NoError(t, h.client.Delete(context.Background(), h.node(name)))
	h.sync()
	require.NotNil(t, h.r.Nodes.Get(name).DeletionTimestamp)
	h.r.NodeUpdated(old)
	cause, _ := h.reconcileMarked()
	require.Equal(t, causeNodeState, cause)
}

// TestAbsorbNeedsAQuietRecentPlan: what makes the next reconcile plan whole although its only
// event is one a quiet plan absorbs (a client cordoned).
func TestAbsorbNeedsAQuietRecentPlan(t *testing.T) {
	cordon := func(n *corev1.Node) { n.Spec.Unschedulable = !n.Spec.Unschedulable }
	t.Run("the absorb window has passed", func(t *testing.T) {
		h := quietHarness(t, 30, nil)
		h.now = h.now.Add(absorbWindow)
		cause, _ := h.event(h.aClient(""), cordon)
		require.Equal(t, causeWindowPassed, cause)
	})
	t.Run("an event for a full plan came too", func(t *testing.T) {
		h := quietHarness(t, 30, nil)
		h.r.markFull(h.policyNm)
		cause, _ := h.event(h.aClient(""), cordon)
		require.Equal(t, causeEvent, cause)
	})
	t.Run("the policy changed", func(t *testing.T) {
		h := quietHarness(t, 30, nil)
		pol := &v1alpha1.RouteReflectorPolicy{}
		require.NoError(t, h.client.Get(context.Background(), request(h.policyNm).NamespacedName, pol))
		pol.Generation++
		require.NoError(t, h.client.Update(context.Background(), pol))
		cause, _ := h.event(h.aClient(""), cordon)
		require.Equal(t, causePoliciesChanged, cause)
	})
	t.Run("the admission of a change is assumed, not in the cache yet", func(t *testing.T) {
		h := quietHarness(t, 30, nil)
		name := h.aClient("")
		h.r.Ledger.Assume(h.policyNm, state.Change{Node: name, Labels: map[string]*string{extender.LabelPeeringSet: nil}})
		cause, _ := h.event(name, cordon)
		require.Equal(t, causeNodeUnsettled, cause)
	})
	t.Run("the last plan was not quiet", func(t *testing.T) {
		h := quietHarness(t, 30, func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.RemovalDelay = &metav1.Duration{Duration: time.Hour}
		})
		// A route reflector cordoned: it drains for an hour, so no plan is quiet meanwhile.
		cause, _ := h.event(firstKey(h.rrs()), cordon)
		require.Equal(t, causeRouteReflector, cause)
		cause, _ = h.event(h.aClient(""), cordon)
		require.Equal(t, causeLastPlan+"role-changes", cause) // it started the drain
		cause, _ = h.event(h.aClient(""), cordon)
		require.Equal(t, causeLastPlan+"draining", cause)
	})
	t.Run("more changed nodes than maxAbsorbed", func(t *testing.T) {
		h := quietHarness(t, 30, nil)
		for i := range maxAbsorbed + 1 {
			n := node(fmt.Sprintf("other-%03d", i), "zone-a", 0)
			h.r.NodeUpdated(extender.FromNode(n))
		}
		cause, _ := h.event(h.aClient(""), cordon)
		require.Equal(t, causeTooManyNodes, cause)
	})
	t.Run("absorbed events ask for a full plan by the window's end", func(t *testing.T) {
		h := quietHarness(t, 30, nil)
		h.now = h.now.Add(3 * time.Second)
		old := h.r.Nodes.Get(h.aClient(""))
		h.update(old.Name, cordon)
		h.sync()
		h.r.NodeUpdated(old)
		res, err := h.r.Reconcile(context.Background(), request(h.policyNm))
		require.NoError(t, err)
		require.Equal(t, absorbWindow-3*time.Second, res.RequeueAfter)
	})
}

// TestAbsorbClientReadiness: clients' readiness changes are absorbed while the healthy counts
// give the plan's desired counts (the full plan that follows writes nothing), one by one and back;
// one that changes a desired count, or a client the plan read NotReady turning Ready, is planned
// whole.
func TestAbsorbClientReadiness(t *testing.T) {
	t.Run("ten clients NotReady and back, one reconcile each", func(t *testing.T) {
		h := quietHarness(t, 30, nil)
		var clients []string
		for _, z := range []string{"zone-a", "zone-b", "zone-c"} {
			for _, n := range h.clientsIn(z) {
				if len(clients) < 10 {
					clients = append(clients, n)
				}
			}
		}
		require.Len(t, clients, 10)
		for _, ready := range []corev1.ConditionStatus{corev1.ConditionFalse, corev1.ConditionTrue} {
			for _, c := range clients {
				cause, writes := h.event(c, func(n *corev1.Node) { setReadyCondition(n, ready) })
				require.Equal(t, "", cause, "%s Ready=%s", c, ready)
				require.Zero(t, writes)
			}
		}
		h.r.mu.Lock()
		left := len(h.r.quiet[h.policyNm].health)
		h.r.mu.Unlock()
		require.Zero(t, left, "every client is back as the plan read it")
	})
	t.Run("a client NotReady lowers the desired count: planned whole", func(t *testing.T) {
		// Steps: 30 healthy nodes want 4 route reflectors, 29 want 3.
		h := quietHarness(t, 30, func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.Scaling = &v1alpha1.Scaling{Steps: []v1alpha1.Step{{MaxNodes: 29, RouteReflectors: 3}, {MaxNodes: 1000, RouteReflectors: 4}}}
		})
		require.Len(t, h.rrs(), 6, "4 route reflectors, in 3 cluster-ID groups")
		cause, _ := h.event(h.aClient(""), func(n *corev1.Node) { setReadyCondition(n, corev1.ConditionFalse) })
		require.Equal(t, causeNodeState, cause)
	})
	t.Run("the counts add up over absorbed reconciles", func(t *testing.T) {
		// Steps: up to 28 healthy nodes want 3, more 4: the first NotReady client (29 healthy) is
		// absorbed, the second (28) is not.
		h := quietHarness(t, 30, func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.Scaling = &v1alpha1.Scaling{Steps: []v1alpha1.Step{{MaxNodes: 28, RouteReflectors: 3}, {MaxNodes: 1000, RouteReflectors: 4}}}
		})
		clients := h.clientsIn("")
		cause, _ := h.event(clients[0], func(n *corev1.Node) { setReadyCondition(n, corev1.ConditionFalse) })
		require.Equal(t, "", cause)
		cause, _ = h.event(clients[1], func(n *corev1.Node) { setReadyCondition(n, corev1.ConditionFalse) })
		require.Equal(t, causeNodeState, cause)
	})
}

// clientsIn returns the plan's clients in zone (every zone when ""), by name.
func (h *harness) clientsIn(zone string) []string {
	rrs := h.rrs()
	var out []string
	for _, n := range h.r.Nodes.List() {
		if _, rr := rrs[n.Name]; !rr && (zone == "" || n.Labels["topology.kubernetes.io/zone"] == zone) {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out
}

func setReadyCondition(n *corev1.Node, s corev1.ConditionStatus) {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			n.Status.Conditions[i].Status = s
			n.Status.Conditions[i].LastTransitionTime = metav1.Time{Time: t0}
		}
	}
}

// firstKey is the smallest key of m.
func firstKey(m map[string]string) string {
	return slices.Sorted(maps.Keys(m))[0]
}

func TestAbsorbLimit(t *testing.T) {
	view := func(n int) *quietPlan {
		q := &quietPlan{view: map[string]*extender.Node{}, nodes: n}
		for i := range n {
			q.view[fmt.Sprint(i)] = nil
		}
		return q
	}
	for _, c := range []struct {
		name string
		q    *quietPlan
		want int
	}{
		{"no quiet plan", nil, maxAbsorbed},
		{"a small policy", view(30), maxAbsorbed},
		{"4,096 nodes", view(4096), maxAbsorbed},
		{"65,000 nodes: a sixteenth", view(65000), 4062},
		{"65,000 nodes, retired by a full plan under way", &quietPlan{nodes: 65000, retired: true}, 4062},
	} {
		t.Run(c.name, func(t *testing.T) { require.Equal(t, c.want, absorbLimit(c.q)) })
	}
}
