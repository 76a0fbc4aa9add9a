package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Versions of the binaries hack/tools.sh builds. Keep in sync with the
// defaults in hack/tools.sh.
const (
	KubernetesVersion = "v1.34.3"
	EtcdVersion       = "v3.6.16"
	HelmVersion       = "v3.19.5"
	// CalicoVersion is the github.com/projectcalico/calico module version (go.mod's) the Calico
	// API server is built from.
	CalicoVersion = "v0.0.0-20251021213802-b1f3c43f8437"
	// KarpenterVersion is sigs.k8s.io/karpenter's (hack/karpenter/go.mod's): its controller with
	// the kwok cloud provider (test/karpenter).
	KarpenterVersion = "v1.8.2"
)

// Tool names accepted by BinaryPath and RequireBinary.
const (
	ToolKubeAPIServer = "kube-apiserver"
	ToolEtcd          = "etcd"
	ToolKubectl       = "kubectl"
	ToolHelm          = "helm"
	// ToolCalicoAPIServer is Calico's API server (apiserver/cmd/apiserver of the calico module).
	ToolCalicoAPIServer = "calico-apiserver"
	// ToolKarpenter is Karpenter's controller with its kwok cloud provider (sigs.k8s.io/karpenter/kwok).
	ToolKarpenter = "karpenter"
)

var toolEnv = map[string]string{
	ToolKubeAPIServer:   "KUBE_APISERVER",
	ToolEtcd:            "ETCD",
	ToolKubectl:         "KUBECTL",
	ToolHelm:            "HELM",
	ToolCalicoAPIServer: "CALICO_APISERVER",
	ToolKarpenter:       "KARPENTER",
}

var toolVersion = map[string]string{
	ToolKubeAPIServer:   KubernetesVersion,
	ToolEtcd:            EtcdVersion,
	ToolKubectl:         KubernetesVersion,
	ToolHelm:            HelmVersion,
	ToolCalicoAPIServer: CalicoVersion,
	ToolKarpenter:       KarpenterVersion,
}

// CacheDir is hack/tools.sh's cache: $RRA_CACHE, else
// $HOME/.cache/calico-rr-autoscaler.
func CacheDir() string {
	if d := os.Getenv("RRA_CACHE"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "calico-rr-autoscaler")
}

// BinaryPath finds a tool ("kube-apiserver", "etcd", "kubectl" or "helm"):
// the path in its environment variable (KUBE_APISERVER, ETCD, KUBECTL,
// HELM) when set, else <CacheDir>/bin/<tool>-<version> as built by
// hack/tools.sh. The error is one line that says how to get the binary.
func BinaryPath(tool string) (string, error) {
	envName, ok := toolEnv[tool]
	if !ok {
		return "", fmt.Errorf("testenv: unknown tool %q", tool)
	}
	if p := os.Getenv(envName); p != "" {
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("testenv: %s=%s: %v (unset it or run hack/tools.sh)", envName, p, err)
		}
		return p, nil
	}
	p := filepath.Join(CacheDir(), "bin", tool+"-"+toolVersion[tool])
	if err := checkExecutable(p); err != nil {
		return "", fmt.Errorf("testenv: %s not found (%s unset, %s missing): run hack/tools.sh %s to build it", tool, envName, p, tool)
	}
	return p, nil
}

// RequireBinary is BinaryPath that fails the test when the binary is missing.
func RequireBinary(t testing.TB, tool string) string {
	t.Helper()
	p, err := BinaryPath(tool)
	if err != nil {
		t.Fatal(err.Error())
	}
	return p
}

func checkExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("not an executable file")
	}
	return nil
}
