package webhook

import (
	"context"
	"fmt"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// PolicyValidator is /validate-routereflectorpolicy (CREATE and UPDATE): the policy's own
// validation (every invalid field with its path), no overlap with another policy's nodeSelector (a
// node may match at most one policy), and warnings for risky values.
type PolicyValidator struct {
	Policies *state.Policies
	Nodes    *state.NodeStore
}

var policyGK = v1alpha1.GroupVersion.WithKind("RouteReflectorPolicy").GroupKind()

// Handle implements Handler.
func (v *PolicyValidator) Handle(_ context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return Allowed(), nil
	}
	p := &v1alpha1.RouteReflectorPolicy{}
	if err := decodeObject(req.Object.Raw, "request.object", p); err != nil {
		return nil, err
	}
	if p.Name == "" {
		p.Name = req.Name
	}
	errs := invalid(policy.Validate(p))
	if len(errs) == 0 {
		errs = v.overlap(p)
	}
	if len(errs) > 0 {
		return Denied(policyGK, p.Name, errs), nil
	}
	return Allowed(append(policy.Warnings(p), v.costWarning(p)...)...), nil
}

// CostWarningMaxNodes bounds the clusters on which applying a policy plans it and runs the graph
// model to warn what it costs (the policy status reports it at any size).
const CostWarningMaxNodes = 20000

// costWarning plans the policy on the cached nodes it selects and says what the layout costs BIRD
// beside the default layout, by the graph model; empty when there are no nodes to plan.
func (v *PolicyValidator) costWarning(p *v1alpha1.RouteReflectorPolicy) []string {
	if v.Nodes == nil {
		return nil
	}
	r, errs := policy.Resolve(p)
	if len(errs) > 0 {
		return nil
	}
	var nodes []*corev1.Node
	for _, n := range v.Nodes.List() {
		if r.NodeSelector.Matches(labels.Set(n.Labels)) {
			nodes = append(nodes, n)
		}
	}
	if len(nodes) == 0 || len(nodes) > CostWarningMaxNodes {
		return nil
	}
	in := extender.Input{Policy: r, Nodes: nodes, Now: time.Now()}
	c, err := bgpmodel.CostOf(in, extender.Plan(in), nil)
	if err != nil {
		return []string{"route cost not computed: graph model: " + err.Error()}
	}
	w := fmt.Sprintf("on the %d nodes it selects, %s", len(nodes), c)
	if c.Expensive() {
		w += "; that is more than twice the default's paths (condition ExpensiveTopology)"
	}
	return []string{w}
}

// overlap reports another policy that selects a node this one selects: when either selects every
// node, when both selectors are the same, or when a node in the cache matches both.
func (v *PolicyValidator) overlap(p *v1alpha1.RouteReflectorPolicy) Denials {
	path := field.NewPath("spec", "nodeSelector")
	sel := selectorOf(p.Spec.NodeSelector)
	for _, o := range v.Policies.List() {
		if o.Name == p.Name {
			continue
		}
		other := selectorOf(o.Spec.NodeSelector)
		switch {
		case sel.Empty() || other.Empty():
			return Denials{deny(path, RulePolicyOverlap,
				"policy %q selects every node or policy %q does; a node may match at most one policy: give both a nodeSelector that tells their nodes apart", p.Name, o.Name)}
		case sel.String() == other.String():
			return Denials{deny(path, RulePolicyOverlap,
				"policy %q has the same nodeSelector (%s); a node may match at most one policy", o.Name, sel)}
		}
		if v.Nodes == nil {
			continue
		}
		for _, n := range v.Nodes.List() {
			if sel.Matches(labels.Set(n.Labels)) && other.Matches(labels.Set(n.Labels)) {
				return Denials{deny(path, RulePolicyOverlap,
					"node %s matches both this nodeSelector and policy %q's (%s); a node may match at most one policy", n.Name, o.Name, other)}
			}
		}
	}
	return nil
}

func selectorOf(s *metav1.LabelSelector) labels.Selector {
	if s == nil {
		return labels.Everything()
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return labels.Nothing()
	}
	return sel
}
