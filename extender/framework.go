package extender

import "github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"

// FilterPlugin decides whether a node may be a route reflector. A node that fails a filter gets the
// plugin's human-readable reason.
type FilterPlugin interface {
	Name() string
	// Rule is the rule under which the node validator refuses to label a node this filter
	// rejects (its name in denials, in the denial metric and in the audit annotation).
	Rule() string
	// Filter returns "" when the node passes, or the reason it does not.
	Filter(p *policy.Resolved, n *NodeInfo) string
}

// ScorePlugin ranks eligible nodes. Scores compare in plugin order, highest first; the node name
// breaks the last tie, so the ranking never depends on input order.
type ScorePlugin interface {
	Name() string
	Score(p *policy.Resolved, n *NodeInfo) int64
}

// DefaultFilters are the filters in the order they run: NodeGoing first, so that the reason of a
// going node is its going, never the NotReady or cordon that come with it.
func DefaultFilters() []FilterPlugin {
	return []FilterPlugin{NewNodeGoing(), NewNodeReady(), NewNodeUnschedulable(), NewNodeDeleting(), NewTaintToleration(), NewNotForbidden(), NewNodeConditions(), NewBGPSessions()}
}

// DefaultScores are the score plugins in order of precedence (the planner compares at most four).
func DefaultScores() []ScorePlugin {
	return []ScorePlugin{NewCurrentRole(), NewPreferred(), NewStableCapacity(), NewNodeAge()}
}

// RunFilters runs the filters on n and sets n.Eligible and n.Reason (the first failing filter's).
// A node that fails NodeReady only is checked against the rest and marked Awaited when it is young
// enough (see NodeInfo.Awaited).
func RunFilters(filters []FilterPlugin, p *policy.Resolved, n *NodeInfo) {
	n.Preferred = p.Preferred.Matches(labelSet(n.Node.Labels))
	n.Eligible, n.Reason, n.Rule, n.Awaited = true, "", "", false
	notReady := false
	for _, f := range filters {
		r := f.Filter(p, n)
		switch {
		case r == "":
			continue
		case n.Eligible && f.Name() == NodeReadyName:
			n.Eligible, n.Reason, n.Rule, notReady = false, r, f.Rule(), true
			continue
		case n.Eligible:
			n.Eligible, n.Reason, n.Rule = false, r, f.Rule()
		}
		return
	}
	n.Awaited = notReady && n.awaitable(p)
}
