package extender

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// Filter plugin names.
const (
	NodeReadyName         = "NodeReady"
	NodeUnschedulableName = "NodeUnschedulable"
	NodeDeletingName      = "NodeDeleting"
	TaintTolerationName   = "TaintToleration"
	NotForbiddenName      = "NotForbidden"
	NodeConditionsName    = "NodeConditions"
	HandedOverName        = "HandedOver"
	CalicoNodeName        = "CalicoNodeRegistered"
	ReasonNotReady        = "node is not Ready"
	ReasonUnschedulable   = "node is cordoned (spec.unschedulable)"
	ReasonDeleting        = "node is being deleted"
	ReasonForbidden       = "node matches the policy's forbiddenNodeSelector"
	ReasonUnregistered    = "node has no Calico Node in the datastore yet (calico-node has not started on it)"
	ReasonHandedOver      = "node's route reflector role is handed over: the layout survives its failure drills only without it in that place"

	// The rules under which the node validator refuses to make a node a route reflector that a
	// filter rejects (FilterPlugin.Rule).
	RuleNotReadyNode       = "not-ready-node"
	RuleCordonedNode       = "cordoned-node"
	RuleDeletingNode       = "deleting-node"
	RuleUntoleratedTaint   = "untolerated-taint"
	RuleForbiddenNode      = "forbidden-node"
	RuleNodeCondition      = "node-condition"
	RuleHandedOverNode     = "handed-over-node"
	RuleUnregisteredNode   = "unregistered-node"
	reasonUntoleratedTaint = "node has taint %s=%s:%s that the route reflector does not tolerate"
	reasonCondition        = "node condition %s is True"
)

// NodeReady passes Ready nodes, and a route reflector NotReady for less than the policy's
// notReadyGracePeriod (it keeps its role through a kubelet blip).
type NodeReady struct{}

var _ FilterPlugin = &NodeReady{}

// NewNodeReady returns the NodeReady filter.
func NewNodeReady() *NodeReady { return &NodeReady{} }

// Name implements FilterPlugin.
func (*NodeReady) Name() string { return NodeReadyName }

// Rule implements FilterPlugin.
func (*NodeReady) Rule() string { return RuleNotReadyNode }

// Filter implements FilterPlugin.
func (*NodeReady) Filter(p *policy.Resolved, n *NodeInfo) string {
	if !n.Ready && !n.WithinNotReadyGrace(p) {
		return ReasonNotReady
	}
	return ""
}

// NodeConditions rejects a node that is not a route reflector yet while it reports memory, disk or
// PID pressure or an unavailable network; a route reflector keeps its role (a replacement would
// reset its clients' sessions, and the condition often clears by itself).
type NodeConditions struct{}

var _ FilterPlugin = &NodeConditions{}

// NewNodeConditions returns the NodeConditions filter.
func NewNodeConditions() *NodeConditions { return &NodeConditions{} }

// Name implements FilterPlugin.
func (*NodeConditions) Name() string { return NodeConditionsName }

// Rule implements FilterPlugin.
func (*NodeConditions) Rule() string { return RuleNodeCondition }

// Filter implements FilterPlugin.
func (*NodeConditions) Filter(_ *policy.Resolved, n *NodeInfo) string {
	if n.Condition != "" && !(n.CurrentRR && !n.Draining()) {
		return fmt.Sprintf(reasonCondition, n.Condition)
	}
	return ""
}

// NodeUnschedulable rejects cordoned nodes.
type NodeUnschedulable struct{}

var _ FilterPlugin = &NodeUnschedulable{}

// NewNodeUnschedulable returns the NodeUnschedulable filter.
func NewNodeUnschedulable() *NodeUnschedulable { return &NodeUnschedulable{} }

// Name implements FilterPlugin.
func (*NodeUnschedulable) Name() string { return NodeUnschedulableName }

// Rule implements FilterPlugin.
func (*NodeUnschedulable) Rule() string { return RuleCordonedNode }

// Filter implements FilterPlugin.
func (*NodeUnschedulable) Filter(_ *policy.Resolved, n *NodeInfo) string {
	if n.Unschedulable {
		return ReasonUnschedulable
	}
	return ""
}

// NodeDeleting rejects nodes with a deletion timestamp.
type NodeDeleting struct{}

var _ FilterPlugin = &NodeDeleting{}

// NewNodeDeleting returns the NodeDeleting filter.
func NewNodeDeleting() *NodeDeleting { return &NodeDeleting{} }

// Name implements FilterPlugin.
func (*NodeDeleting) Name() string { return NodeDeletingName }

// Rule implements FilterPlugin.
func (*NodeDeleting) Rule() string { return RuleDeletingNode }

// Filter implements FilterPlugin.
func (*NodeDeleting) Filter(_ *policy.Resolved, n *NodeInfo) string {
	if n.Deleting {
		return ReasonDeleting
	}
	return ""
}

// TaintToleration rejects nodes with a NoSchedule or NoExecute taint the policy's tolerations do not tolerate.
type TaintToleration struct{}

var _ FilterPlugin = &TaintToleration{}

// NewTaintToleration returns the TaintToleration filter.
func NewTaintToleration() *TaintToleration { return &TaintToleration{} }

// Name implements FilterPlugin.
func (*TaintToleration) Name() string { return TaintTolerationName }

// Rule implements FilterPlugin.
func (*TaintToleration) Rule() string { return RuleUntoleratedTaint }

// Filter implements FilterPlugin.
func (*TaintToleration) Filter(p *policy.Resolved, n *NodeInfo) string {
	for i := range n.Node.Spec.Taints {
		t := &n.Node.Spec.Taints[i]
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !tolerated(p.Tolerations, t) {
			return fmt.Sprintf(reasonUntoleratedTaint, t.Key, t.Value, t.Effect)
		}
	}
	return ""
}

func tolerated(ts []corev1.Toleration, t *corev1.Taint) bool {
	for i := range ts {
		if ts[i].ToleratesTaint(t) {
			return true
		}
	}
	return false
}

// NotForbidden rejects nodes matched by the policy's forbiddenNodeSelector.
type NotForbidden struct{}

var _ FilterPlugin = &NotForbidden{}

// NewNotForbidden returns the NotForbidden filter.
func NewNotForbidden() *NotForbidden { return &NotForbidden{} }

// Name implements FilterPlugin.
func (*NotForbidden) Name() string { return NotForbiddenName }

// Rule implements FilterPlugin.
func (*NotForbidden) Rule() string { return RuleForbiddenNode }

// Filter implements FilterPlugin.
func (*NotForbidden) Filter(p *policy.Resolved, n *NodeInfo) string {
	if p.Forbidden.Matches(labelSet(n.Node.Labels)) {
		return ReasonForbidden
	}
	return ""
}

// HandedOver rejects the route reflectors whose role is being handed over so that the layout
// survives its failure drills (see safest): they drain like any route reflector the plan no longer
// selects. The planner adds it only to the plan that replaces one failing its drills.
type HandedOver struct{ nodes map[string]bool }

var _ FilterPlugin = &HandedOver{}

// NewHandedOver returns the HandedOver filter for the named nodes.
func NewHandedOver(nodes map[string]bool) *HandedOver { return &HandedOver{nodes: nodes} }

// Name implements FilterPlugin.
func (*HandedOver) Name() string { return HandedOverName }

// Rule implements FilterPlugin.
func (*HandedOver) Rule() string { return RuleHandedOverNode }

// Filter implements FilterPlugin.
func (f *HandedOver) Filter(_ *policy.Resolved, n *NodeInfo) string {
	if f.nodes[n.Name] {
		return ReasonHandedOver
	}
	return ""
}

// CalicoNodeRegistered (the etcd datastore) rejects a node whose Calico Node calico-node has not
// registered yet, so that a route reflector is never a node where Calico does not run; a current
// route reflector keeps its role (the set comes from a watch that may lag). The shared state adds it
// with the names the watch has seen, when it has seen any: with none, every node passes.
type CalicoNodeRegistered struct{ names map[string]bool }

var _ FilterPlugin = &CalicoNodeRegistered{}

// NewCalicoNodeRegistered returns the CalicoNodeRegistered filter for the registered names.
func NewCalicoNodeRegistered(names map[string]bool) *CalicoNodeRegistered {
	return &CalicoNodeRegistered{names: names}
}

// Name implements FilterPlugin.
func (*CalicoNodeRegistered) Name() string { return CalicoNodeName }

// Rule implements FilterPlugin.
func (*CalicoNodeRegistered) Rule() string { return RuleUnregisteredNode }

// Filter implements FilterPlugin.
func (f *CalicoNodeRegistered) Filter(_ *policy.Resolved, n *NodeInfo) string {
	if f.names[n.Name] || (n.CurrentRR && !n.Draining()) {
		return ""
	}
	return ReasonUnregistered
}
