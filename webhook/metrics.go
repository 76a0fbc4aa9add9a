package webhook

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Results of an admission request, a label of the request metrics.
const (
	resultAllowed   = "allowed"
	resultPatched   = "patched"
	resultDenied    = "denied"
	resultMalformed = "malformed"
	resultError     = "error"
)

var (
	requestsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "calico_rr_autoscaler_webhook_requests_total",
		Help: "Admission requests by webhook and result (allowed, patched, denied, malformed, error).",
	}, []string{"webhook", "result"})
	denialsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "calico_rr_autoscaler_webhook_denials_total",
		Help: "Admission denials by webhook and rule.",
	}, []string{"webhook", "rule"})
	requestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "calico_rr_autoscaler_webhook_duration_seconds",
		Help:    "Time to decide an admission request, from the request body to the answer.",
		Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1},
	}, []string{"webhook"})
	decisionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "calico_rr_autoscaler_webhook_decisions_total",
		Help: "Roles given by the mutating webhook (route-reflector, client, draining), joins left to the leader's reconciler (deferred), and decisions that gave no role (none; none-held: an eligible node while promotions were held for a plan).",
	}, []string{"decision"})
)

func init() {
	metrics.Registry.MustRegister(requestsTotal, denialsTotal, requestDuration, decisionsTotal)
}

// initMetrics exports every result of webhook name at 0 before its first request, so that an alert
// on the increase of errors sees the first one, and its latency histogram.
func initMetrics(name string) {
	for _, r := range []string{resultAllowed, resultPatched, resultDenied, resultMalformed, resultError} {
		requestsTotal.WithLabelValues(name, r)
	}
	requestDuration.WithLabelValues(name)
}

func observe(name, result string, start time.Time) {
	requestsTotal.WithLabelValues(name, result).Inc()
	requestDuration.WithLabelValues(name).Observe(time.Since(start).Seconds())
}

func resultOf(resp *admissionv1.AdmissionResponse) string {
	switch {
	case !resp.Allowed:
		return resultDenied
	case len(resp.Patch) > 0:
		return resultPatched
	}
	return resultAllowed
}

func countDenials(name string, resp *admissionv1.AdmissionResponse) {
	for _, r := range rulesOf(resp) {
		denialsTotal.WithLabelValues(name, r).Inc()
	}
}
