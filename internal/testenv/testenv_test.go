package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

const widgetCRD = `---
# a comment-only document and an unrelated kind are skipped
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: ignored
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.testenv.example.com
spec:
  group: testenv.example.com
  scope: Cluster
  names:
    kind: Widget
    listKind: WidgetList
    plural: widgets
    singular: widget
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`

func TestEnv(t *testing.T) {
	env := Start(t)
	ctx := t.Context()

	admin, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	_, err = admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	require.NoError(t, err, "creating node")

	// The real kubectl sees it, as the admin and as alice (cluster-admin).
	for _, user := range []string{UserAdmin, UserAlice} {
		out, stderr, err := env.Kubectl(t, user, "get", "nodes", "-o", "name")
		require.Falsef(t, err != nil, "kubectl as %s: %v\n%s", user, err, stderr)
		require.Truef(t, slices.Contains(strings.Fields(out), "node/node-1"), "kubectl get nodes as %s = %q, want node/node-1 listed", user, out)
	}

	// Identities as the apiserver sees them.
	for user, wantGroup := range map[string]string{
		UserKubelet:        "system:nodes",
		UserServiceAccount: "system:serviceaccounts:calico-rr-autoscaler",
		UserAlice:          "system:authenticated",
		UserAdmin:          "system:masters",
	} {
		cs, err := kubernetes.NewForConfig(env.ConfigFor(user))
		require.NoError(t, err)
		ssr, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		require.NoErrorf(t, err, "SelfSubjectReview as %s", user)
		ui := ssr.Status.UserInfo
		assert.Equal(t, user, ui.Username, "SelfSubjectReview")
		assert.Contains(t, ui.Groups, wantGroup, "SelfSubjectReview as %s", user)
	}

	// The kubelet user may read nodes (cluster-admin binding), via kubectl.
	if _, stderr, err := env.Kubectl(t, UserKubelet, "get", "node", "node-1"); err != nil {
		require.Fail(t, fmt.Sprintf("kubectl as kubelet: %v\n%s", err, stderr))
	}

	// CRDs from a multi-document file, then a custom resource.
	crdFile := filepath.Join(t.TempDir(), "crds.yaml")
	require.NoError(t, os.WriteFile(crdFile, []byte(widgetCRD), 0o600))
	crds := InstallCRDs(t, env.Config, filepath.Dir(crdFile))
	require.Len(t, crds, 1, "InstallCRDs")
	require.Equal(t, "widgets.testenv.example.com", crds[0].Name, "InstallCRDs")
	dyn, err := dynamic.NewForConfig(env.ConfigFor(UserServiceAccount))
	require.NoError(t, err)
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "testenv.example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w1"},
	}}
	gvr := schema.GroupVersionResource{Group: "testenv.example.com", Version: "v1", Resource: "widgets"}
	_, err = dyn.Resource(gvr).Create(ctx, w, metav1.CreateOptions{})
	require.NoError(t, err, "creating widget")

	// Pods need the namespace's default ServiceAccount.
	env.CreateNamespace(t, "pods")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "pods"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}},
	}
	_, err = admin.CoreV1().Pods("pods").Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err, "creating pod")

	// Stop is idempotent and removes the directory.
	dir := env.Dir
	env.Stop()
	env.Stop()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		assert.Fail(t, fmt.Sprintf("after Stop, %s still exists (%v)", dir, err))
	}
}
