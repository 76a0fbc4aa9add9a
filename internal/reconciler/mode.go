package reconciler

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// EventWouldChange is recorded, in Observe mode, for each change Enforce would make.
const EventWouldChange = "WouldChange"

// maxPendingChanges bounds status.pendingChanges.
const maxPendingChanges = 20

// enforcing runs a step that writes nodes, BGPPeers, CalicoNodeStatuses or the BGPConfiguration
// only when the policy is in Enforce mode: Observe and Paused write nothing but the status and
// Events.
func (r *Reconciler) enforcing(step func(context.Context, *State) error) func(context.Context, *State) error {
	return func(ctx context.Context, st *State) error {
		if st.Managed.Resolved == nil || st.Managed.Resolved.Mode != v1alpha1.Enforce {
			return nil
		}
		return step(ctx, st)
	}
}

// pending lists, in Observe and Paused mode, what Enforce would change now: promotions, demotions,
// handovers, cluster IDs, clients moved, BGPPeers. In Observe each new one is recorded as an Event
// on the policy ("would promote node-12 in zone-b").
func (r *Reconciler) pending(ctx context.Context, st *State) error {
	p := st.Managed.Resolved
	st.Pending = nil
	if p.Mode == v1alpha1.Enforce {
		return nil
	}
	rrs := map[string]extender.RouteReflector{}
	for _, rr := range st.Result.RouteReflectors {
		rrs[rr.Node] = rr
	}
	moves := 0
	for _, c := range ownedChanges(st) {
		want := c.want
		rr, wantRR := rrs[want.Name]
		switch changeKind(p, c.cur, want) {
		case KindPromoted:
			st.Pending = append(st.Pending, fmt.Sprintf("promote %s in zone %s (cluster ID %s)", want.Name, extender.ZoneName(rr.Zone), rr.ClusterID))
		case KindDemoted:
			st.Pending = append(st.Pending, "demote "+want.Name)
		case KindDraining:
			st.Pending = append(st.Pending, fmt.Sprintf("hand %s over (%s)", want.Name, roleLossReason(st, want.Name)))
		case KindClusterIDChanged:
			st.Pending = append(st.Pending, fmt.Sprintf("change the cluster ID of %s to %s", want.Name, rr.ClusterID))
		default:
			if !wantRR {
				moves++
			}
		}
	}
	if moves > 0 {
		st.Pending = append(st.Pending, fmt.Sprintf("move %d clients to their planned route reflectors", moves))
	}
	have := map[string]bool{}
	list, err := r.peers().List(ctx, managedPeers(st.Name))
	if err != nil {
		return err
	}
	for _, b := range list {
		have[b.Name] = true
	}
	creates := 0
	for _, b := range st.Result.BGPPeers {
		if !have[b.Name] {
			creates++
		}
	}
	if creates > 0 {
		st.Pending = append(st.Pending, fmt.Sprintf("create %d BGPPeers", creates))
	}
	if p.AdoptBGPPeers {
		names, err := r.adoptable(ctx, st)
		if err != nil {
			return err
		}
		for _, n := range names {
			st.Pending = append(st.Pending, "delete hand-written BGPPeer "+n+" once calico-rr-autoscaler's BGPPeers cover it (adoptBGPPeers)")
		}
	}
	if p.Mode == v1alpha1.Observe {
		m := r.memo(st.Name)
		for _, c := range st.Pending {
			if !slices.Contains(m.announced, c) {
				r.Recorder.Eventf(st.Policy, corev1.EventTypeNormal, EventWouldChange, "Observe: Enforce would %s", c)
			}
		}
		m.announced = slices.Clone(st.Pending)
	}
	return nil
}
