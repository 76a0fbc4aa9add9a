package chart

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// applier server-side applies objects as dry runs, with strict field
// validation: an unknown or misplaced field, a bad enum value or a CEL
// expression that does not compile is an error.
type applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newApplier(t *testing.T, env *testenv.Env) *applier {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(env.Config)
	require.NoError(t, err)
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
}

func (a *applier) apply(ctx context.Context, u *unstructured.Unstructured, dryRun bool) error {
	gvk := u.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return err
	}
	body, err := json.Marshal(u.Object)
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{FieldManager: "chart-test", Force: ptrTo(true), FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	ri := a.dyn.Resource(m.Resource)
	if u.GetNamespace() != "" {
		_, err = ri.Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.ApplyPatchType, body, opts)
	} else {
		_, err = ri.Patch(ctx, u.GetName(), types.ApplyPatchType, body, opts)
	}
	return err
}

func ptrTo[T any](v T) *T { return &v }

// TestServerSideDryRun applies every object the chart renders, for several
// sets of values, to a real kube-apiserver that has the CRDs of this product,
// cert-manager, Calico and (when its module can be fetched) the
// prometheus-operator installed, as server-side dry runs.
func TestServerSideDryRun(t *testing.T) {
	if testing.Short() {
		t.Skip("needs kube-apiserver and etcd")
	}
	env := testenv.Start(t)
	crds := installCRDs(t, env)
	a := newApplier(t, env)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	for name, vals := range map[string]map[string]any{
		"defaults":    nil,
		"non-default": valuesYAML(t, nonDefaultValues),
		"issuerRef and no policy": valuesYAML(t, `
certManager: {issuerRef: {name: corp-ca, kind: ClusterIssuer, group: cert-manager.io}}
policy: {create: false}
leaderElection: {enabled: false}
replicaCount: 1
`),
	} {
		t.Run(name, func(t *testing.T) {
			ns := "chart-" + map[string]string{"defaults": "a", "non-default": "b", "issuerRef and no policy": "c"}[name]
			env.CreateNamespace(t, ns)
			r, err := renderErr(t, ns, vals)
			require.NoError(t, err)
			applied, skipped := 0, 0
			for _, o := range r.Objects {
				if o.GetKind() == "ServiceMonitor" && !crds.serviceMonitor || o.GetKind() == "PrometheusRule" && !crds.prometheusRule {
					t.Logf("skipping %s %s: no CRD", o.GetKind(), o.GetName())
					skipped++
					continue
				}
				require.NoError(t, a.apply(ctx, o, true), "%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
				applied++
			}
			t.Logf("%d objects accepted by a server-side dry run", applied)
			require.Equal(t, len(r.Objects)-skipped, applied)
			require.GreaterOrEqual(t, applied, 10)
		})
	}

	// The Deployment's pod passes the "restricted" Pod Security Standard and
	// the Priority admission (system-cluster-critical outside kube-system).
	{
		const ns = "chart-restricted"
		env.CreateNamespace(t, ns)
		cs, err := kubernetes.NewForConfig(env.Config)
		require.NoError(t, err)
		_, err = cs.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"restricted"}}}`), metav1.PatchOptions{})
		require.NoError(t, err)
		r, err := renderErr(t, ns, nil)
		require.NoError(t, err)
		require.NoError(t, a.apply(ctx, r.get(t, "ServiceAccount", "calico-rr-autoscaler"), false))
		dep := typed[appsv1.Deployment](t, r.get(t, "Deployment", "calico-rr-autoscaler"))
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "from-template", Namespace: ns, Labels: dep.Spec.Template.Labels},
			Spec: dep.Spec.Template.Spec}
		_, err = cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.NoError(t, err, "the controller's pod under Pod Security restricted")
		pod.Spec.SecurityContext.SeccompProfile = nil
		pod.Spec.Containers[0].SecurityContext.SeccompProfile = nil
		_, err = cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.ErrorContains(t, err, "seccompProfile", "restricted is enforced")
		// The hook Jobs' pods (pre-upgrade crds apply, pre-delete uninstall) too.
		for _, name := range []string{"calico-rr-autoscaler-crds", "calico-rr-autoscaler-uninstall"} {
			require.NoError(t, a.apply(ctx, r.get(t, "ServiceAccount", name), false))
			job := typed[batchv1.Job](t, r.get(t, "Job", name))
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: job.Spec.Template.Labels},
				Spec: job.Spec.Template.Spec}
			_, err = cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			require.NoError(t, err, "the %s Job's pod under Pod Security restricted", name)
		}
	}

	// The dry runs do catch mistakes: a misspelled field, a CEL expression
	// that does not compile, a bad enum of a cert-manager field.
	r, err := renderErr(t, "chart-a", nil)
	require.NoError(t, err)
	for what, mutate := range map[string]func(*unstructured.Unstructured) (string, string){
		"misspelled probe field": func(u *unstructured.Unstructured) (string, string) {
			dep := r.get(t, "Deployment", "calico-rr-autoscaler").DeepCopy()
			c := dep.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
			c["readinesProbe"] = c["readinessProbe"]
			*u = *dep
			return "Deployment", "readinesProbe: field not declared in schema"
		},
		"bad CEL": func(u *unstructured.Unstructured) (string, string) {
			vwc := r.get(t, "ValidatingWebhookConfiguration", "calico-rr-autoscaler").DeepCopy()
			w := vwc.Object["webhooks"].([]any)[0].(map[string]any)
			w["matchConditions"].([]any)[0].(map[string]any)["expression"] = "object.metadata.labels =="
			*u = *vwc
			return "ValidatingWebhookConfiguration", "compilation failed"
		},
		"bad cert-manager field": func(u *unstructured.Unstructured) (string, string) {
			crt := r.get(t, "Certificate", "calico-rr-autoscaler-tls").DeepCopy()
			crt.Object["spec"].(map[string]any)["privateKey"].(map[string]any)["rotationPolicy"] = "Sometimes"
			*u = *crt
			return "Certificate", "rotationPolicy"
		},
	} {
		u := &unstructured.Unstructured{}
		kind, want := mutate(u)
		err := a.apply(ctx, u, true)
		require.Error(t, err, "%s: %s accepted", what, kind)
		require.Contains(t, err.Error(), want, what)
	}
}
