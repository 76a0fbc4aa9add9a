package reconciler

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// load reads the policy from the cache. A deleted policy is forgotten (its nodes and BGPPeers are
// left as they are: removing every route reflector at once would cut the cluster's routes); an
// invalid one only gets its status.
func (r *Reconciler) load(ctx context.Context, st *State) error {
	obj, ok, err := r.Policies.Store().GetByKey(st.Name)
	if err != nil {
		return err
	}
	if !ok {
		r.Ledger.DropPolicy(st.Name)
		r.mu.Lock()
		delete(r.history, st.Name)
		delete(r.last, st.Name)
		delete(r.planned, st.Name)
		delete(r.facts, st.Name)
		delete(r.memos, st.Name)
		delete(r.costs, st.Name)
		delete(r.bgp, st.Name)
		delete(r.quiet, st.Name)
		delete(r.unquiet, st.Name)
		delete(r.marks, st.Name)
		r.mu.Unlock()
		forgetMetrics(st.Name)
		st.Done = true
		return nil
	}
	st.Policy = obj.(*v1alpha1.RouteReflectorPolicy)
	r.loadTransitions(ctx, st)
	if r.waitRefill(ctx, st) {
		return nil
	}
	resolved, errs := r.Policies.Resolve(st.Policy)
	if st.Policy.DeletionTimestamp != nil {
		// A deleted policy's reconcile is its release: the release steps replace the rest.
		st.Managed = state.Managed{Policy: st.Policy, Resolved: resolved}
		st.Invalid = errs
		st.then = r.releaseSteps
		return nil
	}
	if err := r.ensureFinalizer(ctx, st.Policy); err != nil {
		return err
	}
	if len(errs) > 0 {
		st.Invalid = errs
		return r.status(ctx, st)
	}
	st.Managed = state.Managed{Policy: st.Policy, Resolved: resolved}
	return nil
}

// plan computes the plan from the cache and the ledger's assumed changes, and commits it to the
// ledger. The promotions admitted after the input was read stand in the committed state when they
// fill gaps the plan left (state.Ledger's replay); when one does not, the two filled the same gap
// and the plan is computed again, once as before, then with promotions held
// (state.Ledger.HoldPromotions: admissions are still answered at once, as clients or without a
// role), so that a stream of joins cannot keep the plan from committing.
func (r *Reconciler) plan(_ context.Context, st *State) error {
	if st.Invalid != nil {
		st.Done = true
		return nil
	}
	r.mu.Lock()
	history, known := r.history[st.Name]
	r.mu.Unlock()
	if !known {
		history = seedHistory(st.Managed.Resolved, st.Policy.Status, st.Now)
	}
	valid, ok := r.validNow(st)
	if !ok {
		return nil
	}
	st.valid = valid
	r.mu.Lock()
	prev, facts := r.planned[st.Name], r.facts[st.Name]
	r.mu.Unlock()
	cache := r.Nodes.List()
	var planned *state.Planned
	// A reconcile that no node change marked first tries the last plan: when the planner would
	// read nothing new, it is the plan (state.Ledger.Reuse).
	if len(st.marks.nodes) == 0 && !st.marks.overflow {
		start := time.Now()
		if pd, ok := r.Ledger.Reuse(prev, valid, cache, st.Managed, st.Now, history); ok && facts != nil {
			planned, st.facts = pd, facts
			planDuration.WithLabelValues(st.Name).Observe(time.Since(start).Seconds())
			plansTotal.WithLabelValues(st.Name, "committed").Inc()
			plansReused.WithLabelValues(st.Name).Inc()
		}
	}
	for attempt := 0; planned == nil; attempt++ {
		var unblock func()
		if attempt > 0 {
			cache = r.Nodes.List()
		}
		if attempt > 1 {
			unblock = r.Ledger.HoldPromotions()
		}
		start := time.Now()
		pd, ok := r.Ledger.PlanKept(valid, cache, st.Managed, st.Now, history)
		if unblock != nil {
			unblock()
		}
		planDuration.WithLabelValues(st.Name).Observe(time.Since(start).Seconds())
		if ok {
			plansTotal.WithLabelValues(st.Name, "committed").Inc()
			planned, st.facts = pd, &viewFacts{}
			break
		}
		plansTotal.WithLabelValues(st.Name, "conflict").Inc()
	}
	st.Input, st.Result = planned.In, planned.Res
	st.Overlaps = state.Overlaps(valid, cache, st.Name)
	st.View = st.facts.viewOf(st.Input.Nodes)
	r.mu.Lock()
	r.history[st.Name] = st.Result.Recommendations
	r.last[st.Name] = st.Result
	r.planned[st.Name], r.facts[st.Name] = planned, st.facts
	r.mu.Unlock()
	// Wake up when a route reflector's NotReady grace period ends, and when a draining route
	// reflector's removalDelay ends.
	if at := st.Result.RecheckAt; !at.IsZero() {
		st.requeue(at.Sub(st.Now) + 100*time.Millisecond)
	}
	for _, rr := range st.Result.RouteReflectors {
		if !rr.Draining {
			continue
		}
		if n := st.View[rr.Node]; n != nil {
			if since, err := time.Parse(time.RFC3339, n.Annotations[extender.AnnotationDrainingSince]); err == nil {
				st.requeue(since.Add(st.Managed.Resolved.RemovalDelay).Sub(st.Now) + 100*time.Millisecond)
			} else {
				st.requeue(st.Managed.Resolved.RemovalDelay + 100*time.Millisecond)
			}
		}
	}
	return nil
}

// validNow returns the valid policies as the cache has them now, and whether st's policy is still
// among them as load read it (same generation). When it is not (deleted or edited since), the
// reconcile ends and runs again at once: the policies partition the nodes, and a plan of the policy
// as loaded against the others as they are now gives it none of its nodes (a policy deleted
// between load and plan once scaled its route reflectors down to 0 while the mesh was off).
func (r *Reconciler) validNow(st *State) ([]state.Managed, bool) {
	valid := r.Policies.Valid()
	if slices.ContainsFunc(valid, func(m state.Managed) bool {
		return m.Policy.Name == st.Name && m.Policy.Generation == st.Policy.Generation
	}) {
		return valid, true
	}
	st.Done = true
	st.requeue(10 * time.Millisecond)
	return nil, false
}

// seedHistory is the stabilization history a new leader starts a policy with: the desired counts
// its status shows, as if recommended now. The old leader's history lived in its memory; seeded
// this way a leader change never scales down earlier than the old leader would have (at most one
// scale-down window later), and scaling up stays immediate.
func seedHistory(p *policy.Resolved, s v1alpha1.RouteReflectorPolicyStatus, now time.Time) []extender.Recommendation {
	if p.ScaleDownWindow <= 0 || s.DesiredRouteReflectors == 0 {
		return nil
	}
	if p.Topology != v1alpha1.SingleCluster {
		return []extender.Recommendation{{Key: "", Time: now, Count: int(s.DesiredRouteReflectors)}}
	}
	out := make([]extender.Recommendation, 0, len(s.Zones))
	for _, z := range s.Zones { // SingleCluster: one count per zone
		out = append(out, extender.Recommendation{Key: z.Zone, Time: now, Count: int(z.DesiredRouteReflectors)})
	}
	return out
}

// keepInvalid ends the release of a policy deleted while invalid: nothing it made can be released
// safely without a valid spec, so everything stays and the finalizer goes.
func (r *Reconciler) keepInvalid(ctx context.Context, st *State) error {
	if st.Invalid == nil {
		return nil
	}
	st.Done = true
	r.Recorder.Eventf(st.Policy, corev1.EventTypeWarning, EventRouteReflectorsKept,
		"policy deleted while invalid: its route reflectors, labels and BGPPeers stay; remove them by hand")
	return r.dropFinalizer(ctx, st.Policy)
}
