package policy

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// Other actors on the nodes: the taints and labels by which autoscalers and cloud providers say
// that a node goes, or may go soon (docs/autoscalers.md). The planner's predicates on them are in
// extender (NodeGoing, StableCapacity); the keys are here because a policy's LabelKeys name them.
const (
	// TaintToBeDeletedByClusterAutoscaler: cluster-autoscaler is about to drain and delete the
	// node (NoSchedule, value the time).
	TaintToBeDeletedByClusterAutoscaler = "ToBeDeletedByClusterAutoscaler"
	// TaintDeletionCandidateOfClusterAutoscaler: cluster-autoscaler found the node unneeded
	// (PreferNoSchedule): it may delete it later.
	TaintDeletionCandidateOfClusterAutoscaler = "DeletionCandidateOfClusterAutoscaler"
	// TaintKarpenterDisrupted: Karpenter (v1) is disrupting the node: it drains and deletes it.
	TaintKarpenterDisrupted = "karpenter.sh/disrupted"
	// KeyKarpenterDisruption with ValueKarpenterDisrupting: Karpenter before v1 (taint, or label).
	KeyKarpenterDisruption   = "karpenter.sh/disruption"
	ValueKarpenterDisrupting = "disrupting"
	AnnotationDoNotDisrupt   = "karpenter.sh/do-not-disrupt"
	AnnotationScaleDownOff   = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
	sourceClusterAutoscaler  = "cluster-autoscaler deletes the node"
	sourceKarpenter          = "Karpenter disrupts the node"
	sourceKarpenterBeforeV1  = "Karpenter (before v1) disrupts the node"
	sourceOutOfService       = "the node is out of service"
	sourceSpec               = "the policy's goingSignals"
	maxGoingSignalsPerKind   = 32
)

// GoingSignal is one taint or label that says a node is going.
type GoingSignal struct {
	// Taint: a taint (any effect); a label otherwise.
	Taint bool
	// Key, and Value unless it is empty (any value).
	Key, Value string
	// Source says who sets it, in the words of a filter's reason.
	Source string
}

// DefaultGoingSignals are the built-in signals every policy reads.
func DefaultGoingSignals() []GoingSignal {
	return []GoingSignal{
		{Taint: true, Key: TaintToBeDeletedByClusterAutoscaler, Source: sourceClusterAutoscaler},
		{Taint: true, Key: TaintKarpenterDisrupted, Source: sourceKarpenter},
		{Taint: true, Key: KeyKarpenterDisruption, Value: ValueKarpenterDisrupting, Source: sourceKarpenterBeforeV1},
		{Key: KeyKarpenterDisruption, Value: ValueKarpenterDisrupting, Source: sourceKarpenterBeforeV1},
		{Taint: true, Key: corev1.TaintNodeOutOfService, Source: sourceOutOfService},
	}
}

// SpotLabels are the well-known labels (key and value) of spot or preemptible capacity: Karpenter,
// EKS managed node groups, GKE (spot and the older preemptible VMs) and AKS.
func SpotLabels() []v1alpha1.NodeMark {
	return []v1alpha1.NodeMark{
		{Key: "karpenter.sh/capacity-type", Value: "spot"},
		{Key: "eks.amazonaws.com/capacityType", Value: "SPOT"},
		{Key: "cloud.google.com/gke-spot", Value: "true"},
		{Key: "cloud.google.com/gke-preemptible", Value: "true"},
		{Key: "kubernetes.azure.com/scalesetpriority", Value: "spot"},
	}
}

// ProtectionAnnotations are the annotations a route reflector carries while it is one (unless
// spec.protectRouteReflectors is false), each "true".
func ProtectionAnnotations() []string {
	return []string{AnnotationDoNotDisrupt, AnnotationScaleDownOff}
}

// goingSignalsOf returns the built-in signals and the spec's, in that order.
func goingSignalsOf(g *v1alpha1.GoingSignals) []GoingSignal {
	out := DefaultGoingSignals()
	if g == nil {
		return out
	}
	for _, m := range g.Taints {
		out = append(out, GoingSignal{Taint: true, Key: m.Key, Value: m.Value, Source: sourceSpec})
	}
	for _, m := range g.Labels {
		out = append(out, GoingSignal{Key: m.Key, Value: m.Value, Source: sourceSpec})
	}
	return out
}

// validateGoingSignals checks spec.goingSignals: every key a qualified name (taint keys follow
// the label key rules), every value a label value, at most 32 of each kind.
func validateGoingSignals(g *v1alpha1.GoingSignals, p *field.Path) field.ErrorList {
	if g == nil {
		return nil
	}
	var errs field.ErrorList
	for _, kind := range []struct {
		name  string
		marks []v1alpha1.NodeMark
	}{{"taints", g.Taints}, {"labels", g.Labels}} {
		kp, marks := p.Child(kind.name), kind.marks
		if len(marks) > maxGoingSignalsPerKind {
			errs = append(errs, field.TooMany(kp, len(marks), maxGoingSignalsPerKind))
		}
		for i, m := range marks {
			ip := kp.Index(i)
			if m.Key == "" {
				errs = append(errs, field.Required(ip.Child("key"), "a taint or label key"))
			} else {
				errs = append(errs, validateLabelKey(m.Key, ip.Child("key"))...)
			}
			for _, msg := range validation.IsValidLabelValue(m.Value) {
				errs = append(errs, field.Invalid(ip.Child("value"), m.Value, msg))
			}
		}
	}
	return errs
}

// String names a signal as a filter's reason does: "taint ToBeDeletedByClusterAutoscaler",
// "label karpenter.sh/disruption=disrupting".
func (s GoingSignal) String() string {
	kind := "label"
	if s.Taint {
		kind = "taint"
	}
	if s.Value == "" {
		return fmt.Sprintf("%s %s", kind, s.Key)
	}
	return fmt.Sprintf("%s %s=%s", kind, s.Key, s.Value)
}
