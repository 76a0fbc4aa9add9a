package chart

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/serve"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// TestChartMatchesCode: the chart is the only source of the webhook registrations, so what the
// code serves and reads must be what the chart registers: each handler's path, the operations of
// each rule, every annotation the node webhooks must see, and the identity the webhooks never
// deny (passed to serve as --service-account). The end-to-end tests install the same rendered
// chart (testenv.InstallChart).
func TestChartMatchesCode(t *testing.T) {
	r := render(t, nil)
	fullname := "calico-rr-autoscaler"
	mwc := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, r.get(t, "MutatingWebhookConfiguration", fullname))
	vwc := typed[admissionregistrationv1.ValidatingWebhookConfiguration](t, r.get(t, "ValidatingWebhookConfiguration", fullname))
	type hook struct {
		path       string
		rules      []admissionregistrationv1.RuleWithOperations
		conditions []admissionregistrationv1.MatchCondition
	}
	hooks := map[string]hook{}
	for _, w := range mwc.Webhooks {
		hooks[w.Name] = hook{*w.ClientConfig.Service.Path, w.Rules, w.MatchConditions}
	}
	for _, w := range vwc.Webhooks {
		hooks[w.Name] = hook{*w.ClientConfig.Service.Path, w.Rules, w.MatchConditions}
	}
	ops := func(rules []admissionregistrationv1.RuleWithOperations) string {
		var out []string
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					out = append(out, fmt.Sprintf("%s/%s:%v", g, res, r.Operations))
				}
			}
		}
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	for _, tc := range []struct {
		name, path, ops string
	}{
		{"node.mutate.routereflector.io", serve.PathMutateNode, "/nodes/status:[CREATE UPDATE] /nodes:[CREATE UPDATE]"},
		{"node.validate.routereflector.io", serve.PathValidateNode, "/nodes/status:[UPDATE DELETE] /nodes:[UPDATE DELETE]"},
		{"policy.validate.routereflector.io", serve.PathValidatePolicy, "routereflector.io/routereflectorpolicies:[CREATE UPDATE]"},
		{"bgppeer.validate.routereflector.io", serve.PathValidatePeer,
			"crd.projectcalico.org/bgppeers:[CREATE UPDATE DELETE] projectcalico.org/bgppeers:[CREATE UPDATE DELETE]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, ok := hooks[tc.name]
			require.True(t, ok, "the chart registers no %s", tc.name)
			require.Equal(t, tc.path, h.path, "the path the code serves")
			require.Equal(t, tc.ops, ops(h.rules))
		})
	}

	// Both node webhooks see a change to every annotation the product reads or writes, and a
	// deletion.
	for _, name := range []string{"node.mutate.routereflector.io", "node.validate.routereflector.io"} {
		var cel string
		for _, c := range hooks[name].conditions {
			if c.Name == "node-changed" {
				cel = c.Expression
			}
		}
		require.NotEmpty(t, cel, "%s: no node-changed condition", name)
		for _, k := range extender.WatchedAnnotationKeys() {
			require.Contains(t, cel, "annotations[?'"+k+"']", "%s does not watch annotation %s", name, k)
		}
		require.Contains(t, cel, "has(object.metadata.deletionTimestamp) != has(oldObject.metadata.deletionTimestamp)", name)
	}

	// The identity: the chart passes its service account to serve, the one the webhooks never deny
	// and the one the tests run the product as.
	dep := typed[appsv1.Deployment](t, r.get(t, "Deployment", fullname))
	require.Contains(t, dep.Spec.Template.Spec.Containers[0].Args, "--service-account="+testenv.UserServiceAccount)
	require.Contains(t, hooks["bgppeer.validate.routereflector.io"].conditions[0].Expression, testenv.UserServiceAccount)
}
