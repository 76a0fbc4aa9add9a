package webhook

import (
	"context"
	"fmt"
	"slices"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// PolicyValidator is /validate-routereflectorpolicy (CREATE and UPDATE): the policy's own
// validation (every invalid field with its path), no overlap with another policy's nodeSelector (a
// node may match at most one policy), and warnings for risky values.
//
// A selector on a node label key the cache does not hold on every node yet (LabelKeys: a key no
// policy or BGPPeer read so far, dropped from the cached nodes until the cache has listed them
// again) is not evaluated on the cache, where it would match nothing: the overlap is asked of the
// API server (APIReader), and the cost warning waits for the next apply.
type PolicyValidator struct {
	Policies *state.Policies
	Nodes    *state.NodeStore
	// LabelKeys are the node label keys the cache keeps (nil: every key, as in tests).
	LabelKeys *state.LabelKeys
	// APIReader reads nodes from the API server when the cache does not hold a key.
	APIReader client.Reader
}

var policyGK = v1alpha1.GroupVersion.WithKind("RouteReflectorPolicy").GroupKind()

// Handle implements Handler.
func (v *PolicyValidator) Handle(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
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
		errs = v.overlap(ctx, p)
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
	if pending := v.notHeld(r.LabelKeys()...); len(pending) > 0 {
		return []string{fmt.Sprintf("route cost not computed: the node cache is listing the nodes again to keep the label keys %v; apply again in a few seconds for the figure", pending)}
	}
	var nodes []*extender.Node
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
func (v *PolicyValidator) overlap(ctx context.Context, p *v1alpha1.RouteReflectorPolicy) Denials {
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
		if pending := v.notHeld(slices.Concat(selectorKeys(sel), selectorKeys(other))...); len(pending) > 0 {
			if d := v.overlapLive(ctx, path, sel, other, o.Name, pending); d != nil {
				return d
			}
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

// notHeld adds keys to the cache's label keys and returns those it does not hold on every node yet.
func (v *PolicyValidator) notHeld(keys ...string) []string {
	if v.LabelKeys == nil {
		return nil
	}
	v.LabelKeys.Want(keys...)
	return v.LabelKeys.Held(keys...)
}

// overlapLive asks the API server for a node both selectors select (one is enough).
func (v *PolicyValidator) overlapLive(ctx context.Context, path *field.Path, sel, other labels.Selector, otherName string, pending []string) Denials {
	if v.APIReader == nil {
		return Denials{deny(path, RulePolicyOverlap,
			"the node cache does not hold the label keys %v on every node yet (it is listing the nodes again): overlap with policy %q not checked; retry in a few seconds", pending, otherName)}
	}
	both := labels.NewSelector()
	for _, s := range []labels.Selector{sel, other} {
		reqs, _ := s.Requirements()
		both = both.Add(reqs...)
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := v.APIReader.List(ctx, list, client.MatchingLabelsSelector{Selector: both}, client.Limit(1)); err != nil {
		return Denials{deny(path, RulePolicyOverlap,
			"overlap with policy %q not checked: the node cache is listing the nodes again for the label keys %v and the API server's list failed (%v); retry in a few seconds", otherName, pending, err)}
	}
	if len(list.Items) == 0 {
		return nil
	}
	return Denials{deny(path, RulePolicyOverlap,
		"node %s matches both this nodeSelector and policy %q's (%s); a node may match at most one policy", list.Items[0].Name, otherName, other)}
}

// selectorKeys returns the label keys a selector names.
func selectorKeys(s labels.Selector) []string {
	reqs, _ := s.Requirements()
	out := make([]string, 0, len(reqs))
	for _, q := range reqs {
		out = append(out, q.Key())
	}
	return out
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
