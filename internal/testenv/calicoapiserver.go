package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// The Calico API server as the Tigera operator installs it: Service calico-api in namespace
// calico-apiserver, service account calico-apiserver.
const (
	CalicoAPIServerNamespace = "calico-apiserver"
	CalicoAPIServerService   = "calico-api"
	// UserCalicoAPIServer is its service account's identity: add it with WithCalicoAPIServer.
	UserCalicoAPIServer = "system:serviceaccount:calico-apiserver:calico-apiserver"
)

// WithCalicoAPIServer is WithAggregation plus the static-token user UserCalicoAPIServer (bound to
// cluster-admin: the test is about admission, not RBAC), for StartCalicoAPIServer.
func WithCalicoAPIServer() Option {
	return func(o *Options) {
		WithAggregation()(o)
		WithUser(UserCalicoAPIServer, true, "system:serviceaccounts", "system:serviceaccounts:"+CalicoAPIServerNamespace, "system:authenticated")(o)
	}
}

// StartCalicoAPIServer runs Calico's own API server (ToolCalicoAPIServer, built by hack/tools.sh)
// on loopback with the Kubernetes datastore, as UserCalicoAPIServer (so it stores the
// crd.projectcalico.org objects under that identity), delegating authentication and
// authorization to the Env (which must have WithCalicoAPIServer), and registers it as the
// APIService v3.projectcalico.org. The crd.projectcalico.org CRDs must be installed. It fails the
// test when the binary is missing or the server does not become Available.
func (e *Env) StartCalicoAPIServer(t testing.TB) {
	t.Helper()
	if e.FrontProxyCA == "" {
		t.Fatal("testenv: StartCalicoAPIServer needs an Env started WithCalicoAPIServer")
	}
	bin := RequireBinary(t, ToolCalicoAPIServer)
	dir := filepath.Join(e.Dir, "calico-apiserver")
	caPEM, err := WriteServingCert(dir, CalicoAPIServerService+"."+CalicoAPIServerNamespace+".svc")
	if err != nil {
		t.Fatal(err)
	}
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	kc := e.KubeconfigPath(UserCalicoAPIServer)
	logPath := filepath.Join(e.Dir, "calico-apiserver.log")
	p, err := startProcessEnv("calico-apiserver", bin, logPath,
		[]string{"DATASTORE_TYPE=kubernetes", "KUBECONFIG=" + kc, "LOG_LEVEL=info"},
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(ports[0]),
		"--tls-cert-file="+filepath.Join(dir, "tls.crt"),
		"--tls-private-key-file="+filepath.Join(dir, "tls.key"),
		"--kubeconfig="+kc,
		"--authentication-kubeconfig="+kc,
		"--authorization-kubeconfig="+kc,
		"--requestheader-client-ca-file="+e.FrontProxyCA,
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: calico-apiserver log tail:\n%s", Tail(logPath, 40))
		}
		p.stop()
	})
	// The server is up once it answers TLS on its port (401/403 without credentials).
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfigFor(caPEM)}}
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	for {
		if p.exited() {
			t.Fatalf("testenv: calico-apiserver exited: %v\n%s", p.err, Tail(logPath, 40))
		}
		resp, err := hc.Get(fmt.Sprintf("https://127.0.0.1:%d/healthz", ports[0]))
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("testenv: calico-apiserver not serving on 127.0.0.1:%d: %v\n%s", ports[0], err, Tail(logPath, 40))
		case <-time.After(200 * time.Millisecond):
		}
	}
	e.RegisterAPIService(t, APIService{Group: "projectcalico.org", Version: "v3",
		Namespace: CalicoAPIServerNamespace, Service: CalicoAPIServerService, Port: ports[0], CABundle: caPEM})
}

func tlsConfigFor(caPEM []byte) *tls.Config {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}
