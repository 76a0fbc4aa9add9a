package chart

import (
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestRenderUninstallHook: by default `helm uninstall` first runs a pre-delete Job with the
// product's image and service account that releases every policy (`uninstall`); it can be turned
// off, and its deadline follows the value.
func TestRenderUninstallHook(t *testing.T) {
	r := render(t, nil)
	job := typed[batchv1.Job](t, r.get(t, "Job", "calico-rr-autoscaler-uninstall"))
	require.Equal(t, "pre-delete", job.Annotations["helm.sh/hook"])
	require.Equal(t, "before-hook-creation,hook-succeeded", job.Annotations["helm.sh/hook-delete-policy"])
	pod := job.Spec.Template.Spec
	require.Equal(t, "calico-rr-autoscaler-uninstall", pod.ServiceAccountName)
	// Its own identity: it may list and delete policies, nothing else; the controller may not delete them.
	cr := typed[rbacv1.ClusterRole](t, r.get(t, "ClusterRole", "calico-rr-autoscaler-uninstall"))
	require.Len(t, cr.Rules, 1)
	require.True(t, allows(cr.Rules, "routereflector.io", "routereflectorpolicies", "delete", ""))
	require.False(t, allows(cr.Rules, "", "nodes", "patch", ""))
	crb := typed[rbacv1.ClusterRoleBinding](t, r.get(t, "ClusterRoleBinding", "calico-rr-autoscaler-uninstall"))
	require.Equal(t, "calico-rr-autoscaler-uninstall", crb.Subjects[0].Name)
	for _, kind := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding"} {
		o := r.get(t, kind, "calico-rr-autoscaler-uninstall")
		require.Equal(t, "-1", o.GetAnnotations()["helm.sh/hook-weight"], "%s before the Job", kind)
	}
	require.Equal(t, []string{"uninstall", "--timeout=900s"}, pod.Containers[0].Args)
	require.EqualValues(t, 900, *job.Spec.ActiveDeadlineSeconds)
	dep := typed[appsv1.Deployment](t, r.get(t, "Deployment", "calico-rr-autoscaler"))
	require.Equal(t, dep.Spec.Template.Spec.Containers[0].Image, pod.Containers[0].Image, "the product's own image")

	r = render(t, valuesYAML(t, "uninstall: {releaseRouteReflectors: false}"))
	for _, o := range r.all("Job") {
		require.NotEqual(t, "calico-rr-autoscaler-uninstall", o.GetName())
	}
	for _, o := range r.all("ClusterRole") {
		require.NotEqual(t, "calico-rr-autoscaler-uninstall", o.GetName())
	}
	r = render(t, valuesYAML(t, "uninstall: {timeoutSeconds: 1800}"))
	job = typed[batchv1.Job](t, r.get(t, "Job", "calico-rr-autoscaler-uninstall"))
	require.Equal(t, "--timeout=1800s", job.Spec.Template.Spec.Containers[0].Args[1])
}
