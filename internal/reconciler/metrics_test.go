package reconciler

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// seriesOf gathers c and returns the series of policy pol: their other labels' values joined by
// "/" (in label name order), with their value.
func seriesOf(t *testing.T, c prometheus.Collector, pol string) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var key []string
			mine := false
			for _, l := range m.GetLabel() {
				if l.GetName() == "policy" {
					mine = l.GetValue() == pol
					continue
				}
				key = append(key, l.GetValue())
			}
			if mine {
				out[strings.Join(key, "/")] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// The condition gauge has one series per status of each condition, 1 on the current one; a
// condition that leaves the status leaves the gauge, and a deleted policy's series go.
func TestConditionMetrics(t *testing.T) {
	const pol = "condition-metrics-test"
	conditionMetrics(pol, []metav1.Condition{
		{Type: ConditionDegraded, Status: metav1.ConditionTrue},
		{Type: ConditionReady, Status: metav1.ConditionUnknown},
	})
	require.Equal(t, map[string]float64{
		"True/Degraded": 1, "False/Degraded": 0, "Unknown/Degraded": 0,
		"True/Ready": 0, "False/Ready": 0, "Unknown/Ready": 1,
	}, seriesOf(t, conditionGauge, pol))

	conditionMetrics(pol, []metav1.Condition{{Type: ConditionDegraded, Status: metav1.ConditionFalse}})
	require.Equal(t, map[string]float64{"True/Degraded": 0, "False/Degraded": 1, "Unknown/Degraded": 0},
		seriesOf(t, conditionGauge, pol))

	forgetMetrics(pol)
	require.Empty(t, seriesOf(t, conditionGauge, pol))
}

// The route figures of the last model run are exported as numbers; a failed model run exports
// none (rather than the figures of an older plan).
func TestCostMetrics(t *testing.T) {
	const pol = "cost-metrics-test"
	r := &Reconciler{costs: map[string]*costMemo{pol: {cost: bgpmodel.Cost{
		BusiestPaths: 4, MeanPaths: 2.5, DefaultBusiest: 2, DefaultMean: 2, MissingPairs: 7}}}}
	r.costMetrics(pol)
	require.Equal(t, map[string]float64{"busiest/plan": 4, "mean/plan": 2.5, "busiest/default": 2, "mean/default": 2},
		seriesOf(t, pathsGauge, pol))
	require.Equal(t, map[string]float64{"": 7}, seriesOf(t, missingPairsGauge, pol))

	r.costs[pol] = &costMemo{err: errors.New("model failed")}
	r.costMetrics(pol)
	require.Empty(t, seriesOf(t, pathsGauge, pol))
	require.Empty(t, seriesOf(t, missingPairsGauge, pol))
}

// Every step of a reconciled policy has an error count, 0 before its first error; so do its role
// changes of each kind and its node patches.
func TestErrorCountsStartAtZero(t *testing.T) {
	const pol = "errors-metrics-test"
	r := &Reconciler{}
	r.steps = r.Steps()
	require.NoError(t, r.metrics(t.Context(), &State{Name: pol, Managed: state.Managed{Resolved: &policy.Resolved{}}, Result: &extender.Result{}}))
	got := seriesOf(t, reconcileErrors, pol)
	var steps []string
	for _, s := range r.steps {
		steps = append(steps, s.Name)
		require.Contains(t, got, s.Name)
		require.Zero(t, got[s.Name])
	}
	require.Len(t, got, len(steps))
	require.True(t, slices.Contains(steps, "bgppeers"))
	require.Equal(t, map[string]float64{"Promoted": 0, "Draining": 0, "Demoted": 0, "ClusterIDChanged": 0}, seriesOf(t, roleChanges, pol))
	require.Equal(t, map[string]float64{"": 0}, seriesOf(t, nodePatches, pol))
	forgetMetrics(pol)
	require.Empty(t, seriesOf(t, reconcileErrors, pol))
	require.Empty(t, seriesOf(t, roleChanges, pol))
}
