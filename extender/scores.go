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
