package metricsdoc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// TestMetricsReferenceMatchesCode: docs/operations.md's metrics reference is what the product's
// metric definitions render (make generate writes it), and it holds metrics of each kind with
// their labels.
func TestMetricsReferenceMatchesCode(t *testing.T) {
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	ms, err := Collect(root)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(ms), 20, "the product's metrics")
	want := Render(ms)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	require.NoError(t, err)
	require.Contains(t, string(doc), want, "docs/operations.md's metrics reference differs from the code: run make generate")
	for _, w := range []string{"| `calico_rr_autoscaler_transition_held_cluster_id_changes` | gauge | `policy` |", "| counter |", "| histogram |"} {
		require.True(t, strings.Contains(want, w), "%s in %s", w, want)
	}
}

func TestCollectReadsLiterals(t *testing.T) {
	dir := t.TempDir()
	src := `package p
import "github.com/prometheus/client_golang/prometheus"
var a = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "calico_rr_autoscaler_a", Help: "A " + "b|c."}, []string{"policy", "zone"})
var b = prometheus.NewCounter(prometheus.CounterOpts{Name: "other_b", Help: "not ours"})
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "m.go"), []byte(src), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "m_test.go"), []byte(strings.ReplaceAll(src, "_a\"", "_t\"")), 0o644))
	ms, err := Collect(dir)
	require.NoError(t, err)
	require.Equal(t, []Metric{{Name: "calico_rr_autoscaler_a", Type: "gauge", Help: "A b|c.", File: "m.go", Labels: []string{"policy", "zone"}}}, ms)
	require.Contains(t, Render(ms), `| A b\|c. |`)
	require.Error(t, Update(filepath.Join(dir, "none.md"), "x"))
}
