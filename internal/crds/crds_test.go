package crds

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/crd"
)

// oldField is a spec field the tests remove from the embedded CRD to play an older CRD.
const oldField = `              notReadyGracePeriod:
                description: |-
                  NotReadyGracePeriod is how long a route reflector keeps its role while NotReady [2m]: a kubelet
                  blip shorter than this moves no role (every role change resets the BGP sessions of all the
                  route reflector's clients). Cordon and deletion act at once.
                type: string
`

func TestDecode(t *testing.T) {
	body, name, err := decode(crd.YAML)
	require.NoError(t, err)
	require.Equal(t, Name, name)
	require.True(t, bytes.HasPrefix(body, []byte("{")), "JSON")
	require.Equal(t, 1, strings.Count(string(crd.YAML), oldField), "the field the tests remove")

	_, _, err = decode([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"))
	require.ErrorContains(t, err, "CustomResourceDefinition")
	_, _, err = decode([]byte("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: x}\nspec: {nope: 1}\n"))
	require.ErrorContains(t, err, "nope")
}

// TestApply on a real API server: the apply creates the CRD when there is none; over a CRD another
// manager created (Helm's create from the chart's crds/) with one field less, it takes the fields
// over and the field is served (a policy using it passes strict field validation); a second apply
// changes nothing. The hook's identity needs only get, patch and create of this one CRD.
func TestApply(t *testing.T) {
	if testing.Short() {
		t.Skip("needs kube-apiserver and etcd")
	}
	const hookUser = "crds-hook"
	env := testenv.Start(t, testenv.WithUser(hookUser, false, "system:authenticated"))
	ctx := t.Context()
	cs, err := apiextensionsclient.NewForConfig(env.Config)
	require.NoError(t, err)
	api := cs.ApiextensionsV1().CustomResourceDefinitions()
	dyn, err := dynamic.NewForConfig(env.Config)
	require.NoError(t, err)
	policies := dyn.Resource(schema.GroupVersionResource{Group: "routereflector.io", Version: "v1alpha1", Resource: "routereflectorpolicies"})
	strict := func(name string) error {
		p := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "routereflector.io/v1alpha1", "kind": "RouteReflectorPolicy",
			"metadata": map[string]any{"name": name},
			"spec":     map[string]any{"notReadyGracePeriod": "3m"},
		}}
		_, err := policies.Create(ctx, p, metav1.CreateOptions{FieldValidation: "Strict"})
		return err
	}

	// The hook's identity, as the chart's ClusterRole grants it.
	kube, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	_, err = kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "crds-hook"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"},
			ResourceNames: []string{Name}, Verbs: []string{"get", "patch", "create"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "crds-hook"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "crds-hook"},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: hookUser}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	hook := env.ConfigFor(hookUser)
	// RBAC is enforced: the identity cannot touch another CRD.
	other := bytes.ReplaceAll(crd.YAML, []byte("name: routereflectorpolicies.routereflector.io"), []byte("name: otherpolicies.routereflector.io"))
	other = bytes.ReplaceAll(other, []byte("plural: routereflectorpolicies"), []byte("plural: otherpolicies"))
	err = apply(ctx, hook, other, 10*time.Second, &bytes.Buffer{})
	require.True(t, apierrors.IsForbidden(err), "%v", err)

	// No CRD yet (installed with --skip-crds, or deleted): the apply creates it.
	var out bytes.Buffer
	start := time.Now()
	require.NoError(t, Apply(ctx, hook, time.Minute, &out))
	t.Logf("apply (create) in %s: %s", time.Since(start).Round(time.Millisecond), out.String())
	require.Contains(t, out.String(), "Established")
	require.NoError(t, strict("created"))
	require.NoError(t, api.Delete(ctx, Name, metav1.DeleteOptions{}))
	testenv.Eventually(t, "CRD deleted", time.Minute, 200*time.Millisecond, func() error {
		_, err := api.Get(ctx, Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})

	// An older CRD, created as Helm creates crds/ (a create, its own manager): no notReadyGracePeriod.
	old := &apiextensionsv1.CustomResourceDefinition{}
	require.NoError(t, yaml.UnmarshalStrict([]byte(strings.Replace(string(crd.YAML), oldField, "", 1)), old))
	testenv.Eventually(t, "old CRD created", time.Minute, 200*time.Millisecond, func() error {
		_, err := api.Create(ctx, old, metav1.CreateOptions{FieldManager: "helm"})
		return err // "object is being deleted" until the deletion above is done
	})
	testenv.Eventually(t, "old CRD served", time.Minute, 200*time.Millisecond, func() error {
		if err := strict("probe"); err != nil && !strings.Contains(err.Error(), "notReadyGracePeriod") {
			return err // not served yet
		}
		return nil
	})
	require.ErrorContains(t, strict("old"), `unknown field "spec.notReadyGracePeriod"`)

	out.Reset()
	start = time.Now()
	require.NoError(t, Apply(ctx, hook, time.Minute, &out))
	t.Logf("apply (upgrade) in %s: %s", time.Since(start).Round(time.Millisecond), out.String())
	got, err := api.Get(ctx, Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Contains(t, got.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties, "notReadyGracePeriod")
	require.Equal(t, "v0.19.0", got.Annotations["controller-gen.kubebuilder.io/version"])
	managers := map[string]metav1.ManagedFieldsOperationType{}
	for _, m := range got.ManagedFields {
		managers[m.Manager] = m.Operation
	}
	require.Equal(t, metav1.ManagedFieldsOperationApply, managers[FieldManager], "%v", managers)
	// The new schema is served shortly after the update.
	testenv.Eventually(t, "new field served", time.Minute, 200*time.Millisecond, func() error { return strict("new") })

	gen := got.Generation
	require.NoError(t, Apply(ctx, hook, time.Minute, &bytes.Buffer{}))
	got, err = api.Get(ctx, Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, gen, got.Generation, "a second apply changes nothing")

	// A timeout that passes is an error naming the CRD.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorContains(t, Apply(cctx, hook, time.Minute, &bytes.Buffer{}), Name)
}
