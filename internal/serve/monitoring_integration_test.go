package serve_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/certs"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/serve"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// targetLabels are the labels Prometheus adds to every scraped series (the ServiceMonitor's
// target labels), which an alert or a panel may read though no /metrics line carries them.
var targetLabels = []string{"job", "instance", "namespace", "pod", "service", "container", "endpoint"}

// exported is what a /metrics page holds: each series name (a histogram's as name_bucket, _sum
// and _count) with the label names its series carry.
type exported map[string]map[string]bool

func parseExposition(t *testing.T, body string) exported {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err)
	out := exported{}
	add := func(name string, labels []*dto.LabelPair, extra ...string) {
		if out[name] == nil {
			out[name] = map[string]bool{}
		}
		for _, l := range labels {
			out[name][l.GetName()] = true
		}
		for _, l := range extra {
			out[name][l] = true
		}
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				add(name+"_bucket", m.GetLabel(), "le")
				add(name+"_sum", m.GetLabel())
				add(name+"_count", m.GetLabel())
			case dto.MetricType_SUMMARY:
				add(name, m.GetLabel(), "quantile")
				add(name+"_sum", m.GetLabel())
				add(name+"_count", m.GetLabel())
			default:
				add(name, m.GetLabel())
			}
		}
	}
	return out
}

// checkRefs returns what expr (an alert's, or a panel's) reads that ex does not export: metric
// names, and label names (of the expression, and those its annotations or legend read: uses) that
// none of its metrics carries and Prometheus does not add.
func checkRefs(ex exported, what, expr string, uses []string) []string {
	refs, err := testenv.ParsePromQLRefs(expr)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", what, err)}
	}
	if len(refs.Metrics) == 0 {
		return []string{fmt.Sprintf("%s: reads no metric: %s", what, expr)}
	}
	var problems []string
	have := map[string]bool{}
	for _, l := range targetLabels {
		have[l] = true
	}
	for _, m := range refs.Metrics {
		if ex[m] == nil {
			problems = append(problems, fmt.Sprintf("%s: metric %s is not exported", what, m))
		}
		for l := range ex[m] {
			have[l] = true
		}
	}
	for _, l := range append(refs.Labels, uses...) {
		if !have[l] {
			problems = append(problems, fmt.Sprintf("%s: label %q is on none of %v", what, l, refs.Metrics))
		}
	}
	return problems
}

// checkMonitoring holds the chart's alerts and dashboard (queries, legends, variables) to ex.
func checkMonitoring(m *testenv.Monitoring, ex exported) []string {
	var problems []string
	for _, a := range m.Alerts {
		var uses []string
		for _, v := range a.Annotations {
			uses = append(uses, testenv.AlertTemplateLabels(v)...)
		}
		problems = append(problems, checkRefs(ex, "alert "+a.Alert, a.Expr, uses)...)
	}
	for _, q := range m.Queries {
		e, err := testenv.GrafanaToPromQL(q.Expr)
		if err != nil {
			problems = append(problems, fmt.Sprintf("panel %q: %v", q.Panel, err))
			continue
		}
		problems = append(problems, checkRefs(ex, fmt.Sprintf("panel %q %s", q.Panel, q.RefID), e, testenv.LegendLabels(q.Legend))...)
	}
	for _, v := range m.Variables {
		problems = append(problems, checkRefs(ex, "variable "+v.Name, v.Metric, []string{v.Label})...)
	}
	return problems
}

// TestMonitoringMetricsExist runs serve on a real API server with the product installed from its
// chart, makes it export what a live cluster exports (a policy reconciled over 9 nodes in 3 zones,
// roles given at admission, a kubectl denial, the self-managed certificates: the certs package
// run as `serve --self-managed-certs` runs it, in the same process and registry), scrapes its
// /metrics over HTTP, and fails when an alert of the rendered PrometheusRule or a query, legend
// or variable of the rendered dashboard names a metric or label that is not on the page. A
// renamed metric or label fails it (shown at the end on the scrape with one metric and one label
// taken away).
func TestMonitoringMetricsExist(t *testing.T) {
	mon := testenv.RenderMonitoring(t)
	w := newEnv(t)
	w.port = testenv.FreePort(t)
	w.install(w.port)
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	w.rep = w.start(w.port, true, func(o *serve.Options) { o.MetricsBindAddress = metricsAddr })
	w.awaitWebhooks()

	certDir := t.TempDir()
	rot, err := certs.New(w.env.Config, certs.Options{Namespace: testenv.ChartNamespace, SecretName: "monitoring-test-tls",
		ServiceName: "monitoring-test", CertDir: certDir})
	require.NoError(t, err)
	require.NoError(t, rot.Bootstrap(t.Context()))

	w.applyPolicy(policyYAML)
	for i := range 9 {
		w.join(fmt.Sprintf("node-%02d", i), fmt.Sprintf("zone-%c", 'a'+i%3), nil)
	}
	w.join("db-1", "zone-a", map[string]string{"role": "db"})
	w.eventually("settled on 3 route reflectors", 60*time.Second, func() error { return w.snapshot().settled(3) })
	_, stderr, err := w.kubectl(testenv.UserAlice, "label", "node", "db-1", "calico-route-reflector=")
	require.Error(t, err, "kubectl label of a forbidden node was not refused")
	require.Contains(t, stderr, "[forbidden-node]")

	scrape := func() (exported, string) {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return parseExposition(t, string(body)), string(body)
	}
	var ex exported
	var body string
	w.eventually("the alerts' and the dashboard's metrics and labels on /metrics", 30*time.Second, func() error {
		ex, body = scrape()
		if p := checkMonitoring(mon, ex); len(p) > 0 {
			return fmt.Errorf("%d problems:\n%s", len(p), strings.Join(p, "\n"))
		}
		return nil
	})
	t.Logf("%d alerts, %d panel queries and %d variables read %d exported series names",
		len(mon.Alerts), len(mon.Queries), len(mon.Variables), len(ex))
	require.Contains(t, body, serve.LeaderMetric+" 1", "this replica is the leader")
	// The condition gauge follows the policy status.
	w.eventually("the Ready and Resilient gauges as in the policy status", 30*time.Second, func() error {
		_, body := scrape()
		for _, typ := range []string{"Ready", "Resilient"} {
			st := w.policyField(fmt.Sprintf(`{.status.conditions[?(@.type=="%s")].status}`, typ))
			line := fmt.Sprintf(`calico_rr_autoscaler_policy_condition{policy="default",status="%s",type="%s"} 1`, st, typ)
			if st == "" || !strings.Contains(body, line+"\n") {
				return fmt.Errorf("status %s=%q, no line %s", typ, st, line)
			}
		}
		return nil
	})
	require.Regexp(t, `calico_rr_autoscaler_missing_pairs\{policy="default"\} 0`, body)
	require.Regexp(t, `calico_rr_autoscaler_reconcile_errors_total\{policy="default",step="bgppeers"\} 0`, body)
	require.Regexp(t, `calico_rr_autoscaler_webhook_requests_total\{result="error",webhook="mutate-v1-node"\} 0`, body)

	// The check fails on a renamed metric or label.
	renamed := exported{}
	for name, labels := range ex {
		if name == serve.LeaderMetric {
			continue
		}
		renamed[name] = map[string]bool{}
		for l := range labels {
			if name == "calico_rr_autoscaler_route_reflectors_desired" && l == "zone" {
				continue
			}
			renamed[name][l] = true
		}
	}
	p := strings.Join(checkMonitoring(mon, renamed), "\n")
	require.Contains(t, p, "alert CalicoRRAutoscalerNoLeader: metric calico_rr_autoscaler_leader is not exported")
	require.Contains(t, p, `panel "Leader" A: metric calico_rr_autoscaler_leader is not exported`)
	require.Contains(t, p, `panel "Route reflectors: desired and actual, per policy and zone" A: label "zone" is on none of [calico_rr_autoscaler_route_reflectors_desired]`)
}
