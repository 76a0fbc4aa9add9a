package reconciler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/releaseplan"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/sessions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// A deleted policy's release without explosion (issue 36).
//
// The release BGPPeer once peered every node with every route reflector of the policy: the route
// reflectors, of distinct cluster IDs and with `add paths on`, then pass every route along every
// loop-free chain of them (117,111 routes on the busiest node of 24 where the layout holds 47).
// Now the release keeps every node within twice its steady state, where a node's steady state is
// the larger of what it holds in the layout before the release and in the layout after it (the
// mesh, or the layout kept): its routes, and for a route reflector its sessions.
//
//   - Above spec.release.maxMeshNodes (Auto) or with Keep, a policy that turned the mesh off does
//     not turn it back on: its roles, labels and BGPPeers stay, no longer the product's (the
//     finalizer goes, a Warning Event says how to go back by hand). Peak = steady.
//   - Otherwise the release goes through one route reflector of the policy, the keeper: the
//     release BGPPeer peers every node that is not a route reflector with the keeper alone
//     (ReleaseBGPPeer), then the policy's other route reflectors lose their role one at a time,
//     each only when the graph model finds every pair without it, then the mesh comes back on
//     (when the policy turned it off), then the keeper and the clients go. The keeper is the one
//     whose whole sequence the graph model finds within the bound, every step without a lost pair;
//     when none is, the layout is kept as above.

// Annotations on a deleted policy.
const (
	// AnnotationReleaseKeeper names the route reflector the release goes through.
	AnnotationReleaseKeeper = "routereflector.io/release-keeper"
	// AnnotationReleaseBridgedAt is when the release BGPPeer to the keeper was written: the other
	// route reflectors go removalDelay later.
	AnnotationReleaseBridgedAt = "routereflector.io/release-bridged-at"

	EventLayoutKept = "RouteReflectorLayoutKept"

	// releaseStep is the wait between two route reflectors' releases (at most removalDelay).
	releaseStep = 5 * time.Second
	// NoKeeper (AnnotationReleaseKeeper) is a release without a release BGPPeer of its own (see
	// releaseplan.NoKeeper).
	NoKeeper = releaseplan.NoKeeper
)

// keepLayout ends a deleted policy's release without touching its layout: the route reflectors,
// labels and BGPPeers stay, no longer the product's; the policy leaves the mesh's owners (the
// annotation goes with the last of them: the mesh is then off as a person's) and the finalizer
// goes.
func (r *Reconciler) keepLayout(ctx context.Context, st *State, cfg *apiv3.BGPConfiguration, why string) error {
	pol := st.Policy
	if err := r.deleteReleaseBridge(ctx, st); err != nil {
		return err
	}
	if owners, ours := meshOwners(cfg); ours {
		orig := cfg.DeepCopy()
		rest := slices.DeleteFunc(slices.Clone(owners), func(o string) bool { return o == pol.Name })
		if len(rest) == 0 {
			delete(cfg.Annotations, AnnotationMeshDisabledBy)
		} else {
			setMeshOwners(cfg, rest)
		}
		if err := r.configs().Patch(ctx, orig, cfg); err != nil {
			return fmt.Errorf("leaving the node-to-node mesh's owners: %w", err)
		}
	}
	mesh := "the node-to-node mesh stays off"
	if cfg == nil || cfg.Spec.NodeToNodeMeshEnabled == nil || *cfg.Spec.NodeToNodeMeshEnabled {
		mesh = "the node-to-node mesh is left as it is"
	}
	r.Recorder.Eventf(pol, corev1.EventTypeWarning, EventLayoutKept,
		"%s: %s and the route reflectors, their labels and BGPPeers (label %s=%s) stay, no longer managed; to go back to the mesh by hand: set nodeToNodeMeshEnabled: true in BGPConfiguration default, wait for the sessions, remove the annotation %s and the labels %s from the nodes, then delete the BGPPeers",
		why, mesh, extender.LabelPolicy, pol.Name, extender.AnnotationClusterID, strings.Join(extender.OwnedLabelKeys(st.Managed.Resolved.RRLabelKey), ", "))
	return r.dropFinalizer(ctx, pol)
}

// boundedRelease runs the release through the keeper up to the point where only the keeper is
// left of the policy's route reflectors: it picks the keeper (once; kept on the policy), writes
// the release BGPPeer, waits removalDelay, then releases one other route reflector per pass. It
// returns done when only the keeper is left; when no release stays within the bound, the layout
// is kept (keepLayout, cfg the default BGPConfiguration).
func (r *Reconciler) boundedRelease(ctx context.Context, st *State, cfg *apiv3.BGPConfiguration, mesh bool) (done bool, err error) {
	pol, p := st.Policy, st.Managed.Resolved
	keeper := pol.Annotations[AnnotationReleaseKeeper]
	if other := r.releaseTurn(pol, keeper != "", mesh); other != "" {
		r.Log.V(1).Info("policy deleted: waiting for another policy's release", "policy", st.Name, "other", other)
		st.requeue(handoverRetry)
		return false, nil
	}
	if keeper == "" {
		sim, err := r.newReleaseSim(ctx, st)
		if err != nil {
			return false, err
		}
		plan := sim.Plan(mesh)
		if plan.Keeper == "" {
			if len(sim.PolicyRRs()) == 0 {
				return true, nil // nothing to go through
			}
			return false, r.keepLayout(ctx, st, cfg, "no release through one route reflector stays within twice the steady state without losing a pair ("+plan.Why+")")
		}
		r.Log.Info("policy deleted: releasing through one route reflector", "policy", st.Name, "keeper", plan.Keeper,
			"peakRoutes", plan.PeakRoutes, "peakSessions", plan.PeakSessions)
		now := state.CeilSecond(st.Now).Format(time.RFC3339)
		if err := r.markPolicy(ctx, pol, AnnotationReleaseKeeper, plan.Keeper); err != nil {
			return false, err
		}
		if err := r.markPolicy(ctx, pol, AnnotationReleaseBridgedAt, now); err != nil {
			return false, err
		}
		if plan.Keeper == NoKeeper {
			st.requeue(handoverRetry)
			return false, nil
		}
		if err := r.ensureReleaseBridge(ctx, st, plan.Keeper); err != nil {
			return false, err
		}
		// The keeper's CalicoNodeStatus with the release BGPPeer, so that calico-node reports it by
		// the time the first route reflector may go (without the API the release waits
		// removalDelay only).
		if err := r.statuses().Create(ctx, st.Name, plan.Keeper); err != nil && !sessions.Unavailable(err) {
			return false, fmt.Errorf("creating the keeper's CalicoNodeStatus: %w", err)
		}
		st.requeue(p.RemovalDelay + 100*time.Millisecond)
		return false, nil
	}
	if keeper != NoKeeper {
		if err := r.ensureReleaseBridge(ctx, st, keeper); err != nil {
			return false, err
		}
	}
	// The keeper's sessions are waited for from the release's last change: the last route
	// reflector released (its ReleaseStep record), or the bridge (a record of it, its Max
	// transitions.DefaultMax after its removalDelay).
	change := &transitions.Record{Kind: transitions.ReleaseStep, Node: keeper, Started: st.Now, Waits: transitions.DefaultWaits}
	if at, err := time.Parse(time.RFC3339, pol.Annotations[AnnotationReleaseBridgedAt]); err == nil {
		if wait := at.Add(p.RemovalDelay).Sub(st.Now); wait > 0 {
			st.requeue(wait + 100*time.Millisecond)
			return false, nil
		}
		change.Started, change.Max = at, p.RemovalDelay+transitions.DefaultMax
	}
	r.expireTransitions(st)
	if last := st.trans.Latest(transitions.ReleaseStep); last != nil && last.Started.After(change.Started) {
		change = last
	}
	sim, err := r.newReleaseSim(ctx, st)
	if err != nil {
		return false, err
	}
	next, left, err := sim.Next(keeper, mesh)
	if err != nil {
		return false, err
	}
	if left == 0 {
		return true, nil
	}
	if next == "" {
		r.Log.Info("policy deleted: its route reflectors keep their role until one can go without losing a pair", "policy", st.Name, "left", left)
		st.requeue(handoverRetry)
		return false, nil
	}
	if keeper != NoKeeper {
		if wait, err := r.keeperSessionsWait(ctx, st, keeper, change); wait || err != nil {
			return false, err
		}
	}
	n := sim.Node(next)
	lbl, ann := state.OwnedChanges(p.RRLabelKey, n, extender.NodeState{})
	if st.View == nil {
		st.View = map[string]*extender.Node{}
	}
	// The next one goes once this one's sessions are back (a cluster ID change restarts them
	// all; about 2 s in BIRD), at most removalDelay later, and once the keeper's sessions,
	// this one's among them, are seen Established (keeperSessionsWait). The record is in the
	// policy's status before the release it records.
	began := r.now()
	st.trans.Start(transitions.ReleaseStep, began, next)
	if err := r.persistTransitions(ctx, st); err != nil {
		return false, err
	}
	err = r.applyPatches(ctx, st, []nodePatch{{name: next, lbl: lbl, ann: ann}})
	if err == nil && r.CalicoNodes != nil {
		view := map[string]*extender.Node{next: n}
		if v := st.View[next]; v != nil {
			view[next] = v
		}
		err = r.releaseCalicoRoles(ctx, &State{Name: st.Name, Managed: st.Managed, View: view})
	}
	if err := r.confirm(ctx, st, began, err); err != nil {
		return false, err
	}
	st.requeue(max(handoverRetry, min(p.RemovalDelay, releaseStep)))
	return false, nil
}

// releaseTurn returns another deleted policy whose release goes first ("" when none): deleted at
// once (the chart's uninstall), policies release one at a time, each through its keeper, so that
// the bound each one's plan checks holds for the cluster. One goes first while it releases its
// route reflectors other than its keeper (and, with the mesh off, until it turns the mesh back
// on), and one not started yet waits for those before it by name.
func (r *Reconciler) releaseTurn(pol *v1alpha1.RouteReflectorPolicy, started, mesh bool) string {
	for _, q := range r.Policies.List() {
		if q.Name == pol.Name || q.DeletionTimestamp == nil || !slices.Contains(q.Finalizers, Finalizer) {
			continue
		}
		qk := q.Annotations[AnnotationReleaseKeeper]
		if qk == "" {
			if !started && q.Name < pol.Name {
				return q.Name
			}
			continue
		}
		if !started && !mesh {
			return q.Name // it turns the mesh back on once only its keeper is left
		}
		rq, errs := r.Policies.Resolve(q)
		if len(errs) > 0 {
			continue
		}
		for _, n := range r.Nodes.List() {
			if n.Name == qk || !rq.NodeSelector.Matches(labels.Set(n.Labels)) {
				continue
			}
			if _, ok := policy.ParseClusterID(n.Annotations[extender.AnnotationClusterID]); ok {
				return q.Name
			}
		}
	}
	return ""
}

func (r *Reconciler) newReleaseSim(ctx context.Context, st *State) (*releaseplan.Sim, error) {
	all, err := r.peers().List(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("listing BGPPeers: %w", err)
	}
	return releaseplan.New(st.Managed.Resolved, st.Name, r.Nodes.List(), all), nil
}

// deleteReleaseBridge removes a release BGPPeer left by an earlier pass (none when missing).
func (r *Reconciler) deleteReleaseBridge(ctx context.Context, st *State) error {
	peers, err := r.livePeers(ctx, managedPeers(st.Name))
	if err != nil {
		return fmt.Errorf("listing BGPPeers: %w", err)
	}
	name := extender.ReleaseBGPPeer(st.Managed.Resolved, "").Name
	for _, p := range peers {
		if p.Name == name {
			if err := r.peers().Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting BGPPeer %s: %w", p.Name, err)
			}
			r.peerSynced(p.Name, nil)
		}
	}
	return nil
}
