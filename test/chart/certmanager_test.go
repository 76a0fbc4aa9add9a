package chart

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	cmcontroller "github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/serve"

	// cert-manager's controllers that issue a Certificate from a SelfSigned
	// or CA Issuer register themselves on import.
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

var certManagerControllers = []string{
	"issuers",
	"certificaterequests-approver",
	"certificaterequests-issuer-selfsigned",
	"certificaterequests-issuer-ca",
	"certificates-trigger",
	"certificates-key-manager",
	"certificates-request-manager",
	"certificates-issuing",
	"certificates-readiness",
}

// runCertManager runs cert-manager v1.19's controllers (for SelfSigned and CA
// issuers) and its cainjector (for webhook configurations) in the test
// process, against env, until the test ends.
func runCertManager(t *testing.T, env *testenv.Env) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })

	factory, err := cmcontroller.NewContextFactory(ctx, cmcontroller.ContextOptions{
		Kubeconfig:         env.KubeconfigPath(testenv.UserAdmin),
		KubernetesAPIQPS:   100,
		KubernetesAPIBurst: 200,
		IssuerOptions:      cmcontroller.IssuerOptions{ClusterResourceNamespace: "cert-manager"},
	})
	require.NoError(t, err)
	known := cmcontroller.Known()
	var run []cmcontroller.Interface
	for _, name := range certManagerControllers {
		ctor, ok := known[name]
		require.True(t, ok, "cert-manager controller %s not registered", name)
		c, err := ctor(factory)
		require.NoError(t, err, name)
		run = append(run, c)
	}
	cctx, err := factory.Build()
	require.NoError(t, err)
	cctx.KubeSharedInformerFactory.Start(ctx.Done())
	cctx.SharedInformerFactory.Start(ctx.Done())
	for i, c := range run {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(1, ctx); err != nil && ctx.Err() == nil {
				assert.Fail(t, fmt.Sprintf("cert-manager controller %s: %v", certManagerControllers[i], err))
			}
		}()
	}

	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, cmapi.AddToScheme(scheme))
	require.NoError(t, apiextensionsv1.AddToScheme(scheme))
	require.NoError(t, apiregistrationv1.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	require.NoError(t, err)
	require.NoError(t, cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			"mutatingwebhookconfiguration":   true,
			"validatingwebhookconfiguration": true,
		},
	}))
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := mgr.Start(ctx); err != nil && ctx.Err() == nil {
			assert.Fail(t, fmt.Sprintf("cainjector: %v", err))
		}
	}()
}

// TestCertManagerEndToEnd installs the chart with the real helm binary, as a
// user would, into a real kube-apiserver; cert-manager (in-process) issues
// the serving certificate the chart asks for and its cainjector fills the
// webhook configurations' caBundle. A webhook server using that certificate
// then receives the API server's reviews through the chart's webhook
// configurations and Service, which also shows which requests the
// matchConditions let through: no kubelet heartbeat, no unrelated change.
func TestCertManagerEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("needs kube-apiserver, etcd and helm")
	}
	env := testenv.Start(t)
	installCRDs(t, env)
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	env.CreateNamespace(t, releaseNamespace)

	// helm install, with the webhooks' service port set to the recorder's.
	ln := freeListener(t)
	portStr := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	start := time.Now()
	out, stderr, err := env.Helm(t, testenv.UserAdmin, "install", releaseName, chartDir(t),
		"--namespace", releaseNamespace, "--set", "policy.create=false", "--set", "service.port="+portStr)
	require.NoError(t, err, "helm install: %s\n%s", out, stderr)
	t.Logf("helm install in %s", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	runCertManager(t, env)
	cm, err := cmclient.NewForConfig(env.Config)
	require.NoError(t, err)
	const fullname = "calico-rr-autoscaler"
	eventually(t, time.Minute, "the serving Certificate to be Ready", func() bool {
		crt, err := cm.CertmanagerV1().Certificates(releaseNamespace).Get(ctx, fullname+"-tls", metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range crt.Status.Conditions {
			if c.Type == cmapi.CertificateConditionReady {
				return c.Status == cmmeta.ConditionTrue
			}
		}
		return false
	})
	sec, err := cs.CoreV1().Secrets(releaseNamespace).Get(ctx, fullname+"-tls", metav1.GetOptions{})
	require.NoError(t, err)
	t.Logf("cert-manager issued the serving certificate in %s", time.Since(start).Round(time.Millisecond))

	// The certificate is for the Service's DNS names, signed by the chart's
	// CA, and the Secret carries that CA.
	pair, err := tls.X509KeyPair(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey])
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	_, isECDSA := leaf.PublicKey.(*ecdsa.PublicKey)
	require.True(t, isECDSA)
	caPEM := sec.Data["ca.crt"]
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	svcName := fullname + "." + releaseNamespace + ".svc"
	_, err = leaf.Verify(x509.VerifyOptions{DNSName: svcName, Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	require.NoError(t, err)
	caSec, err := cs.CoreV1().Secrets(releaseNamespace).Get(ctx, fullname+"-ca", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, caSec.Data["tls.crt"], caPEM, "signed by the chart's own CA")

	// cainjector fills the caBundle of both webhook configurations.
	eventually(t, time.Minute, "cainjector to inject the CA", func() bool {
		mwc, err1 := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, fullname, metav1.GetOptions{})
		vwc, err2 := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, fullname, metav1.GetOptions{})
		if err1 != nil || err2 != nil {
			return false
		}
		all := [][]byte{mwc.Webhooks[0].ClientConfig.CABundle}
		for _, w := range vwc.Webhooks {
			all = append(all, w.ClientConfig.CABundle)
		}
		for _, b := range all {
			if !bytes.Equal(b, caPEM) {
				return false
			}
		}
		return true
	})

	// A TLS client that trusts only the Secret's CA accepts a server using the
	// Secret's certificate, over TLS 1.2 or newer only.
	rec := startRecorder(t, ln, func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &pair, nil })
	conn, err := tls.Dial("tcp", "127.0.0.1:"+portStr, &tls.Config{RootCAs: pool, ServerName: svcName, MinVersion: tls.VersionTLS12})
	require.NoError(t, err)
	require.GreaterOrEqual(t, conn.ConnectionState().Version, uint16(tls.VersionTLS12))
	conn.Close()
	_, err = tls.Dial("tcp", "127.0.0.1:"+portStr, &tls.Config{RootCAs: pool, ServerName: svcName, MaxVersion: tls.VersionTLS11})
	require.Error(t, err, "TLS 1.1 refused")
	_, err = tls.Dial("tcp", "127.0.0.1:"+portStr, &tls.Config{ServerName: svcName})
	require.Error(t, err, "not trusted without the CA")

	pointServiceAtRecorder(t, cs, releaseNamespace, fullname)
	checkMatchConditions(t, env, rec)
	checkProductServes(t, env, cs, sec, fullname)
}

// checkProductServes runs the product itself (calico-rr-autoscaler serve, in process) with the
// certificate cert-manager issued, moves the webhooks' service port to it, and checks that the API
// server reaches it, trusting the CA cainjector put in the caBundle: an invalid policy is rejected
// with the product's own field errors.
func checkProductServes(t *testing.T, env *testenv.Env, cs kubernetes.Interface, sec *corev1.Secret, fullname string) {
	ctx := t.Context()
	certDir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(certDir, corev1.TLSCertKey), sec.Data[corev1.TLSCertKey], 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(certDir, corev1.TLSPrivateKeyKey), sec.Data[corev1.TLSPrivateKeyKey], 0o600))
	ln := freeListener(t)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())

	sctx, cancel := context.WithCancel(context.Background())
	srv, err := serve.New(sctx, serve.Options{
		RestConfig:             env.ConfigFor(testenv.UserServiceAccount),
		WebhookHost:            "127.0.0.1",
		WebhookPort:            port,
		CertDir:                certDir,
		MetricsBindAddress:     "0",
		HealthProbeBindAddress: "0",
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.Manager.Start(sctx) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, time.Minute, "serve to be ready", func() bool {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return srv.Synced()
	})

	// Point every webhook at the product's port (the caBundle stays cainjector's).
	mwc, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, fullname, metav1.GetOptions{})
	require.NoError(t, err)
	for i := range mwc.Webhooks {
		mwc.Webhooks[i].ClientConfig.Service.Port = ptr.To(int32(port))
	}
	_, err = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, mwc, metav1.UpdateOptions{})
	require.NoError(t, err)
	vwc, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, fullname, metav1.GetOptions{})
	require.NoError(t, err)
	for i := range vwc.Webhooks {
		vwc.Webhooks[i].ClientConfig.Service.Port = ptr.To(int32(port))
	}
	_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, vwc, metav1.UpdateOptions{})
	require.NoError(t, err)

	bad := "apiVersion: routereflector.io/v1alpha1\nkind: RouteReflectorPolicy\nmetadata: {name: broken}\n" +
		"spec: {nodeSelector: {matchLabels: {pool: none}}, minRouteReflectors: 5, maxRouteReflectors: 2}\n"
	var stderr string
	eventually(t, 30*time.Second, "the product to reject an invalid policy", func() bool {
		_, stderr, err = env.KubectlStdin(t, testenv.UserAlice, bad, "create", "-f", "-")
		return err != nil && strings.Contains(stderr, "spec.minRouteReflectors")
	})
	t.Logf("kubectl, through the product's webhook on cert-manager's certificate: %s", strings.TrimSpace(stderr))
}

var (
	bgpPeerGVR = schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: "bgppeers"}
	policyGVR  = schema.GroupVersionResource{Group: "routereflector.io", Version: "v1alpha1", Resource: "routereflectorpolicies"}
)

// checkMatchConditions drives the API server as a kubelet, a user and the
// controller, and checks which requests reach which webhook.
func checkMatchConditions(t *testing.T, env *testenv.Env, rec *recorder) {
	ctx := t.Context()
	clients := map[string]kubernetes.Interface{}
	dyns := map[string]dynamic.Interface{}
	for _, u := range []string{testenv.UserKubelet, testenv.UserAlice, testenv.UserServiceAccount} {
		cs, err := kubernetes.NewForConfig(env.ConfigFor(u))
		require.NoError(t, err)
		clients[u] = cs
		dyn, err := dynamic.NewForConfig(env.ConfigFor(u))
		require.NoError(t, err)
		dyns[u] = dyn
	}
	kubelet, alice, sa := clients[testenv.UserKubelet], clients[testenv.UserAlice], clients[testenv.UserServiceAccount]
	const node = "node-1"

	// The kubelet registers its node: the mutating webhook sees the CREATE.
	// The first calls may precede the API server's view of the caBundle
	// (failurePolicy Ignore lets them through unseen): wait until reviews arrive.
	_, err := kubelet.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
		Labels: map[string]string{corev1.LabelTopologyZone: "zone-a"}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	i := 0
	eventually(t, 30*time.Second, "the API server to call the webhooks", func() bool {
		i++
		_, err := alice.CoreV1().Nodes().Patch(ctx, node, "application/merge-patch+json",
			fmt.Appendf(nil, `{"metadata":{"labels":{"probe":"%d"}}}`, i), metav1.PatchOptions{})
		require.NoError(t, err)
		return len(rec.Take()) > 0
	})
	rec.Take()

	setReady := func(cs kubernetes.Interface, status corev1.ConditionStatus, heartbeat time.Time) {
		t.Helper()
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		require.NoError(t, err)
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.NewTime(heartbeat), LastTransitionTime: metav1.NewTime(heartbeat)}}
		if status == corev1.ConditionTrue {
			n.Status.Conditions[0].LastTransitionTime = metav1.NewTime(time.Unix(1700000000, 0))
		}
		_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	patch := func(cs kubernetes.Interface, p string, sub ...string) {
		t.Helper()
		_, err := cs.CoreV1().Nodes().Patch(ctx, node, "application/merge-patch+json", []byte(p), metav1.PatchOptions{}, sub...)
		require.NoError(t, err, p)
	}
	const (
		mutate   = "/mutate-v1-node"
		validate = "/validate-v1-node"
	)
	// expect compares the webhooks a request reached, each counted once: the API server runs
	// admission again when its first write attempt meets a conflict (its watch cache a step behind
	// the previous write, seen on a loaded machine), so a request may reach a webhook twice.
	expect := func(what string, want ...string) {
		t.Helper()
		got := paths(rec.Take())
		slices.Sort(got)
		got = slices.Compact(got)
		slices.Sort(want)
		require.Equal(t, want, got, what)
	}

	setReady(kubelet, corev1.ConditionTrue, time.Now())
	expect("the kubelet reports Ready: the mutating webhook only (kubelets are never validated)", mutate)
	for k := range 3 {
		setReady(kubelet, corev1.ConditionTrue, time.Now().Add(time.Duration(k+1)*time.Second))
	}
	expect("kubelet heartbeats reach no webhook")
	patch(kubelet, `{"status":{"images":[{"names":["example.invalid/pause:1"],"sizeBytes":1}]}}`, "status")
	expect("other kubelet status changes reach no webhook")
	setReady(alice, corev1.ConditionTrue, time.Now().Add(10*time.Second))
	expect("a heartbeat-like status update by a user reaches no webhook")
	setReady(kubelet, corev1.ConditionFalse, time.Now().Add(20*time.Second))
	expect("Ready turning False", mutate)

	patch(alice, `{"metadata":{"labels":{"calico-route-reflector":""}}}`)
	expect("a user labels a route reflector", mutate, validate)
	patch(alice, `{"metadata":{"annotations":{"example.com/unrelated":"x"}}}`)
	expect("an unrelated annotation reaches no webhook")
	patch(alice, `{"metadata":{"annotations":{"projectcalico.org/RouteReflectorClusterID":"224.0.0.1"}}}`)
	expect("a cluster ID", mutate, validate)
	patch(alice, `{"metadata":{"annotations":{"projectcalico.org/labels":"{\"rack\":\"r1\"}"}}}`, "status")
	expect("Calico labels written through nodes/status (as calicoctl does)", mutate, validate)
	patch(alice, `{"spec":{"unschedulable":true}}`)
	expect("a cordon", mutate, validate)
	patch(alice, `{"spec":{"taints":[{"key":"example.com/maintenance","effect":"NoSchedule"}]}}`)
	expect("a taint", mutate, validate)
	patch(sa, `{"metadata":{"labels":{"routereflector.io/peering-set":"a"}}}`)
	expect("the controller's own change: mutated, never validated", mutate)
	patch(kubelet, `{"metadata":{"labels":{"example.com/kubelet":"x"}}}`)
	expect("a kubelet's label change: mutated, never validated", mutate)
	require.NoError(t, alice.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}))
	expect("a node deletion is validated (to warn)", validate)

	// Policies: CREATE and spec changes only.
	pol := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "routereflector.io/v1alpha1", "kind": "RouteReflectorPolicy",
		"metadata": map[string]any{"name": "e2e"},
		"spec":     map[string]any{"nodeSelector": map[string]any{"matchLabels": map[string]any{"pool": "e2e"}}},
	}}
	pc := dyns[testenv.UserAlice].Resource(policyGVR)
	got, err := pc.Create(ctx, pol, metav1.CreateOptions{})
	require.NoError(t, err)
	expect("a policy is created", "/validate-routereflectorpolicy")
	got.SetLabels(map[string]string{"team": "net"})
	got, err = pc.Update(ctx, got, metav1.UpdateOptions{})
	require.NoError(t, err)
	expect("a metadata-only policy change")
	require.NoError(t, unstructured.SetNestedField(got.Object, int64(5), "spec", "minRouteReflectors"))
	got, err = pc.Update(ctx, got, metav1.UpdateOptions{})
	require.NoError(t, err)
	expect("a policy spec change", "/validate-routereflectorpolicy")
	require.NoError(t, unstructured.SetNestedField(got.Object, int64(7), "status", "nodes"))
	_, err = dyns[testenv.UserServiceAccount].Resource(policyGVR).UpdateStatus(ctx, got, metav1.UpdateOptions{})
	require.NoError(t, err)
	expect("a status update by the controller")

	// BGPPeers: changes to managed ones, by anyone but the controller.
	peer := func(name string, managed bool) *unstructured.Unstructured {
		labels := map[string]any{}
		if managed {
			labels["app.kubernetes.io/managed-by"] = "calico-rr-autoscaler"
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "crd.projectcalico.org/v1", "kind": "BGPPeer",
			"metadata": map[string]any{"name": name, "labels": labels},
			"spec":     map[string]any{"nodeSelector": "!has(calico-route-reflector)", "peerSelector": "has(calico-route-reflector)"},
		}}
	}
	for _, p := range []*unstructured.Unstructured{peer("rr-autoscaler-a", true), peer("by-hand", false)} {
		_, err := dyns[testenv.UserServiceAccount].Resource(bgpPeerGVR).Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	expect("the controller creates BGPPeers")
	touch := func(user, name string) {
		t.Helper()
		_, err := dyns[user].Resource(bgpPeerGVR).Patch(ctx, name, "application/merge-patch+json",
			[]byte(`{"metadata":{"annotations":{"touched":"`+strconv.FormatInt(time.Now().UnixNano(), 10)+`"}}}`), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	touch(testenv.UserAlice, "rr-autoscaler-a")
	expect("a user changes a managed BGPPeer", "/validate-bgppeer")
	touch(testenv.UserAlice, "by-hand")
	expect("a user changes an unmanaged BGPPeer")
	touch(testenv.UserServiceAccount, "rr-autoscaler-a")
	expect("the controller changes its BGPPeer")
	require.NoError(t, dyns[testenv.UserAlice].Resource(bgpPeerGVR).Delete(ctx, "rr-autoscaler-a", metav1.DeleteOptions{}))
	expect("a user deletes a managed BGPPeer", "/validate-bgppeer")
}
