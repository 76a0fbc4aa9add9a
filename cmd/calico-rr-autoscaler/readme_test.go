package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/nodesource"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// TestReadmePolicyExamples runs plan on every RouteReflectorPolicy example of the README and docs/, as a user
// who copies one would: it must be valid, give no warning, and plan 300 nodes in three zones
// without being Degraded.
func TestReadmePolicyExamples(t *testing.T) {
	var docs []byte
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		docs = append(docs, b...)
	}
	var examples []string
	for _, block := range strings.Split(string(docs), "```yaml\n")[1:] {
		body, _, _ := strings.Cut(block, "```")
		if strings.Contains(body, "kind: RouteReflectorPolicy") {
			examples = append(examples, body)
		}
	}
	require.NotEmpty(t, examples, "the README and docs/ have policy examples")
	for i, ex := range examples {
		path := filepath.Join(t.TempDir(), "policy.yaml")
		require.NoError(t, os.WriteFile(path, []byte(ex), 0o644))
		p, _, err := nodesource.ReadPolicyFile(path)
		require.NoError(t, err, "example %d", i)
		require.Empty(t, policy.Warnings(p), "example %d", i)
		var out bytes.Buffer
		require.NoError(t, runPlan([]string{"--simulate", "300", "--zones", "3", "--policy", path, "-o", "json", "--routes=false"}, &out), "example %d", i)
		var res extender.Result
		require.NoError(t, json.Unmarshal(out.Bytes(), &res))
		require.Empty(t, res.Conditions, "example %d is Degraded", i)
		require.Positive(t, res.Summary.RouteReflectors, "example %d", i)
	}
}
