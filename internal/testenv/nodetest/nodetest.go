// Package nodetest builds Kubernetes Nodes for tests: one builder and one set of options, shared by the
// unit tests of the planner, the shared state, the webhooks and the reconciler. It imports only the
// Kubernetes API types, so that any package's tests can use it without an import cycle; options
// that set the product's own labels and annotations stay next to the tests that read them.
package nodetest

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Opt changes a node being built.
type Opt func(*corev1.Node)

// New is a Ready node with non-nil label and annotation maps, changed by opts in order.
func New(name string, opts ...Opt) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: map[string]string{}},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

// Zone sets the node's topology.kubernetes.io/zone label; an empty zone sets none.
func Zone(zone string) Opt {
	return func(n *corev1.Node) {
		if zone != "" {
			n.Labels[corev1.LabelTopologyZone] = zone
		}
	}
}

// Hostname sets the kubernetes.io/hostname label to the node's name, as the kubelet does.
func Hostname(n *corev1.Node) { n.Labels[corev1.LabelHostname] = n.Name }

// TypeMeta sets the node's apiVersion and kind, as an admission request carries them.
func TypeMeta(n *corev1.Node) { n.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Node"} }

// Created sets the creation time.
func Created(t time.Time) Opt {
	return func(n *corev1.Node) { n.CreationTimestamp = metav1.NewTime(t) }
}

// ResourceVersion sets the resource version.
func ResourceVersion(rv string) Opt { return func(n *corev1.Node) { n.ResourceVersion = rv } }

// UID sets the UID.
func UID(uid string) Opt { return func(n *corev1.Node) { n.UID = types.UID(uid) } }

// Label sets a label.
func Label(k, v string) Opt { return func(n *corev1.Node) { n.Labels[k] = v } }

// Annotation sets an annotation.
func Annotation(k, v string) Opt { return func(n *corev1.Node) { n.Annotations[k] = v } }

// Taint adds a taint.
func Taint(t corev1.Taint) Opt {
	return func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, t) }
}

// Cordoned marks the node unschedulable.
func Cordoned(n *corev1.Node) { n.Spec.Unschedulable = true }

// NotReady sets the Ready condition to False.
func NotReady(n *corev1.Node) { setReady(n, corev1.ConditionFalse, time.Time{}) }

// NotReadySince sets the Ready condition to False since t (its lastTransitionTime).
func NotReadySince(t time.Time) Opt {
	return func(n *corev1.Node) { setReady(n, corev1.ConditionFalse, t) }
}

// ShuttingDown sets the Ready condition as the kubelet's graceful node shutdown posts it (k8s.io/kubernetes
// pkg/kubelet/nodestatus ReadyCondition with the shutdown manager's error): False since t, reason
// KubeletNotReady, message "node is shutting down".
func ShuttingDown(t time.Time) Opt {
	return func(n *corev1.Node) {
		setReady(n, corev1.ConditionFalse, t)
		for i := range n.Status.Conditions {
			if c := &n.Status.Conditions[i]; c.Type == corev1.NodeReady {
				c.Reason, c.Message = "KubeletNotReady", "node is shutting down"
			}
		}
	}
}

// Deleting sets the deletion timestamp to t.
func Deleting(t time.Time) Opt {
	return func(n *corev1.Node) {
		ts := metav1.NewTime(t)
		n.DeletionTimestamp = &ts
	}
}

// Condition sets a condition of type typ to status, replacing one of that type.
func Condition(typ corev1.NodeConditionType, status corev1.ConditionStatus) Opt {
	return func(n *corev1.Node) {
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == typ {
				n.Status.Conditions[i].Status = status
				return
			}
		}
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: typ, Status: status})
	}
}

func setReady(n *corev1.Node, s corev1.ConditionStatus, since time.Time) {
	Condition(corev1.NodeReady, s)(n)
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			n.Status.Conditions[i].LastTransitionTime = metav1.NewTime(since)
		}
	}
}

// Cluster is n nodes named node-00001, node-00002, ... spread round-robin over zones zone-a,
// zone-b, ..., created one step apart from start, each changed by opts.
func Cluster(n, zones int, start time.Time, step time.Duration, opts ...Opt) []*corev1.Node {
	out := make([]*corev1.Node, n)
	for i := range out {
		o := append([]Opt{Zone(fmt.Sprintf("zone-%c", 'a'+i%zones)), Created(start.Add(time.Duration(i) * step))}, opts...)
		out[i] = New(fmt.Sprintf("node-%05d", i+1), o...)
	}
	return out
}

// Going is one signal that a node goes (docs/autoscalers.md), as the tests of every layer put it
// on a route reflector: the rule of the planner's filter that rejects the node and a part of its
// reason. The keys are written out here, as the autoscalers set them, not taken from the product.
type Going struct {
	Name, Rule, Reason string
	Opt                Opt
}

// GoingSignals are the cordon (the reference), the built-in going signals, a deletion held by a
// finalizer, the kubelet's graceful node shutdown (NotReady for 5 s at now) and the two that
// GoingPolicyTaint and GoingPolicyLabel add in a policy's spec.goingSignals.
func GoingSignals(now time.Time) []Going {
	return []Going{
		{"cordon", "cordoned-node", "cordoned", Cordoned},
		{"ToBeDeletedByClusterAutoscaler", "going-node", "taint ToBeDeletedByClusterAutoscaler (cluster-autoscaler",
			Taint(corev1.Taint{Key: "ToBeDeletedByClusterAutoscaler", Value: "1700000000", Effect: corev1.TaintEffectNoSchedule})},
		{"karpenter.sh/disrupted", "going-node", "taint karpenter.sh/disrupted (Karpenter",
			Taint(corev1.Taint{Key: "karpenter.sh/disrupted", Effect: corev1.TaintEffectNoSchedule})},
		{"karpenter.sh/disruption taint", "going-node", "taint karpenter.sh/disruption=disrupting (Karpenter (before v1)",
			Taint(corev1.Taint{Key: "karpenter.sh/disruption", Value: "disrupting", Effect: corev1.TaintEffectNoSchedule})},
		{"karpenter.sh/disruption label", "going-node", "label karpenter.sh/disruption=disrupting", Label("karpenter.sh/disruption", "disrupting")},
		{"out-of-service", "going-node", "taint node.kubernetes.io/out-of-service",
			Taint(corev1.Taint{Key: "node.kubernetes.io/out-of-service", Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})},
		{"deletion held by a finalizer", "deleting-node", "being deleted", Deleting(now.Add(-time.Second))},
		{"graceful node shutdown", "going-node", "graceful node shutdown", ShuttingDown(now.Add(-5 * time.Second))},
		{"policy going taint", "going-node", "taint " + GoingPolicyTaint + " (the policy's goingSignals)",
			Taint(corev1.Taint{Key: GoingPolicyTaint, Effect: corev1.TaintEffectPreferNoSchedule})},
		{"policy going label", "going-node", "label " + GoingPolicyLabel + "=retiring (the policy's goingSignals)", Label(GoingPolicyLabel, "retiring")},
	}
}

// The taint key and label key (value "retiring") of GoingSignals that a policy adds.
const (
	GoingPolicyTaint = "example.com/retire"
	GoingPolicyLabel = "lifecycle"
)
