package reconciler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/sessions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
)

// The session verifier.
//
// One step (sessions, after the nodes step) reads every CalicoNodeStatus a wait relies on: it
// gathers the nodes whose sessions some step awaits (sessionNeeds: a BGPSessions handover's
// replacements, the latest renumbering's and the held moves' route reflectors, an adoption's and
// the mesh's route reflectors), each with the peers it must show Established (sessionPeers), and
// gives each one Sessions record (internal/transitions), persisted with the other records. It keeps
// a CalicoNodeStatus for every node whose record is not Up yet, at most MaxNodeStatuses at once
// (the first in name order; the others wait their turn; BGP health's objects stay outside the
// bound), and reads each once by one freshness rule: a report counts only when made after its
// Sessions record started and at least its Min after every other record of the node started
// (transitions.Record.Fresh). What it read is in the records (transitions.Table.Observe) and, for
// the later steps of the reconcile, in State.lacking. The steps read those, never a report
// (sessionsUp). A deleted policy's release reads its keeper the same way (keeperSessionsWait).

// sessionNeed is what the verifier checks of a node: the peers it must show Established, and the
// kinds of the node's records marked Up without a report when it has none (transitions.Table.Settled;
// nil: none).
type sessionNeed struct {
	peers  []string
	settle []transitions.Kind
}

// moveKinds are the kinds of a route reflector's own records (every kind but a step's).
var moveKinds = []transitions.Kind{transitions.Renumber, transitions.SessionsRestart, transitions.ClientMove,
	transitions.UplinkMove, transitions.SetInherited, transitions.ReleaseStep}

// sessionPeers are the nodes route reflector rr must show Established sessions with: its Ready
// clients (clients, clientsByRR's) and, for a spine member, the Ready rack route reflectors whose
// uplink set selects it.
func sessionPeers(st *State, clients map[string][]string, rr string) []string {
	return union(clients[rr], uplinkPeers(st, rr))
}

// sessionNeeds gathers the nodes whose sessions a step awaits (see above).
func (r *Reconciler) sessionNeeds(st *State) map[string]*sessionNeed {
	verify := verifies(st)
	mesh := r.meshPending(st) && meshReads(st)
	need := map[string]*sessionNeed{}
	if !verify && !mesh {
		return need
	}
	clients := clientsByRR(st)
	add := func(rr string, settle ...transitions.Kind) {
		if need[rr] == nil {
			need[rr] = &sessionNeed{peers: sessionPeers(st, clients, rr)}
		}
		need[rr].settle = union(need[rr].settle, settle)
	}
	if mesh {
		for _, rr := range meshRRs(st, clients) {
			add(rr)
		}
	}
	if verify && st.trans.Latest(transitions.Adopt) != nil {
		for rr := range clients {
			add(rr)
		}
	}
	if !verify {
		return need
	}
	for _, d := range drainingRRs(st) {
		if r.handoverInPlace(st, d) {
			for _, rr := range replacementsAll(st, d) {
				add(rr)
			}
		}
	}
	if last := st.trans.Latest(transitions.Renumber); last != nil && !last.Up {
		add(last.Node, transitions.Renumber)
	}
	for rr := range st.SettleWaits {
		add(rr, moveKinds...)
	}
	return need
}

// verifySessions is the session verifier's step (see above).
func (r *Reconciler) verifySessions(ctx context.Context, st *State) error {
	if err := r.verify(ctx, st, r.sessionNeeds(st), st.View, st.healthIPs, r.now()); err != nil {
		r.Log.Error(err, "CalicoNodeStatus", "policy", st.Name)
		st.requeue(5 * time.Second)
	}
	return nil
}

// verify keeps a Sessions record, started at from when it has none, for each node of need (those
// of other nodes dropped), keeps the CalicoNodeStatuses of those not Up, and reads them (view: where
// the peers' addresses are; ips: Calico's BGP addresses when the caller read them this reconcile,
// nil: read here when needed). Without the CalicoNodeStatus API (or the right to use it) the waits
// fall back to their timers: the verifier's step logs an error, never stops the other steps.
func (r *Reconciler) verify(ctx context.Context, st *State, need map[string]*sessionNeed, view map[string]*extender.Node,
	ips map[string][]string, from time.Time) error {
	var want, keep []string
	recs := map[string]*transitions.Record{}
	for _, rr := range slices.Sorted(maps.Keys(need)) {
		if len(need[rr].peers) == 0 {
			if len(need[rr].settle) > 0 {
				st.trans.Settled(rr, need[rr].settle...) // no session to wait for
			}
			continue
		}
		rec := st.trans.Hold(transitions.Sessions, transitions.Subject(rr, need[rr].peers), from, transitions.SessionsWaits)
		keep = append(keep, rec.Node)
		if !rec.Up {
			want, recs[rr] = append(want, rr), rec
		}
	}
	st.trans.Drop(transitions.Sessions, keep...)
	statuses, err := r.syncNodeStatuses(ctx, st, want)
	if ips == nil {
		ips = r.calicoBGPAddresses(ctx, len(statuses) > 0)
	}
	st.statuses, st.sessionIPs = statuses, ips
	st.lacking = map[string]map[string]extender.Families{}
	for rr, rec := range recs {
		// The freshness rule: made after its Sessions record and every other record of the node
		// started, each record's Min after.
		cns := statuses[rr]
		if cns == nil || !rec.Fresh(cns.Status.LastUpdated.Time) || st.trans.Stale(rr, cns.Status.LastUpdated.Time) {
			continue
		}
		st.lacking[rr] = missingPeers(st.trans, rr, need[rr].peers, cns, view, st.sessionIPs)
		st.trans.Observe(rr, cns.Status.LastUpdated.Time, len(st.lacking[rr]))
	}
	if len(want) > 0 {
		st.requeue(handoverRetry)
	}
	return err
}

// missingPeers are the peers (their addresses in view and ips) without an Established session with
// rr in its report cns, with the families they lack; the sessions a renumbering of rr restarted
// count only once up again since (sessions.RestartedAfter).
func missingPeers(recs *transitions.Table, rr string, peers []string, cns *apiv3.CalicoNodeStatus,
	view map[string]*extender.Node, ips map[string][]string) map[string]extender.Families {
	addrs := make(map[string][]string, len(peers))
	for _, c := range peers {
		addrs[c] = sessions.Addresses(ips, view, c)
	}
	if rn := recs.Get(transitions.Renumber, rr); rn != nil {
		cns = sessions.RestartedAfter(cns, rn.Started, rn.Settle)
	}
	return sessions.Missing(addrs, sessions.Addresses(ips, view, rr), cns)
}

// sessionsUp: rr's Sessions record of these peers is Up, or it awaits none.
func sessionsUp(st *State, rr string, peers []string) bool {
	rec := st.trans.Get(transitions.Sessions, transitions.Subject(rr, peers))
	return len(peers) == 0 || rec != nil && rec.Up
}

// meshRRs are the route reflectors whose sessions the mesh waits for: those a client lists
// (clients, clientsByRR's) and those carrying their role, sorted.
func meshRRs(st *State, clients map[string][]string) []string {
	out := slices.Collect(maps.Keys(clients))
	for name, n := range st.View {
		if isCurrentRR(st.Managed.Resolved, n) && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// unverified lists the peers of the given route reflectors whose Sessions record is not Up: those
// the verifier last read without an Established session (State.lacking), or all of them when it
// read none.
func unverified(st *State, clients map[string][]string, rrs []string) []string {
	var out []string
	for _, rr := range rrs {
		peers := sessionPeers(st, clients, rr)
		if sessionsUp(st, rr, peers) {
			continue
		}
		lacking, read := st.lacking[rr]
		for _, c := range peers {
			if _, lacks := lacking[c]; !read || lacks {
				out = union(out, []string{c})
			}
		}
	}
	slices.Sort(out)
	return out
}

// syncNodeStatuses keeps one CalicoNodeStatus per node of want, at most MaxNodeStatuses at once
// (the first in name order; the rest wait), deletes the others but BGP health's, and returns the
// present ones by node.
func (r *Reconciler) syncNodeStatuses(ctx context.Context, st *State, want []string) (map[string]*apiv3.CalicoNodeStatus, error) {
	m := r.memo(st.Name)
	if len(want) == 0 && m.statusesChecked && st.HealthStatuses == nil {
		return nil, nil
	}
	// One List per reconcile: BGP health's of this reconcile when it read them.
	list, err := slices.Collect(maps.Values(st.healthReports)), error(nil)
	if st.healthReports == nil {
		list, err = r.statuses().List(ctx, st.Name)
	}
	if err != nil {
		if sessions.Unavailable(err) {
			m.statusesChecked = true // no CalicoNodeStatus API (or no right to it): nothing to clean up
			if len(want) > 0 {
				return nil, fmt.Errorf("CalicoNodeStatus cannot be used; the sessions' waits fall back to their timers: %w", err)
			}
			return nil, nil
		}
		return nil, fmt.Errorf("listing CalicoNodeStatuses: %w", err)
	}
	have, err := r.statuses().Sync(ctx, st.Name, list, want, st.HealthStatuses, MaxNodeStatuses)
	m.statusesChecked = err == nil && len(have) == 0
	return have, err
}
