package testenv

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Monitoring is what the chart renders for Prometheus and Grafana with prometheusRule.enabled and
// grafanaDashboard.enabled, through the real helm.
type Monitoring struct {
	// Manifest is helm template's whole output.
	Manifest string
	// RuleFile is the PrometheusRule's spec as YAML: a Prometheus rule file (groups).
	RuleFile []byte
	// Alerts are its alerting rules.
	Alerts []AlertRule
	// PrometheusRule and DashboardConfigMap are the two objects as rendered.
	PrometheusRule, DashboardConfigMap map[string]any
	// Dashboard is the dashboard JSON of the ConfigMap.
	Dashboard []byte
	// Queries are the dashboard's panel queries; Variables its label_values variables.
	Queries   []PanelQuery
	Variables []LabelValuesVariable
}

// AlertRule is one alerting rule of the PrometheusRule.
type AlertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// PanelQuery is one query of a dashboard panel, as written (Grafana variables included).
type PanelQuery struct {
	Panel  string
	RefID  string
	Expr   string
	Legend string
}

// LabelValuesVariable is a dashboard variable filled by label_values(Metric, Label).
type LabelValuesVariable struct {
	Name, Metric, Label string
}

var labelValuesQuery = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)

// RenderMonitoring renders the chart with the real helm (helm template, as a user would) with
// prometheusRule.enabled and grafanaDashboard.enabled and the extra --set values, and extracts the
// PrometheusRule and the dashboard. It fails the test when helm is missing or either object is
// not rendered.
func RenderMonitoring(t testing.TB, set ...string) *Monitoring {
	t.Helper()
	bin := RequireBinary(t, ToolHelm)
	dir, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	h := t.TempDir()
	args := []string{"template", ChartRelease, dir, "--namespace", ChartNamespace,
		"--set", "prometheusRule.enabled=true", "--set", "grafanaDashboard.enabled=true"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, stderr, err := run(t, bin, args, "", []string{
		"HELM_CONFIG_HOME=" + filepath.Join(h, "config"),
		"HELM_CACHE_HOME=" + filepath.Join(h, "cache"),
		"HELM_DATA_HOME=" + filepath.Join(h, "data"),
	})
	if err != nil {
		t.Fatalf("testenv: %v: %s", err, stderr)
	}
	m := &Monitoring{Manifest: out}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		obj := map[string]any{}
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("testenv: decoding helm template's output: %v", err)
		}
		switch obj["kind"] {
		case "PrometheusRule":
			m.PrometheusRule = obj
		case "ConfigMap":
			if l, _ := obj["metadata"].(map[string]any)["labels"].(map[string]any); l != nil && l["app.kubernetes.io/name"] != nil {
				if data, _ := obj["data"].(map[string]any); data != nil && data["calico-rr-autoscaler.json"] != nil {
					m.DashboardConfigMap = obj
				}
			}
		}
	}
	if m.PrometheusRule == nil || m.DashboardConfigMap == nil {
		t.Fatalf("testenv: helm template with prometheusRule.enabled and grafanaDashboard.enabled rendered PrometheusRule %v, dashboard ConfigMap %v",
			m.PrometheusRule != nil, m.DashboardConfigMap != nil)
	}
	if err := m.extract(); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return m
}

func (m *Monitoring) extract() error {
	spec, _ := m.PrometheusRule["spec"].(map[string]any)
	var err error
	if m.RuleFile, err = yaml.Marshal(spec); err != nil {
		return err
	}
	var groups struct {
		Groups []struct {
			Rules []AlertRule `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(m.RuleFile, &groups); err != nil {
		return fmt.Errorf("the PrometheusRule's groups: %w", err)
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				return fmt.Errorf("rule %q of the PrometheusRule is not an alert", r.Expr)
			}
			m.Alerts = append(m.Alerts, r)
		}
	}
	m.Dashboard = []byte(m.DashboardConfigMap["data"].(map[string]any)["calico-rr-autoscaler.json"].(string))
	var d struct {
		Panels     []dashboardPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(m.Dashboard, &d); err != nil {
		return fmt.Errorf("the dashboard JSON: %w", err)
	}
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			for _, q := range p.Targets {
				m.Queries = append(m.Queries, PanelQuery{Panel: p.Title, RefID: q.RefID, Expr: q.Expr, Legend: q.LegendFormat})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if o, ok := v.Query.(map[string]any); ok {
			q, _ = o["query"].(string)
		}
		s := labelValuesQuery.FindStringSubmatch(q)
		if s == nil {
			return fmt.Errorf("dashboard variable %s: query %q is not label_values(metric, label)", v.Name, q)
		}
		m.Variables = append(m.Variables, LabelValuesVariable{Name: v.Name, Metric: s[1], Label: s[2]})
	}
	return nil
}

type dashboardPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		RefID        string `json:"refId"`
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"` // a collapsed row's
}
