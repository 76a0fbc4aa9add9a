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
	kptr "k8s.io/utils/ptr"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
)

// Moves between sets of route reflectors, make-before-break.
//
// A client whose peering set changes (LabelPeeringSet) gets the sessions of its new set's BGPPeer
// in the same confd render that removes those of its old one, and BIRD applies both on one
// `configure`: the client has no session up until the new ones establish (1-4 s on the live lab),
// and when the new set's route reflectors were promoted in the same reconcile (a rack split) their
// own sessions and uplinks are not up either. So a move that removes sessions while the client
// keeps no settled route reflector (one that is Ready and whose sessions did not (re)start lately)
// goes in steps. First the client is labelled with a transitional set
// (extender.TransitionalBGPPeer) whose BGPPeer selects its old route reflectors and one new one
// (the first Ready one in the plan's order): the write only adds a session (Calico renders one BIRD
// protocol per peer address, the same whichever BGPPeer selects it, so the client's old sessions do
// not change). Then, once that route reflector has settled, the next new one takes the place of the
// old one of its plane (AnnotationPlane; outside DualPlane, of the first old one) in another
// transitional set, and so on; the client leaves its last old ones for its planned set only once
// every new route reflector is in its set and has settled. So on every plane it keeps a settled
// session while the other comes up: moving to the planned set as soon as the first new one had
// settled left the other plane on a session still establishing (on the live rack split the clients'
// plane-2 sessions, and their pairs lost for seconds: 0 to 4,970 pair-samples in six runs). One new
// route reflector at a time rather than all: a client peering with both whole sets holds every
// route from twice as many route reflectors (135 routes against 58 steady on the live lab's rack
// split, past twice). A client that keeps a settled route reflector of its old set moves in one
// write: its routes stay with the kept one while its other sessions change. A route reflector has
// settled when its records (internal/transitions, Table.Wait) let its last change go: it was
// promoted, renumbered or added to clients by a transitional set at least transitions.DefaultSettle
// before (handover BGPSessions: its CalicoNodeStatus, reported transitions.DefaultMin after, shows
// every client that lists it Established), at most transitions.DefaultMax. A transitional client's
// route reflectors annotation lists its planned route reflectors, then the old ones its set still
// has. A set's BGPPeer whose route reflectors change (extender.MakeBeforeBreak, peers.go) is
// narrowed by the same rule.
//
// A DualPlane rack route reflector's uplink set (LabelUplinkSet: its plane's spine members) moves
// the same way when the plan gives its plane another spine member (a member relabelled, cordoned
// or replaced): Calico would drop its session to the old member and open one to the new, often
// promoted or renumbered in that very reconcile, in one render, and the rack route reflector would
// lack every other rack's routes until it establishes (its rack mate's are no help: they carry its
// own cluster ID). So it first peers with its old spine members and one new one (a transitional
// uplink set, up-move.<hash>), then with the planned set once the new member has settled (with
// BGPSessions: its CalicoNodeStatus shows every rack route reflector whose uplink set selects it
// Established). A spine member stays a route reflector while an uplink set a node carries selects
// it (demote, uplinkHolds). A rack route reflector whose own cluster ID changes restarts every
// session anyway and moves in one write.
//
// The state a reconcile leaves is checked with the graph model against the writes as they were
// (the plan's patches, after the cluster-ID staging): when it misses more pairs, the writes go as
// they were. The transitional BGPPeers go with the prune step once no node carries their set. Each
// reconcile that moves clients to a transitional set says so in an Event (ClientMovesHeld; rack
// route reflectors' uplinks: UplinkMovesHeld); calico_rr_autoscaler_transition_held_client_moves
// and calico_rr_autoscaler_transition_held_uplink_moves count the nodes in one.
const (
	EventClientMovesHeld = "ClientMovesHeld"
	EventUplinkMovesHeld = "UplinkMovesHeld"
)

// maxTransitionalSets bounds the transitional BGPPeers one reconcile creates (a rack split needs
// one per new rack and zone; a MultiCluster rebalance may need one per moving client): the moves
// beyond go in one write, as before.
const maxTransitionalSets = 32

var (
	transitionHeldMoves = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "calico_rr_autoscaler_transition_held_client_moves",
		Help: "Clients in a transitional peering set (their old route reflectors and one of their new ones), held there until the new one's BGP sessions have settled (make-before-break moves between peering sets).",
	}, []string{"policy"})
	transitionHeldUplinks = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "calico_rr_autoscaler_transition_held_uplink_moves",
		Help: "DualPlane rack route reflectors in a transitional uplink set (their old spine members and one of their new ones), held there until the new one's BGP sessions have settled (make-before-break moves between uplink sets).",
	}, []string{"policy"})
)

// setKind is a node label naming the set of route reflectors a node peers with, whose changes
// stageMoves makes make-before-break.
type setKind struct {
	label string // extender.LabelPeeringSet, extender.LabelUplinkSet
	phase int    // patchNodes' phase of the nodes that carry it
	event string // the Event of a reconcile that moves nodes to a transitional set
	nodes string // what the moving nodes are, and what their route reflectors are (Events)
	rrs   string
	held  *prometheus.GaugeVec
	kind  transitions.Kind // the record a move gives the route reflectors it adds
}

var setKinds = [...]setKind{
	{label: extender.LabelPeeringSet, phase: 1, event: EventClientMovesHeld, nodes: "clients", rrs: "route reflectors", held: transitionHeldMoves, kind: transitions.ClientMove},
	{label: extender.LabelUplinkSet, phase: 0, event: EventUplinkMovesHeld, nodes: "rack route reflectors", rrs: "spine members", held: transitionHeldUplinks, kind: transitions.UplinkMove},
}

// settled: route reflector rr is Ready and its records (transitions.Table.Wait) let a move relying
// on its sessions go.
func settled(st *State, rr string) bool {
	return readyNode(st, rr) && st.trans.Wait(rr, st.Now, sessionWaits(st)) == 0
}

// settlingWait is the longest wait (transitions.Table.Wait) of the Ready route reflectors among rrs
// that have not settled yet, and those route reflectors.
func settlingWait(st *State, rrs []string) (w time.Duration, waiting []string) {
	for _, rr := range rrs {
		if d := st.trans.Wait(rr, st.Now, sessionWaits(st)); readyNode(st, rr) && d > 0 {
			w = max(w, d)
			waiting = append(waiting, rr)
		}
	}
	return w, waiting
}

// waitFor records that a held change waits for these route reflectors' sessions.
func (st *State) waitFor(rrs ...string) {
	if st.SettleWaits == nil {
		st.SettleWaits = map[string]bool{}
	}
	for _, rr := range rrs {
		st.SettleWaits[rr] = true
	}
}

// stageMoves makes the moves between peering sets and between uplink sets make-before-break (see
// above). It runs after stageClusterIDs, on the patches that reconcile writes.
func (r *Reconciler) stageMoves(ctx context.Context, st *State, phases *[3][]nodePatch) error {
	m := r.memo(st.Name)
	idNow := map[string]int{} // the nodes this reconcile promotes or renumbers -> the phase that writes it
	for _, ps := range phases {
		for _, np := range ps {
			if id := np.ann[extender.AnnotationClusterID]; id != nil {
				// Promoted or renumbered: every session of the node (re)starts.
				st.trans.Start(transitions.SessionsRestart, st.Now, np.name)
				idNow[np.name] = np.phase
			}
		}
	}
	defer func() {
		for _, k := range setKinds {
			k.held.WithLabelValues(st.Name).Set(float64(inTransitionalSets(st, phases, k.label)))
		}
	}()
	if len(st.View) > transitionMaxNodes {
		return nil
	}
	rrOf := make(map[string]string, len(st.View)) // route reflector ID -> node
	for name := range st.View {
		rrOf[extender.RouteReflectorID(name)] = name
	}
	r.adoptTransitionalSets(st, m, rrOf)
	next := *phases
	sets := map[string]extender.BGPPeer{}
	var added [len(setKinds)]map[string][]string // per kind: node -> the route reflectors its transitional set adds
	var held [len(setKinds)][]string
	moves := 0
	for ki, k := range setKinds {
		next[k.phase], added[ki], held[ki] = stageSetMoves(st, k, phases[k.phase], sets, rrOf, idNow)
		moves += len(added[ki]) + len(held[ki])
	}
	if moves == 0 {
		return nil
	}
	// The state this reconcile leaves must lose no pair the writes as they were keep (the
	// cluster's other nodes too, when the policy has top-level route reflectors).
	outside, all, err := r.stageOutside(ctx, st)
	if err != nil {
		r.Log.Info("moves not staged: cannot read the cluster's BGPPeers", "policy", st.Name, "error", err.Error())
		return nil
	}
	c := newModelView(st, outside, all)
	for _, name := range slices.Sorted(maps.Keys(sets)) {
		c.peers = append(c.peers, sets[name])
	}
	staged, err := c.missing(slices.Concat(next[:]...))
	direct, err2 := c.missing(slices.Concat(phases[:]...))
	if err != nil || err2 != nil || staged > direct {
		r.Log.Info("moves between sets not staged: the graph model finds the staged state worse, or cannot read the cluster", "policy", st.Name,
			"staged", staged, "direct", direct, "error", fmt.Sprint(err, err2))
		return nil
	}
	if err := r.writeTransitionalPeers(ctx, st, sets); err != nil {
		return err
	}
	*phases = next
	for name := range sets {
		m.moveSets[name] = true
	}
	for ki, k := range setKinds {
		for _, rrs := range added[ki] {
			for _, rr := range rrs {
				if rr != "" {
					st.trans.Start(k.kind, st.Now, rr)
				}
			}
		}
		if len(held[ki]) > 0 {
			r.Log.V(1).Info("moves held until their new route reflectors have settled", "policy", st.Name,
				k.nodes, len(held[ki]), "waitingOn", slices.Sorted(maps.Keys(st.SettleWaits)), "reason", k.event)
		}
		if len(added[ki]) == 0 {
			continue
		}
		st.requeue(transitions.DefaultMin)
		moved := slices.Sorted(maps.Keys(added[ki]))
		var via []string
		for _, name := range slices.Sorted(maps.Keys(sets)) {
			if key, _, _ := extender.SetLabelOf(name); key == k.label {
				via = append(via, peerSelection(sets[name]))
			}
		}
		r.Log.Info("nodes move make-before-break", "policy", st.Name, k.nodes, len(moved), "sets", via, "reason", k.event)
		r.Recorder.Eventf(st.Policy, corev1.EventTypeNormal, k.event,
			"%d %s move make-before-break (%s): they peer with their old %s and one new one (%s), an old one leaving as the new one of its plane has settled, the last once every new one's BGP sessions have",
			len(moved), k.nodes, joinCapped(moved, 5), k.rrs, joinCapped(via, 3))
	}
	return nil
}

// adoptTransitionalSets: a transitional set this leader did not write (a failover) was written at
// an unknown time: its route reflectors are given their settle time from now. moveSets are the
// BGPPeers of the transitional sets some node carries.
func (r *Reconciler) adoptTransitionalSets(st *State, m *handoverMemo, rrOf map[string]string) {
	present := map[string]bool{}
	for _, n := range st.View {
		for _, k := range setKinds {
			if set := n.Labels[k.label]; extender.IsTransitionalSet(set) {
				present[extender.SetBGPPeerName(k.label, set)] = true
			}
		}
	}
	for name := range m.moveSets {
		if !present[name] {
			delete(m.moveSets, name)
		}
	}
	var cur map[string][]string
	for _, name := range slices.Sorted(maps.Keys(present)) {
		if m.moveSets[name] {
			continue
		}
		m.moveSets[name] = true
		if cur == nil {
			cur = peerIDs(st.Peers)
		}
		for _, id := range cur[name] {
			if rr := rrOf[id]; rr != "" && !st.trans.Has(rr) {
				st.trans.Start(transitions.SetInherited, st.Now, rr)
			}
		}
	}
}

// stageSetMoves stages the moves of one kind of set among the patches of its phase (see above):
// it returns the patches to write, the nodes moved to a transitional set with the route
// reflectors that set adds, and the nodes whose move waits (their patch held). The transitional
// BGPPeers are added to sets. idNow are the nodes whose cluster ID this reconcile writes, with
// the phase that writes it.
//
// A transitional set adds a new route reflector only once its cluster ID is written: the patches
// of one phase go in parallel, so a rack route reflector's transitional uplink set written beside
// the new spine member's renumbering (a rack route reflector of another rack until then) could be
// rendered first, and the member would reflect between racks that are not its own with its old
// rack's cluster ID (on the live spine relabel: clients of its old rack lost other racks for
// seconds). Such a move waits for the next reconcile. A client's new route reflector is written
// in an earlier phase, before the client.
func stageSetMoves(st *State, k setKind, patches []nodePatch, sets map[string]extender.BGPPeer,
	rrOf map[string]string, idNow map[string]int) (next []nodePatch, added map[string][]string, held []string) {
	p := st.Managed.Resolved
	cur, planned := setIDs(st.Peers, k.label), map[string][]string{}
	for _, bp := range st.Result.BGPPeers {
		if key, set, ok := extender.SetLabelOf(bp.Name); ok && key == k.label {
			if ids, ok := extender.PeerRouteReflectorIDs(bp.Spec.PeerSelector); ok {
				planned[set] = ids
			}
		}
	}
	next = make([]nodePatch, 0, len(patches))
	added = map[string][]string{}
	for _, np := range patches {
		to := np.lbl[k.label]
		from := st.View[np.name].Labels[k.label]
		old, ok := cur[from]
		want, ok2 := planned[kptr.Deref(to, "")]
		if to == nil || *to == "" || from == "" || from == *to || !ok || !ok2 || np.ann[extender.AnnotationClusterID] != nil {
			// No move, or the node's own cluster ID changes: every session it has restarts anyway.
			next = append(next, np)
			continue
		}
		if ids, ok := planned[from]; ok {
			old = union(old, ids) // the sessions of the set as it is and as the plan writes it
		}
		add, removed, kept := minus(want, old), minus(old, want), intersect(old, want)
		var keptRRs []string
		for _, id := range kept {
			keptRRs = append(keptRRs, rrOf[id])
		}
		wait, waitOn := settlingWait(st, keptRRs)
		// keeps: a route reflector it keeps is settled, so its routes stay with it while its other
		// sessions change.
		keeps := slices.ContainsFunc(keptRRs, func(rr string) bool { return settled(st, rr) })
		transitional := extender.IsTransitionalSet(from)
		// stale: the old route reflectors it leaves whose sessions are down, within the restart time
		// since (staleHold): they stay until it passes, as in a narrowed set (peers.go), so a move
		// that would drop one goes through transitional sets that keep it.
		stale, hold := staleHolds(st, removed, rrOf)
		keeps = keeps && (transitional || hold == 0)
		switch {
		case len(removed) == 0:
		case transitional && wait > 0:
			// A new route reflector of its transitional set is settling: it keeps its old ones
			// until every new one it has is settled.
			held = append(held, np.name)
			st.requeue(wait)
			st.waitFor(waitOn...)
			continue
		case transitional && len(add) > 0 && keeps:
			// Its new route reflectors so far have settled: the next new one takes the place of
			// the old one of a settled one's plane, whose other old ones stay until the new one of
			// their plane has settled too. Leaving every old one now would leave a plane on a
			// session still establishing (on the live rack split: the client's plane-2 session,
			// its only one on that plane, was not up, and its pairs went for seconds).
			next := nextWritten(st, k, add, rrOf, idNow)
			if next == "" {
				held = append(held, np.name)
				st.requeue(transitions.DefaultMin)
				continue
			}
			ids := union(minus(old, minus(replaced(st, removed, kept, rrOf), stale)), []string{next})
			tp := extender.TransitionalBGPPeer(p, k.label, ids)
			if _, ok := sets[tp.Name]; !ok && len(sets) >= maxTransitionalSets {
				held = append(held, np.name) // in its transitional set until the next reconcile
				st.requeue(transitions.DefaultMin)
				continue
			}
			sets[tp.Name] = tp
			_, set, _ := extender.SetLabelOf(tp.Name)
			np = transitionalPatch(np, k.label, set, st.View[np.name], want, intersect(old, ids), minus(old, ids), rrOf)
			added[np.name] = append(added[np.name], rrOf[next])
		case hold > 0 && len(add) == 0:
			held = append(held, np.name) // leaves its down old ones once their restart time has passed
			st.requeue(hold + 100*time.Millisecond)
			continue
		case transitional && len(add) == 0:
			// Every new route reflector is in its transitional set and has settled (or none is
			// Ready): it leaves the old ones.
		case keeps:
			// Its routes stay with a route reflector it keeps: one write, as before.
		case len(add) == 0:
			// Only removes sessions: it waits for the route reflectors it keeps.
			if wait > 0 {
				held = append(held, np.name)
				st.requeue(wait)
				st.waitFor(waitOn...)
				continue
			}
		default:
			// First the old route reflectors and one new one (the first Ready of the plan's whose
			// cluster ID is written): once it has settled the node moves in one write, keeping it.
			// One rather than all new ones: a client peering with both sets would hold each route
			// twice as often.
			first := nextWritten(st, k, add, rrOf, idNow)
			if first == "" {
				held = append(held, np.name)
				st.requeue(transitions.DefaultMin)
				continue
			}
			tp := extender.TransitionalBGPPeer(p, k.label, union(old, []string{first}))
			if _, ok := sets[tp.Name]; !ok && len(sets) >= maxTransitionalSets {
				break
			}
			sets[tp.Name] = tp
			_, set, _ := extender.SetLabelOf(tp.Name)
			np = transitionalPatch(np, k.label, set, st.View[np.name], want, old, nil, rrOf)
			added[np.name] = append(added[np.name], rrOf[first])
		}
		next = append(next, np)
	}
	return next, added, held
}

// nextWritten is the new route reflector a transitional set adds next, of add (in the plan's
// order): the first Ready one whose cluster ID is written (not by this reconcile in a phase that
// goes with or after the set's nodes), else the first whose ID is written; "" when none is.
func nextWritten(st *State, k setKind, add []string, rrOf map[string]string, idNow map[string]int) string {
	written := slices.DeleteFunc(slices.Clone(add), func(id string) bool {
		p, now := idNow[rrOf[id]]
		return now && p >= k.phase
	})
	if len(written) == 0 {
		return ""
	}
	if i := slices.IndexFunc(written, func(id string) bool { return readyNode(st, rrOf[id]) }); i >= 0 {
		return written[i]
	}
	return written[0]
}

// replaced names the old route reflectors (of removed) a transitional set leaves as it adds its
// next new one: the first of each plane (AnnotationPlane; "" outside DualPlane) on which one of the
// new ones it keeps is Ready and settled; the old ones of the other planes stay. When no old one
// shares such a plane (the old set had no planes), the first old one goes: the set never grows
// past the old route reflectors and one new one.
func replaced(st *State, removed, kept []string, rrOf map[string]string) []string {
	covered := map[string]bool{}
	for _, id := range kept {
		if rr := rrOf[id]; settled(st, rr) {
			covered[planeOf(st, rr)] = true
		}
	}
	var out []string
	for _, id := range removed {
		if pl := planeOf(st, rrOf[id]); covered[pl] {
			out = append(out, id)
			delete(covered, pl)
		}
	}
	if len(out) == 0 && len(covered) > 0 && len(removed) > 0 {
		out = removed[:1]
	}
	return out
}

// planeOf is a DualPlane route reflector's plane as labelled now ("" for any other node).
func planeOf(st *State, rr string) string {
	if n := st.View[rr]; n != nil {
		return n.Annotations[extender.AnnotationPlane]
	}
	return ""
}

// transitionalPatch is np with the transitional set in place of the planned one (of the label
// key) and, for a client's peering set, as the route reflectors annotation, the planned route
// reflectors then the old ones that remain (the planner keeps a MultiCluster client's first ones:
// the planned); left are the old ones the set no longer selects.
func transitionalPatch(np nodePatch, key, set string, cur *extender.Node, want, old, left []string, rrOf map[string]string) nodePatch {
	np.lbl, np.ann = maps.Clone(np.lbl), maps.Clone(np.ann)
	np.lbl[key] = &set
	if key != extender.LabelPeeringSet {
		return np
	}
	var names []string
	if v := np.ann[extender.AnnotationRouteReflectors]; v != nil && *v != "" {
		names = strings.Split(*v, ",")
	} else {
		for _, id := range want {
			names = append(names, rrOf[id])
		}
	}
	for _, n := range strings.Split(cur.Annotations[extender.AnnotationRouteReflectors], ",") {
		if n != "" && !slices.Contains(names, n) && !slices.Contains(left, extender.RouteReflectorID(n)) {
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
		if err := r.writePeer(ctx, st, have[name], obj); err != nil && (have[name] != nil || !apierrors.IsAlreadyExists(err)) {
			return fmt.Errorf("writing transitional BGPPeer %s: %w", name, err)
		}
		if have[name] == nil {
			st.Peers = append(st.Peers, obj)
		}
	}
	return nil
}

// setIDs maps each set of the label key (LabelPeeringSet, LabelUplinkSet) whose BGPPeer selects
// route reflectors by ID to those IDs.
func setIDs(peers []*apiv3.BGPPeer, label string) map[string][]string {
	out := map[string][]string{}
	for _, bp := range peers {
		if key, set, ok := extender.SetLabelOf(bp.Name); ok && key == label {
			if ids, ok := extender.PeerRouteReflectorIDs(bp.Spec.PeerSelector); ok {
				out[set] = ids
			}
		}
	}
	return out
}

// uplinkHolders names the nodes of the view (sorted) whose uplink set, as labelled now, selects
// route reflector rr: the rack route reflectors it is a spine member for. rr stays a route
// reflector while any does (demote), and its sessions to them are what a move to it waits for
// (handover BGPSessions).
func uplinkHolders(st *State, rr string) []string {
	id := extender.RouteReflectorID(rr)
	var ids map[string][]string
	var out []string
	for name, n := range st.View {
		set := n.Labels[extender.LabelUplinkSet]
		if set == "" || name == rr {
			continue
		}
		if ids == nil {
			ids = setIDs(st.Peers, extender.LabelUplinkSet)
		}
		if slices.Contains(ids[set], id) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// uplinkPeers are uplinkHolders(rr) that are Ready and not being deleted: the sessions a move to
// spine member rr, and the mesh, wait for.
func uplinkPeers(st *State, rr string) []string {
	return slices.DeleteFunc(uplinkHolders(st, rr), func(c string) bool { return !readyNode(st, c) || st.View[c].DeletionTimestamp != nil })
}

// peerIDs maps the name of each BGPPeer that selects route reflectors by ID to those IDs.
func peerIDs(peers []*apiv3.BGPPeer) map[string][]string {
	out := map[string][]string{}
	for _, bp := range peers {
		if ids, ok := extender.PeerRouteReflectorIDs(bp.Spec.PeerSelector); ok {
			out[bp.Name] = ids
		}
	}
	return out
}

// inTransitionalSets counts the nodes in a transitional set of the label key once the phases are
// written.
func inTransitionalSets(st *State, phases *[3][]nodePatch, label string) int {
	set := map[string]bool{}
	for _, name := range st.transitionalSet(label) {
		set[name] = true
	}
	for _, ps := range phases {
		for _, np := range ps {
			if v, ok := np.lbl[label]; ok {
				set[np.name] = extender.IsTransitionalSet(kptr.Deref(v, ""))
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

// peerSelection names a transitional set with the route reflectors it selects.
func peerSelection(bp extender.BGPPeer) string {
	ids, _ := extender.PeerRouteReflectorIDs(bp.Spec.PeerSelector)
	return strings.Join(ids, "+")
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

func union[T comparable](a, b []T) []T {
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
