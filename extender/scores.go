package extender

import (
	"k8s.io/apimachinery/pkg/labels"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// Score plugin names.
const (
	CurrentRoleName = "CurrentRole"
	PreferredName   = "Preferred"
	NodeAgeName     = "NodeAge"
)

// CurrentRole ranks nodes that already are route reflectors (and are not being handed over) first,
// so that roles do not move without a reason; before them, a route reflector handed over because
// it was NotReady and Ready again (it takes its role back from its replacement).
type CurrentRole struct{}

var _ ScorePlugin = &CurrentRole{}

// NewCurrentRole returns the CurrentRole score plugin.
func NewCurrentRole() *CurrentRole { return &CurrentRole{} }

// Name implements ScorePlugin.
func (*CurrentRole) Name() string { return CurrentRoleName }

// Score implements ScorePlugin.
func (*CurrentRole) Score(_ *policy.Resolved, n *NodeInfo) int64 {
	switch {
	case n.DrainedWhileNotReady():
		return 2
	case n.CurrentRR && !n.Draining():
		return 1
	}
	return 0
}

// Preferred ranks nodes matched by the policy's preferredNodeSelector first.
type Preferred struct{}

var _ ScorePlugin = &Preferred{}

// NewPreferred returns the Preferred score plugin.
func NewPreferred() *Preferred { return &Preferred{} }

// Name implements ScorePlugin.
func (*Preferred) Name() string { return PreferredName }

// Score implements ScorePlugin.
func (*Preferred) Score(_ *policy.Resolved, n *NodeInfo) int64 {
	if n.Preferred {
		return 1
	}
	return 0
}

// NodeAge ranks older nodes first: they are more likely to survive.
type NodeAge struct{}

var _ ScorePlugin = &NodeAge{}

// NewNodeAge returns the NodeAge score plugin.
func NewNodeAge() *NodeAge { return &NodeAge{} }

// Name implements ScorePlugin.
func (*NodeAge) Name() string { return NodeAgeName }

// Score implements ScorePlugin.
func (*NodeAge) Score(_ *policy.Resolved, n *NodeInfo) int64 { return -n.Created }

// labelSet adapts a label map without copying it.
func labelSet(l map[string]string) labels.Set { return labels.Set(l) }

// StableCapacityName is the name of the StableCapacity score plugin.
const StableCapacityName = "StableCapacity"

// ScoreReason says, by kind, why a score plugin scored a node down.
type ScoreReason string

// The reasons of StableCapacity.
const (
	// ScoreReasonSpot: the node is spot or preemptible capacity (policy.SpotLabels): the provider
	// may reclaim it, often with others of its kind at once.
	ScoreReasonSpot ScoreReason = "SpotCapacity"
	// ScoreReasonDeletionCandidate: cluster-autoscaler found the node unneeded
	// (DeletionCandidateOfClusterAutoscaler) and may delete it.
	ScoreReasonDeletionCandidate ScoreReason = "DeletionCandidate"
)

// ScoreExplainer is a score plugin that says why it scored a node down.
type ScoreExplainer interface {
	// Explain returns the reason and what on the node gave it ("label
	// karpenter.sh/capacity-type=spot"), "" when the node is not scored down.
	Explain(p *policy.Resolved, n *NodeInfo) (ScoreReason, string)
}

// StableCapacity ranks nodes that are likely to stay before spot or preemptible capacity and
// cluster-autoscaler's deletion candidates. A score, not a filter: a cluster of spot nodes only
// still gets route reflectors. It comes after CurrentRole (a spot label added later moves no
// route reflector: its next replacement is picked by it) and Preferred (a user's explicit
// preference wins), before NodeAge.
type StableCapacity struct{}

var (
	_ ScorePlugin    = &StableCapacity{}
	_ ScoreExplainer = &StableCapacity{}
)

// NewStableCapacity returns the StableCapacity score plugin.
func NewStableCapacity() *StableCapacity { return &StableCapacity{} }

// Name implements ScorePlugin.
func (*StableCapacity) Name() string { return StableCapacityName }

// Score implements ScorePlugin.
func (s *StableCapacity) Score(p *policy.Resolved, n *NodeInfo) int64 {
	if r, _ := s.Explain(p, n); r != "" {
		return 0
	}
	return 1
}

// Explain implements ScoreExplainer.
func (*StableCapacity) Explain(_ *policy.Resolved, n *NodeInfo) (ScoreReason, string) {
	for _, m := range policy.SpotLabels() {
		if hasLabel(n.Node.Labels, m.Key, m.Value) {
			return ScoreReasonSpot, "label " + m.Key + "=" + m.Value
		}
	}
	if hasTaint(n.Node.Spec.Taints, policy.TaintDeletionCandidateOfClusterAutoscaler, "") {
		return ScoreReasonDeletionCandidate, "taint " + policy.TaintDeletionCandidateOfClusterAutoscaler
	}
	return "", ""
}
