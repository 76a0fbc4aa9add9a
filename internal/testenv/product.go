package testenv

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// webhookProbe is a policy only the product's validating webhook rejects (min > max passes the
// CRD schema): once kubectl's server-side dry run of it fails naming the field, the API server
// calls the product.
const webhookProbe = `apiVersion: routereflector.io/v1alpha1
kind: RouteReflectorPolicy
metadata: {name: probe}
spec: {nodeSelector: {matchLabels: {probe: "1"}}, minRouteReflectors: 5, maxRouteReflectors: 2}
`

// AwaitWebhooks waits until the API server calls the product's webhooks (registered by
// InstallChart, served by a started product), or fails the test after timeout.
func (e *Env) AwaitWebhooks(t testing.TB, timeout time.Duration) {
	t.Helper()
	Eventually(t, "webhooks registered", timeout, 200*time.Millisecond, func() error {
		_, stderr, err := e.KubectlStdin(t, UserAdmin, webhookProbe, "apply", "--dry-run=server", "-f", "-")
		if err == nil || !strings.Contains(stderr, "spec.minRouteReflectors") {
			return fmt.Errorf("probe not rejected by the webhook yet: %v %s", err, stderr)
		}
		return nil
	})
}

// BuildProduct builds the calico-rr-autoscaler binary the chart runs by default, the image's
// entrypoint (the slim build: go build -tags slim, the Kubernetes datastore only), into dir and
// returns its path.
func BuildProduct(ctx context.Context, dir string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "calico-rr-autoscaler")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-tags=slim", "-o", bin, "./cmd/calico-rr-autoscaler")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// Product is `calico-rr-autoscaler serve` running as a process, as its Deployment runs it: as the
// product's service account, with a serving certificate its caBundle trusts.
type Product struct {
	Cmd         *exec.Cmd
	WebhookPort int
	HealthPort  int
	MetricsPort int // 0: metrics off
	CAPEM       []byte
	Log         string
	exited      chan struct{}
}

// ProductOptions are what a test chooses of a started product.
type ProductOptions struct {
	Dir     string   // the binary, certificates and log (a temporary directory)
	Bin     string   // the product binary (BuildProduct)
	Metrics bool     // serve metrics on a free port
	Args    []string // more flags
}

// NewProduct picks the product's ports and writes its serving certificate; Start runs it. The
// chart goes in between (InstallChart with WebhookURL and CAPEM): it is the only source of the
// webhook configurations and of the service account's RBAC, which serve reads at start.
func NewProduct(o ProductOptions) (*Product, error) {
	ports, err := FreePorts(3)
	if err != nil {
		return nil, err
	}
	p := &Product{WebhookPort: ports[0], HealthPort: ports[1], Log: filepath.Join(o.Dir, "serve.log"), exited: make(chan struct{})}
	if o.Metrics {
		p.MetricsPort = ports[2]
	}
	certDir := filepath.Join(o.Dir, "certs")
	if p.CAPEM, err = WriteWebhookCert(certDir); err != nil {
		return nil, err
	}
	metrics := "0"
	if p.MetricsPort != 0 {
		metrics = fmt.Sprintf("127.0.0.1:%d", p.MetricsPort)
	}
	args := append([]string{"serve",
		"--webhook-host=127.0.0.1", "--webhook-port=" + strconv.Itoa(p.WebhookPort), "--cert-dir=" + certDir,
		"--metrics-bind-address=" + metrics, fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", p.HealthPort)}, o.Args...)
	p.Cmd = exec.Command(o.Bin, args...)
	return p, nil
}

// WebhookURL is where the API server reaches the product's webhooks.
func (p *Product) WebhookURL() string { return fmt.Sprintf("https://127.0.0.1:%d", p.WebhookPort) }

// Start runs the product with kubeconfig and waits until it is ready (readyz), or it exits, or
// timeout passes.
func (p *Product) Start(ctx context.Context, kubeconfig string, timeout time.Duration) error {
	logf, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644) // a Restart appends
	if err != nil {
		return err
	}
	p.Cmd.Args = append(p.Cmd.Args, "--kubeconfig="+kubeconfig)
	p.Cmd.Stdout, p.Cmd.Stderr = logf, logf
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.Cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	go func() { _ = p.Cmd.Wait(); logf.Close(); close(p.exited) }()
	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", p.HealthPort)
	err = Poll(ctx, timeout, 200*time.Millisecond, func() error {
		select {
		case <-p.exited:
			return fmt.Errorf("serve exited:\n%s", Tail(p.Log, 40))
		default:
		}
		resp, err := http.Get(readyz)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz %d", resp.StatusCode)
		}
		return nil
	})
	if err != nil {
		p.Stop()
		return fmt.Errorf("serve did not become ready: %w (log:\n%s)", err, Tail(p.Log, 40))
	}
	return nil
}

// Stop sends SIGTERM and waits for the product to exit, killing it after 15 s.
func (p *Product) Stop() {
	if p.Cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}

// Restart stops the product and starts the same binary with the same flags, ports and
// certificate (the webhook configurations keep pointing at it), as a replica that replaces one on
// a running cluster; it returns when the new process is ready (its cache synced) or fails.
func (p *Product) Restart(ctx context.Context, timeout time.Duration) error {
	p.Stop()
	var args []string
	kubeconfig := ""
	for _, a := range p.Cmd.Args[1:] {
		if k, ok := strings.CutPrefix(a, "--kubeconfig="); ok {
			kubeconfig = k
			continue
		}
		args = append(args, a)
	}
	p.Cmd = exec.Command(p.Cmd.Path, args...)
	p.exited = make(chan struct{})
	return p.Start(ctx, kubeconfig, timeout)
}

// StartProduct builds and starts the product for a test, installing the chart in between (see
// NewProduct), and stops it when the test ends (printing its log's tail when the test failed).
// values are the chart values InstallChart adds.
func (e *Env) StartProduct(t testing.TB, metrics bool, values string, args ...string) *Product {
	t.Helper()
	dir := t.TempDir()
	bin, err := BuildProduct(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProduct(ProductOptions{Dir: dir, Bin: bin, Metrics: metrics, Args: args})
	if err != nil {
		t.Fatal(err)
	}
	e.InstallChart(t, p.WebhookURL(), p.CAPEM, values)
	if err := p.Start(t.Context(), e.KubeconfigPath(UserServiceAccount), time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("serve log (tail):\n%s", Tail(p.Log, 40))
		}
	})
	return p
}
