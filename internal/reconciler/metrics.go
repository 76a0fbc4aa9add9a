package reconciler

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

var (
	desiredGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "calico_rr_autoscaler_route_reflectors_desired",
		Help: "Route reflectors the plan wants, per policy and zone.",
	}, []string{"policy", "zone"})
	currentGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "calico_rr_autoscaler_route_reflectors",
		Help: "Nodes carrying the route reflector role (label and cluster ID, not draining), per policy and zone.",
	}, []string{"policy", "zone"})
	roleChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "calico_rr_autoscaler_role_changes_total",
		Help: "Role changes written by the reconciler (Promoted, Draining, Demoted, ClusterIDChanged).",
	}, []string{"policy", "change"})
	reconcileDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "calico_rr_autoscaler_reconcile_duration_seconds",
		Help:    "Time of one reconcile of a policy: plan, writes, status.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	}, []string{"policy"})
	planDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "calico_rr_autoscaler_plan_duration_seconds",
		Help:    "Time of one full plan from the cache.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	}, []string{"policy"})
	plansTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "calico_rr_autoscaler_plans_total",
		Help: "Full plans, committed or computed again because an admission meanwhile promoted a node into a gap the plan filled otherwise (conflict).",
	}, []string{"policy", "result"})
	plansReused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "calico_rr_autoscaler_plans_reused_total",
		Help: "Committed plans that were the policy's last plan moved to the reconcile's time, because the planner would have read nothing new (also counted in calico_rr_autoscaler_plans_total).",
	}, []string{"policy"})
	absorbedEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "calico_rr_autoscaler_node_events_absorbed_total",
		Help: "Node changes a reconcile absorbed without a full plan: clients changed in nothing the last quiet plan decided (docs/architecture.md: Absorbed node events).",
	}, []string{"policy"})
	fullPlanCauses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "calico_rr_autoscaler_full_plan_causes_total",
		Help: "Reconciles that planned a policy whole, by cause: event (a join, deletion, policy, BGPPeer, BGP health or datastore change), timer, too-many-nodes, window-passed, policies-changed, a node's change (node-unsettled, node-outside, node-topology, node-role, node-state, route-reflector), or last-plan-<why> when the last full plan was not quiet (docs/architecture.md: Absorbed node events).",
	}, []string{"policy", "cause"})
	nodePatches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "calico_rr_autoscaler_node_patches_total",
		Help: "Merge patches of nodes' owned labels and annotations.",
	}, []string{"policy"})
	calicoNodeWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "calico_rr_autoscaler_calico_node_writes_total",
		Help: "Writes of the route reflector role to Calico Nodes in etcd (the etcd datastore).",
	}, []string{"policy"})
	driftReverted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "calico_rr_autoscaler_drift_reverted_total",
		Help: "Hand changes to Calico Nodes and managed BGPPeers in etcd that were reverted, by kind.",
	}, []string{"policy", "kind"})
	peerWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "calico_rr_autoscaler_bgppeer_writes_total",
		Help: "BGPPeer creations, updates and deletions.",
	}, []string{"policy", "op"})
	drillsGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "calico_rr_autoscaler_failure_drills",
		Help: "Failure drills run on the current plan (each zone lost, each route reflector lost), per policy, kind (zone, routeReflector), address family (IPv4, IPv6: the drills run in each family the policy's nodes peer in) and result (pass, fail).",
	}, []string{"policy", "kind", "family", "result"})
	drillMissing = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "calico_rr_autoscaler_failure_drill_missing_pairs",
		Help: "Most node pairs one failure drill of the kind loses on the current plan (0: every drill of the kind passes), per policy, kind and address family (IPv4, IPv6).",
	}, []string{"policy", "kind", "family"})
	reconcileErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "calico_rr_autoscaler_reconcile_errors_total",
		Help: "Reconciles that failed, by step (every step of a reconciled policy is exported, 0 until it fails).",
	}, []string{"policy", "step"})
	conditionGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: PolicyConditionMetric,
		Help: "Conditions of the policy status (Ready, Degraded, Resilient, ...): 1 for the condition's current status (True, False, Unknown), 0 for the other two, per policy and type.",
	}, []string{"policy", "type", "status"})
	pathsGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: PathsPerPrefixMetric,
		Help: "Paths per prefix the nodes store by the graph model (status.routes), per policy, figure (busiest: the node storing the most; mean) and layout (plan: the current plan; default: the default layout on the same nodes).",
	}, []string{"policy", "figure", "layout"})
	missingPairsGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MissingPairsMetric,
		Help: "Node pairs without a route between them in the current plan by the graph model (status.routes.missingPairs; 0 when every node reaches every other), per policy.",
	}, []string{"policy"})
	familyMissingPairsGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "calico_rr_autoscaler_family_missing_pairs",
		Help: "Node pairs with addresses of the family without a route between them in that family in the current plan by the graph model (status.routes.families[].missingPairs), per policy and address family (IPv4, IPv6); exported when a node of the policy has an IPv6 address.",
	}, []string{"policy", "family"})
)

// Names of the metrics the chart's alerts and dashboard read that a test finds by name.
const (
	// PolicyConditionMetric: 1 for each policy condition's current status, as kube-state-metrics
	// exports conditions (the Degraded alert reads type="Degraded",status="True").
	PolicyConditionMetric = "calico_rr_autoscaler_policy_condition"
	// PathsPerPrefixMetric: the route figures of status.routes, as numbers.
	PathsPerPrefixMetric = "calico_rr_autoscaler_paths_per_prefix"
	// MissingPairsMetric: status.routes.missingPairs.
	MissingPairsMetric = "calico_rr_autoscaler_missing_pairs"
)

func init() {
	metrics.Registry.MustRegister(desiredGauge, currentGauge, roleChanges, reconcileDuration, planDuration,
		plansTotal, plansReused, absorbedEvents, fullPlanCauses, nodePatches, calicoNodeWrites, driftReverted, peerWrites, reconcileErrors, drillsGauge, drillMissing,
		conditionGauge, pathsGauge, missingPairsGauge, familyMissingPairsGauge, transitionSessions, transitionAtRisk, transitionHeld, transitionHeldMoves, transitionHeldUplinks)
}

// conditionStatuses are the values of a condition's status, each a series of the condition gauge.
var conditionStatuses = []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown}

// conditionMetrics exports the conditions of a policy status: for each type, 1 on its status and
// 0 on the other two; types no longer in the status are dropped.
func conditionMetrics(policy string, conds []metav1.Condition) {
	conditionGauge.DeletePartialMatch(prometheus.Labels{"policy": policy})
	for _, c := range conds {
		for _, s := range conditionStatuses {
			v := 0.0
			if c.Status == s {
				v = 1
			}
			conditionGauge.WithLabelValues(policy, c.Type, string(s)).Set(v)
		}
	}
}

// costMetrics exports the route figures of the policy's last graph-model run (setCost's memo);
// none while the model failed.
func (r *Reconciler) costMetrics(policy string) {
	pathsGauge.DeletePartialMatch(prometheus.Labels{"policy": policy})
	missingPairsGauge.DeletePartialMatch(prometheus.Labels{"policy": policy})
	familyMissingPairsGauge.DeletePartialMatch(prometheus.Labels{"policy": policy})
	r.mu.Lock()
	m := r.costs[policy]
	r.mu.Unlock()
	if m == nil || m.err != nil {
		return
	}
	c := m.cost
	pathsGauge.WithLabelValues(policy, "busiest", "plan").Set(c.BusiestPaths)
	pathsGauge.WithLabelValues(policy, "mean", "plan").Set(c.MeanPaths)
	pathsGauge.WithLabelValues(policy, "busiest", "default").Set(c.DefaultBusiest)
	pathsGauge.WithLabelValues(policy, "mean", "default").Set(c.DefaultMean)
	missingPairsGauge.WithLabelValues(policy).Set(float64(c.MissingPairs))
	for _, f := range m.families {
		familyMissingPairsGauge.WithLabelValues(policy, f.Family.String()).Set(float64(f.MissingPairs))
	}
}

// metrics exports the desired and current route reflectors per zone, the failure drills, the
// route figures, and the policy's counters at 0 before their first increment (each step's errors,
// each kind of role change, node patches): a rate or increase sees the first one.
func (r *Reconciler) metrics(_ context.Context, st *State) error {
	for _, s := range r.steps {
		reconcileErrors.WithLabelValues(st.Name, s.Name)
	}
	for _, k := range []ChangeKind{KindPromoted, KindDraining, KindDemoted, KindClusterIDChanged} {
		roleChanges.WithLabelValues(st.Name, string(k))
	}
	nodePatches.WithLabelValues(st.Name)
	absorbedEvents.WithLabelValues(st.Name)
	r.costMetrics(st.Name)
	desiredGauge.DeletePartialMatch(prometheus.Labels{"policy": st.Name})
	currentGauge.DeletePartialMatch(prometheus.Labels{"policy": st.Name})
	current, _ := st.currentRouteReflectors()
	for _, z := range st.Result.Zones {
		desiredGauge.WithLabelValues(st.Name, z.Zone).Set(float64(z.Desired))
		currentGauge.WithLabelValues(st.Name, z.Zone).Set(float64(current[z.Zone]))
	}
	drillsGauge.DeletePartialMatch(prometheus.Labels{"policy": st.Name})
	drillMissing.DeletePartialMatch(prometheus.Labels{"policy": st.Name})
	for fam, drills := range drillsByFamily(st.Result.Drills) {
		tally := extender.TallyDrills(drills)
		for _, kind := range []string{extender.DrillZone, extender.DrillRouteReflector} {
			var worst int64
			for _, d := range drills {
				if d.Kind == kind {
					worst = max(worst, d.MissingPairs)
				}
			}
			t := tally[kind]
			drillsGauge.WithLabelValues(st.Name, kind, fam, "pass").Set(float64(t.Pass))
			drillsGauge.WithLabelValues(st.Name, kind, fam, "fail").Set(float64(t.All - t.Pass))
			drillMissing.WithLabelValues(st.Name, kind, fam).Set(float64(worst))
		}
	}
	return nil
}

// drillsByFamily splits a plan's drills by address family; family-blind drills (no node of the
// policy has an IPv6 address) are IPv4's.
func drillsByFamily(drills []extender.Drill) map[string][]extender.Drill {
	out := map[string][]extender.Drill{}
	for _, d := range drills {
		f := d.Family
		if f == "" {
			f = extender.FamilyIPv4.String()
		}
		out[f] = append(out[f], d)
	}
	return out
}

// forgetMetrics drops the series of a deleted policy.
func forgetMetrics(policy string) {
	for _, v := range []*prometheus.MetricVec{desiredGauge.MetricVec, currentGauge.MetricVec, drillsGauge.MetricVec,
		drillMissing.MetricVec, conditionGauge.MetricVec, pathsGauge.MetricVec, missingPairsGauge.MetricVec, familyMissingPairsGauge.MetricVec, reconcileErrors.MetricVec,
		roleChanges.MetricVec, nodePatches.MetricVec, absorbedEvents.MetricVec, fullPlanCauses.MetricVec, transitionSessions.MetricVec,
		transitionAtRisk.MetricVec, transitionHeld.MetricVec, transitionHeldMoves.MetricVec, transitionHeldUplinks.MetricVec} {
		v.DeletePartialMatch(prometheus.Labels{"policy": policy})
	}
}
