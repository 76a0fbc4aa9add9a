package testenv

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParsePromQLRefs(t *testing.T) {
	for _, c := range []struct {
		expr            string
		metrics, labels []string
	}{
		{`max by (policy, zone) (calico_rr_autoscaler_route_reflectors_desired) - max by (policy, zone) (calico_rr_autoscaler_route_reflectors) > 0`,
			[]string{"calico_rr_autoscaler_route_reflectors", "calico_rr_autoscaler_route_reflectors_desired"}, []string{"policy", "zone"}},
		{`histogram_quantile(0.99, sum by (webhook, le) (rate(x_duration_seconds_bucket{webhook!~"a|b", x="}"}[5m:1m] offset 1h))) > 1e-3`,
			[]string{"x_duration_seconds_bucket"}, []string{"le", "webhook", "x"}},
		{`(max(calico_rr_autoscaler_leader) or vector(0)) < 1`, []string{"calico_rr_autoscaler_leader"}, nil},
		{`sum(rate(a{job='j'}[5m])) without (instance) / on (policy) group_left (zone) b unless {__name__="c", d=~".*"}`,
			[]string{"a", "b", "c"}, []string{"d", "instance", "job", "policy", "zone"}},
		{`min by (kind) (expiry) - time() < 604800`, []string{"expiry"}, []string{"kind"}},
		{`a * on (x) group_left b`, []string{"a", "b"}, []string{"x"}},
	} {
		r, err := ParsePromQLRefs(c.expr)
		require.NoError(t, err, c.expr)
		if c.labels == nil {
			c.labels = []string{}
		}
		require.Equal(t, c.metrics, r.Metrics, c.expr)
		require.Equal(t, c.labels, r.Labels, c.expr)
	}
	for _, bad := range []string{`sum(a`, `a{b="c"`, `a{b~"c"}`, `rate(a[5m)`, `a ? b`, `sum by a (b)`, `a{b="c}`} {
		_, err := ParsePromQLRefs(bad)
		require.Error(t, err, bad)
	}
}

func TestGrafanaToPromQL(t *testing.T) {
	got, err := GrafanaToPromQL(`sum by (policy) (rate(a{policy=~"$policy"}[$__rate_interval]))`)
	require.NoError(t, err)
	require.Equal(t, `sum by (policy) (rate(a{policy=~".*"}[5m]))`, got)
	_, err = GrafanaToPromQL(`a{policy="$policy"}`)
	require.Error(t, err)
	require.Equal(t, []string{"policy", "zone"}, LegendLabels("{{policy}} {{ zone }} {{policy}}"))
	require.Equal(t, []string{"policy"}, AlertTemplateLabels(`Policy {{ $labels.policy }}: {{ $value }}`))
}
