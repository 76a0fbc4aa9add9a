package reconciler

import (
	"context"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
)

// Prepare computes, before this process leads, the first plan of every valid policy from the
// cache, and keeps it for the policy's first reconcile, which commits it instead of planning when
// the planner would read nothing new meanwhile (state.Ledger.Adopt). serve calls it while the
// takeover reads every node's version: at 65,000 nodes the plan (about a second on one core) then
// no longer follows that read (issue 38's first plan). It writes nothing and publishes no
// admission state. A policy whose label keys the cache is still refilling is left to its reconcile.
func (r *Reconciler) Prepare(ctx context.Context) {
	r.init()
	if r.LabelKeys != nil && len(r.LabelKeys.Refilling()) > 0 {
		return
	}
	valid := r.Policies.Valid()
	now := r.now()
	for _, m := range valid {
		if ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		_, known := r.history[m.Policy.Name]
		r.mu.Unlock()
		if known {
			continue // planned already: its reconcile has a plan to reuse
		}
		pd := r.Ledger.Prepare(valid, r.Nodes.List(), m, now, seedHistory(m.Resolved, m.Policy.Status, now))
		if pd == nil {
			continue
		}
		r.mu.Lock()
		r.prepared[m.Policy.Name] = pd
		r.mu.Unlock()
	}
}

// takePrepared returns, and forgets, policy name's plan that Prepare computed (nil: none).
func (r *Reconciler) takePrepared(name string) *state.Planned {
	r.mu.Lock()
	defer r.mu.Unlock()
	pd := r.prepared[name]
	delete(r.prepared, name)
	return pd
}
