package chart

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/certs"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// TestSelfManagedCertsWithChartRBAC installs the chart with
// certManager.enabled=false, then runs package certs with the flags the
// chart gives the container, as the chart's ServiceAccount with only the
// chart's RBAC (not cluster-admin). The certificate lands in the Secret and
// the cert dir, the caBundle in the chart's webhook configurations, and the
// API server reaches a server using it through the chart's Service, also
// after the certificate is replaced and after the caBundle is wiped.
func TestSelfManagedCertsWithChartRBAC(t *testing.T) {
	if testing.Short() {
		t.Skip("needs kube-apiserver, etcd and helm")
	}
	const ns = "rra-self"
	saUser := "system:serviceaccount:" + ns + ":calico-rr-autoscaler"
	env := testenv.Start(t, testenv.WithUser(saUser, false,
		"system:serviceaccounts", "system:serviceaccounts:"+ns, "system:authenticated"))
	installCRDs(t, env)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	env.CreateNamespace(t, ns)

	ln := freeListener(t)
	out, stderr, err := env.Helm(t, testenv.UserAdmin, "install", "rra", chartDir(t), "--namespace", ns,
		"--set", "certManager.enabled=false", "--set", "policy.create=false", "--set", "service.port="+strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	require.NoError(t, err, "helm install: %s\n%s", out, stderr)
	const fullname = "rra-calico-rr-autoscaler"

	// The chart's RBAC for the ServiceAccount: what it needs, and no more.
	for _, c := range []struct {
		ns, group, resource, sub, verb, name string
		allowed                              bool
	}{
		{"", "", "nodes", "", "patch", "", true},
		{"", "", "nodes", "", "delete", "", false},
		{"", "", "nodes", "", "update", "", false},
		{"", "routereflector.io", "routereflectorpolicies", "status", "update", "", true},
		{"", "routereflector.io", "routereflectorpolicies", "", "delete", "", false},
		{"", "crd.projectcalico.org", "bgppeers", "", "delete", "", true},
		{"", "projectcalico.org", "bgppeers", "", "create", "", true},
		{"", "crd.projectcalico.org", "bgpconfigurations", "", "patch", "", true},
		{"", "crd.projectcalico.org", "ippools", "", "get", "", false},
		{"default", "", "events", "", "create", "", true},
		{ns, "coordination.k8s.io", "leases", "", "update", "", true},
		{"kube-system", "coordination.k8s.io", "leases", "", "update", "", false},
		{ns, "", "secrets", "", "create", "", true},
		{ns, "", "secrets", "", "update", fullname + "-tls", true},
		{ns, "", "secrets", "", "get", "someone-elses", false},
		{ns, "", "secrets", "", "list", "", false},
		{"kube-system", "", "secrets", "", "get", fullname + "-tls", false},
		{"", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "update", fullname, true},
		{"", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "patch", fullname, true},
		{"", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "update", "other", false},
		{"", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "delete", fullname, false},
		{"", "", "pods", "", "list", "", false},
	} {
		sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: saUser, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: c.ns, Group: c.group, Resource: c.resource,
				Subresource: c.sub, Verb: c.verb, Name: c.name},
		}}, metav1.CreateOptions{})
		require.NoError(t, err)
		require.Equal(t, c.allowed, sar.Status.Allowed, "%s %s/%s %s %q in %q: %s", c.verb, c.group, c.resource, c.sub, c.name, c.ns, sar.Status.Reason)
	}

	// The container's arguments, from the installed Deployment.
	dep, err := cs.AppsV1().Deployments(ns).Get(ctx, fullname, metav1.GetOptions{})
	require.NoError(t, err)
	fs, opts := serveFlags()
	require.NoError(t, fs.Parse(dep.Spec.Template.Spec.Containers[0].Args[1:]))
	require.True(t, opts.Enabled)
	t.Setenv("POD_NAMESPACE", ns)
	opts.CertDir = filepath.Join(t.TempDir(), "serving-certs")
	opts.CheckInterval, opts.RetryInterval, opts.PropagationDelay = 200*time.Millisecond, 200*time.Millisecond, 300*time.Millisecond

	rot, err := certs.New(env.ConfigFor(saUser), *opts)
	require.NoError(t, err)
	require.NoError(t, rot.Bootstrap(ctx))
	go func() { _ = rot.Start(ctx) }()
	select {
	case <-rot.Ready():
	case <-time.After(20 * time.Second):
		require.Fail(t, "certs not ready")
	}
	sec, err := cs.CoreV1().Secrets(ns).Get(ctx, fullname+"-tls", metav1.GetOptions{})
	require.NoError(t, err)
	caBundles := func() [][]byte {
		mwc, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, fullname, metav1.GetOptions{})
		require.NoError(t, err)
		vwc, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, fullname, metav1.GetOptions{})
		require.NoError(t, err)
		out := [][]byte{mwc.Webhooks[0].ClientConfig.CABundle}
		for _, w := range vwc.Webhooks {
			out = append(out, w.ClientConfig.CABundle)
		}
		return out
	}
	for _, b := range caBundles() {
		require.Equal(t, sec.Data[certs.CACertKey], b)
	}

	// A server on the files in the cert dir, reloading them as the
	// webhook server does, behind the chart's webhook configurations.
	cw, err := certwatcher.New(filepath.Join(opts.CertDir, "tls.crt"), filepath.Join(opts.CertDir, "tls.key"))
	require.NoError(t, err)
	go func() { _ = cw.Start(ctx) }()
	rec := startRecorder(t, ln, cw.GetCertificate)
	pointServiceAtRecorder(t, cs, ns, fullname)

	dyn, err := dynamic.NewForConfig(env.ConfigFor(testenv.UserAlice))
	require.NoError(t, err)
	n := 0
	changePolicy := func() error {
		n++
		p, err := dyn.Resource(policyGVR).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) { // policy.create=false: no hook here to apply the chart's
			p = &unstructured.Unstructured{Object: map[string]any{"apiVersion": "routereflector.io/v1alpha1", "kind": "RouteReflectorPolicy",
				"metadata": map[string]any{"name": "default"}, "spec": map[string]any{"minRouteReflectors": int64(3)}}}
			_, err = dyn.Resource(policyGVR).Create(ctx, p, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		if err := unstructured.SetNestedField(p.Object, int64(3+n%5), "spec", "minRouteReflectors"); err != nil {
			return err
		}
		_, err = dyn.Resource(policyGVR).Update(ctx, p, metav1.UpdateOptions{})
		return err
	}
	// failurePolicy Fail: an update succeeds only if the API server reached
	// the server and trusted its certificate.
	eventually(t, 30*time.Second, "the policy webhook to answer", func() bool { return changePolicy() == nil })
	require.NotEmpty(t, rec.Take())

	// Replace the serving certificate (as an expiry would): the rotator
	// issues a new one and the server reloads it; the webhook keeps answering.
	old := sec.Data[corev1.TLSCertKey]
	sec.Data[corev1.TLSCertKey] = []byte("expired")
	_, err = cs.CoreV1().Secrets(ns).Update(ctx, sec, metav1.UpdateOptions{})
	require.NoError(t, err)
	eventually(t, 20*time.Second, "a new serving certificate to be served", func() bool {
		c, _ := cw.GetCertificate(nil)
		s, err := cs.CoreV1().Secrets(ns).Get(ctx, fullname+"-tls", metav1.GetOptions{})
		return err == nil && string(s.Data[corev1.TLSCertKey]) != "expired" && string(s.Data[corev1.TLSCertKey]) != string(old) &&
			c != nil && pemOf(c.Certificate[0]) == string(s.Data[corev1.TLSCertKey])
	})
	for range 5 {
		require.NoError(t, changePolicy(), "the webhook answers with the new certificate")
	}

	// A caBundle wiped (e.g. by `helm upgrade --force`) is put back.
	vwc, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, fullname, metav1.GetOptions{})
	require.NoError(t, err)
	for i := range vwc.Webhooks {
		vwc.Webhooks[i].ClientConfig.CABundle = nil
	}
	_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, vwc, metav1.UpdateOptions{})
	require.NoError(t, err)
	eventually(t, 20*time.Second, "the caBundle to be restored", func() bool {
		for _, b := range caBundles() {
			if len(b) == 0 {
				return false
			}
		}
		return true
	})
	eventually(t, 20*time.Second, "the policy webhook to answer again", func() bool { return changePolicy() == nil })

	// The chart's objects are what was installed.
	var d appsv1.Deployment
	raw, _, err := env.Kubectl(t, testenv.UserAdmin, "-n", ns, "get", "deployment", fullname, "-o", "json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(raw), &d))
	require.NotNil(t, d.Spec.Template.Spec.Volumes[0].EmptyDir)
}

func pemOf(der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
