package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// nonDefaultValues changes most things a user would: self-managed TLS, three
// replicas, a ServiceMonitor, the alerts and the dashboard, other ports and
// failure policies, and a custom policy.
const nonDefaultValues = `
fullnameOverride: rra
replicaCount: 3
hostNetwork: true
webhook:
  port: 10443
health:
  port: 10081
metrics:
  port: 10080
  serviceMonitor:
    enabled: true
    labels: {release: prometheus}
    interval: 15s
prometheusRule:
  enabled: true
  labels: {release: prometheus}
  additionalAlertLabels: {team: network}
  roleChurn: {threshold: 40, window: 2h}
grafanaDashboard:
  enabled: true
  annotations: {grafana_folder: Networking}
certManager:
  enabled: false
selfManagedCerts:
  caValidity: 1000h
  certValidity: 100h
tolerations:
  - {key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}
topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}
podDisruptionBudget:
  minAvailable: 2
webhooks:
  node:
    watchedAnnotations: [example.com/maintenance]
    objectSelector:
      matchExpressions: [{key: example.com/unmanaged, operator: DoesNotExist}]
    mutating: {failurePolicy: Fail, timeoutSeconds: 2}
    validating: {timeoutSeconds: 4}
  bgpPeer: {failurePolicy: Ignore}
policy:
  name: bgp-pool
  spec:
    minRouteReflectors: 4
    maxRouteReflectors: 12
    scaling:
      steps: [{maxNodes: 100, routeReflectors: 4}, {maxNodes: 1000, routeReflectors: 8}]
    topology: {type: SingleCluster, clusterID: 10.255.0.1}
    nodeSelector: {matchLabels: {example.com/pool: bgp}}
    forbiddenNodeSelector: {matchExpressions: [{key: node-role.kubernetes.io/control-plane, operator: Exists}]}
    removalDelay: 10m
    handover: BGPSessions
`

// allows reports whether rules grant verb on group/resource (named name).
func allows(rules []rbacv1.PolicyRule, group, resource, verb, name string) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) &&
			(len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, name)) {
			return true
		}
	}
	return false
}

func requireNoWildcards(t *testing.T, kind, name string, rules []rbacv1.PolicyRule) {
	t.Helper()
	for _, r := range rules {
		for _, s := range slices.Concat(r.APIGroups, r.Resources, r.Verbs, r.ResourceNames) {
			require.NotEqual(t, "*", s, "%s %s: wildcard in %+v", kind, name, r)
		}
		require.Empty(t, r.NonResourceURLs, "%s %s", kind, name)
	}
}

// checkCommon checks what holds for any values: the pieces fit together.
func checkCommon(t *testing.T, r *rendered, ns, fullname string) (*appsv1.Deployment, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	t.Helper()
	for _, o := range r.Objects {
		require.LessOrEqual(t, len(o.GetName()), 63, "%s %s", o.GetKind(), o.GetName())
		switch o.GetKind() {
		case "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "RouteReflectorPolicy":
			require.Empty(t, o.GetNamespace(), "%s %s is cluster-scoped", o.GetKind(), o.GetName())
		default:
			require.Equal(t, ns, o.GetNamespace(), "%s %s", o.GetKind(), o.GetName())
		}
		require.Equal(t, "Helm", o.GetLabels()["app.kubernetes.io/managed-by"], "%s %s", o.GetKind(), o.GetName())
	}

	dep := typed[appsv1.Deployment](t, r.get(t, "Deployment", fullname))
	pod := dep.Spec.Template
	require.True(t, labels.SelectorFromSet(dep.Spec.Selector.MatchLabels).Matches(labels.Set(pod.Labels)))
	require.Len(t, pod.Spec.Containers, 1)
	c := pod.Spec.Containers[0]

	// Arguments parse as serve's flags and agree with ports and mounts.
	require.Equal(t, "serve", c.Args[0])
	fs, _ := serveFlags()
	require.NoError(t, fs.Parse(c.Args[1:]), "args %v", c.Args)
	require.Empty(t, fs.Args(), "stray arguments")
	port := func(name string) int32 {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort
			}
		}
		require.Fail(t, fmt.Sprintf("no container port %q", name))
		return 0
	}
	require.Equal(t, fmt.Sprint(port("webhook")), fs.Lookup("webhook-port").Value.String())
	require.Equal(t, fmt.Sprintf(":%d", port("health")), fs.Lookup("health-probe-bind-address").Value.String())
	certDir := fs.Lookup("cert-dir").Value.String()
	var certVolume string
	for _, m := range c.VolumeMounts {
		if m.MountPath == certDir {
			certVolume = m.Name
		}
	}
	require.NotEmpty(t, certVolume, "a volume is mounted at --cert-dir %s", certDir)

	// Hardening.
	require.Equal(t, "system-cluster-critical", pod.Spec.PriorityClassName)
	require.True(t, *pod.Spec.SecurityContext.RunAsNonRoot)
	require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, pod.Spec.SecurityContext.SeccompProfile.Type)
	sc := c.SecurityContext
	require.True(t, *sc.ReadOnlyRootFilesystem)
	require.False(t, *sc.AllowPrivilegeEscalation)
	require.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, sc.SeccompProfile.Type)
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "health", c.LivenessProbe.HTTPGet.Port.String())
	require.Equal(t, "health", c.ReadinessProbe.HTTPGet.Port.String())
	require.NotNil(t, c.Resources.Requests.Cpu())

	// Spread: preferred anti-affinity on hostname, spread across zones.
	paa := pod.Spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	require.NotEmpty(t, paa)
	require.Equal(t, corev1.LabelHostname, paa[0].PodAffinityTerm.TopologyKey)
	require.True(t, labels.SelectorFromSet(paa[0].PodAffinityTerm.LabelSelector.MatchLabels).Matches(labels.Set(pod.Labels)))
	require.Equal(t, corev1.LabelTopologyZone, pod.Spec.TopologySpreadConstraints[0].TopologyKey)
	for _, tsc := range pod.Spec.TopologySpreadConstraints {
		require.NotNil(t, tsc.LabelSelector, "every spread constraint selects the pods")
	}

	// The Service sends 443 (or service.port) to the webhook port.
	svc := typed[corev1.Service](t, r.get(t, "Service", fullname))
	require.True(t, labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)))
	require.Equal(t, "webhook", svc.Spec.Ports[0].TargetPort.String())

	// ServiceAccount.
	sa := typed[corev1.ServiceAccount](t, r.get(t, "ServiceAccount", pod.Spec.ServiceAccountName))
	require.Equal(t, ns, sa.Namespace)

	// RBAC: what the controller needs, nothing cluster-wide it does not.
	cr := typed[rbacv1.ClusterRole](t, r.get(t, "ClusterRole", fullname))
	requireNoWildcards(t, "ClusterRole", cr.Name, cr.Rules)
	for _, v := range []string{"get", "list", "watch", "patch"} {
		require.True(t, allows(cr.Rules, "", "nodes", v, ""), "nodes %s", v)
	}
	for _, v := range []string{"create", "update", "delete", "deletecollection"} {
		require.False(t, allows(cr.Rules, "", "nodes", v, ""), "nodes %s", v)
	}
	require.True(t, allows(cr.Rules, "routereflector.io", "routereflectorpolicies", "watch", ""))
	require.False(t, allows(cr.Rules, "routereflector.io", "routereflectorpolicies", "delete", ""))
	require.True(t, allows(cr.Rules, "routereflector.io", "routereflectorpolicies/status", "update", ""))
	for _, g := range []string{"crd.projectcalico.org", "projectcalico.org"} {
		for _, v := range []string{"get", "list", "watch", "create", "update", "patch", "delete"} {
			require.True(t, allows(cr.Rules, g, "bgppeers", v, ""), "%s bgppeers %s", g, v)
		}
		require.True(t, allows(cr.Rules, g, "bgpconfigurations", "patch", ""))
		require.False(t, allows(cr.Rules, g, "bgpconfigurations", "delete", ""))
		require.True(t, allows(cr.Rules, g, "caliconodestatuses", "create", ""))
		require.False(t, allows(cr.Rules, g, "ippools", "get", ""))
	}
	require.True(t, allows(cr.Rules, "", "events", "create", ""))
	require.True(t, allows(cr.Rules, "events.k8s.io", "events", "patch", ""))
	for _, res := range []string{"secrets", "configmaps", "pods", "leases"} {
		require.False(t, allows(cr.Rules, "", res, "get", ""), "cluster-wide %s", res)
		require.False(t, allows(cr.Rules, "coordination.k8s.io", res, "get", ""), "cluster-wide %s", res)
	}
	crb := typed[rbacv1.ClusterRoleBinding](t, r.get(t, "ClusterRoleBinding", fullname))
	require.Equal(t, rbacv1.Subject{Kind: "ServiceAccount", Name: sa.Name, Namespace: ns}, crb.Subjects[0])

	// Webhook configurations: the four webhooks at their exact paths, behind
	// the Service, with matchConditions and no side effects.
	mwc := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, r.get(t, "MutatingWebhookConfiguration", fullname))
	vwc := typed[admissionregistrationv1.ValidatingWebhookConfiguration](t, r.get(t, "ValidatingWebhookConfiguration", fullname))
	require.Len(t, mwc.Webhooks, 1)
	require.Len(t, vwc.Webhooks, 3)
	paths := map[string]admissionregistrationv1.WebhookClientConfig{mwc.Webhooks[0].Name: mwc.Webhooks[0].ClientConfig}
	for _, w := range vwc.Webhooks {
		paths[w.Name] = w.ClientConfig
		require.Equal(t, admissionregistrationv1.SideEffectClassNone, *w.SideEffects)
		require.Equal(t, []string{"v1"}, w.AdmissionReviewVersions)
		require.NotEmpty(t, w.MatchConditions, w.Name)
	}
	for name, path := range map[string]string{
		"node.mutate.routereflector.io":      "/mutate-v1-node",
		"node.validate.routereflector.io":    "/validate-v1-node",
		"policy.validate.routereflector.io":  "/validate-routereflectorpolicy",
		"bgppeer.validate.routereflector.io": "/validate-bgppeer",
	} {
		cc, ok := paths[name]
		require.True(t, ok, name)
		require.Equal(t, path, *cc.Service.Path, name)
		require.Equal(t, svc.Name, cc.Service.Name)
		require.Equal(t, ns, cc.Service.Namespace)
		require.Equal(t, svc.Spec.Ports[0].Port, *cc.Service.Port)
		require.Nil(t, cc.URL)
	}
	mw := mwc.Webhooks[0]
	require.Equal(t, admissionregistrationv1.SideEffectClassNone, *mw.SideEffects)
	require.Equal(t, admissionregistrationv1.IfNeededReinvocationPolicy, *mw.ReinvocationPolicy)
	require.Equal(t, []string{"nodes", "nodes/status"}, mw.Rules[0].Resources)
	require.ElementsMatch(t, []admissionregistrationv1.OperationType{"CREATE", "UPDATE"}, mw.Rules[0].Operations)
	require.NotEmpty(t, mw.MatchConditions)

	bgp := vwc.Webhooks[2]
	// No objectSelector: a crd.projectcalico.org BGPPeer the Calico API server stored has its
	// labels in an annotation; the "managed" condition reads both.
	require.True(t, bgp.ObjectSelector == nil || len(bgp.ObjectSelector.MatchLabels)+len(bgp.ObjectSelector.MatchExpressions) == 0)
	require.Equal(t, "managed", bgp.MatchConditions[1].Name)
	require.Contains(t, bgp.MatchConditions[1].Expression, "labels[?'app.kubernetes.io/managed-by']")
	require.Contains(t, bgp.MatchConditions[1].Expression, "annotations[?'projectcalico.org/metadata']")
	require.ElementsMatch(t, []string{"crd.projectcalico.org", "projectcalico.org"}, slices.Concat(bgp.Rules[0].APIGroups, bgp.Rules[1].APIGroups))
	require.Contains(t, bgp.MatchConditions[0].Expression, "system:serviceaccount:"+ns+":"+sa.Name)

	// The default policy is valid by the product's own rules.
	if ps := r.all("RouteReflectorPolicy"); len(ps) > 0 {
		p := typed[v1alpha1.RouteReflectorPolicy](t, ps[0])
		require.Empty(t, policy.Validate(p), "rendered policy %s", p.Name)
	}

	// A PodDisruptionBudget that selects the pods.
	pdb := typed[policyv1.PodDisruptionBudget](t, r.get(t, "PodDisruptionBudget", fullname))
	require.True(t, labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels).Matches(labels.Set(pod.Labels)))
	return dep, vwc
}

func TestRenderDefaults(t *testing.T) {
	r := render(t, nil)
	ns, fullname := releaseNamespace, "calico-rr-autoscaler"
	dep, vwc := checkCommon(t, r, ns, fullname)
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]

	require.EqualValues(t, 2, *dep.Spec.Replicas)
	require.Equal(t, "calico-rr-autoscaler", pod.ServiceAccountName)
	require.Contains(t, c.Args, "--leader-elect")
	require.NotContains(t, strings.Join(c.Args, " "), "--self-managed-certs")
	require.Equal(t, "ghcr.io/calico-rr-autoscaler/calico-rr-autoscaler:0.3.0", c.Image)
	require.False(t, pod.HostNetwork)
	svc := typed[corev1.Service](t, r.get(t, "Service", fullname))
	require.EqualValues(t, 443, svc.Spec.Ports[0].Port)
	require.EqualValues(t, 9443, c.Ports[0].ContainerPort)

	// cert-manager: self-signed Issuer -> CA Certificate -> CA Issuer ->
	// serving Certificate for the Service, mounted at --cert-dir and
	// injected into both webhook configurations.
	require.NotNil(t, typed[cmapi.Issuer](t, r.get(t, "Issuer", fullname+"-selfsigned")).Spec.SelfSigned)
	ca := typed[cmapi.Certificate](t, r.get(t, "Certificate", fullname+"-ca"))
	require.True(t, ca.Spec.IsCA)
	require.Equal(t, fullname+"-selfsigned", ca.Spec.IssuerRef.Name)
	caIssuer := typed[cmapi.Issuer](t, r.get(t, "Issuer", fullname+"-ca"))
	require.Equal(t, ca.Spec.SecretName, caIssuer.Spec.CA.SecretName)
	serving := typed[cmapi.Certificate](t, r.get(t, "Certificate", fullname+"-tls"))
	require.Equal(t, caIssuer.Name, serving.Spec.IssuerRef.Name)
	require.Equal(t, []string{fullname, fullname + "." + ns, fullname + "." + ns + ".svc", fullname + "." + ns + ".svc.cluster.local"}, serving.Spec.DNSNames)
	require.Contains(t, serving.Spec.Usages, cmapi.UsageServerAuth)
	require.Equal(t, cmapi.ECDSAKeyAlgorithm, serving.Spec.PrivateKey.Algorithm)
	require.Equal(t, cmapi.RotationPolicyAlways, serving.Spec.PrivateKey.RotationPolicy)
	require.Equal(t, serving.Spec.SecretName, pod.Volumes[0].Secret.SecretName)
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		require.Equal(t, ns+"/"+serving.Name, r.get(t, kind, fullname).GetAnnotations()["cert-manager.io/inject-ca-from"], kind)
	}

	// Failure policies and timeouts.
	mwc := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, r.get(t, "MutatingWebhookConfiguration", fullname))
	require.Equal(t, admissionregistrationv1.Ignore, *mwc.Webhooks[0].FailurePolicy)
	require.EqualValues(t, 3, *mwc.Webhooks[0].TimeoutSeconds)
	want := []admissionregistrationv1.FailurePolicyType{admissionregistrationv1.Ignore, admissionregistrationv1.Fail, admissionregistrationv1.Fail}
	for i, w := range vwc.Webhooks {
		require.Equal(t, want[i], *w.FailurePolicy, w.Name)
	}

	// Namespace-scoped RBAC: leader election only; no Secrets with cert-manager.
	role := typed[rbacv1.Role](t, r.get(t, "Role", fullname))
	requireNoWildcards(t, "Role", role.Name, role.Rules)
	require.True(t, allows(role.Rules, "coordination.k8s.io", "leases", "update", ""))
	require.False(t, allows(role.Rules, "", "secrets", "get", fullname+"-tls"))
	require.Empty(t, r.all("ServiceMonitor"))

	p := typed[v1alpha1.RouteReflectorPolicy](t, r.get(t, "RouteReflectorPolicy", "default"))
	require.Nil(t, p.Spec.MinRouteReflectors, "the layout's own default")
	require.Nil(t, p.Spec.MaxRouteReflectors, "DualPlane: no cap")
	require.Equal(t, v1alpha1.DualPlane, p.Spec.Topology.Type)
	require.EqualValues(t, 500, *p.Spec.MaxClientsPerRouteReflector)
	// The chart's default policy is the empty spec's layout.
	chartDefault, errs := policy.Resolve(p)
	require.Empty(t, errs)
	require.True(t, chartDefault.IsDefaultLayout())

	pdb := typed[policyv1.PodDisruptionBudget](t, r.get(t, "PodDisruptionBudget", fullname))
	require.Equal(t, "1", pdb.Spec.MaxUnavailable.String())

	require.Contains(t, r.Notes, "kubectl get routereflectorpolicy default")
	require.Contains(t, r.Notes, "cert-manager issues")

	// The policy is no release resource: the policy hook applies it once its webhook answers
	// (TestRenderPolicyHooks, TestInstallWebhookLoadedFirst).
	for _, o := range r.Objects {
		require.NotEqual(t, "RouteReflectorPolicy", o.GetKind(), "a release resource")
	}
}

func TestRenderNonDefault(t *testing.T) {
	r := render(t, valuesYAML(t, nonDefaultValues))
	ns, fullname := releaseNamespace, "rra"
	dep, vwc := checkCommon(t, r, ns, fullname)
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]

	require.EqualValues(t, 3, *dep.Spec.Replicas)
	require.True(t, pod.HostNetwork)
	require.Equal(t, corev1.DNSClusterFirstWithHostNet, pod.DNSPolicy)
	require.Equal(t, "node-role.kubernetes.io/control-plane", pod.Tolerations[0].Key)
	require.Len(t, pod.TopologySpreadConstraints, 2)

	// No cert-manager: the binary manages its certificate; the flags it gets
	// name the chart's Secret, Service and webhook configurations.
	for _, kind := range []string{"Issuer", "Certificate"} {
		require.Empty(t, r.all(kind), kind)
	}
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		require.NotContains(t, r.get(t, kind, fullname).GetAnnotations(), "cert-manager.io/inject-ca-from")
	}
	fs, opts := serveFlags()
	require.NoError(t, fs.Parse(c.Args[1:]))
	opts.CertDir = fs.Lookup("cert-dir").Value.String()
	opts.Namespace = ns // from POD_NAMESPACE in the pod
	require.True(t, opts.Enabled)
	require.NoError(t, opts.Validate())
	require.Equal(t, "rra-tls", opts.SecretName)
	require.Equal(t, []string{"rra"}, opts.MutatingWebhooks)
	require.Equal(t, []string{"rra"}, opts.ValidatingWebhooks)
	require.Contains(t, opts.DNSNames(), "rra."+ns+".svc")
	require.EqualValues(t, 100, opts.CertValidity.Hours())
	require.NotNil(t, pod.Volumes[0].EmptyDir, "a writable volume at --cert-dir")
	require.EqualValues(t, 10443, c.Ports[0].ContainerPort)
	var env []string
	for _, e := range c.Env {
		env = append(env, e.Name)
	}
	require.Contains(t, env, "POD_NAMESPACE")

	// RBAC for self-managed certificates: its one Secret, its two webhook
	// configurations, nothing more.
	role := typed[rbacv1.Role](t, r.get(t, "Role", fullname))
	require.True(t, allows(role.Rules, "", "secrets", "create", ""))
	require.True(t, allows(role.Rules, "", "secrets", "update", "rra-tls"))
	require.False(t, allows(role.Rules, "", "secrets", "get", "other"))
	require.False(t, allows(role.Rules, "", "secrets", "list", ""))
	whca := typed[rbacv1.ClusterRole](t, r.get(t, "ClusterRole", fullname+"-webhook-ca"))
	requireNoWildcards(t, "ClusterRole", whca.Name, whca.Rules)
	for _, res := range []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations"} {
		require.True(t, allows(whca.Rules, "admissionregistration.k8s.io", res, "update", "rra"))
		require.False(t, allows(whca.Rules, "admissionregistration.k8s.io", res, "update", "someone-else"))
		require.False(t, allows(whca.Rules, "admissionregistration.k8s.io", res, "delete", "rra"))
	}
	r.get(t, "ClusterRoleBinding", fullname+"-webhook-ca")

	// Webhook settings from values.
	mwc := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, r.get(t, "MutatingWebhookConfiguration", fullname))
	require.Equal(t, admissionregistrationv1.Fail, *mwc.Webhooks[0].FailurePolicy)
	require.EqualValues(t, 2, *mwc.Webhooks[0].TimeoutSeconds)
	require.Equal(t, "example.com/unmanaged", mwc.Webhooks[0].ObjectSelector.MatchExpressions[0].Key)
	require.Contains(t, mwc.Webhooks[0].MatchConditions[0].Expression, "annotations[?'example.com/maintenance']")
	require.Contains(t, mwc.Webhooks[0].MatchConditions[0].Expression, "annotations[?'projectcalico.org/labels']", "the product's own annotations stay watched")
	require.EqualValues(t, 4, *vwc.Webhooks[0].TimeoutSeconds)
	require.Equal(t, admissionregistrationv1.Ignore, *vwc.Webhooks[2].FailurePolicy)

	// ServiceMonitor on the metrics Service's port.
	sm := r.get(t, "ServiceMonitor", fullname)
	require.Equal(t, "prometheus", sm.GetLabels()["release"])
	msvc := typed[corev1.Service](t, r.get(t, "Service", fullname+"-metrics"))
	sel := labels.SelectorFromSet(labels.Set(mustMap(t, sm.Object, "spec", "selector", "matchLabels")))
	require.True(t, sel.Matches(labels.Set(msvc.Labels)), "ServiceMonitor selects the metrics Service")
	require.False(t, sel.Matches(labels.Set(typed[corev1.Service](t, r.get(t, "Service", fullname)).Labels)), "not the webhook Service")
	require.EqualValues(t, 10080, msvc.Spec.Ports[0].Port)

	// The alerts and the dashboard with their values.
	pr := r.get(t, "PrometheusRule", fullname)
	require.Equal(t, "prometheus", pr.GetLabels()["release"])
	rules, _, err := unstructured.NestedSlice(pr.Object, "spec", "groups")
	require.NoError(t, err)
	require.Len(t, rules, 1)
	for _, rule := range rules[0].(map[string]any)["rules"].([]any) {
		rule := rule.(map[string]any)
		require.Equal(t, "network", rule["labels"].(map[string]any)["team"], rule["alert"])
		if rule["alert"] == "CalicoRRAutoscalerRoleChurn" {
			require.Contains(t, rule["expr"], "[2h])) > 40")
		}
	}
	dash := r.get(t, "ConfigMap", fullname+"-dashboard")
	require.Equal(t, "1", dash.GetLabels()["grafana_dashboard"])
	require.Equal(t, "Networking", dash.GetAnnotations()["grafana_folder"])
	data, _, err := unstructured.NestedString(dash.Object, "data", "calico-rr-autoscaler.json")
	require.NoError(t, err)
	file, err := os.ReadFile(filepath.Join(chartDir(t), "dashboards", "calico-rr-autoscaler.json"))
	require.NoError(t, err)
	require.JSONEq(t, string(file), data, "the ConfigMap carries dashboards/calico-rr-autoscaler.json")

	// The custom policy.
	p := typed[v1alpha1.RouteReflectorPolicy](t, r.get(t, "RouteReflectorPolicy", "bgp-pool"))
	require.Len(t, p.Spec.Scaling.Steps, 2)
	require.Empty(t, p.Spec.Scaling.Ratio)
	require.Equal(t, v1alpha1.SingleCluster, p.Spec.Topology.Type)
	require.Equal(t, v1alpha1.HandoverBGPSessions, p.Spec.Handover)

	pdb := typed[policyv1.PodDisruptionBudget](t, r.get(t, "PodDisruptionBudget", fullname))
	require.Equal(t, "2", pdb.Spec.MinAvailable.String())
	require.Nil(t, pdb.Spec.MaxUnavailable)
	require.Contains(t, r.Notes, "keeps its own CA")
}

// TestRenderOtherModes: an existing cert-manager issuer; no policy, a single
// replica without leader election; webhooks switched off.
func TestRenderOtherModes(t *testing.T) {
	r := render(t, valuesYAML(t, `
certManager:
  issuerRef: {name: corp-ca, kind: ClusterIssuer, group: cert-manager.io}
policy: {create: false}
replicaCount: 1
leaderElection: {enabled: false}
`))
	require.Empty(t, r.all("Issuer"))
	require.Len(t, r.all("Certificate"), 1)
	serving := typed[cmapi.Certificate](t, r.all("Certificate")[0])
	require.Equal(t, "corp-ca", serving.Spec.IssuerRef.Name)
	require.Equal(t, "ClusterIssuer", serving.Spec.IssuerRef.Kind)
	require.Empty(t, r.all("RouteReflectorPolicy"))
	require.Empty(t, r.all("Role"), "nothing to do in the namespace")
	dep := typed[appsv1.Deployment](t, r.get(t, "Deployment", "calico-rr-autoscaler"))
	require.NotContains(t, dep.Spec.Template.Spec.Containers[0].Args, "--leader-elect")
	require.Contains(t, r.Notes, "No RouteReflectorPolicy was created")

	r = render(t, valuesYAML(t, `
webhooks:
  node: {mutating: {enabled: false}, validating: {enabled: false}}
  bgpPeer: {enabled: false}
certManager: {enabled: false}
`))
	require.Empty(t, r.all("MutatingWebhookConfiguration"))
	vwc := typed[admissionregistrationv1.ValidatingWebhookConfiguration](t, r.get(t, "ValidatingWebhookConfiguration", "calico-rr-autoscaler"))
	require.Len(t, vwc.Webhooks, 1)
	require.Equal(t, "policy.validate.routereflector.io", vwc.Webhooks[0].Name)
	args := strings.Join(typed[appsv1.Deployment](t, r.get(t, "Deployment", "calico-rr-autoscaler")).Spec.Template.Spec.Containers[0].Args, " ")
	require.NotContains(t, args, "--cert-mutating-webhooks")
	require.Contains(t, args, "--cert-validating-webhooks=calico-rr-autoscaler")
}

func TestSchemaRejectsBadValues(t *testing.T) {
	for _, tc := range []struct{ values, want string }{
		{`replicaCount: -1`, "/replicaCount"},
		{`replicas: 3`, "additional properties 'replicas'"},
		{`image: {pullPolicy: Sometimes}`, "/image/pullPolicy"},
		{`webhooks: {node: {mutating: {failurePolicy: Sometimes}}}`, "/webhooks/node/mutating/failurePolicy"},
		{`webhooks: {policy: {timeoutSeconds: 31}}`, "/webhooks/policy/timeoutSeconds"},
		{`webhooks: {node: {watchedAnnotations: ["not a key!"]}}`, "/webhooks/node/watchedAnnotations/0"},
		{`webhooks: {bgpPeer: {enabeld: true}}`, "additional properties 'enabeld'"},
		{`certManager: {duration: 90 days}`, "/certManager/duration"},
		{`certManager: {privateKey: {algorithm: DSA}}`, "/certManager/privateKey/algorithm"},
		{`service: {port: 70000}`, "/service/port"},
		{`podDisruptionBudget: {unhealthyPodEvictionPolicy: Never}`, "/podDisruptionBudget/unhealthyPodEvictionPolicy"},
		{`policy: {spec: {minRouteReflectors: 0}}`, "/policy/spec/minRouteReflectors"},
		{`policy: {spec: {topology: {type: Ring}}}`, "/policy/spec/topology/type"},
		{`policy: {spec: {scaling: {ratio: "0.1", clientsPerRouteReflector: 50}}}`, "/policy/spec/scaling"},
		{`policy: {name: Default}`, "/policy/name"},
		{`topologySpread: {whenUnsatisfiable: Sometimes}`, "/topologySpread/whenUnsatisfiable"},
		{`logging: {format: xml}`, "/logging/format"},
	} {
		t.Run(tc.values, func(t *testing.T) {
			_, err := renderErr(t, releaseNamespace, valuesYAML(t, tc.values))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := renderErr(t, releaseNamespace, valuesYAML(t, `serviceAccount: {create: false, name: ""}`))
	require.ErrorContains(t, err, "serviceAccount.name is required")
}

func mustMap(t *testing.T, obj map[string]any, path ...string) map[string]string {
	t.Helper()
	cur := any(obj)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		require.True(t, ok, "%v", path)
		cur = m[p]
	}
	out := map[string]string{}
	for k, v := range cur.(map[string]any) {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// GOMEMLIMIT follows the container's memory limit (downward API) unless turned off, absent a
// limit, or set by extraEnv (once, the user's).
func TestRenderGoMemLimit(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		want         string // "limit": from resources.limits.memory; a value: extraEnv's; "": none
	}{
		{"default", ``, "limit"},
		{"off", `goMemLimitFromResources: false`, ""},
		{"no memory limit", `resources: {limits: {memory: null, cpu: "1"}}`, ""},
		{"extraEnv wins", `extraEnv: [{name: GOMEMLIMIT, value: 200MiB}]`, "200MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, valuesYAML(t, tc.values))
			c := typed[appsv1.Deployment](t, r.get(t, "Deployment", "calico-rr-autoscaler")).Spec.Template.Spec.Containers[0]
			var found []corev1.EnvVar
			for _, e := range c.Env {
				if e.Name == "GOMEMLIMIT" {
					found = append(found, e)
				}
			}
			switch tc.want {
			case "":
				require.Empty(t, found)
			case "limit":
				require.Len(t, found, 1)
				require.NotNil(t, found[0].ValueFrom)
				require.NotNil(t, found[0].ValueFrom.ResourceFieldRef)
				require.Equal(t, "limits.memory", found[0].ValueFrom.ResourceFieldRef.Resource)
			default:
				require.Len(t, found, 1)
				require.Equal(t, tc.want, found[0].Value)
			}
		})
	}
}
