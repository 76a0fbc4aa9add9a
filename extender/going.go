package extender

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// Going: a node about to go hands its route reflector role over at once, as a cordoned one does
// (docs/autoscalers.md).

// The kubelet's graceful node shutdown, as the Node reports it. In k8s.io/kubernetes v1.34.3,
// pkg/kubelet/nodeshutdown/nodeshutdown_manager_linux.go, managerImpl.ShutdownStatus returns
// fmt.Errorf("node is shutting down") from the moment the shutdown manager sees systemd's
// PrepareForShutdown signal (nodeShuttingDownNow); pkg/kubelet/nodestatus/setters.go,
// ReadyCondition, aggregates it with the runtime, network and storage errors into the Ready
// condition: Status False, Reason "KubeletNotReady", Message the aggregate ("node is shutting
// down" alone, "[..., node is shutting down]" with others, either possibly followed by ". WARNING:
// ..."). No taint or label says it (the node lifecycle controller adds the usual not-ready taint
// later, as for any NotReady node).
const (
	ReadyReasonKubeletNotReady = "KubeletNotReady"
	MessageNodeShuttingDown    = "node is shutting down"
)

// Filter plugin, rule and reasons of the going signals.
const (
	NodeGoingName      = "NodeGoing"
	RuleGoingNode      = "going-node"
	reasonGoing        = "node is going: %s (%s)"
	reasonShuttingDown = "node is going: the kubelet reports a graceful node shutdown (Ready False, " + ReadyReasonKubeletNotReady + ": " + MessageNodeShuttingDown + ")"
)

// IsShuttingDown reports whether a Ready condition is the kubelet's graceful node shutdown.
func IsShuttingDown(c *corev1.NodeCondition) bool {
	return c.Type == corev1.NodeReady && c.Status == corev1.ConditionFalse && c.Reason == ReadyReasonKubeletNotReady &&
		strings.Contains(c.Message, MessageNodeShuttingDown)
}

// NodeShuttingDown reports whether n's kubelet reports a graceful node shutdown.
func NodeShuttingDown(n *Node) bool {
	for i := range n.Status.Conditions {
		if c := &n.Status.Conditions[i]; c.Type == corev1.NodeReady {
			return IsShuttingDown(c)
		}
	}
	return false
}

// GoingCause says why a node is going under p, "" when it is not: the first of p's going signals
// (policy.Resolved.Going: cluster-autoscaler's and Karpenter's deletion taints, out-of-service,
// the policy's own) that it carries, else the kubelet's graceful node shutdown. (A deletion held
// by a finalizer is NodeDeleting's.)
func GoingCause(p *policy.Resolved, n *Node) string {
	for _, g := range p.Going {
		if g.Taint && hasTaint(n.Spec.Taints, g.Key, g.Value) || !g.Taint && hasLabel(n.Labels, g.Key, g.Value) {
			return fmt.Sprintf(reasonGoing, g, g.Source)
		}
	}
	if NodeShuttingDown(n) {
		return reasonShuttingDown
	}
	return ""
}

// hasTaint reports whether taints hold one of key, and of value unless value is "" (any effect).
func hasTaint(taints []corev1.Taint, key, value string) bool {
	for i := range taints {
		if t := &taints[i]; t.Key == key && (value == "" || t.Value == value) {
			return true
		}
	}
	return false
}

// hasLabel reports whether labels hold key, with value unless value is "".
func hasLabel(labels map[string]string, key, value string) bool {
	v, ok := labels[key]
	return ok && (value == "" || v == value)
}

// NodeGoing rejects a node that is going (GoingCause): an autoscaler or the provider is about to
// drain and delete it, or it shuts down. It runs first, so that a route reflector's draining
// names the going rather than the NotReady that follows it, and takes no grace period.
type NodeGoing struct{}

var _ FilterPlugin = &NodeGoing{}

// NewNodeGoing returns the NodeGoing filter.
func NewNodeGoing() *NodeGoing { return &NodeGoing{} }

// Name implements FilterPlugin.
func (*NodeGoing) Name() string { return NodeGoingName }

// Rule implements FilterPlugin.
func (*NodeGoing) Rule() string { return RuleGoingNode }

// Filter implements FilterPlugin.
func (*NodeGoing) Filter(p *policy.Resolved, n *NodeInfo) string { return GoingCause(p, n.Node) }
