package chart

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// promtool runs the real promtool (hack/tools.sh installs it; the test fails without it) in dir.
func promtool(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), testenv.RequirePromtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

var rulesFound = regexp.MustCompile(`SUCCESS: (\d+) rules found`)

// checkRules runs promtool check rules on a rule file and requires it to find want rules.
func checkRules(t *testing.T, ruleFile []byte, want int) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rules.yaml"), ruleFile, 0o644))
	out, err := promtool(t, dir, "check", "rules", "rules.yaml")
	require.NoError(t, err, "promtool check rules:\n%s\n%s", out, ruleFile)
	m := rulesFound.FindStringSubmatch(out)
	require.NotNil(t, m, out)
	require.Equal(t, fmt.Sprint(want), m[1], out)
}

// The chart with prometheusRule.enabled and grafanaDashboard.enabled, through the real helm,
// renders a PrometheusRule whose every alert has a severity, a summary, a description and a
// runbook_url pointing at a section of docs/operations.md, and the dashboard ConfigMap with the Grafana
// sidecar's label (key, value and namespace from the values). Without them neither renders.
func TestMonitoringRender(t *testing.T) {
	m := testenv.RenderMonitoring(t)
	require.GreaterOrEqual(t, len(m.Alerts), 10)
	ops, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	require.NoError(t, err)
	anchors := readmeAnchors(string(ops))
	var names []string
	for _, a := range m.Alerts {
		names = append(names, a.Alert)
		require.Contains(t, []string{"warning", "critical"}, a.Labels["severity"], a.Alert)
		require.NotEmpty(t, a.Annotations["summary"], a.Alert)
		require.NotEmpty(t, a.Annotations["description"], a.Alert)
		url, anchor, ok := strings.Cut(a.Annotations["runbook_url"], "#")
		require.True(t, ok, "%s: runbook_url %q has no anchor", a.Alert, a.Annotations["runbook_url"])
		require.Equal(t, "https://github.com/calico-rr-autoscaler/calico-rr-autoscaler/blob/main/docs/operations.md", url, a.Alert)
		require.Equal(t, strings.ToLower(a.Alert), anchor, a.Alert)
		require.True(t, anchors[anchor], "%s: docs/operations.md has no section #%s (its runbook)", a.Alert, anchor)
		refs, err := testenv.ParsePromQLRefs(a.Expr)
		require.NoError(t, err, a.Alert)
		// The description names what the alert is about: the labels the expression keeps.
		for _, l := range refs.Labels {
			if l != "le" && !slices.Contains([]string{"type", "status", "result"}, l) {
				require.Contains(t, testenv.AlertTemplateLabels(a.Annotations["description"]), l, "%s: the description names its %s", a.Alert, l)
			}
		}
	}
	require.Len(t, slices.Compact(slices.Sorted(slices.Values(names))), len(names), "alert names are unique")
	require.Contains(t, names, "CalicoRRAutoscalerNoLeader")

	cm := m.DashboardConfigMap["metadata"].(map[string]any)
	require.Equal(t, "1", cm["labels"].(map[string]any)["grafana_dashboard"])
	require.Equal(t, testenv.ChartNamespace, cm["namespace"])
	require.Equal(t, testenv.ChartNamespace, m.PrometheusRule["metadata"].(map[string]any)["namespace"])

	other := testenv.RenderMonitoring(t, "grafanaDashboard.labelKey=dashboards", "grafanaDashboard.labelValue=calico",
		"grafanaDashboard.namespace=monitoring", "prometheusRule.namespace=monitoring", "prometheusRule.labels.release=kps",
		"prometheusRule.roleChurn.threshold=50", "prometheusRule.roleChurn.window=30m", "prometheusRule.additionalAlertLabels.team=net",
		"prometheusRule.runbookBaseURL=https://wiki.example.com/rra")
	cm = other.DashboardConfigMap["metadata"].(map[string]any)
	require.Equal(t, "calico", cm["labels"].(map[string]any)["dashboards"])
	require.NotContains(t, cm["labels"], "grafana_dashboard")
	require.Equal(t, "monitoring", cm["namespace"])
	pr := other.PrometheusRule["metadata"].(map[string]any)
	require.Equal(t, "monitoring", pr["namespace"])
	require.Equal(t, "kps", pr["labels"].(map[string]any)["release"])
	for _, a := range other.Alerts {
		require.Equal(t, "net", a.Labels["team"], a.Alert)
		require.True(t, strings.HasPrefix(a.Annotations["runbook_url"], "https://wiki.example.com/rra#"), a.Alert)
		if a.Alert == "CalicoRRAutoscalerRoleChurn" {
			require.Contains(t, a.Expr, "[30m])) > 50")
		}
	}
	require.JSONEq(t, string(m.Dashboard), string(other.Dashboard))

	r := render(t, nil)
	require.Empty(t, r.all("PrometheusRule"))
	for _, c := range r.all("ConfigMap") {
		require.NotContains(t, c.GetLabels(), "grafana_dashboard")
	}
	// The rule needs the metrics endpoint.
	r = render(t, valuesYAML(t, "metrics: {enabled: false}\nprometheusRule: {enabled: true}\n"))
	require.Empty(t, r.all("PrometheusRule"))
}

// readmeAnchors returns the anchors GitHub gives the README's headings.
func readmeAnchors(md string) map[string]bool {
	out := map[string]bool{}
	inCode := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}

// The alerts as the chart renders them pass promtool check rules, and promtool test rules runs
// tests/alerts.test.yaml on them: series in the product's metric names, each alert expected to
// fire at one time and to stay quiet at another. Every alert has both expectations.
func TestAlertRules(t *testing.T) {
	m := testenv.RenderMonitoring(t)
	checkRules(t, m.RuleFile, len(m.Alerts))

	tests, err := os.ReadFile(filepath.Join(chartDir(t), "tests", "alerts.test.yaml"))
	require.NoError(t, err)
	var suite struct {
		RuleFiles []string `json:"rule_files"`
		Tests     []struct {
			Name  string `json:"name"`
			Cases []struct {
				Alert     string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	require.NoError(t, yaml.Unmarshal(tests, &suite))
	require.Equal(t, []string{"rules.yaml"}, suite.RuleFiles)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range suite.Tests {
		for _, c := range tc.Cases {
			if len(c.ExpAlerts) > 0 {
				fires[c.Alert] = true
			} else {
				quiet[c.Alert] = true
			}
		}
	}
	for _, a := range m.Alerts {
		require.True(t, fires[a.Alert], "tests/alerts.test.yaml never expects %s to fire", a.Alert)
		require.True(t, quiet[a.Alert], "tests/alerts.test.yaml never expects %s to stay quiet", a.Alert)
	}

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rules.yaml"), m.RuleFile, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "alerts.test.yaml"), tests, 0o644))
	out, err := promtool(t, dir, "test", "rules", "alerts.test.yaml")
	require.NoError(t, err, "promtool test rules:\n%s", out)
	require.Contains(t, out, "SUCCESS", out)
}

// Every query of the dashboard parses: each, with Grafana's variables replaced
// (testenv.GrafanaToPromQL), becomes a recording rule of a generated file that promtool check
// rules must accept whole.
func TestDashboardQueriesParse(t *testing.T) {
	m := testenv.RenderMonitoring(t)
	require.GreaterOrEqual(t, len(m.Queries), 15)
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	for i, q := range m.Queries {
		require.NotEmpty(t, q.Expr, "panel %q %s", q.Panel, q.RefID)
		e, err := testenv.GrafanaToPromQL(q.Expr)
		require.NoError(t, err, "panel %q", q.Panel)
		rules = append(rules, rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: e})
	}
	for _, v := range m.Variables {
		rules = append(rules, rule{Record: "dashboard:variable_" + v.Name, Expr: v.Metric})
	}
	file, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	require.NoError(t, err)
	checkRules(t, file, len(rules))

	// And the check can fail: a query with a syntax error is refused.
	bad := append([]rule{{Record: "dashboard:bad", Expr: "sum by (policy (calico_rr_autoscaler_route_reflectors)"}}, rules...)
	file, err = yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": bad}}})
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rules.yaml"), file, 0o644))
	out, err := promtool(t, dir, "check", "rules", "rules.yaml")
	require.Error(t, err, out)
}
