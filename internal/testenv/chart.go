package testenv

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// The release the tests install the product's chart as: UserServiceAccount is its service account.
const (
	ChartRelease   = "calico-rr-autoscaler"
	ChartNamespace = "calico-rr-autoscaler"
)

// ChartDir returns the product's chart (charts/calico-rr-autoscaler) under the module root.
func ChartDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "charts", "calico-rr-autoscaler"), nil
}

// InstallChart installs the product from its rendered chart, as a user would with `helm
// template | kubectl apply`: the webhook configurations (pointed at url, a backend outside the
// cluster, trusting caPEM), the RBAC of the service account and the rest of the release, in
// ChartNamespace (which must exist: see CreateNamespace). The chart is the only source of the webhook registrations, their rules and
// conditions, and the product's permissions. values (YAML, may be empty) is added after the
// test's own: no CRDs (the test installs them), no policy (the test applies its own), no hooks.
// The Deployment stays inert: the test API server runs no controllers. It returns the manifest.
func (e *Env) InstallChart(t testing.TB, url string, caPEM []byte, values string) string {
	t.Helper()
	dir, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("certManager: {enabled: false}\nwebhook: {url: %q, caBundle: %s}\npolicy: {create: false}\n",
		url, base64.StdEncoding.EncodeToString(caPEM))
	files := []string{"-f", writeTemp(t, e.Dir, "values-base-*.yaml", base)}
	if values != "" {
		files = append(files, "-f", writeTemp(t, e.Dir, "values-test-*.yaml", values))
	}
	args := append([]string{"template", ChartRelease, dir, "--namespace", ChartNamespace, "--no-hooks", "--skip-crds"}, files...)
	manifest, stderr, err := e.Helm(t, UserAdmin, args...)
	if err != nil {
		t.Fatalf("testenv: helm template: %v: %s", err, stderr)
	}
	if _, stderr, err := e.KubectlStdin(t, UserAdmin, manifest, "apply", "--server-side", "-f", "-"); err != nil {
		t.Fatalf("testenv: applying the rendered chart: %v: %s", err, stderr)
	}
	return manifest
}

func writeTemp(t testing.TB, dir, pattern, content string) string {
	t.Helper()
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}
