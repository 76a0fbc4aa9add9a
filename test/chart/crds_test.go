package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

const crdName = "routereflectorpolicies.routereflector.io"

// TestRenderCRDValues: the CRD is a template, so `helm upgrade` upgrades it: rendered by
// default with the keep annotation (uninstall leaves it), without it with crds.keep=false, not at
// all with crds.enabled=false. The default policy is left out of the install that creates the CRD
// (Helm cannot build an object of a kind the cluster does not serve yet) and NOTES say how to
// create it.
func TestRenderCRDValues(t *testing.T) {
	r := render(t, nil)
	require.Len(t, r.CRDs, 1)
	crd := typed[apiextensionsv1.CustomResourceDefinition](t, r.CRDs[0])
	require.Equal(t, crdName, crd.Name)
	require.Equal(t, "keep", crd.Annotations["helm.sh/resource-policy"])
	require.Equal(t, "Helm", crd.Labels["app.kubernetes.io/managed-by"])
	r.get(t, "RouteReflectorPolicy", "default")

	r = render(t, valuesYAML(t, "crds: {keep: false}"))
	require.Len(t, r.CRDs, 1)
	require.NotContains(t, r.CRDs[0].GetAnnotations(), "helm.sh/resource-policy")

	r = render(t, valuesYAML(t, "crds: {enabled: false}"))
	require.Empty(t, r.CRDs)
	require.NotContains(t, r.Manifest, "CustomResourceDefinition")
	r.get(t, "RouteReflectorPolicy", "default")

	// A first install: the cluster does not serve the policy CRD yet.
	r, err := renderOn(t, releaseNamespace, nil)
	require.NoError(t, err)
	require.Len(t, r.CRDs, 1)
	require.Empty(t, r.all("RouteReflectorPolicy"))
	require.Contains(t, r.Notes, "--reuse-values")
	// With crds.enabled=false the CRD is the user's, there before the chart: the policy renders.
	r, err = renderOn(t, releaseNamespace, valuesYAML(t, "crds: {enabled: false}"))
	require.NoError(t, err)
	r.get(t, "RouteReflectorPolicy", "default")

	for _, bad := range []string{"crds: {enabled: yes please}", "crds: {keep: 1}", "crds: {upgrade: true}"} {
		_, err := renderErr(t, releaseNamespace, valuesYAML(t, bad))
		require.ErrorContains(t, err, "crds", bad)
	}
}

// TestCRDUpgradeWithHelm installs the chart with the real helm binary on a real kube-apiserver
// (no CRD beforehand), then upgrades it with a chart whose CRD has one more field: the upgrade
// applies the new schema and creates the default policy the first install had to leave out; then
// uninstall leaves the CRD and the policy (helm.sh/resource-policy: keep).
func TestCRDUpgradeWithHelm(t *testing.T) {
	if testing.Short() {
		t.Skip("needs kube-apiserver, etcd and helm")
	}
	env := testenv.Start(t)
	const ns = "rra-crds"
	env.CreateNamespace(t, ns)
	ctx := t.Context()
	dyn, err := dynamic.NewForConfig(env.Config)
	require.NoError(t, err)
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	policies := dyn.Resource(schema.GroupVersionResource{Group: "routereflector.io", Version: "v1alpha1", Resource: "routereflectorpolicies"})
	// No controller runs here: no policy webhook (it would deny the policy at the upgrade) and
	// no uninstall Job (it would wait for the controller).
	args := []string{"--namespace", ns, "--set", "certManager.enabled=false", "--set", "webhooks.policy.enabled=false",
		"--set", "uninstall.releaseRouteReflectors=false"}
	helm := func(a ...string) string {
		t.Helper()
		if a[0] != "uninstall" {
			a = append(a, args...)
		} else {
			a = append(a, "--namespace", ns)
		}
		out, stderr, err := env.Helm(t, testenv.UserAdmin, a...)
		require.NoError(t, err, "helm %v: %s\n%s", a, out, stderr)
		return out
	}

	out := helm("install", "rra", chartDir(t))
	require.Contains(t, out, "--reuse-values", "NOTES say how to create the default policy")
	crd, err := crds.Get(ctx, crdName, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "keep", crd.GetAnnotations()["helm.sh/resource-policy"])
	require.Equal(t, "rra", crd.GetAnnotations()["meta.helm.sh/release-name"], "the release's")
	_, err = policies.Get(ctx, "default", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "%v", err)

	// The next chart's CRD: one more field.
	next := filepath.Join(t.TempDir(), "calico-rr-autoscaler")
	require.NoError(t, os.CopyFS(next, os.DirFS(chartDir(t))))
	f := filepath.Join(next, "templates", "crds", "routereflector.io_routereflectorpolicies.yaml")
	b, err := os.ReadFile(f)
	require.NoError(t, err)
	const anchor = "        properties:\n          apiVersion:\n"
	require.Equal(t, 1, strings.Count(string(b), anchor))
	b = []byte(strings.Replace(string(b), anchor, "        properties:\n          upgradeProbe:\n            type: string\n          apiVersion:\n", 1))
	require.NoError(t, os.WriteFile(f, b, 0o644))

	helm("upgrade", "rra", next)
	crd, err = crds.Get(ctx, crdName, metav1.GetOptions{})
	require.NoError(t, err)
	got := typed[apiextensionsv1.CustomResourceDefinition](t, crd)
	require.Contains(t, got.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties, "upgradeProbe", "helm upgrade applied the new CRD")
	_, err = policies.Get(ctx, "default", metav1.GetOptions{})
	require.NoError(t, err, "the upgrade created the default policy")

	out = helm("uninstall", "rra")
	require.Contains(t, out, "kept due to the resource policy")
	_, err = crds.Get(ctx, crdName, metav1.GetOptions{})
	require.NoError(t, err, "uninstall keeps the CRD")
}
