package reconciler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
)

// Client moves, make-before-break.
//
// A client whose peering set changes (LabelPeeringSet) gets the sessions of its new set's BGPPeer
// in the same confd render that removes those of its old one, and BIRD applies both on one
// `configure`: the client has no session up until the new ones establish (1-4 s on the live lab),
// and when the new set's route reflectors were promoted in the same reconcile (a rack split) their
// own sessions and uplinks are not up either. So a move that removes sessions while the client
// keeps no settled route reflector (one that is Ready and whose sessions did not (re)start lately)
// goes in two writes. First the client is labelled with a transitional set
// (extender.TransitionalBGPPeer) whose BGPPeer selects its old route reflectors and one new one
// (the first Ready one in the plan's order): the write only adds a session (Calico renders one
// BIRD protocol per peer address, the same whichever BGPPeer selects it, so the client's old
// sessions do not change). Then, once that route reflector has settled, the client keeps a
// settled route reflector and moves to its planned set in one write, as any such client does: its
// routes stay with the kept one while its other sessions change. One new route reflector rather
// than all: a client peering with both whole sets holds every route from twice as many route
// reflectors (135 routes against 58 steady on the live lab's rack split, past twice). A route
// reflector has settled when settleWait (stages.go, the wait of the cluster-ID staging) lets its
// last change go: it was promoted, renumbered or added to clients by a transitional set at least
// idSettle before (handover BGPSessions: its CalicoNodeStatus, reported idSettleMin after, shows
// every client that lists it Established), at most idSettleMax. A transitional client's route
// reflectors annotation lists its planned route reflectors, then its old ones. A set's BGPPeer
// whose route reflectors change (extender.MakeBeforeBreak, peers.go) is narrowed by the same rule.
//
// The state a reconcile leaves is checked with the graph model against the writes as they were
// (the plan's patches, after the cluster-ID staging): when it misses more pairs, the writes go as
// they were. The transitional BGPPeers go with the prune step once no node carries their set. Each
// reconcile that moves clients to a transitional set says so in an Event (ClientMovesHeld);
// calico_rr_autoscaler_transition_held_client_moves counts the clients in one.
const EventClientMovesHeld = "ClientMovesHeld"

// maxTransitionalSets bounds the transitional BGPPeers one reconcile creates (a rack split needs
// one per new rack and zone; a MultiCluster rebalance may need one per moving client): the moves
// beyond go in one write, as before.
const maxTransitionalSets = 32

var transitionHeldMoves = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "calico_rr_autoscaler_transition_held_client_moves",
	Help: "Clients in a transitional peering set (their old route reflectors and one of their new ones), held there until the new one's BGP sessions have settled (make-before-break moves between peering sets).",
}, []string{"policy"})

// settleRec is a route reflector whose BGP sessions (re)started at `at`: promoted, renumbered, or
// given clients by a move; seen: a CalicoNodeStatus reported it idSettleMin after; up: that report
// showed every client that lists it Established.
type settleRec struct {
	at       time.Time
	seen, up bool
}

// settling records that the sessions of these route reflectors (re)start now: their clients are
// seen Established again before moves rely on them.
func (m *handoverMemo) settling(now time.Time, names ...string) {
	if m.settle == nil {
		m.settle = map[string]*settleRec{}
	}
	for _, n := range names {
		m.settle[n] = &settleRec{at: now}
	}
}

// rrWait is how long a move relying on route reflector rr must still wait for its sessions.
func rrWait(st *State, m *handoverMemo, rr string) time.Duration {
	rec := m.settle[rr]
	if rec == nil {
		return 0
	}
	return settleWait(st.Managed.Resolved.Handover, st.Now.Sub(rec.at), rec.up, rec.seen)
}

// waitFor records that a held change waits for route reflector rr's sessions.
func (st *State) waitFor(rr string) {
	if st.SettleWaits == nil {
		st.SettleWaits = map[string]bool{}
	}
	st.SettleWaits[rr] = true
}

// settleStale: the CalicoNodeStatus of a settling route reflector was reported too soon after its
// change to show the sessions that (re)started.
func settleStale(m *handoverMemo, rr string, cns *apiv3.CalicoNodeStatus) bool {
	rec := m.settle[rr]
	return rec != nil && cns.Status.LastUpdated.Time.Before(rec.at.Add(idSettleMin))
}

// settleSessions is called by the handover step with a fresh report of a settling route reflector.
func settleSessions(m *handoverMemo, rr string, missing int) {
	if rec := m.settle[rr]; rec != nil {
		rec.seen, rec.up = true, missing == 0
	}
}

// stageMoves makes the clients' moves between peering sets make-before-break (see above). It runs
// after stageClusterIDs, on the patches that reconcile writes.
func (r *Reconciler) stageMoves(ctx context.Context, st *State, phases *[3][]nodePatch) error {
	m := r.memo(st.Name)
	for n, rec := range m.settle {
		if st.View[n] == nil || st.Now.Sub(rec.at) >= idSettleMax {
			delete(m.settle, n)
		}
	}
	for _, ps := range phases {
		for _, np := range ps {
			if id := np.ann[extender.AnnotationClusterID]; id != nil {
				// Promoted or renumbered: every session of the node (re)starts.
				m.settling(st.Now, np.name)
				delete(m.verified, np.name)
			}
		}
	}
	defer func() { transitionHeldMoves.WithLabelValues(st.Name).Set(float64(inTransitionalSets(st, phases))) }()
	if len(st.View) > transitionMaxNodes {
		return nil
	}
	p := st.Managed.Resolved
	cur, planned := setIDs(st.Peers), map[string][]string{}
	for _, bp := range st.Result.BGPPeers {
		if key, set, ok := extender.SetLabelOf(bp.Name); ok && key == extender.LabelPeeringSet {
			if ids, ok := extender.PeerRouteReflectorIDs(bp.Spec.PeerSelector); ok {
				planned[set] = ids
			}
		}
	}
	rrOf := make(map[string]string, len(st.View)) // route reflector ID -> node
	for name := range st.View {
		rrOf[extender.RouteReflectorID(name)] = name
	}
	// A transitional set this leader did not write (a failover) was written at an unknown time:
	// its route reflectors are given their settle time from now.
	present := map[string]bool{}
	for _, n := range st.View {
		if set := n.Labels[extender.LabelPeeringSet]; extender.IsTransitionalSet(set) {
			present[set] = true
		}
	}
	if m.moveSets == nil {
		m.moveSets = map[string]bool{}
	}
	for set := range m.moveSets {
		if !present[set] {
			delete(m.moveSets, set)
		}
	}
	for _, set := range slices.Sorted(maps.Keys(present)) {
		if !m.moveSets[set] {
			m.moveSets[set] = true
			for _, id := range cur[set] {
				if rr := rrOf[id]; rr != "" && m.settle[rr] == nil {
					m.settling(st.Now, rr)
				}
			}
		}
	}
	next := [3][]nodePatch{phases[0], make([]nodePatch, 0, len(phases[1])), phases[2]}
	sets := map[string]extender.BGPPeer{}
	added := map[string][]string{} // client -> the route reflectors its transitional set adds
	var held []string
	for _, np := range phases[1] {
		to := np.lbl[extender.LabelPeeringSet]
		from := st.View[np.name].Labels[extender.LabelPeeringSet]
		old, ok := cur[from]
		want, ok2 := planned[deref(to)]
		if to == nil || *to == "" || from == "" || from == *to || !ok || !ok2 {
			next[1] = append(next[1], np)
			continue
		}
		if ids, ok := planned[from]; ok {
			old = union(old, ids) // the sessions of the set as it is and as the plan writes it
		}
		add, removed, kept := minus(want, old), minus(old, want), intersect(old, want)
		wait, waitOn := settlingWait(st, m, kept, rrOf)
		switch {
		case len(removed) == 0:
		case keepsSettled(st, m, kept, rrOf):
			// Its routes stay with a route reflector it keeps: one write, as before.
		case len(add) == 0 || wait > 0 && extender.IsTransitionalSet(from):
			// Only removes sessions, or its transitional set's new route reflector is settling: it
			// waits for the route reflectors it keeps.
			if wait > 0 {
				held = append(held, np.name)
				st.requeue(wait)
				for _, rr := range waitOn {
					st.waitFor(rr)
				}
				continue
			}
		default:
			// First the old route reflectors and one new one (the first Ready of the plan's): once
			// it has settled the client moves in one write, keeping it. One rather than all new
			// ones: a client peering with both sets would hold each route twice as often.
			first := add
			if k := slices.IndexFunc(add, func(id string) bool { return readyNode(st, rrOf[id]) }); k >= 0 {
				first = add[k : k+1]
			}
			tp := extender.TransitionalBGPPeer(p, union(old, first))
			if _, ok := sets[tp.Name]; !ok && len(sets) >= maxTransitionalSets {
				break
			}
			sets[tp.Name] = tp
			_, set, _ := extender.SetLabelOf(tp.Name)
			np = transitionalPatch(np, set, st.View[np.name], want, old, rrOf)
			for _, id := range first {
				added[np.name] = append(added[np.name], rrOf[id])
			}
		}
		next[1] = append(next[1], np)
	}
	if len(added)+len(held) == 0 {
		return nil
	}
	// The state this reconcile leaves must lose no pair the writes as they were keep (the
	// cluster's other nodes too, when the policy has top-level route reflectors).
	outside, all, err := r.stageOutside(ctx, st)
	if err != nil {
		return err
	}
	c := newModelView(st, outside, all)
	for _, name := range slices.Sorted(maps.Keys(sets)) {
		c.peers = append(c.peers, sets[name])
	}
	staged, err := c.missing(flatten(next))
	direct, err2 := c.missing(flatten(*phases))
	if err != nil || err2 != nil || staged > direct {
		r.Log.Info("client moves not staged: the graph model finds the staged state worse, or cannot read the cluster", "policy", st.Name,
			"staged", staged, "direct", direct, "error", fmt.Sprint(err, err2))
		return nil
	}
	if err := r.writeTransitionalPeers(ctx, st, sets); err != nil {
		return err
	}
	*phases = next
	for name := range sets {
		_, set, _ := extender.SetLabelOf(name)
		m.moveSets[set] = true
	}
	for client, rrs := range added {
		for _, rr := range rrs {
			if rr != "" {
				m.settling(st.Now, rr)
				delete(m.verified[rr], client)
			}
		}
	}
	if len(held) > 0 {
		r.Log.V(1).Info("client moves held until their new route reflectors have settled", "policy", st.Name,
			"clients", len(held), "waitingOn", slices.Sorted(maps.Keys(st.SettleWaits)), "reason", EventClientMovesHeld)
	}
	if len(added) > 0 {
		st.requeue(idSettleMin)
		moved := slices.Sorted(maps.Keys(added))
		r.Log.Info("clients move make-before-break", "policy", st.Name, "clients", len(moved), "sets", slices.Sorted(maps.Keys(sets)), "reason", EventClientMovesHeld)
		r.Recorder.Eventf(st.Policy, corev1.EventTypeNormal, EventClientMovesHeld,
			"%d clients move make-before-break (%s): they peer with their old route reflectors and one new one (%s) and leave the old ones once the new one's BGP sessions have settled",
			len(moved), joinCapped(moved, 5), joinCapped(peerSelections(sets), 3))
	}
	return nil
}

// transitionalPatch is np with the transitional set in place of the planned one and, as the
// route reflectors annotation, the planned route reflectors then the old ones that remain (the
// planner keeps a MultiCluster client's first ones: the planned).
func transitionalPatch(np nodePatch, set string, cur *corev1.Node, want, old []string, rrOf map[string]string) nodePatch {
	np.lbl, np.ann = maps.Clone(np.lbl), maps.Clone(np.ann)
	np.lbl[extender.LabelPeeringSet] = &set
	var names []string
	if v := np.ann[extender.AnnotationRouteReflectors]; v != nil && *v != "" {
		names = strings.Split(*v, ",")
	} else {
		for _, id := range want {
			names = append(names, rrOf[id])
		}
	}
	for _, n := range strings.Split(cur.Annotations[extender.AnnotationRouteReflectors], ",") {
		if n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for _, id := range old {
		if n := rrOf[id]; n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	joined := strings.Join(slices.DeleteFunc(names, func(s string) bool { return s == "" }), ",")
	np.ann[extender.AnnotationRouteReflectors] = &joined
	return np
}

// writeTransitionalPeers creates the transitional BGPPeers (or brings their settings up to date)
// before any node is labelled with their sets, and adds them to st.Peers (the prune step deletes
// them once no node carries their set).
func (r *Reconciler) writeTransitionalPeers(ctx context.Context, st *State, sets map[string]extender.BGPPeer) error {
	have := map[string]*apiv3.BGPPeer{}
	for _, p := range st.Peers {
		have[p.Name] = p
	}
	for _, name := range slices.Sorted(maps.Keys(sets)) {
		obj := calico.BGPPeer(r.PeerAPI, sets[name])
		if h := have[name]; h != nil {
			upd, changed := calico.NeedsUpdate(h, obj)
			if !changed {
				continue
			}
			if err := r.peers().Update(ctx, upd); err != nil {
				return fmt.Errorf("updating transitional BGPPeer %s: %w", name, err)
			}
			r.peerSynced(name, obj)
			peerWrites.WithLabelValues(st.Name, "update").Inc()
			continue
		}
		if err := r.peers().Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating transitional BGPPeer %s: %w", name, err)
		}
		r.peerSynced(name, obj)
		st.Peers = append(st.Peers, obj)
		peerWrites.WithLabelValues(st.Name, "create").Inc()
	}
	return nil
}

// setIDs maps each peering set whose BGPPeer selects route reflectors by ID to those IDs.
func setIDs(peers []*apiv3.BGPPeer) map[string][]string {
	out := map[string][]string{}
	for _, bp := range peers {
		if key, set, ok := extender.SetLabelOf(bp.Name); ok && key == extender.LabelPeeringSet {
			if ids, ok := extender.PeerRouteReflectorIDs(bp.Spec.PeerSelector); ok {
				out[set] = ids
			}
		}
	}
	return out
}

// inTransitionalSets counts the clients in a transitional set once the phases are written.
func inTransitionalSets(st *State, phases *[3][]nodePatch) int {
	set := map[string]bool{}
	for name, n := range st.View {
		if extender.IsTransitionalSet(n.Labels[extender.LabelPeeringSet]) {
			set[name] = true
		}
	}
	for _, ps := range phases {
		for _, np := range ps {
			if v, ok := np.lbl[extender.LabelPeeringSet]; ok {
				set[np.name] = extender.IsTransitionalSet(deref(v))
			}
		}
	}
	n := 0
	for _, in := range set {
		if in {
			n++
		}
	}
	return n
}

// peerSelections names each transitional set with the route reflectors it selects.
func peerSelections(sets map[string]extender.BGPPeer) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(sets)) {
		ids, _ := extender.PeerRouteReflectorIDs(sets[name].Spec.PeerSelector)
		out = append(out, strings.Join(ids, "+"))
	}
	return out
}

// keepsSettled: one of these route reflectors (a client keeps its session with them) is Ready and
// settled, so the client's routes stay with it while its other sessions change.
func keepsSettled(st *State, m *handoverMemo, kept []string, rrOf map[string]string) bool {
	for _, id := range kept {
		if rr := rrOf[id]; readyNode(st, rr) && rrWait(st, m, rr) == 0 {
			return true
		}
	}
	return false
}

// settlingWait is the longest wait (rrWait) of the Ready route reflectors among ids that have not
// settled yet, and those route reflectors.
func settlingWait(st *State, m *handoverMemo, ids []string, rrOf map[string]string) (w time.Duration, rrs []string) {
	for _, id := range ids {
		if rr := rrOf[id]; readyNode(st, rr) {
			if d := rrWait(st, m, rr); d > 0 {
				w = max(w, d)
				rrs = append(rrs, rr)
			}
		}
	}
	return w, rrs
}

// readyNode: the node is in the view and Ready.
func readyNode(st *State, name string) bool {
	n := st.View[name]
	return n != nil && extender.IsReady(n)
}

func intersect(a, b []string) []string {
	var out []string
	for _, s := range a {
		if slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

func flatten(phases [3][]nodePatch) []nodePatch {
	var out []nodePatch
	for _, ps := range phases {
		out = append(out, ps...)
	}
	return out
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// minus is a without the elements of b.
func minus(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
