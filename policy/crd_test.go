package policy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// controllerGen is the generator `make generate` runs; the test runs the same one.
const controllerGen = "sigs.k8s.io/controller-tools/cmd/controller-gen@v0.19.0"

// TestGeneratedFilesMatchTypes regenerates the CRD and the deepcopy code from policy/v1alpha1 and
// fails when the committed files differ: the CRD the chart ships is the Go types, not a hand copy.
func TestGeneratedFilesMatchTypes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs controller-gen; make test runs it")
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	out := t.TempDir()
	// Generate in a scratch copy of the module's policy/ tree, never over the committed files.
	for _, f := range []string{"go.mod", "go.sum", "policy/v1alpha1/types.go", "policy/v1alpha1/register.go"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(out, f)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(out, f), b, 0o644))
	}
	cmd := exec.Command("go", "run", controllerGen, "object", "paths=./policy/...",
		"crd:crdVersions=v1", "output:crd:artifacts:config=policy/crd")
	cmd.Dir = out
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GONOSUMDB=github.com/projectcalico")
	outb, err := cmd.CombinedOutput()
	require.NoError(t, err, "controller-gen: %s", outb)

	const crdFile = "routereflector.io_routereflectorpolicies.yaml"
	want, err := os.ReadFile(filepath.Join(out, "policy", "crd", crdFile))
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(root, "policy", "crd", crdFile))
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "policy/crd/%s differs from the Go types: run make generate", crdFile)

	wantDC, err := os.ReadFile(filepath.Join(root, "policy", "v1alpha1", "zz_generated.deepcopy.go"))
	require.NoError(t, err)
	gotDC, err := os.ReadFile(filepath.Join(out, "policy", "v1alpha1", "zz_generated.deepcopy.go"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(wantDC, gotDC), "zz_generated.deepcopy.go is stale: run make generate")

	// The CRD is what the API server will serve: it parses, is cluster-scoped and has the short name.
	var crd apiextensionsv1.CustomResourceDefinition
	require.NoError(t, yaml.UnmarshalStrict(got, &crd))
	require.Equal(t, apiextensionsv1.ClusterScoped, crd.Spec.Scope)
	require.Equal(t, []string{"rrp"}, crd.Spec.Names.ShortNames)
	require.Equal(t, "v1alpha1", crd.Spec.Versions[0].Name)
	require.NotNil(t, crd.Spec.Versions[0].Subresources.Status)
}
