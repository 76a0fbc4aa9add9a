package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// admissionServer is the fake admission webhook (testenv.AdmissionRecorder) serving the
// certificate a certwatcher reloads from disk; it records the serial of every certificate served.
type admissionServer struct {
	*testenv.AdmissionRecorder
	mu      sync.Mutex
	serials map[string]bool
}

func startAdmissionServer(t *testing.T, ctx context.Context, certDir string) *admissionServer {
	t.Helper()
	cw, err := certwatcher.New(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
	require.NoError(t, err)
	go func() { _ = cw.Start(ctx) }()
	s := &admissionServer{serials: map[string]bool{}}
	cfg := &tls.Config{GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		c, err := cw.GetCertificate(hello)
		if err == nil && c != nil {
			if leaf, perr := x509.ParseCertificate(c.Certificate[0]); perr == nil {
				s.mu.Lock()
				s.serials[leaf.SerialNumber.String()] = true
				s.mu.Unlock()
			}
		}
		return c, err
	}}
	TLSOpts(cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s.AdmissionRecorder = testenv.StartAdmissionRecorder(t, ln, cfg)
	return s
}

func (s *admissionServer) servedCertificates() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.serials)
}

// TestRotationOnRealAPIServer runs the Rotator with lifetimes of seconds
// against a real kube-apiserver that calls a webhook (failurePolicy Fail)
// through a Service reference, as it calls the product's. Over several
// serving-certificate and CA rotations, every call must succeed: the API
// server trusts every certificate served, through the caBundle the Rotator
// patches.
func TestRotationOnRealAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("needs kube-apiserver and etcd")
	}
	env := testenv.Start(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	const ns, svc, whName = "rra-certs", "rra-webhook", "rra-certs-test"
	env.CreateNamespace(t, ns)

	opts := Options{
		Namespace: ns, SecretName: "rra-webhook-tls", ServiceName: svc, CertDir: t.TempDir(),
		ValidatingWebhooks: []string{whName},
		CAValidity:         12 * time.Second, CertValidity: 4 * time.Second,
		CheckInterval: 200 * time.Millisecond, RetryInterval: 200 * time.Millisecond,
		// A sixth of the default (3 s): the new caBundle must reach the API server's webhook
		// client within it, also on two cores loaded by make test.
		PropagationDelay: 500 * time.Millisecond,
	}
	// The product's service account, bound to cluster-admin by testenv: the
	// chart's RBAC is tested with the chart.
	r, err := New(env.ConfigFor(testenv.UserServiceAccount), opts)
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, r.Bootstrap(ctx), "bootstrap without the webhook configuration")
	t.Logf("bootstrap (CA, certificate, Secret, files) in %s", time.Since(start).Round(time.Millisecond))
	sec, err := cs.CoreV1().Secrets(ns).Get(ctx, opts.SecretName, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, corev1.SecretTypeTLS, sec.Type)

	server := startAdmissionServer(t, ctx, opts.CertDir)

	// The API server resolves an ExternalName Service to its name and the
	// webhook's port, and checks the certificate for <svc>.<ns>.svc.
	_, err = cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svc, Namespace: ns},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "127.0.0.1"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: whName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "configmaps.certs.routereflector.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
				Namespace: ns, Name: svc, Path: ptr.To("/validate"), Port: ptr.To(int32(server.Port)),
			}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			TimeoutSeconds:          ptr.To(int32(5)),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	runErr := make(chan error, 1)
	go func() { runErr <- r.Start(ctx) }()
	select {
	case <-r.Ready():
	case <-time.After(20 * time.Second):
		require.Fail(t, "rotator not ready 20s after the webhook configuration appeared")
	}
	vwc, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, whName, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, vwc.Webhooks[0].ClientConfig.CABundle, "caBundle injected")
	// The API server reads webhook configurations through its own informer: the first caBundle
	// (the configuration was created without one) reaches its webhook client a moment after the
	// write, longer on a loaded machine (make test). Rotations are what this test measures, so it
	// starts once a call has passed.
	testenv.Eventually(t, "the API server trusts the injected caBundle", 20*time.Second, 100*time.Millisecond, func() error {
		_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "warmup-", Namespace: ns}}, metav1.CreateOptions{})
		return err
	})
	warmup := server.Calls()

	// Call the webhook for 15s: about five serving certificates and two CAs.
	cas := map[string]bool{}
	var failures []string
	deadline := time.Now().Add(15 * time.Second)
	n := 0
	for time.Now().Before(deadline) {
		n++
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-" + strconv.Itoa(n), Namespace: ns}}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			failures = append(failures, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), err))
		}
		if s, err := cs.CoreV1().Secrets(ns).Get(ctx, opts.SecretName, metav1.GetOptions{}); err == nil {
			if c := parseCerts(s.Data[CACertKey]); len(c) > 0 {
				cas[c[0].SerialNumber.String()] = true
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d webhook calls, %d served certificates, %d CAs, %d failures", server.Calls(), server.servedCertificates(), len(cas), len(failures))
	require.Empty(t, failures, "every admission call must succeed across rotations")
	require.GreaterOrEqual(t, server.servedCertificates(), 4, "the server picked up renewed certificates")
	require.GreaterOrEqual(t, len(cas), 2, "the CA was renewed")
	require.EqualValues(t, n, server.Calls()-warmup, "every create reached the webhook")

	cancel()
	select {
	case err := <-runErr:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		require.Fail(t, "Start did not return after cancel")
	}
}

// TestSetupWithManager: Setup returns with the certificate files in place
// (the webhook server, started first by the manager, loads them at once) and
// the readiness check passes once the manager runs the Rotator.
func TestSetupWithManager(t *testing.T) {
	if testing.Short() {
		t.Skip("needs kube-apiserver and etcd")
	}
	env := testenv.Start(t)
	env.CreateNamespace(t, "rra-setup")
	mgr, err := manager.New(env.ConfigFor(testenv.UserServiceAccount), manager.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	require.NoError(t, err)
	dir := t.TempDir()
	ready, err := Setup(mgr, Options{Namespace: "rra-setup", SecretName: "tls", ServiceName: "rra", CertDir: dir,
		MutatingWebhooks: []string{"absent"}, RetryInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	check := Checker(ready)
	require.Error(t, check(nil), "not ready before the manager runs")
	_, err = tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	require.NoError(t, err, "Setup wrote the certificate")

	_, err = Setup(mgr, Options{Namespace: "rra-setup", ServiceName: "rra", CertDir: dir})
	require.ErrorContains(t, err, "secret name is required")

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	// A named configuration that does not exist keeps it not ready...
	time.Sleep(500 * time.Millisecond)
	require.Error(t, check(nil))
	// ...until it appears and gets the caBundle.
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	none := admissionregistrationv1.SideEffectClassNone
	_, err = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "absent"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "a.certs.routereflector.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "rra-setup", Name: "rra"}},
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		require.Fail(t, "not ready 10s after the webhook configuration appeared")
	}
	require.NoError(t, check(nil))
	mwc, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "absent", metav1.GetOptions{})
	require.NoError(t, err)
	sec, err := cs.CoreV1().Secrets("rra-setup").Get(ctx, "tls", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, sec.Data[CACertKey], mwc.Webhooks[0].ClientConfig.CABundle)
	cancel()
	require.NoError(t, <-done)
}
