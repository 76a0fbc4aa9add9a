package reconciler

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
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
		Help: "Full plans, committed or computed again because an admission promoted a node meanwhile (conflict).",
	}, []string{"policy", "result"})
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
		Help: "Failure drills run on the current plan (each zone lost, each route reflector lost), per policy, kind (zone, routeReflector) and result (pass, fail).",
	}, []string{"policy", "kind", "result"})
	drillMissing = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "calico_rr_autoscaler_failure_drill_missing_pairs",
		Help: "Most node pairs one failure drill of the kind loses on the current plan (0: every drill of the kind passes), per policy and kind.",
	}, []string{"policy", "kind"})
	reconcileErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "calico_rr_autoscaler_reconcile_errors_total",
		Help: "Reconciles that failed, by step.",
	}, []string{"policy", "step"})
)

func init() {
	metrics.Registry.MustRegister(desiredGauge, currentGauge, roleChanges, reconcileDuration, planDuration,
		plansTotal, nodePatches, calicoNodeWrites, driftReverted, peerWrites, reconcileErrors, drillsGauge, drillMissing)
}

// metrics exports the desired and current route reflectors per zone.
func (r *Reconciler) metrics(_ context.Context, st *State) error {
	desiredGauge.DeletePartialMatch(prometheus.Labels{"policy": st.Name})
	currentGauge.DeletePartialMatch(prometheus.Labels{"policy": st.Name})
	p := st.Managed.Resolved
	current := map[string]float64{}
	for _, n := range st.View {
		if extender.IsActiveRouteReflector(n, p) {
			current[n.Labels[p.ZoneLabel]]++
		}
	}
	for _, z := range st.Result.Zones {
		desiredGauge.WithLabelValues(st.Name, z.Zone).Set(float64(z.Desired))
		currentGauge.WithLabelValues(st.Name, z.Zone).Set(current[z.Zone])
	}
	drillsGauge.DeletePartialMatch(prometheus.Labels{"policy": st.Name})
	drillMissing.DeletePartialMatch(prometheus.Labels{"policy": st.Name})
	if st.Result.Drills != nil {
		tally := extender.TallyDrills(st.Result.Drills)
		for _, kind := range []string{extender.DrillZone, extender.DrillRouteReflector} {
			var worst int64
			for _, d := range st.Result.Drills {
				if d.Kind == kind {
					worst = max(worst, d.MissingPairs)
				}
			}
			t := tally[kind]
			drillsGauge.WithLabelValues(st.Name, kind, "pass").Set(float64(t.Pass))
			drillsGauge.WithLabelValues(st.Name, kind, "fail").Set(float64(t.All - t.Pass))
			drillMissing.WithLabelValues(st.Name, kind).Set(float64(worst))
		}
	}
	return nil
}

func forgetMetrics(policy string) {
	desiredGauge.DeletePartialMatch(prometheus.Labels{"policy": policy})
	currentGauge.DeletePartialMatch(prometheus.Labels{"policy": policy})
}
