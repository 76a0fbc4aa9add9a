package policydoc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// TestPolicyReferenceMatchesCRD: docs/policy-reference.md is what the CRD's schema renders (make
// generate writes it), and it names every spec field the schema has.
func TestPolicyReferenceMatchesCRD(t *testing.T) {
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	crd, err := os.ReadFile(filepath.Join(root, "policy/crd/routereflector.io_routereflectorpolicies.yaml"))
	require.NoError(t, err)
	want, err := Render(crd)
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(root, "docs/policy-reference.md"))
	require.NoError(t, err)
	require.Equal(t, want, string(got), "docs/policy-reference.md differs from the CRD: run make generate")
	for _, f := range []string{"`topology`", "`maxRackSize`", "`spec.topology`", "`spec.release`", "`status`"} {
		require.Contains(t, want, f)
	}
}

func TestRenderRejectsBadInput(t *testing.T) {
	for name, in := range map[string]string{
		"not YAML":    "{",
		"no schema":   "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: x}\nspec: {group: g, names: {kind: K, plural: ks}, scope: Cluster, versions: [{name: v1, served: true, storage: true}]}\n",
		"unknown key": "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nbogus: 1\n",
		"no versions": "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: x}\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Render([]byte(in))
			require.Error(t, err)
			require.NotContains(t, err.Error(), "\n", "one line")
			require.False(t, strings.Contains(err.Error(), "panic"))
		})
	}
}
