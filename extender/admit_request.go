package extender

import (
	"slices"
	"time"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// One admission, one call.
//
// The mutating webhook hands a node to the shared state (state.Ledger.AdmitNode), which calls
// AdmitNodeRequest once with the policy's admission state held for the call; the answer carries
// everything the state records and the webhook patches (the owned keys' changes). Nothing here
// calls back into the state: the walk is webhook -> state -> extender -> state -> webhook.

// AdmitRequest is one admission of a node by the mutating webhook.
type AdmitRequest struct {
	Node *Node
	// Old is the node before an UPDATE, nil for a CREATE.
	Old *Node
	// Now is when the node is read (the filters' grace periods, a draining mark's time).
	Now time.Time
	// Observe: the policy is in Observe or Paused mode; the answer says what Enforce would do
	// for a node without a peering set (whatever its update) and records nothing.
	Observe bool
	// Defer: a role decision is due but this replica leaves it to the leader's reconciler (it has
	// not the lease, or roles are deferred).
	Defer bool
	// State is the policy's admission state, nil when no plan of the policy's generation is
	// committed. The caller holds it for the call (AdmitState is not safe for concurrent use).
	State *AdmitState
	// Decide holds the decision's options (Record, NoPromotion, Prev).
	Decide DecideOptions
}

// AdmitAction is what an admission does to the node.
type AdmitAction int

// The actions of an admission.
const (
	// AdmitPass: nothing (no decision due, or no plan to decide on).
	AdmitPass AdmitAction = iota
	// AdmitDrain: a route reflector that is cordoned, forbidden or no longer eligible is marked
	// draining (Annotations); DrainReason is why.
	AdmitDrain
	// AdmitDeferred: a role decision is due and left to the leader's reconciler.
	AdmitDeferred
	// AdmitDecide: a role decision was taken on the state (Decision).
	AdmitDecide
)

// AdmitAnswer is the answer to one AdmitRequest.
type AdmitAnswer struct {
	Action AdmitAction
	// DrainReason is the filter's reason an AdmitDrain route reflector is not eligible.
	DrainReason string
	// Decision is AdmitDecide's decision; for AdmitDrain, only Labels and Annotations are set.
	Decision
}

// Decision is a role decision on an AdmitState (AdmitState.Decide).
type Decision struct {
	Admission
	// Decided: the decision gives a role (Role is not AdmitNone).
	Decided bool
	// Same: the decision is DecideOptions.Prev again (a retry or a reinvocation); Admission is
	// Prev and nothing was recorded.
	Same bool
	// Recorded: the decision was added to the state.
	Recorded bool
	// Held: no role, for an eligible node, while DecideOptions.NoPromotion held promotions: the
	// node might have been made a route reflector (and its rack's next clients given a set)
	// otherwise.
	Held bool
	// Labels and Annotations are the owned keys' changes the decision makes to the node: a value
	// to set, nil to remove.
	Labels, Annotations map[string]*string
}

// DecideOptions are a decision's options.
type DecideOptions struct {
	// Record adds the decision to the state (a role, or an awaited node without one) in place of
	// the node's earlier recorded decision.
	Record bool
	// NoPromotion: no new route reflector; the node may still become a client.
	NoPromotion bool
	// Prev is the node's last decision not seen by the cache yet, nil when none.
	Prev *Admission
}

// AdmitNodeRequest reads the node once through the planner's filters and answers the admission:
// a route reflector that is not eligible any more is marked draining; a joining node, or one that
// just became eligible, gets its role from req.State (Decide). It is the mutating webhook's whole
// decision; the caller records the answer.
func AdmitNodeRequest(p *policy.Resolved, req AdmitRequest) AdmitAnswer {
	node := req.Node
	ni := NewNodeInfo(node, p)
	ni.Now = req.Now
	RunFilters(DefaultFilters(), p, ni)
	var was *NodeInfo // the node before the update: its role; its eligibility only when needed
	if req.Old != nil {
		was = NewNodeInfo(req.Old, p)
	}
	switch {
	case ni.CurrentRR:
		if ni.Eligible || IsDraining(node) {
			return AdmitAnswer{}
		}
		ts := CeilSecond(req.Now).Format(time.RFC3339)
		ann := map[string]*string{AnnotationDrainingSince: &ts}
		if ni.Rule == RuleNotReadyNode {
			reason := DrainingReasonNotReady
			ann[AnnotationDrainingReason] = &reason
		}
		return AdmitAnswer{Action: AdmitDrain, DrainReason: ni.Reason, Decision: Decision{Annotations: ann}}
	case was != nil && was.CurrentRR:
		// The role is being removed (by the reconciler, or by hand as the validator allows): the
		// reconciler decides what the node becomes.
		return AdmitAnswer{}
	}
	hasSet := node.Labels[LabelPeeringSet] != ""
	if req.Observe {
		if hasSet {
			return AdmitAnswer{}
		}
	} else if hasSet && !(ni.Eligible && (was == nil || !wasEligible(was, p))) {
		return AdmitAnswer{}
	}
	if req.Defer {
		return AdmitAnswer{Action: AdmitDeferred}
	}
	if req.State == nil {
		return AdmitAnswer{}
	}
	o := req.Decide
	o.Record = o.Record && !req.Observe
	return AdmitAnswer{Action: AdmitDecide, Decision: req.State.Decide(ni, o)}
}

// wasEligible runs the planner's filters on the node as it was before the update, without a
// decision time: no grace period and no awaiting apply to what it was.
func wasEligible(was *NodeInfo, p *policy.Resolved) bool {
	RunFilters(DefaultFilters(), p, was)
	return was.Eligible
}

// Decide decides the role of a node already read through the filters (AdmitNode), and with
// o.Record records it (Remember) unless it is o.Prev again. It returns the owned keys' changes.
func (s *AdmitState) Decide(ni *NodeInfo, o DecideOptions) Decision {
	a := s.admitNode(ni, o.NoPromotion)
	d := Decision{Admission: a, Decided: a.Role != AdmitNone, Held: o.NoPromotion && a.Role == AdmitNone && a.Eligible}
	if !o.Record || !d.Decided && !a.Awaited {
		d.Labels, d.Annotations = s.changes(ni.Node, &d)
		return d
	}
	if o.Prev != nil && sameAdmission(o.Prev, &a) {
		d.Admission, d.Same = *o.Prev, true
	} else {
		s.Remember(&d.Admission)
		d.Recorded = true
	}
	d.Labels, d.Annotations = s.changes(ni.Node, &d)
	return d
}

func (s *AdmitState) changes(n *Node, d *Decision) (lbl, ann map[string]*string) {
	if !d.Decided {
		return nil, nil
	}
	st := d.Admission.State(s.Policy)
	if d.Role == AdmitRouteReflector && d.planned == nil {
		protect(s.Policy, n.Annotations, st.Annotations) // State made its maps for this decision
	}
	return OwnedChanges(s.Policy.RRLabelKey, n, st)
}

// Remember records a decision (Record) in place of the decision recorded for its node before
// through Remember, which it takes back out first. A committed plan's state replays the decisions
// taken after the plan's input was read with it.
func (s *AdmitState) Remember(a *Admission) {
	if undo := s.remembered[a.Node]; undo != nil {
		undo()
	}
	if s.remembered == nil {
		s.remembered = map[string]func(){}
	}
	s.remembered[a.Node] = s.Record(a)
}

// Replays reports whether the state, a newer plan's, takes promotion a of node n again: n (as
// admitted, with the decision's changes) read through the filters at at is decided a route
// reflector of the same zone, rack, plane and cluster ID, with the same peering. A commit keeps the
// promotions admitted while its plan was computed only when they fill a gap its plan left; a
// promotion the plan's own choices displace fails the commit (the plan is computed again).
func (s *AdmitState) Replays(n *Node, at time.Time, a *Admission) bool {
	if a.Role != AdmitRouteReflector || n == nil || n.Name != a.Node {
		return false
	}
	ni := NewNodeInfo(n, s.Policy)
	ni.Now = at
	RunFilters(DefaultFilters(), s.Policy, ni)
	b := s.admitNode(ni, false)
	return b.Role == a.Role && b.ClusterID == a.ClusterID && b.Zone == a.Zone && b.Rack == a.Rack && b.Plane == a.Plane &&
		b.PeeringSet == a.PeeringSet && b.UplinkSet == a.UplinkSet && b.topLevel == a.topLevel && slices.Equal(b.RouteReflectors, a.RouteReflectors)
}

func sameAdmission(a, b *Admission) bool {
	return a.Role == b.Role && a.ClusterID == b.ClusterID && a.PeeringSet == b.PeeringSet && a.Rack == b.Rack &&
		a.Healthy == b.Healthy && a.Eligible == b.Eligible && a.Awaited == b.Awaited && a.Zone == b.Zone
}

// OwnedChanges returns the label and annotation changes that turn n's owned keys into want's.
func OwnedChanges(rrLabelKey string, n *Node, want NodeState) (lbl, ann map[string]*string) {
	return diffKeys(OwnedLabelKeys(rrLabelKey), n.Labels, want.Labels), diffKeys(OwnedAnnotationKeysOf(n.Annotations, want.Annotations), n.Annotations, want.Annotations)
}

func diffKeys(keys []string, cur, want map[string]string) map[string]*string {
	var out map[string]*string
	for _, k := range keys {
		w, wok := want[k]
		c, cok := cur[k]
		if wok == cok && w == c {
			continue
		}
		if out == nil {
			out = map[string]*string{}
		}
		if wok {
			out[k] = &w
		} else {
			out[k] = nil
		}
	}
	return out
}

// CeilSecond rounds t up to the second, in UTC. Draining marks have a resolution of one second
// (RFC 3339); rounding up keeps the removalDelay from ever being cut short.
func CeilSecond(t time.Time) time.Time {
	u := t.UTC().Truncate(time.Second)
	if u.Before(t) {
		u = u.Add(time.Second)
	}
	return u
}
