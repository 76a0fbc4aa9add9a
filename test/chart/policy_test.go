package chart

import (
	"context"
	"encoding/base64"
	"errors"
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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	calicocrds "github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico/crds"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/policyapply"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// TestRenderPolicyHooks: the default policy is no release resource. The chart renders it into a
// ConfigMap that a post-install, post-upgrade and post-rollback hook Job mounts and applies
// (`policy apply`, the product's image, its own identity that may only get, create and patch this
// one policy); a pre-upgrade hook Job (`policy keep`, after the crds hook) marks a policy the
// previous chart created as a release resource. The rendered document is one the command takes
// and the product's rules accept. policy.create=false renders none of it.
func TestRenderPolicyHooks(t *testing.T) {
	r := render(t, nil)
	const fullname = "calico-rr-autoscaler"
	for _, o := range r.Objects {
		require.NotEqual(t, "RouteReflectorPolicy", o.GetKind(), "the policy is no release resource")
	}
	cm := typed[corev1.ConfigMap](t, r.get(t, "ConfigMap", fullname+"-policy"))
	require.Empty(t, cm.Annotations["helm.sh/hook"], "the ConfigMap is a release resource")
	body, name, err := policyapply.Decode([]byte(cm.Data["policy.yaml"]))
	require.NoError(t, err, "the command takes the rendered policy")
	require.Equal(t, "default", name)
	require.Contains(t, string(body), `"helm.sh/resource-policy":"keep"`)
	p := typed[v1alpha1.RouteReflectorPolicy](t, r.get(t, "RouteReflectorPolicy", "default"))
	require.Empty(t, policy.Validate(p))

	dep := typed[appsv1.Deployment](t, r.get(t, "Deployment", fullname)).Spec.Template.Spec
	apply := typed[batchv1.Job](t, r.get(t, "Job", fullname+"-policy"))
	keep := typed[batchv1.Job](t, r.get(t, "Job", fullname+"-policy-keep"))
	require.Equal(t, "post-install,post-upgrade,post-rollback", apply.Annotations["helm.sh/hook"])
	require.Equal(t, "pre-upgrade", keep.Annotations["helm.sh/hook"])
	require.Equal(t, "1", keep.Annotations["helm.sh/hook-weight"], "after the crds hook's Job (weight 0)")
	for _, j := range []*batchv1.Job{apply, keep} {
		require.Equal(t, "before-hook-creation,hook-succeeded", j.Annotations["helm.sh/hook-delete-policy"])
		pod := j.Spec.Template.Spec
		require.Equal(t, fullname+"-policy", pod.ServiceAccountName)
		require.Equal(t, corev1.RestartPolicyNever, pod.RestartPolicy)
		require.Equal(t, dep.Containers[0].Image, pod.Containers[0].Image, "the product's own image")
		require.Equal(t, dep.SecurityContext, pod.SecurityContext)
		require.NotNil(t, j.Spec.ActiveDeadlineSeconds)
	}
	require.Equal(t, []string{"policy", "apply", "-f=/etc/calico-rr-autoscaler/policy.yaml", "--timeout=240s"}, apply.Spec.Template.Spec.Containers[0].Args)
	require.EqualValues(t, 300, *apply.Spec.ActiveDeadlineSeconds, "the command's timeout and a minute")
	require.Equal(t, cm.Name, apply.Spec.Template.Spec.Volumes[0].ConfigMap.Name)
	require.Equal(t, "/etc/calico-rr-autoscaler", apply.Spec.Template.Spec.Containers[0].VolumeMounts[0].MountPath)
	require.Equal(t, []string{"policy", "keep", "--name=default", "--release=" + releaseName, "--release-namespace=" + releaseNamespace, "--timeout=2m"},
		keep.Spec.Template.Spec.Containers[0].Args)
	for _, kind := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding"} {
		a := r.get(t, kind, fullname+"-policy").GetAnnotations()
		require.Equal(t, "pre-upgrade,post-install,post-upgrade,post-rollback", a["helm.sh/hook"], kind)
		require.Equal(t, "-1", a["helm.sh/hook-weight"], "%s before the Jobs", kind)
	}
	cr := typed[rbacv1.ClusterRole](t, r.get(t, "ClusterRole", fullname+"-policy"))
	require.Len(t, cr.Rules, 1)
	require.Equal(t, []string{"default"}, cr.Rules[0].ResourceNames, "this policy only")
	for _, verb := range []string{"get", "patch", "create"} {
		require.True(t, allows(cr.Rules, "routereflector.io", "routereflectorpolicies", verb, "default"), verb)
	}
	for _, verb := range []string{"delete", "list", "update"} {
		require.False(t, allows(cr.Rules, "routereflector.io", "routereflectorpolicies", verb, "default"), verb)
	}
	require.False(t, allows(cr.Rules, "routereflector.io", "routereflectorpolicies", "patch", "other"))

	r = render(t, valuesYAML(t, "policy: {name: pool-a, applyTimeoutSeconds: 60}"))
	cr = typed[rbacv1.ClusterRole](t, r.get(t, "ClusterRole", fullname+"-policy"))
	require.Equal(t, []string{"pool-a"}, cr.Rules[0].ResourceNames)
	require.Contains(t, typed[batchv1.Job](t, r.get(t, "Job", fullname+"-policy")).Spec.Template.Spec.Containers[0].Args, "--timeout=60s")
	r.get(t, "RouteReflectorPolicy", "pool-a")

	r = render(t, valuesYAML(t, "policy: {create: false}"))
	for _, o := range r.Objects {
		require.False(t, strings.HasPrefix(o.GetName(), fullname+"-policy"), "%s %s with policy.create=false", o.GetKind(), o.GetName())
	}
	_, err = renderErr(t, releaseNamespace, valuesYAML(t, "policy: {applyTimeoutSeconds: 1}"))
	require.ErrorContains(t, err, "applyTimeoutSeconds")
}

// TestInstallWebhookLoadedFirst is issue 51's install race, forced the losing way: `helm install`
// (the real helm, the chart's own values but the test's webhook Service, played as in
// TestChartUpgradeMovesNothing) with the policy webhook (failurePolicy Fail) answered by nothing
// yet. Before the policy hook runs, the test proves the API server has loaded the webhook
// configuration: a probe policy's server-side dry run fails calling the webhook. Then the hook
// Job is played (`policy apply` of the ConfigMap Helm created, as the hook's service account): it
// retries, the policy is still absent; a replica of the product starts (the chart's Deployment
// args) and joins the Service: the apply goes through, Helm's install succeeds, the replica
// answered the policy's CREATE (allowed, by the hook's identity), and the policy has the values'
// spec. Then the command's two other ends: a policy the webhook denies is refused at once (one
// line, no retry), and with the Service down the apply gives up after its timeout with one line.
// Last, helm uninstall with its pre-delete hook played: the hook deletes the policy (no release
// resource now) and the replica releases it; the ConfigMap goes with the release.
func TestInstallWebhookLoadedFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("needs kube-apiserver, etcd and helm")
	}
	begin := time.Now()
	binc := make(chan error, 1)
	u := &upgradeWorld{t: t}
	go func() {
		var err error
		u.bin, err = testenv.BuildProduct(context.Background(), t.TempDir())
		binc <- err
	}()
	env := testenv.Start(t, testenv.WithChartRBAC())
	u.env = env
	const ns = testenv.ChartNamespace
	env.CreateNamespace(t, ns)
	calicoDir, err := calicocrds.Dir()
	require.NoError(t, err)
	testenv.InstallCRDs(t, env.Config, filepath.Join(calicoDir, "crd.projectcalico.org_bgppeers.yaml"),
		filepath.Join(calicoDir, "crd.projectcalico.org_bgpconfigurations.yaml"),
		filepath.Join(calicoDir, "crd.projectcalico.org_caliconodestatuses.yaml"))
	u.admin, err = kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	u.dyn, err = dynamic.NewForConfig(env.Config)
	require.NoError(t, err)
	ctx := t.Context()
	policies := u.dyn.Resource(policiesGVR)

	svc, svcCA := startService(t) // no endpoint: every call fails as a Service without ready pods
	values := fmt.Sprintf("certManager: {enabled: false}\nwebhook: {url: %q, caBundle: %s}\n"+
		"policy: {spec: {topology: {type: DualPlane, maxRackSize: 15}, removalDelay: 3s, bgpHealth: {enabled: false}}}\n",
		svc.url, base64.StdEncoding.EncodeToString(svcCA))
	valuesFile := filepath.Join(t.TempDir(), "values.yaml")
	require.NoError(t, os.WriteFile(valuesFile, []byte(values), 0o644))
	installed := make(chan error, 1)
	start := time.Now()
	go func() {
		out, stderr, err := env.Helm(t, testenv.UserAdmin, "install", testenv.ChartRelease, chartDir(t), "--namespace", ns,
			"-f", valuesFile, "--timeout", "3m")
		if err != nil {
			err = fmt.Errorf("%w\n%s\n%s", err, out, stderr)
		}
		installed <- err
	}()

	// The API server calls the policy webhook, which nothing answers.
	probe := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal([]byte("apiVersion: routereflector.io/v1alpha1\nkind: RouteReflectorPolicy\n"+
		"metadata: {name: probe}\nspec: {nodeSelector: {matchLabels: {probe: \"1\"}}}\n"), &probe.Object))
	u.eventually("the policy webhook loaded, its backend down", time.Minute, func() error {
		_, err := policies.Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil || !strings.Contains(err.Error(), `failed calling webhook "policy.validate.routereflector.io"`) {
			return fmt.Errorf("the probe's dry run: %v", err)
		}
		return nil
	})
	loaded := time.Since(start)
	refusedBefore := svc.noEndpoints.Load()
	require.Positive(t, refusedBefore)

	// The post-install hook, played while the webhook has no backend.
	jobName := testenv.ChartRelease + "-policy"
	job, kubeconfig := awaitHookJob(t, env, ns, jobName, installed)
	args := job.Spec.Template.Spec.Containers[0].Args
	require.Equal(t, []string{"policy", "apply"}, args[:2])
	cm, err := u.admin.CoreV1().ConfigMaps(ns).Get(ctx, job.Spec.Template.Spec.Volumes[0].ConfigMap.Name, metav1.GetOptions{})
	require.NoError(t, err)
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(policyFile, []byte(cm.Data["policy.yaml"]), 0o644))
	for i, a := range args {
		if strings.HasPrefix(a, "-f=") {
			args[i] = "-f=" + policyFile
		}
	}
	require.NoError(t, <-binc)
	type result struct {
		out string
		err error
	}
	applied := make(chan result, 1)
	var hookOut strings.Builder
	go func() {
		cmd := exec.CommandContext(ctx, u.bin, append(args, "--kubeconfig="+kubeconfig)...)
		cmd.Stdout, cmd.Stderr = &hookOut, &hookOut
		err := cmd.Run()
		applied <- result{hookOut.String(), err}
	}()
	u.eventually("the hook retried twice", time.Minute, func() error {
		if n := svc.noEndpoints.Load() - refusedBefore; n < 2 {
			return fmt.Errorf("%d calls of the hook's reached the Service", n)
		}
		return nil
	})
	_, err = policies.Get(ctx, "default", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "no policy while the webhook has no backend: %v", err)

	// The backend comes up.
	replica := u.startReplica("a", u.deployment())
	svc.add("a", replica)
	var res result
	select {
	case res = <-applied:
	case <-time.After(2 * time.Minute):
		t.Fatal("policy apply did not end after the webhook came up")
	}
	require.NoError(t, res.err, "policy apply: %s", res.out)
	t.Logf("the hook's output:\n%s", res.out)
	require.Contains(t, res.out, `not applied yet (attempt 1, next in 500ms): Internal error occurred: failed calling webhook "policy.validate.routereflector.io"`, "attempts failed before the backend came")
	require.Contains(t, res.out, "RouteReflectorPolicy default applied")
	completeHookJob(t, env, job)
	select {
	case err := <-installed:
		require.NoError(t, err, "helm install")
	case <-time.After(2 * time.Minute):
		t.Fatal("helm install did not end after its hook Job completed")
	}
	t.Logf("helm install in %s (the webhook loaded %s after it started)", time.Since(start).Round(time.Millisecond), loaded.Round(time.Millisecond))

	// The replica reviewed the policy's creation, by the hook's identity.
	var created []svcReview
	for _, r := range svc.answered("RouteReflectorPolicy") {
		if r.name == "default" && r.operation == "CREATE" {
			created = append(created, r)
		}
	}
	require.Len(t, created, 1, "%v", svc.answered("RouteReflectorPolicy"))
	require.True(t, created[0].allowed)
	require.Equal(t, "/validate-routereflectorpolicy", created[0].path)
	require.Equal(t, "system:serviceaccount:"+ns+":"+jobName, created[0].user)
	got, err := policies.Get(ctx, "default", metav1.GetOptions{})
	require.NoError(t, err)
	rack, _, _ := unstructured.NestedInt64(got.Object, "spec", "topology", "maxRackSize")
	require.EqualValues(t, 15, rack, "the values' spec")
	require.Equal(t, policyapply.ResourcePolicyKeep, got.GetAnnotations()[policyapply.AnnotationResourcePolicy])

	// A denial ends the command at once, on one line.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("apiVersion: routereflector.io/v1alpha1\nkind: RouteReflectorPolicy\nmetadata: {name: default}\n"+
		"spec: {topology: {type: MultiCluster}, minRouteReflectors: 5, maxRouteReflectors: 2}\n"), 0o644))
	adminKubeconfig := env.KubeconfigPath(testenv.UserAdmin)
	denied := time.Now()
	out, err := exec.CommandContext(ctx, u.bin, "policy", "apply", "-f="+bad, "--timeout=1m", "--kubeconfig="+adminKubeconfig).CombinedOutput()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "%v %s", err, out)
	require.Equal(t, 1, ee.ExitCode())
	require.Less(t, time.Since(denied), 10*time.Second, "a denial is not retried")
	require.Equal(t, 1, strings.Count(string(out), "\n"), "one line: %s", out)
	require.Contains(t, string(out), "RouteReflectorPolicy default refused:")
	require.Contains(t, string(out), "spec.minRouteReflectors")
	t.Logf("denied in %s: %s", time.Since(denied).Round(time.Millisecond), out)

	// The Service down: the command gives up after its timeout, on one line.
	svc.down.Store(true)
	gaveUp := time.Now()
	changed := strings.Replace(cm.Data["policy.yaml"], "maxRackSize: 15", "maxRackSize: 16", 1)
	require.NotEqual(t, cm.Data["policy.yaml"], changed)
	require.NoError(t, os.WriteFile(policyFile, []byte(changed), 0o644))
	out, err = exec.CommandContext(ctx, u.bin, "policy", "apply", "-f="+policyFile, "--timeout=3s", "--kubeconfig="+adminKubeconfig).CombinedOutput()
	require.True(t, errors.As(err, &ee), "%v %s", err, out)
	took := time.Since(gaveUp)
	require.GreaterOrEqual(t, took, 3*time.Second)
	require.Less(t, took, 15*time.Second)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Regexp(t, `^calico-rr-autoscaler: RouteReflectorPolicy default not applied within 3s \(\d+ attempts\): .*failed calling webhook`, lines[len(lines)-1])
	svc.down.Store(false)
	t.Logf("gave up after %s: %s", took.Round(time.Millisecond), lines[len(lines)-1])
	// helm uninstall: the pre-delete hook (`uninstall`) deletes the policy, which is no release
	// resource, and the replica releases it; Helm removes the rest, the ConfigMap with it.
	uninstalled := make(chan error, 1)
	go func() {
		out, stderr, err := env.Helm(t, testenv.UserAdmin, "uninstall", testenv.ChartRelease, "--namespace", ns, "--timeout", "2m")
		if err != nil {
			err = fmt.Errorf("%w\n%s\n%s", err, out, stderr)
		}
		uninstalled <- err
	}()
	job, kubeconfig = awaitHookJob(t, env, ns, testenv.ChartRelease+"-uninstall", uninstalled)
	require.Equal(t, "uninstall", job.Spec.Template.Spec.Containers[0].Args[0])
	hookOutput := runHookCommand(t, u.bin, job.Spec.Template.Spec.Containers[0].Args, kubeconfig)
	require.Contains(t, hookOutput, "RouteReflectorPolicy default deleted")
	require.Contains(t, hookOutput, "every RouteReflectorPolicy released")
	completeHookJob(t, env, job)
	select {
	case err := <-uninstalled:
		require.NoError(t, err, "helm uninstall")
	case <-time.After(2 * time.Minute):
		t.Fatal("helm uninstall did not end after its hook Job completed")
	}
	_, err = policies.Get(ctx, "default", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the uninstall hook deleted the policy: %v", err)
	_, err = u.admin.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the policy's ConfigMap went with the release: %v", err)
	t.Logf("TestInstallWebhookLoadedFirst took %s", time.Since(begin).Round(time.Millisecond))
}
