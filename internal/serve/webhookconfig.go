package serve

import (
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// nodeChangedCEL is true when a Node UPDATE changes something the product reads: labels (the RR,
// zone and selector labels), the cluster ID and Calico-label annotations and the owned ones,
// spec.unschedulable, taints, the Ready condition's status, deletion. A kubelet heartbeat (the
// conditions' heartbeat times) changes none of these, so it never reaches a webhook.
func nodeChangedCEL() string {
	ann := func(o, k string) string {
		return fmt.Sprintf("(has(%[1]s.metadata.annotations) && '%[2]s' in %[1]s.metadata.annotations ? %[1]s.metadata.annotations['%[2]s'] : '')", o, k)
	}
	keys := append([]string{extender.AnnotationClusterID, extender.AnnotationCalicoLabels}, extender.OwnedAnnotationKeys()...)
	var parts []string
	parts = append(parts, "(has(object.metadata.labels) ? object.metadata.labels : {}) != (has(oldObject.metadata.labels) ? oldObject.metadata.labels : {})")
	seen := map[string]bool{}
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			parts = append(parts, ann("object", k)+" != "+ann("oldObject", k))
		}
	}
	unsched := func(o string) string {
		return fmt.Sprintf("(has(%[1]s.spec) && has(%[1]s.spec.unschedulable) && %[1]s.spec.unschedulable)", o)
	}
	taints := func(o string) string {
		return fmt.Sprintf("(has(%[1]s.spec) && has(%[1]s.spec.taints) ? %[1]s.spec.taints : [])", o)
	}
	ready := func(o string) string {
		return fmt.Sprintf("(has(%[1]s.status) && has(%[1]s.status.conditions) ? %[1]s.status.conditions.filter(c, c.type == 'Ready').map(c, c.status) : [])", o)
	}
	parts = append(parts,
		unsched("object")+" != "+unsched("oldObject"),
		taints("object")+" != "+taints("oldObject"),
		ready("object")+" != "+ready("oldObject"),
		"has(object.metadata.deletionTimestamp) != has(oldObject.metadata.deletionTimestamp)",
	)
	return strings.Join(parts, " || ")
}

func managedCEL(o string) string {
	return fmt.Sprintf("(%[1]s != null && has(%[1]s.metadata.labels) && '%[2]s' in %[1]s.metadata.labels && %[1]s.metadata.labels['%[2]s'] == '%[3]s')",
		o, extender.LabelManagedBy, extender.ManagedByValue)
}

// WebhookConfigurations returns the product's webhook registrations: clientConfig gives each
// path's client configuration (a Service in the chart, a URL in tests), peerAPI is the BGPPeer API
// in use and serviceAccount the product's identity. The node webhooks fail open (Ignore: the
// reconciler repairs what was missed, and a node must register with the webhook down); every
// webhook has sideEffects None, short timeouts and matchConditions so that the API server calls it
// only for changes it cares about.
func WebhookConfigurations(name string, clientConfig func(path string) admissionregistrationv1.WebhookClientConfig,
	peerAPI schema.GroupVersion, serviceAccount string) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	none := ptr.To(admissionregistrationv1.SideEffectClassNone)
	cluster := ptr.To(admissionregistrationv1.ClusterScope)
	rule := func(group, version string, resources []string, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.RuleWithOperations {
		return admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{
			APIGroups: []string{group}, APIVersions: []string{version}, Resources: resources, Scope: cluster}}
	}
	changed := admissionregistrationv1.MatchCondition{Name: "relevant-change", Expression: "request.operation != 'UPDATE' || " + nodeChangedCEL()}
	notSelf := admissionregistrationv1.MatchCondition{Name: "not-self", Expression: fmt.Sprintf("request.userInfo.username != '%s'", serviceAccount)}
	notKubelet := admissionregistrationv1.MatchCondition{Name: "not-kubelet",
		Expression: "!(has(request.userInfo.groups) && 'system:nodes' in request.userInfo.groups)"}
	ignore, fail := ptr.To(admissionregistrationv1.Ignore), ptr.To(admissionregistrationv1.Fail)

	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "mutate-node.routereflector.io",
			ClientConfig:            clientConfig(PathMutateNode),
			Rules:                   []admissionregistrationv1.RuleWithOperations{rule("", "v1", []string{"nodes", "nodes/status"}, admissionregistrationv1.Create, admissionregistrationv1.Update)},
			MatchConditions:         []admissionregistrationv1.MatchCondition{changed},
			FailurePolicy:           ignore,
			SideEffects:             none,
			TimeoutSeconds:          ptr.To[int32](2),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
		}},
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{
				Name:         "validate-node.routereflector.io",
				ClientConfig: clientConfig(PathValidateNode),
				Rules: []admissionregistrationv1.RuleWithOperations{
					rule("", "v1", []string{"nodes", "nodes/status"}, admissionregistrationv1.Update),
					rule("", "v1", []string{"nodes"}, admissionregistrationv1.Delete),
				},
				MatchConditions: []admissionregistrationv1.MatchCondition{
					{Name: "relevant-change", Expression: "request.operation == 'DELETE' || " + nodeChangedCEL()},
					notSelf, notKubelet,
				},
				FailurePolicy:           ignore,
				SideEffects:             none,
				TimeoutSeconds:          ptr.To[int32](2),
				AdmissionReviewVersions: []string{"v1"},
			},
			{
				Name:                    "validate-policy.routereflector.io",
				ClientConfig:            clientConfig(PathValidatePolicy),
				Rules:                   []admissionregistrationv1.RuleWithOperations{rule(v1alpha1.GroupVersion.Group, v1alpha1.GroupVersion.Version, []string{"routereflectorpolicies"}, admissionregistrationv1.Create, admissionregistrationv1.Update)},
				FailurePolicy:           fail,
				SideEffects:             none,
				TimeoutSeconds:          ptr.To[int32](5),
				AdmissionReviewVersions: []string{"v1"},
			},
			{
				Name:         "validate-bgppeer.routereflector.io",
				ClientConfig: clientConfig(PathValidatePeer),
				Rules: []admissionregistrationv1.RuleWithOperations{rule(peerAPI.Group, peerAPI.Version, []string{"bgppeers"},
					admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete)},
				MatchConditions: []admissionregistrationv1.MatchCondition{
					{Name: "managed", Expression: managedCEL("object") + " || " + managedCEL("oldObject")},
					notSelf,
				},
				FailurePolicy:           fail,
				SideEffects:             none,
				TimeoutSeconds:          ptr.To[int32](5),
				AdmissionReviewVersions: []string{"v1"},
			},
		},
	}
	return mutating, validating
}
