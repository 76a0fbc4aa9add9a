package chart

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/certs"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// Modules whose CRDs the tests install; never hand-written copies.
const (
	certManagerModule        = "github.com/cert-manager/cert-manager" // version from go.mod (its controllers run in-process)
	calicoModule             = "github.com/projectcalico/calico"      // version from go.mod
	prometheusOperatorModule = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
)

// moduleDir returns the directory of a module in the module cache: a module
// of go.mod (path), or any version (path@version, fetched through the module
// proxy like the tools of hack/tools.sh).
func moduleDir(t testing.TB, mod string) (string, error) {
	t.Helper()
	var cmd *exec.Cmd
	if strings.Contains(mod, "@") {
		cmd = exec.Command("go", "mod", "download", "-json", mod)
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GO111MODULE=on", "GOWORK=off")
	} else {
		cmd = exec.Command("go", "list", "-m", "-json", mod)
		cmd.Dir = filepath.Join("..", "..")
		cmd.Env = append(os.Environ(), "GONOSUMDB=github.com/projectcalico")
	}
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return "", &moduleError{mod: mod, msg: string(ee.Stderr)}
		}
		return "", err
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", err
	}
	if m.Dir == "" {
		return "", &moduleError{mod: mod, msg: m.Error + " (module not downloaded)"}
	}
	return m.Dir, nil
}

type moduleError struct{ mod, msg string }

func (e *moduleError) Error() string { return e.mod + ": " + strings.TrimSpace(e.msg) }

// crdSet says which optional CRDs were installed.
type crdSet struct{ serviceMonitor, prometheusRule bool }

// installCRDs installs the chart's CRD, cert-manager's (from its module),
// Calico's crd.projectcalico.org CRDs (from its module) and, when its module
// can be fetched, prometheus-operator's ServiceMonitor and PrometheusRule.
func installCRDs(t *testing.T, env *testenv.Env) crdSet {
	t.Helper()
	start := time.Now()
	paths := []string{filepath.Join(chartDir(t), "crds")}
	cm, err := moduleDir(t, certManagerModule)
	require.NoError(t, err)
	paths = append(paths, filepath.Join(cm, "deploy", "crds"))
	calico, err := moduleDir(t, calicoModule)
	require.NoError(t, err, "the Calico module is a dependency of go.mod")
	calicoCRDs, err := filepath.Glob(filepath.Join(calico, "libcalico-go", "config", "crd", "crd.projectcalico.org_*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, calicoCRDs)
	paths = append(paths, calicoCRDs...)
	var set crdSet
	if po, err := moduleDir(t, prometheusOperatorModule); err == nil {
		paths = append(paths, filepath.Join(po, "example", "prometheus-operator-crd", "monitoring.coreos.com_servicemonitors.yaml"),
			filepath.Join(po, "example", "prometheus-operator-crd", "monitoring.coreos.com_prometheusrules.yaml"))
		set.serviceMonitor, set.prometheusRule = true, true
	} else {
		t.Logf("prometheus-operator CRDs unavailable, ServiceMonitors and PrometheusRules are not applied: %v", err)
	}
	crds := testenv.InstallCRDs(t, env.Config, paths...)
	t.Logf("installed %d CRDs in %s", len(crds), time.Since(start).Round(time.Millisecond))
	return set
}

type (
	review   = testenv.Review
	recorder = testenv.AdmissionRecorder
)

// startRecorder is the fake admission webhook on ln with the product's TLS settings.
func startRecorder(t *testing.T, ln net.Listener, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *recorder {
	t.Helper()
	cfg := &tls.Config{GetCertificate: getCert}
	certs.TLSOpts(cfg)
	return testenv.StartAdmissionRecorder(t, ln, cfg)
}

func paths(rs []review) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Path)
	}
	return out
}

// pointServiceAtRecorder replaces the chart's ClusterIP Service (nothing
// routes ClusterIPs here) with an ExternalName Service of the same name: the
// API server then dials 127.0.0.1 at the webhook's service port (the chart's
// service.port, set to the recorder's port) and still checks the
// certificate for <svc>.<ns>.svc.
func pointServiceAtRecorder(t *testing.T, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	ctx := t.Context()
	require.NoError(t, cs.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}))
	_, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "127.0.0.1"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// eventually polls cond every 100ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, what, timeout, 100*time.Millisecond, func() error {
		if !cond() {
			return errors.New("not yet")
		}
		return nil
	})
}

func freeListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}
