package reconciler

import (
	"context"
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// Absorbed node events.
//
// A full plan reads every node of a policy: at 65,000 nodes it costs about half a second however
// little changed. Most node events on a settled cluster change nothing a plan decides now: a
// client cordoned, a pressure condition, a label only a preferred or forbidden selector reads, a
// preferred label on a route reflector. The mutating webhook has already admitted such a change
// against the committed plan. So when the last full reconcile of a policy left nothing to do (its
// plan is quiet: not Degraded, every drill passing, no grace period or drain running, nothing
// pending or requeued) and every node changed since has the role, zone, rack, readiness and policy
// that plan read (and a route reflector still passes the plan's filters), the reconcile checks
// those nodes only and ends (the absorb step): its cost follows the events, not the cluster. The
// events' effect on choices a plan may revise (which nodes are eligible or preferred, the status's
// counts) is taken up by the next full plan, at most absorbWindow after the quiet one. A client's
// readiness is absorbed too while the healthy counts, with every client absorbed since the quiet
// plan, give the desired counts the plan had (extender.HealthNeutral), and unless a client the plan
// read NotReady turns Ready (it may be a candidate the plan waits for). Anything else (a route
// reflector cordoned, NotReady or otherwise ineligible, a join or deletion, a policy, BGPPeer, BGP
// health or datastore event, a timer) plans the policy whole.

const (
	// absorbWindow bounds how long absorbed events wait for a full plan: a reconcile absorbs only
	// within this time after the last full plan, and asks for the next full one at its end.
	absorbWindow = 10 * time.Second
	// maxAbsorbed: more changed nodes than this since the last reconcile (or than a sixteenth of
	// the last quiet plan's nodes, when that is more) are planned whole. Checking a changed node
	// costs about 20 µs, a full plan about 7.5 µs per node of the policy (BENCHMARKS.md), so a
	// sixteenth costs under a third of a plan; at 65,000 nodes a full plan under load takes
	// seconds, and the events of those seconds (hundreds) must not force the next one.
	maxAbsorbed = 256
)

// absorbLimit is how many changed nodes a reconcile of the policy with quiet plan q (nil when it
// has none) may absorb; r.mu is held.
func absorbLimit(q *quietPlan) int {
	if q == nil {
		return maxAbsorbed
	}
	return max(maxAbsorbed, q.nodes/16)
}

// marks are what happened to a policy since its last reconcile took them.
type marks struct {
	// full: an event that only a full plan handles (a node created or deleted, a policy, BGPPeer,
	// BGP health or datastore change).
	full bool
	// overflow: more nodes changed than absorbLimit (nodes is then nil).
	overflow bool
	// nodes: the nodes updated in a way a plan reads (NodeChanged), by name, with the object as it
	// was before the first of those updates.
	nodes map[string]*extender.Node
}

// quietPlan is the last full reconcile of a policy when it left nothing to do (see quiet).
type quietPlan struct {
	at         time.Time
	generation int64
	policies   string                    // the valid policies it was planned with (state.PoliciesKey)
	view       map[string]*extender.Node // the policy's nodes as that reconcile read and wrote them
	nodes      int                       // len(view), kept when the plan is retired
	// retired: a full plan of the policy is under way, and the quiet plan is only its node count
	// (absorbLimit, for the events that arrive during the plan); its view and result are dropped
	// so that they are not live beside the new plan and its route cost (about 20 MB at 65,000
	// nodes). remember replaces it at the end of the reconcile.
	retired bool
	result  *extender.Result
	filters []extender.FilterPlugin // the plan's filters
	index   map[string]int          // name -> position in result.Nodes, built at the first absorb
	// counts: the plan's healthy nodes (built at the first absorbed readiness change); health: the
	// clients whose readiness absorbed reconciles took since, healthy now or not.
	counts extender.HealthCounts
	health map[string]bool
}

// markFull records that policy name (every policy when name is "") needs a full plan.
func (r *Reconciler) markFull(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if name != "" {
		r.marksOf(name).full = true
		return
	}
	for _, p := range r.Policies.List() {
		r.marksOf(p.Name).full = true
	}
}

// NodeUpdated records that node old was updated in a way a plan reads (NodeChanged), for the
// absorb step of every policy's next reconcile. The node informer's update handler calls it
// before it queues the policies.
func (r *Reconciler) NodeUpdated(old *extender.Node) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.Policies.List() {
		m := r.marksOf(p.Name)
		if m.full || m.overflow {
			continue
		}
		if m.nodes == nil {
			m.nodes = map[string]*extender.Node{}
		}
		if _, seen := m.nodes[old.Name]; !seen {
			m.nodes[old.Name] = old
		}
		if len(m.nodes) > absorbLimit(r.quiet[p.Name]) {
			m.overflow, m.nodes = true, nil
		}
	}
}

// marksOf returns name's marks, created when missing; r.mu is held.
func (r *Reconciler) marksOf(name string) *marks {
	if r.marks == nil {
		r.marks = map[string]*marks{}
	}
	m := r.marks[name]
	if m == nil {
		m = &marks{}
		r.marks[name] = m
	}
	return m
}

// takeMarks returns policy name's marks and clears them.
func (r *Reconciler) takeMarks(name string) marks {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.marks[name]
	delete(r.marks, name)
	if m == nil {
		return marks{}
	}
	return *m
}

// absorb ends the reconcile when the last full plan is quiet and absorbs every node changed since
// the last reconcile (see the top of this file). Otherwise it counts why the policy is planned
// whole (calico_rr_autoscaler_full_plan_causes_total).
func (r *Reconciler) absorb(_ context.Context, st *State) error {
	if st.Invalid != nil {
		return nil
	}
	q, cause := r.absorbCause(st)
	if cause != "" {
		fullPlanCauses.WithLabelValues(st.Name, cause).Inc()
		r.mu.Lock()
		if q := r.quiet[st.Name]; q != nil && !q.retired {
			r.quiet[st.Name] = &quietPlan{nodes: q.nodes, retired: true}
		}
		r.mu.Unlock()
		return nil
	}
	st.Done, st.absorbed = true, true
	st.requeue(q.at.Add(absorbWindow).Sub(st.Now))
	absorbedEvents.WithLabelValues(st.Name).Add(float64(len(st.marks.nodes)))
	return nil
}

// Causes of a full plan (the cause label of calico_rr_autoscaler_full_plan_causes_total).
const (
	causeEvent           = "event"            // an event only a full plan handles (markFull)
	causeTimer           = "timer"            // no event: a requeue, the resync or the absorb window's end
	causeTooManyNodes    = "too-many-nodes"   // more changed nodes than absorbLimit
	causeWindowPassed    = "window-passed"    // the quiet plan is older than absorbWindow
	causePoliciesChanged = "policies-changed" // the policy or the set of valid policies changed since
	causeNodeUnsettled   = "node-unsettled"   // a node gone, or with a change the ledger still overlays
	causeNodeOutside     = "node-outside"     // a node of no policy or another gained a cluster ID or a selector
	causeNodeTopology    = "node-topology"    // a node's UID, zone, rack or selecting policies changed
	causeNodeRole        = "node-role"        // a node's owned labels are not the plan's
	causeNodeState       = "node-state"       // readiness, deletion, rack or peered route reflectors changed
	causeRouteReflector  = "route-reflector"  // a route reflector would not keep its role (filters, ID, plane)
	// absorbReadiness (no cause: absorbs returns it for a client's readiness change, which
	// absorbCause absorbs when the healthy counts allow, else plans whole for causeNodeState).
	absorbReadiness = "readiness"
	// A plan that was not quiet is counted as "last-plan-" and the reason quietness gives.
	causeLastPlan = "last-plan-"
)

// absorbCause returns the quiet plan that absorbs the reconcile's marks and "", or why the
// reconcile plans whole (the first changed node by name that the plan does not absorb, so that
// the same events give the same cause).
func (r *Reconciler) absorbCause(st *State) (*quietPlan, string) {
	switch {
	case st.marks.full:
		return nil, causeEvent
	case st.marks.overflow:
		return nil, causeTooManyNodes
	case len(st.marks.nodes) == 0:
		return nil, causeTimer
	}
	r.mu.Lock()
	q, why := r.quiet[st.Name], r.unquiet[st.Name]
	r.mu.Unlock()
	if q != nil && q.retired { // the full plan that retired it did not finish
		q = nil
	}
	switch {
	case q == nil && why == "":
		return nil, causeLastPlan + "none"
	case q == nil:
		return nil, causeLastPlan + why
	case st.Now.Before(q.at) || !st.Now.Before(q.at.Add(absorbWindow)):
		return nil, causeWindowPassed
	case st.Policy.Generation != q.generation:
		return nil, causePoliciesChanged
	}
	valid := r.Policies.Valid()
	if state.PoliciesKey(valid) != q.policies {
		return nil, causePoliciesChanged
	}
	if q.index == nil {
		q.index = make(map[string]int, len(q.result.Nodes))
		for i, n := range q.result.Nodes {
			q.index[n.Name] = i
		}
	}
	health := maps.Clone(q.health)
	for _, name := range slices.Sorted(maps.Keys(st.marks.nodes)) {
		delete(health, name)
		switch cause, healthy := r.absorbs(st.Managed.Resolved, q, valid, name, st.marks.nodes[name], st.Now); cause {
		case "":
		case absorbReadiness:
			if health == nil {
				health = map[string]bool{}
			}
			health[name] = healthy
		default:
			return nil, cause
		}
	}
	if len(health) > 0 || len(q.health) > 0 {
		if !q.healthNeutral(st.Managed.Resolved, health) {
			return nil, causeNodeState
		}
		q.health = health
	}
	return q, ""
}

// healthNeutral reports whether the plan's healthy counts, with the nodes of health (name ->
// healthy now) in place of their state in the plan's view, leave the counts the plan derives from
// them as they are (extender.HealthNeutral).
func (q *quietPlan) healthNeutral(p *policy.Resolved, health map[string]bool) bool {
	if q.counts.ByZone == nil {
		q.counts = q.result.Health()
	}
	after := extender.HealthCounts{Total: q.counts.Total, ByZone: maps.Clone(q.counts.ByZone)}
	for name, now := range health {
		was := q.view[name]
		zone := was.Labels[p.ZoneLabel]
		d := 0
		if now {
			d++
		}
		if extender.NewNodeInfo(was, p).Healthy() {
			d--
		}
		after.Total += d
		after.ByZone[zone] += d
	}
	return extender.HealthNeutral(p, q.counts, after)
}

// absorbs returns "" when node name's change (from before) leaves the quiet plan q of policy p
// as it is until the next full plan, absorbReadiness when only a client's readiness changed
// (then healthy says whether the node, as read here, is healthy now), else the cause of a full
// plan.
func (r *Reconciler) absorbs(p *policy.Resolved, q *quietPlan, valid []state.Managed, name string, before *extender.Node, now time.Time) (cause string, healthy bool) {
	cur := r.Nodes.Get(name)
	if cur == nil || r.Ledger.Unsettled(cur) {
		return causeNodeUnsettled, false
	}
	was, mine := q.view[name]
	if !mine {
		// Another policy's node, or nobody's: it must stay so, and carry no cluster ID (other
		// policies' IDs are reserved in this one's plan).
		_, hadID := before.Annotations[extender.AnnotationClusterID]
		_, hasID := cur.Annotations[extender.AnnotationClusterID]
		if hadID || hasID || !sameSelectors(valid, before, cur) {
			return causeNodeOutside, false
		}
		return "", false
	}
	i, ok := q.index[name]
	if !ok || was.UID != cur.UID || !sameSelectors(valid, was, cur) ||
		was.Labels[p.ZoneLabel] != cur.Labels[p.ZoneLabel] || was.Labels[p.RackLabel] != cur.Labels[p.RackLabel] {
		return causeNodeTopology, false
	}
	if lbl, ann := state.OwnedChanges(p.RRLabelKey, cur, q.result.Nodes[i]); len(lbl)+len(ann) > 0 {
		return causeNodeRole, false // its role is not the plan's: the plan repairs it
	}
	a, b := extender.NewNodeInfo(was, p), extender.NewNodeInfo(cur, p)
	if a.CurrentRR != b.CurrentRR || b.Deleting || a.Rack != b.Rack || !slices.Equal(a.CurrentRRs, b.CurrentRRs) {
		return causeNodeState, false
	}
	if a.Ready != b.Ready || !a.NotReadySince.Equal(b.NotReadySince) {
		// A client's readiness reaches the plan through the healthy counts (absorbCause checks
		// them) and its eligibility, which waits for the next plan. A node the plan read NotReady
		// that is Ready now may be a candidate the plan waits for: planned whole.
		if a.CurrentRR || b.Ready && !a.Ready {
			return causeNodeState, false
		}
		return absorbReadiness, b.Healthy()
	}
	if !a.CurrentRR {
		return "", false // a client: whether it may become a route reflector waits for the next plan
	}
	// A route reflector keeps its role while it stays eligible (a preferred label changed, say):
	// the planner's filters must still pass it, as they did.
	a.Now, b.Now = now, now
	extender.RunFilters(q.filters, p, a)
	extender.RunFilters(q.filters, p, b)
	if a.Eligible && b.Eligible && a.ClusterID == b.ClusterID && a.Plane == b.Plane && a.StandbyFor == b.StandbyFor {
		return "", false
	}
	return causeRouteReflector, false
}

// sameSelectors reports whether the same valid policies select a and b (the partition of the
// nodes among policies, and the nodes outside every selector, are unchanged).
func sameSelectors(valid []state.Managed, a, b *extender.Node) bool {
	for _, m := range valid {
		if m.Resolved.NodeSelector.Matches(labels.Set(a.Labels)) != m.Resolved.NodeSelector.Matches(labels.Set(b.Labels)) {
			return false
		}
	}
	return true
}

// remember keeps st as the policy's quiet plan when the reconcile ran every step and left nothing
// to do (quietness). Otherwise the policy has no quiet plan, its next reconcile plans it whole,
// and the reason is kept for the cause of that plan.
func (r *Reconciler) remember(st *State) {
	if st.absorbed {
		return
	}
	why := r.quietness(st)
	r.mu.Lock()
	defer r.mu.Unlock()
	if why != "" {
		delete(r.quiet, st.Name)
		r.unquiet[st.Name] = why
		return
	}
	delete(r.unquiet, st.Name)
	filters := st.Input.Filters
	if filters == nil {
		filters = extender.DefaultFilters()
	}
	r.quiet[st.Name] = &quietPlan{at: st.Now, generation: st.Policy.Generation, policies: state.PoliciesKey(st.valid),
		view: st.View, nodes: len(st.View), result: st.Result, filters: filters}
}

// quietness returns "" when the reconcile ran every step and left nothing to do: no role change,
// nothing pending, no requeue before the resync, and a plan that is not Degraded, hands nothing
// over, waits for no clock and passes its drills. Else it names the first thing left.
func (r *Reconciler) quietness(st *State) string {
	switch {
	case st.Result == nil || st.Done || st.Invalid != nil:
		return "incomplete"
	case len(st.Changes) > 0:
		return "role-changes"
	case len(st.Pending) > 0:
		return "pending"
	case len(st.Demotions) > 0:
		return "demotions"
	case st.Result.Summary.Degraded:
		return "degraded"
	case len(st.Result.HandedOver) > 0:
		return "handover"
	case !st.Result.RecheckAt.IsZero():
		return "recheck"
	case st.Result.Summary.DrainingRouteReflectors > 0:
		return "draining"
	case st.Result.DrillsErr != nil || slices.ContainsFunc(st.Result.Drills, func(d extender.Drill) bool { return d.MissingPairs > 0 }):
		return "drills"
	case st.Requeue != 0 && st.Requeue < r.resync():
		return "requeue"
	}
	return ""
}

// forgetQuiet drops policy name's quiet plan and marks it for a full plan (a step failed).
func (r *Reconciler) forgetQuiet(name string) {
	r.mu.Lock()
	delete(r.quiet, name)
	r.unquiet[name] = "failed"
	r.mu.Unlock()
	r.markFull(name)
}
