package chart

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/crd"
)

const (
	crdName  = "routereflectorpolicies.routereflector.io"
	crdsHook = "calico-rr-autoscaler-crds"
)

// TestRenderCRDUpgradeHook: the CRD is in crds/ (helm install creates it first, so the default
// policy is created in the same install), and by default `helm upgrade` first runs a pre-upgrade
// Job with the product's image and its own identity (get, patch and create of this one CRD) that
// applies the image's CRD (`crds apply`); RBAC before the Job, all deleted once it succeeded.
// crds.upgrade=false leaves the hook out; the schema rejects what is not a boolean.
func TestRenderCRDUpgradeHook(t *testing.T) {
	r := render(t, nil)
	require.Len(t, r.CRDs, 1)
	require.Equal(t, crdName, r.CRDs[0].GetName())
	r.get(t, "RouteReflectorPolicy", "default")
	require.NotContains(t, r.Notes, "crds apply")

	job := typed[batchv1.Job](t, r.get(t, "Job", crdsHook))
	for _, kind := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job"} {
		a := r.get(t, kind, crdsHook).GetAnnotations()
		require.Equal(t, "pre-upgrade", a["helm.sh/hook"], kind)
		require.Equal(t, "before-hook-creation,hook-succeeded", a["helm.sh/hook-delete-policy"], kind)
		if kind != "Job" {
			require.Equal(t, "-1", a["helm.sh/hook-weight"], "%s before the Job", kind)
		} else {
			require.Empty(t, a["helm.sh/hook-weight"], "the Job after the RBAC (weight 0)")
		}
	}
	pod := job.Spec.Template.Spec
	require.Equal(t, crdsHook, pod.ServiceAccountName)
	require.Equal(t, corev1.RestartPolicyNever, pod.RestartPolicy)
	require.Equal(t, []string{"crds", "apply", "--timeout=2m"}, pod.Containers[0].Args)
	require.NotNil(t, job.Spec.ActiveDeadlineSeconds)
	dep := typed[appsv1.Deployment](t, r.get(t, "Deployment", "calico-rr-autoscaler"))
	dpod := dep.Spec.Template.Spec
	require.Equal(t, dpod.Containers[0].Image, pod.Containers[0].Image, "the product's own image")
	require.Equal(t, dpod.Containers[0].SecurityContext, pod.Containers[0].SecurityContext)
	require.Equal(t, dpod.SecurityContext, pod.SecurityContext)

	cr := typed[rbacv1.ClusterRole](t, r.get(t, "ClusterRole", crdsHook))
	require.Len(t, cr.Rules, 1)
	for _, verb := range []string{"get", "patch", "create"} {
		require.True(t, allows(cr.Rules, "apiextensions.k8s.io", "customresourcedefinitions", verb, crdName), verb)
	}
	require.Equal(t, []string{crdName}, cr.Rules[0].ResourceNames, "this CRD only")
	require.False(t, allows(cr.Rules, "apiextensions.k8s.io", "customresourcedefinitions", "delete", crdName))
	require.False(t, allows(cr.Rules, "apiextensions.k8s.io", "customresourcedefinitions", "list", crdName))
	crb := typed[rbacv1.ClusterRoleBinding](t, r.get(t, "ClusterRoleBinding", crdsHook))
	require.Equal(t, crdsHook, crb.RoleRef.Name)
	require.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: crdsHook, Namespace: releaseNamespace}}, crb.Subjects)

	// Scheduling follows the product's values, as the uninstall hook's.
	r = render(t, valuesYAML(t, "nodeSelector: {kubernetes.io/os: linux}\ntolerations: [{key: k, operator: Exists}]\nimagePullSecrets: [{name: reg}]\nimage: {tag: v9}"))
	pod = typed[batchv1.Job](t, r.get(t, "Job", crdsHook)).Spec.Template.Spec
	require.Equal(t, map[string]string{"kubernetes.io/os": "linux"}, pod.NodeSelector)
	require.Equal(t, []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}}, pod.Tolerations)
	require.Equal(t, []corev1.LocalObjectReference{{Name: "reg"}}, pod.ImagePullSecrets)
	require.True(t, strings.HasSuffix(pod.Containers[0].Image, ":v9"), pod.Containers[0].Image)

	r = render(t, valuesYAML(t, "crds: {upgrade: false}"))
	for _, o := range r.Objects {
		require.NotEqual(t, crdsHook, o.GetName(), "%s rendered with crds.upgrade=false", o.GetKind())
		if o.GetName() != "calico-rr-autoscaler-policy-keep" { // the policy's own pre-upgrade hook (TestRenderPolicyHooks)
			require.NotEqual(t, "pre-upgrade", o.GetAnnotations()["helm.sh/hook"], "%s %s", o.GetKind(), o.GetName())
		}
	}
	require.Len(t, r.CRDs, 1, "crds/ stays: helm install creates the CRD")
	require.Contains(t, r.Notes, "calico-rr-autoscaler crds apply", "NOTES say how to upgrade the CRD by hand")
	r.get(t, "RouteReflectorPolicy", "default")

	for _, bad := range []string{"crds: {upgrade: yes please}", "crds: {upgrade: 1}", "crds: {enabled: true}", "crds: true"} {
		_, err := renderErr(t, releaseNamespace, valuesYAML(t, bad))
		require.ErrorContains(t, err, "crds", bad)
	}
}

// TestCRDUpgradeWithHelm runs the real helm on a real kube-apiserver. helm install of a chart
// whose crds/ CRD lacks notReadyGracePeriod (the previous version's) creates the CRD and the
// default policy in one step. helm upgrade to this chart runs the pre-upgrade hook: the test
// plays its Job (no kubelet here) by running the product binary built from this tree, whose
// embedded CRD is this chart's, with the Job's own args as the hook's service account
// (impersonated, so only the hook's RBAC applies), then marks the Job Complete as the Job
// controller would. The upgraded CRD serves the new field (a policy using it passes strict field
// validation), and the hook's objects are gone. helm uninstall leaves the CRD.
func TestCRDUpgradeWithHelm(t *testing.T) {
	if testing.Short() {
		t.Skip("needs kube-apiserver, etcd and helm")
	}
	type built struct {
		bin string
		err error
	}
	binc := make(chan built, 1)
	go func() { // beside the API server's start
		bin, err := testenv.BuildProduct(context.Background(), t.TempDir())
		binc <- built{bin, err}
	}()
	env := testenv.Start(t)
	const ns = "rra-crds"
	env.CreateNamespace(t, ns)
	ctx := t.Context()
	kube, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	ext, err := apiextensionsclient.NewForConfig(env.Config)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(env.Config)
	require.NoError(t, err)
	policies := dyn.Resource(schema.GroupVersionResource{Group: "routereflector.io", Version: "v1alpha1", Resource: "routereflectorpolicies"})
	strict := func(name string) error { // a policy using the field the old CRD lacks
		p := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "routereflector.io/v1alpha1", "kind": "RouteReflectorPolicy",
			"metadata": map[string]any{"name": name},
			"spec":     map[string]any{"notReadyGracePeriod": "3m"},
		}}
		_, err := policies.Create(ctx, p, metav1.CreateOptions{FieldValidation: "Strict"})
		return err
	}
	serves := func(c *apiextensionsv1.CustomResourceDefinition) bool {
		_, ok := c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["notReadyGracePeriod"]
		return ok
	}
	// No controller runs here: no policy webhook (it would deny the policies) and no uninstall
	// Job (it would wait for the controller).
	args := []string{"--namespace", ns, "--set", "certManager.enabled=false", "--set", "webhooks.policy.enabled=false",
		"--set", "uninstall.releaseRouteReflectors=false"}
	helm := func(a ...string) (string, error) {
		if a[0] != "uninstall" {
			a = append(a, args...)
		} else {
			a = append(a, "--namespace", ns)
		}
		out, stderr, err := env.Helm(t, testenv.UserAdmin, a...)
		if err != nil {
			return out, fmt.Errorf("helm %v: %w\n%s\n%s", a, err, out, stderr)
		}
		return out, nil
	}

	// The previous chart: its crds/ CRD without notReadyGracePeriod.
	prev := filepath.Join(t.TempDir(), "calico-rr-autoscaler")
	require.NoError(t, os.CopyFS(prev, os.DirFS(chartDir(t))))
	f := filepath.Join(prev, "crds", crd.File)
	b, err := os.ReadFile(f)
	require.NoError(t, err)
	const field = "              notReadyGracePeriod:\n"
	i := bytes.Index(b, []byte(field))
	require.Positive(t, i)
	j := bytes.Index(b[i+len(field):], []byte("                type: string\n"))
	require.Positive(t, j)
	b = append(b[:i:i], b[i+len(field)+j+len("                type: string\n"):]...)
	require.NotContains(t, string(b), "notReadyGracePeriod")
	require.NoError(t, os.WriteFile(f, b, 0o644))

	bc := <-binc
	require.NoError(t, bc.err)
	const policyJob = "rra-calico-rr-autoscaler-policy"
	start := time.Now()
	installed := make(chan error, 1)
	go func() { _, err := helm("install", "rra", prev); installed <- err }()
	playPolicyHook(t, env, ns, policyJob, bc.bin, installed)
	require.NoError(t, <-installed)
	t.Logf("helm install (with the policy hook) in %s", time.Since(start).Round(time.Millisecond))
	got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crdName, metav1.GetOptions{})
	require.NoError(t, err, "helm install created the CRD")
	require.False(t, serves(got))
	_, err = policies.Get(ctx, "default", metav1.GetOptions{})
	require.NoError(t, err, "the same helm install's hook created the default policy")
	require.ErrorContains(t, strict("before"), `unknown field "spec.notReadyGracePeriod"`)

	start = time.Now()
	upgraded := make(chan error, 1)
	go func() { _, err := helm("upgrade", "rra", chartDir(t), "--timeout", "2m"); upgraded <- err }()
	const jobName = "rra-calico-rr-autoscaler-crds"
	playCRDHook(t, env, ns, jobName, bc.bin, upgraded)
	out := playPolicyHook(t, env, ns, policyJob+"-keep", bc.bin, upgraded)
	require.Contains(t, out, "already carries helm.sh/resource-policy: keep", "the hook's own policy")
	playPolicyHook(t, env, ns, policyJob, bc.bin, upgraded)
	select {
	case err := <-upgraded:
		require.NoError(t, err)
	case <-time.After(2 * time.Minute):
		t.Fatal("helm upgrade did not end after its hook Job completed")
	}
	t.Logf("helm upgrade (with the hook) in %s", time.Since(start).Round(time.Millisecond))

	got, err = ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crdName, metav1.GetOptions{})
	require.NoError(t, err)
	require.True(t, serves(got), "the hook applied the new CRD")
	var managers []string
	for _, m := range got.ManagedFields {
		managers = append(managers, fmt.Sprintf("%s/%s", m.Manager, m.Operation))
	}
	require.Contains(t, managers, "calico-rr-autoscaler/Apply")
	testenv.Eventually(t, "a policy using the new field accepted", time.Minute, 200*time.Millisecond, func() error { return strict("after") })
	_, err = policies.Get(ctx, "default", metav1.GetOptions{})
	require.NoError(t, err, "the default policy is still there")
	// hook-succeeded: the hook's objects are gone.
	_, err = kube.BatchV1().Jobs(ns).Get(ctx, jobName, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "hook Job: %v", err)
	_, err = kube.RbacV1().ClusterRoles().Get(ctx, jobName, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "hook ClusterRole: %v", err)

	_, err = helm("uninstall", "rra")
	require.NoError(t, err)
	_, err = ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crdName, metav1.GetOptions{})
	require.NoError(t, err, "helm uninstall leaves the CRD (crds/)")
}

// playCRDHook plays the pre-upgrade hook Job jobName of a `helm upgrade` running beside it (its
// error arrives on upgraded) where no kubelet runs: once Helm created the Job (after its service
// account and RBAC, which it checks), it runs bin (the product built from this tree, whose
// embedded CRD is this chart's) with the Job's own args as the hook's service account
// (impersonated by the admin, so only the hook's RBAC applies), then marks the Job Complete with
// the conditions the Job controller of Kubernetes 1.34 sets, so that Helm goes on. It returns the
// command's output.
func playCRDHook(t *testing.T, env *testenv.Env, ns, jobName, bin string, upgraded <-chan error) string {
	t.Helper()
	job, kubeconfig := awaitHookJob(t, env, ns, jobName, upgraded)
	c := job.Spec.Template.Spec.Containers[0]
	require.Equal(t, "crds", c.Args[0], "the Job runs crds apply: %v", c.Args)
	out := runHookCommand(t, bin, c.Args, kubeconfig)
	completeHookJob(t, env, job)
	return out
}

// playPolicyHook plays a policy hook Job (`policy apply`, with the ConfigMap Helm created as its
// -f, or `policy keep`) as playCRDHook plays the crds hook, and returns the command's output.
func playPolicyHook(t *testing.T, env *testenv.Env, ns, jobName, bin string, done <-chan error) string {
	t.Helper()
	job, kubeconfig := awaitHookJob(t, env, ns, jobName, done)
	pod := job.Spec.Template.Spec
	args := append([]string{}, pod.Containers[0].Args...)
	require.Equal(t, "policy", args[0], "the Job runs the policy command: %v", args)
	if args[1] == "apply" {
		kube, err := kubernetes.NewForConfig(env.Config)
		require.NoError(t, err)
		cm, err := kube.CoreV1().ConfigMaps(ns).Get(t.Context(), pod.Volumes[0].ConfigMap.Name, metav1.GetOptions{})
		require.NoError(t, err)
		f := filepath.Join(t.TempDir(), "policy.yaml")
		require.NoError(t, os.WriteFile(f, []byte(cm.Data["policy.yaml"]), 0o644))
		for i, a := range args {
			if strings.HasPrefix(a, "-f=") {
				args[i] = "-f=" + f
			}
		}
	}
	out := runHookCommand(t, bin, args, kubeconfig)
	completeHookJob(t, env, job)
	return out
}

// awaitHookJob waits until Helm (whose error arrives on done) created the hook Job jobName, after
// its service account and RBAC, and returns it with a kubeconfig of the Job's service account
// (impersonated by the admin, so only the hook's RBAC applies).
func awaitHookJob(t *testing.T, env *testenv.Env, ns, jobName string, done <-chan error) (*batchv1.Job, string) {
	t.Helper()
	ctx := t.Context()
	kube, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	jobs := kube.BatchV1().Jobs(ns)
	var job *batchv1.Job
	for deadline := time.Now().Add(time.Minute); job == nil; time.Sleep(100 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("helm ended before its hook Job %s ran: %v", jobName, err)
		default:
		}
		job, err = jobs.Get(ctx, jobName, metav1.GetOptions{})
		if err != nil {
			job = nil
			require.True(t, apierrors.IsNotFound(err), "%v", err)
			require.True(t, time.Now().Before(deadline), "no hook Job %s after a minute", jobName)
		}
	}
	// Its RBAC was created first.
	saName := job.Spec.Template.Spec.ServiceAccountName
	_, err = kube.CoreV1().ServiceAccounts(ns).Get(ctx, saName, metav1.GetOptions{})
	require.NoError(t, err)
	_, err = kube.RbacV1().ClusterRoleBindings().Get(ctx, saName, metav1.GetOptions{})
	require.NoError(t, err)
	sa := "system:serviceaccount:" + ns + ":" + saName
	kc := clientcmdapi.NewConfig()
	kc.Clusters["testenv"] = &clientcmdapi.Cluster{Server: env.URL, CertificateAuthorityData: env.CAData}
	kc.AuthInfos["hook"] = &clientcmdapi.AuthInfo{Token: env.Token(testenv.UserAdmin), Impersonate: sa}
	kc.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: "hook"}
	kc.CurrentContext = "testenv"
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, kubeconfig))
	return job, kubeconfig
}

// runHookCommand runs bin with a hook Job's args and kubeconfig; it must succeed.
func runHookCommand(t *testing.T, bin string, args []string, kubeconfig string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, append(append([]string{}, args...), "--kubeconfig="+kubeconfig)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the hook's command %v: %s", args, out)
	t.Logf("the hook's command (%v): %s", args, out)
	return string(out)
}

// completeHookJob marks the Job Complete with the conditions the Job controller of Kubernetes
// 1.34 sets, so that Helm goes on.
func completeHookJob(t *testing.T, env *testenv.Env, job *batchv1.Job) {
	t.Helper()
	kube, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	now := metav1.Now()
	job.Status = batchv1.JobStatus{StartTime: &now, CompletionTime: &now, Succeeded: 1, Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now, LastProbeTime: now},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now, LastProbeTime: now},
	}}
	_, err = kube.BatchV1().Jobs(job.Namespace).UpdateStatus(t.Context(), job, metav1.UpdateOptions{})
	require.NoError(t, err, "marking the hook Job %s Complete", job.Name)
}
