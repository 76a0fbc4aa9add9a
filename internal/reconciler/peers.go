package reconciler

import (
	"context"
	"slices"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// managedPeers selects the BGPPeers of a policy.
func managedPeers(policy string) map[string]string {
	return map[string]string{extender.LabelManagedBy: extender.ManagedByValue, extender.LabelPolicy: policy}
}

// applyPeers creates the plan's missing BGPPeers and updates those that differ (compared before
// any write), before any node is labelled with the peering set a BGPPeer selects. A managed
// BGPPeer changed or deleted by hand (past the guard, or in etcd, which nothing guards) is also
// reported (an Event on the policy naming what changed) as it is reverted.
func (r *Reconciler) applyPeers(ctx context.Context, st *State) error {
	list, err := r.peers().List(ctx, managedPeers(st.Name))
	if err != nil {
		return err
	}
	cur := map[string]*apiv3.BGPPeer{}
	for _, p := range list {
		st.Peers = append(st.Peers, p)
		cur[p.Name] = p
	}
	var labelled map[string]bool // the route reflector IDs the nodes carry, read when a set changes
	isLabelled := func(id string) bool {
		if labelled == nil {
			labelled = map[string]bool{}
			for _, n := range st.View {
				if id := n.Labels[extender.LabelRouteReflectorID]; id != "" {
					labelled[id] = true
				}
			}
		}
		return labelled[id]
	}
	for _, want := range st.Result.BGPPeers {
		have, ok := cur[want.Name]
		if ok && have.Spec.PeerSelector != want.Spec.PeerSelector {
			var wait bool
			if want, wait = extender.MakeBeforeBreak(want, have.Spec.PeerSelector, r.readyForBreak(st, have, want, isLabelled)); wait {
				st.requeue(handoverRetry) // narrowed once the new route reflectors are labelled and settled
			}
		}
		if err := r.writePeer(ctx, st, have, calico.BGPPeer(r.PeerAPI, want)); err != nil {
			if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
				st.requeue(handoverRetry) // the cache is behind: compare on the next pass
				continue
			}
			return err
		}
	}
	return nil
}

// writePeer creates obj (have nil) or brings have up to it, and records it as this reconciler's
// (peerSynced); a hand change or deletion it reverts is reported (reportPeerDrift). The plan's
// BGPPeers (applyPeers) and the transitional sets' (writeTransitionalPeers) are written by it.
func (r *Reconciler) writePeer(ctx context.Context, st *State, have, obj *apiv3.BGPPeer) error {
	write, verb := func() error { return r.peers().Create(ctx, obj) }, "create"
	if have != nil {
		upd, changed := calico.NeedsUpdate(have, obj)
		if !changed {
			r.peerSynced(obj.Name, obj)
			return nil
		}
		write, verb = func() error { return r.peers().Update(ctx, upd) }, "update"
	}
	drift := r.peerDrift(have, obj)
	if err := write(); err != nil {
		return err
	}
	r.peerSynced(obj.Name, obj)
	r.reportPeerDrift(st, drift)
	peerWrites.WithLabelValues(st.Name, verb).Inc()
	return nil
}

func (r *Reconciler) reportPeerDrift(st *State, msg string) {
	if msg == "" || st.Policy == nil {
		return
	}
	driftReverted.WithLabelValues(st.Name, "BGPPeer").Inc()
	r.Recorder.Event(st.Policy, corev1.EventTypeWarning, EventDriftReverted, msg)
}

// prunePeers deletes the policy's managed BGPPeers the plan no longer has, once no node is
// labelled with the peering set they select.
func (r *Reconciler) prunePeers(ctx context.Context, st *State) error {
	want := map[string]bool{}
	for _, p := range st.Result.BGPPeers {
		want[p.Name] = true
	}
	var inUse map[[2]string]bool // the (set label, set) nodes still carry, read only when a BGPPeer is obsolete
	for _, p := range st.Peers {
		if want[p.Name] {
			continue
		}
		if inUse == nil {
			inUse = map[[2]string]bool{}
			for _, n := range st.View {
				for _, k := range [...]string{extender.LabelPeeringSet, extender.LabelUplinkSet} {
					if s := n.Labels[k]; s != "" {
						inUse[[2]string{k, s}] = true
					}
				}
			}
		}
		if key, set, ok := extender.SetLabelOf(p.Name); ok && inUse[[2]string{key, set}] {
			st.requeue(handoverRetry)
			continue
		}
		if err := r.peers().Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
			if apierrors.IsConflict(err) {
				st.requeue(handoverRetry)
				continue
			}
			return err
		}
		r.peerSynced(p.Name, nil)
		peerWrites.WithLabelValues(st.Name, "delete").Inc()
	}
	return nil
}

// readyForBreak is the test extender.MakeBeforeBreak narrows a set's BGPPeer with: a route
// reflector is ready once labelled, and a new one of the set also settled (moves.go) with every
// node of the set up with it (membersUp), unless the set keeps such a one, with which its nodes'
// routes stay meanwhile. A new one in the union the previous reconcile wrote is no such keeper
// until then. A route reflector this plan promotes or renumbers (written by the nodes step,
// after this one) has not settled. An old one whose sessions are down stays until the restart
// time since (staleHold), whatever the set keeps.
func (r *Reconciler) readyForBreak(st *State, have *apiv3.BGPPeer, want extender.BGPPeer, labelled func(string) bool) func(string) bool {
	old, ok := extender.PeerRouteReflectorIDs(have.Spec.PeerSelector)
	ids, ok2 := extender.PeerRouteReflectorIDs(want.Spec.PeerSelector)
	if !ok || !ok2 {
		return labelled
	}
	planned := map[string]string{}
	for _, rr := range st.Result.RouteReflectors {
		planned[rr.Node] = rr.ClusterID
	}
	byID := map[string]string{}
	for name := range st.View {
		byID[extender.RouteReflectorID(name)] = name
	}
	settled := func(rr string) bool {
		n := st.View[rr]
		// A route reflector whose CalicoNodeStatus BGP health reads is settled only once a session
		// of its role was seen Established (or transitions.DefaultMax passed): on the live lab a
		// rack's two replacements' sessions came up 17-20 s after their promotion, past
		// transitions.DefaultSettle.
		// A route reflector BGP health sees down is not settled: a set is never narrowed to its
		// dead route reflectors (as a leader that had lost BGP health's judgement did).
		return settled(st, rr) && n.Annotations[extender.AnnotationClusterID] == planned[rr] &&
			!(st.healthReported(rr) && justStarted(st, rr)) && !st.health[rr].Suspect()
	}
	_, hold := staleHolds(st, minus(old, ids), byID) // old ones the plan drops whose stale routes its members' BIRDs hold
	for _, id := range intersect(old, ids) {
		if rr := byID[id]; hold == 0 && settled(rr) && membersUp(st, rr, want.Name) {
			return labelled
		}
	}
	return func(id string) bool {
		if !labelled(id) {
			return false
		}
		// An old one the plan drops is kept while labelled; one the plan keeps or adds is ready
		// once settled, and once no old one the plan drops holds stale routes (staleHold). A new
		// one is in have's selector too once the union was written (the reconcile after the
		// promotion): counting it ready for that broke the union before its sessions were up, and with every old one failed (a rack's two route reflectors killed
		// together) the clients dropped the sessions whose stale routes graceful restart held
		// (issue 52 item 4, 0.9 s after the plan on the live lab).
		rr := byID[id]
		if slices.Contains(old, id) && !slices.Contains(ids, id) || rr == "" {
			return true
		}
		if hold > 0 {
			st.requeue(hold + 100*time.Millisecond)
			return false
		}
		if settled(rr) && membersUp(st, rr, want.Name) {
			return true
		}
		st.waitFor(rr)
		return false
	}
}

// staleHold is how much longer an old route reflector rr whose BGP sessions are down while every
// other route reflector of a client of it is down too (BGP health's BGPDown record, persisted so
// that a new leader holds it too: down, not back, Orphaning) stays in a set the plan narrows:
// until the graceful-restart time (bgpPeer.maxRestartTime, BIRD's 120 s) has passed since it was
// first seen down. Until then
// those clients' BIRDs hold the routes they learnt over it as stale, their only ones until the
// replacements' sessions carry theirs, and BIRD flushes a removed protocol's routes at once, so
// narrowing it away gains nothing and risks every route a new route reflector's sessions do not
// carry yet (a client that keeps a live route reflector has its routes from it: no hold): on two
// busy cores (TestTwoRouteReflectorsKilledOnRealBIRD, 2026-12-02) a rack's set narrowed 11 s
// after its two replacements' promotion on a report that showed their clients' sessions Established, the
// sessions restarted, and 28 to 1,472 pair-samples were lost between nodes that keep their role.
// Once the restart time has passed, BIRD has dropped the stale routes itself. The hold never
// outlasts the policy's removalDelay from the drain (the draining-since annotation): a policy
// whose removalDelay is shorter than the restart time asked for the node to go sooner.
func staleHold(st *State, rr string) time.Duration {
	rec := st.trans.Get(transitions.BGPDown, rr)
	if rec == nil || !rec.UpSince.IsZero() || len(rec.Orphaning) == 0 {
		return 0
	}
	until := rec.Started.Add(rec.Max)
	if n := st.View[rr]; n != nil {
		delay := st.Managed.Resolved.RemovalDelay
		if since, err := time.Parse(time.RFC3339, n.Annotations[extender.AnnotationDrainingSince]); err == nil && since.Add(delay).Before(until) {
			until = since.Add(delay)
		}
	}
	return until.Sub(st.Now)
}

// staleHolds are those of ids (route reflector IDs; node names by byID) that staleHold keeps, and
// the longest hold among them.
func staleHolds(st *State, ids []string, byID map[string]string) (held []string, longest time.Duration) {
	for _, id := range ids {
		if d := staleHold(st, byID[id]); d > 0 {
			held, longest = append(held, id), max(longest, d)
		}
	}
	return held, longest
}

// bgpRestartTime is BIRD's graceful-restart time when bgpPeer.maxRestartTime is not set
// (Calico's default too).
const bgpRestartTime = 120 * time.Second

// restartTime is the policy's graceful-restart time (bgpPeer.maxRestartTime, or BIRD's).
func restartTime(p *policy.Resolved) time.Duration {
	if d := p.BGPPeer.MaxRestartTime; d != nil {
		return d.Duration
	}
	return bgpRestartTime
}

// membersUp: every Ready node of the set BGPPeer name selects has an Established session with
// route reflector rr in rr's CalicoNodeStatus (BGP health's), read by the session verifier's rule
// (fresh for each of rr's records: transitions.Table.Stale; missingPeers); or rr's BGP health is
// not reported, or its newest record's Max has passed. The narrowing drops the set's old route reflectors, and with a failed one the stale
// routes BIRD's graceful restart holds from it; BGP health's sign that rr's role came up (one
// session, Record.Alive) does not say that every node of the set reaches it. On two busy cores
// (CI, 2026-12-02, TestTwoRouteReflectorsKilledOnRealBIRD) a rack's set narrowed 11 s after the
// replacements' promotion, its clients' sessions to them came up 9 s later, and 293 pair-samples
// were lost between nodes that keep their role.
func membersUp(st *State, rr, name string) bool {
	rec, cns := st.trans.Newest(rr), st.healthReports[rr]
	key, set, ok := extender.SetLabelOf(name)
	if !ok || rec == nil || cns == nil || cns.Status.LastUpdated.IsZero() || st.Now.Sub(rec.Started) >= rec.Max {
		return true
	}
	if st.trans.Stale(rr, cns.Status.LastUpdated.Time) {
		return false // the verifier's freshness rule
	}
	var members []string
	for n, node := range st.View {
		if n != rr && node.Labels[key] == set && extender.IsReady(node) {
			members = append(members, n)
		}
	}
	return len(missingPeers(st.trans, rr, members, cns, st.View, st.healthIPs)) == 0
}
