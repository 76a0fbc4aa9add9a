package chart

import (
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
)

// TestRenderLoggingFormat: logging.format is serve's --logging-format (text by default); the
// schema takes text or json only.
func TestRenderLoggingFormat(t *testing.T) {
	args := func(vals map[string]any) []string {
		r := render(t, vals)
		dep := typed[appsv1.Deployment](t, r.get(t, "Deployment", "calico-rr-autoscaler"))
		return dep.Spec.Template.Spec.Containers[0].Args
	}
	require.Contains(t, args(nil), "--logging-format=text")
	a := args(valuesYAML(t, "logging: {format: json}"))
	require.Contains(t, a, "--logging-format=json")
	require.NotContains(t, a, "--logging-format=text")
	fs, _ := serveFlags()
	require.NoError(t, fs.Parse(a[1:]))

	for _, bad := range []string{"logging: {format: xml}", "logging: {format: JSON}", "logging: {fromat: json}"} {
		_, err := renderErr(t, releaseNamespace, valuesYAML(t, bad))
		require.Error(t, err, bad)
		require.ErrorContains(t, err, "logging", bad)
	}
}
