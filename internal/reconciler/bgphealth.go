package reconciler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/sessions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// BGP health (the policy's bgpHealth, see extender.BGPHealth for the planner's rules).
//
// The leader keeps one CalicoNodeStatus (class BGP, updated every sessions.Period seconds) per
// route reflector of the policy, draining ones included (so that it sees their sessions come
// back), and reads the sessions calico-node reports there before every plan. The objects are the
// handover's (same name, labels and period): the handover's bound of MaxNodeStatuses applies to
// the objects it adds for its own needs only. One object per route reflector is bounded by the
// route reflector count (maxRouteReflectors), and costs each route reflector's calico-node one
// query of its BIRD per period.
//
// A route reflector is down when its status reports no Established session at all: calico-node
// reports an empty list when BIRD does not answer, and a route reflector cut off from the network
// has none Established either; one broken client never makes its route reflector down, as its
// other sessions stay up. A status calico-node has not updated for sessions.StaleAfter counts as
// down too (calico-node, and with it BIRD, is not running); one never filled in is not judged (a
// calico-node older than 3.22 does not fill them in). Each address family is judged on its own list
// (sessions.Down): a dual-stack route reflector whose IPv6 sessions are all down while IPv4 is up is
// down for its IPv6 clients, and replaced as a whole as any down one is (the record's Families, the
// Event and the plan's reason name the family).
//
// While bgpHealth is on, the statuses are read every healthEvery (half calico-node's update
// period) by watchBGPHealth, which plans a policy again only when what they say changed (a route
// reflector's sessions all down or back, a status gone stale): a route reflector whose sessions go
// down is replaced within gracePeriod plus calico-node's period plus healthEvery (15 s with the
// defaults), and a settled cluster is not planned again every few seconds.

// BGP health constants.
const (
	EventBGPDown = "RouteReflectorBGPDown"
	EventBGPUp   = "RouteReflectorBGPUp"
	// healthEvery: how often the statuses are read.
	healthEvery = sessions.Period * time.Second / 2
)

var bgpDownGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "calico_rr_autoscaler_route_reflectors_bgp_down",
	Help: "Route reflectors whose Node is Ready but whose BGP sessions are down: within bgpHealth.gracePeriod (state=\"grace\") or past it, replaced (state=\"failed\"), by the address families down (family=\"ipv4\", \"ipv6\" or \"ipv4+ipv6\"; each route reflector counts once: sum by state for the count).",
}, []string{"policy", "state", "family"})

// gaugeFamily is a record's families as the gauge counts them (a record that does not say counts
// in every family).
func gaugeFamily(f extender.Families) extender.Families {
	if f == 0 {
		return extender.FamilyIPv4 | extender.FamilyIPv6
	}
	return f
}

// bgpDownFamilies are the values of the gauge's family label.
var bgpDownFamilies = []extender.Families{extender.FamilyIPv4, extender.FamilyIPv6, extender.FamilyIPv4 | extender.FamilyIPv6}

func init() { metrics.Registry.MustRegister(bgpDownGauge) }

// BGPHealthRecords returns the BGP health records of every policy's route reflectors, by node
// (state.Ledger.BGPHealth): as this leader's last reconcile of the policy judged them, or, for a
// policy it has not judged (a replica without the lease: its webhooks plan too), as the policy's
// status holds them (its BGPDown records), so that every replica plans with the leader's judgement.
func (r *Reconciler) BGPHealthRecords() map[string]extender.BGPHealth {
	out := map[string]extender.BGPHealth{}
	r.mu.Lock()
	judged := map[string]bool{}
	for name, recs := range r.bgp {
		judged[name] = true
		maps.Copy(out, recs)
	}
	r.mu.Unlock()
	if r.Policies != nil {
		for _, m := range r.Policies.Valid() {
			if on := m.Resolved.BGPHealth; !judged[m.Policy.Name] && (on == nil || *on) {
				maps.Copy(out, healthRecords(transitions.FromAPI(m.Policy.Status.Transitions, time.Time{})))
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// setBGP keeps what this leader judged of the policy's route reflectors (none: recs nil).
func (r *Reconciler) setBGP(policy string, recs map[string]extender.BGPHealth) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bgp == nil {
		r.bgp = map[string]map[string]extender.BGPHealth{}
	}
	r.bgp[policy] = recs
}

// bgpHealth reads the route reflectors' sessions and updates the records the plan reads.
func (r *Reconciler) bgpHealth(ctx context.Context, st *State) error {
	if st.Invalid != nil {
		return nil
	}
	p := st.Managed.Resolved
	if p.BGPHealth != nil && !*p.BGPHealth { // on unless turned off (see the README: BGP health)
		r.keepHealth(st, nil, nil)
		bgpDownGauge.DeletePartialMatch(prometheus.Labels{"policy": st.Name})
		return nil
	}
	valid, ok := r.validNow(st)
	if !ok {
		return nil
	}
	nodes := state.Partition(valid, r.Nodes.List())[st.Name]
	view := make(map[string]*extender.Node, len(nodes))
	var rrs []string
	for _, n := range nodes {
		view[n.Name] = n
		if isCurrentRR(p, n) {
			rrs = append(rrs, n.Name)
		}
	}
	slices.Sort(rrs)
	list, err := r.statuses().List(ctx, st.Name)
	if err != nil {
		if sessions.Unavailable(err) {
			r.keepHealth(st, nil, nil)
			if p.BGPHealth != nil { // asked for explicitly
				r.Log.Error(err, "bgpHealth is on but the CalicoNodeStatus API cannot be used", "policy", st.Name)
			}
			return nil
		}
		r.Log.Error(err, "bgpHealth: listing CalicoNodeStatuses", "policy", st.Name)
		r.setBGP(st.Name, nil) // the records stay: the sessions were not read
		st.requeue(sessions.Period * time.Second)
		return nil
	}
	have := make(map[string]*apiv3.CalicoNodeStatus, len(list))
	for _, o := range list {
		have[o.Spec.Node] = o
	}
	r.mu.Lock()
	if r.healthSeen == nil {
		r.healthSeen = map[string]string{}
	}
	r.healthSeen[st.Name] = sessions.Fingerprint(list, st.Now)
	r.mu.Unlock()
	st.HealthStatuses = make(map[string]bool, len(rrs))
	for _, rr := range rrs {
		st.HealthStatuses[rr] = true
		if have[rr] != nil {
			at := have[rr].Status.LastUpdated.Time
			if !at.IsZero() && (st.trans.ReportsSeen.IsZero() || at.Before(st.trans.ReportsSeen)) {
				st.trans.ReportsSeen = at // calico-node reports (transitions.Reporting)
			}
			continue
		}
		if p.Mode != v1alpha1.Enforce {
			continue // Observe and Paused write the status and Events only: read what exists
		}
		if err := r.statuses().Create(ctx, st.Name, rr); err != nil {
			r.Log.Error(err, "bgpHealth: creating CalicoNodeStatus", "node", rr)
		}
	}

	prev := healthRecords(st.trans)
	announced := map[string]bool{} // failures announced (RouteReflectorBGPDown), kept in the records
	for _, rec := range st.trans.Of(transitions.BGPDown) {
		announced[rec.Node] = rec.Failed
	}
	clients := rrClients(view, func(n *extender.Node) bool { return p.IsRouteReflectorLabel(n.Labels) }) // Ready or not
	ips := r.calicoBGPAddresses(ctx, len(rrs) > 0)
	st.healthReports, st.healthIPs = have, ips
	var uplinkIDs map[string][]string // uplink set -> the spine members' IDs its BGPPeer selects, read once when needed
	uplinks := func() map[string][]string {
		if uplinkIDs == nil {
			list, err := r.peers().List(ctx, managedPeers(st.Name))
			if err != nil {
				r.Log.Error(err, "bgpHealth: listing BGPPeers", "policy", st.Name)
			}
			uplinkIDs = setIDs(list, extender.LabelUplinkSet)
		}
		return uplinkIDs
	}
	orphaning, witnessed := orphaningNow(rrs, have, clients, view, ips, st.Now, func(rr string) bool { return justStarted(st, rr) })
	next := map[string]extender.BGPHealth{}
	grace, failed := map[extender.Families]int{}, map[extender.Families]int{}
	for _, rr := range rrs {
		cns := have[rr]
		h, had := prev[rr]
		if rec := st.trans.Newest(rr); rec != nil && !rec.Alive && cns != nil && !cns.Status.LastUpdated.Time.Before(rec.Started) &&
			sessions.RoleUp(cns, rolePeers(rr, clients[rr], view, uplinks), view, ips) {
			st.trans.SeenAlive(rr, cns.Status.LastUpdated.Time)
		}
		starting := justStarted(st, rr)
		if cns == nil || cns.Status.LastUpdated.IsZero() || !extender.IsReady(view[rr]) || starting {
			if had && extender.IsReady(view[rr]) {
				next[rr] = h // not reported yet, or its sessions are starting: no judgement
			}
			if o := orphaning[rr]; !extender.IsReady(view[rr]) && cns != nil && !cns.Status.LastUpdated.IsZero() &&
				(len(o) > 0 || had && len(h.Orphaning) > 0 && !starting) {
				// NotReady, its sessions down, and a client of it left with no route reflector: no
				// notReadyGracePeriod either (extender.NodeInfo.WithinNotReadyGrace). Kept while down.
				down, named := sessions.Down(cns, sessions.Addresses(ips, view, rr), clients[rr], view, ips, st.Now)
				if w := witnessed[rr]; down == 0 && w != "" {
					down, named = sessions.RRFamilies(sessions.Addresses(ips, view, rr), cns, 0), []string{w}
				}
				if down != 0 {
					if !had || !h.Suspect() {
						h = extender.BGPHealth{DownSince: st.Now}
					}
					h.Sessions, h.Families = named, down
					if len(o) > 0 {
						h.Orphaning = o
					}
					next[rr] = h
				}
			}
			if starting {
				// Read its status again soon: a status showing its role's sessions up changes
				// nothing watchBGPHealth looks at, so without this no reconcile would see it alive,
				// and a BIRD dying after that would be judged only transitions.DefaultMax after the
				// role change (TestBGPHealthSeesSettledRouteReflectorsAlive).
				rec := st.trans.Newest(rr)
				st.requeue(min(healthEvery, rec.Started.Add(rec.Max).Sub(st.Now)+100*time.Millisecond))
			}
			continue
		}
		rrIPs := sessions.Addresses(ips, view, rr)
		down, named := sessions.Down(cns, rrIPs, clients[rr], view, ips, st.Now)
		if w := witnessed[rr]; down == 0 && w != "" {
			// Its calico-node stopped (its last report still shows its sessions up) and the route
			// reflectors it peers with see them down: down, for the rule of orphaningNow only.
			down, named = sessions.RRFamilies(rrIPs, cns, 0), []string{w}
		}
		nh, keep := h.Observe(down != 0, named, st.Now, p)
		if keep && down != 0 {
			nh.Families = down
			if o := orphaning[rr]; len(o) > 0 {
				nh.Orphaning = o // kept while down, and through the hold once back (Observe)
			}
		}
		wasFailed, isFailed := announced[rr], keep && nh.Failed(st.Now, p)
		if keep {
			next[rr] = nh
			switch {
			case nh.Suspect() && !isFailed:
				grace[gaugeFamily(nh.Families)]++
				st.requeue(nh.DownSince.Add(p.BGPGrace).Sub(st.Now) + 100*time.Millisecond)
			case isFailed:
				failed[gaugeFamily(nh.Families)]++
			}
			if !nh.UpSince.IsZero() {
				st.requeue(nh.UpSince.Add(extender.BGPHold(p)).Sub(st.Now) + 100*time.Millisecond)
			}
		}
		ref := nodeRef(rr, view[rr])
		switch {
		case isFailed && !wasFailed:
			announced[rr] = true
			var clientFams extender.Families
			for _, c := range clients[rr] {
				clientFams |= sessions.IPsFamilies(sessions.Addresses(ips, view, c))
			}
			msg := bgpDownMessage(rr, nh, sessions.RRFamilies(rrIPs, cns, clientFams), p.BGPGrace)
			r.Recorder.Event(ref, corev1.EventTypeWarning, EventBGPDown, msg)
			r.Recorder.Event(st.Policy, corev1.EventTypeWarning, EventBGPDown, msg)
		case wasFailed && !keep:
			delete(announced, rr)
			msg := fmt.Sprintf("%s: BGP sessions Established again for %s: it may be a route reflector again", rr, extender.BGPHold(p))
			r.Recorder.Event(ref, corev1.EventTypeNormal, EventBGPUp, msg)
			r.Recorder.Event(st.Policy, corev1.EventTypeNormal, EventBGPUp, msg)
		}
	}
	r.keepHealth(st, next, announced)
	bgpDownGauge.DeletePartialMatch(prometheus.Labels{"policy": st.Name})
	for _, fam := range bgpDownFamilies {
		bgpDownGauge.WithLabelValues(st.Name, "grace", fam.Key()).Set(float64(grace[fam]))
		bgpDownGauge.WithLabelValues(st.Name, "failed", fam.Key()).Set(float64(failed[fam]))
	}
	return nil
}

// healthRecords are BGP health's records as the policy's BGPDown records hold them: the previous
// reconcile's, or an earlier leader's (read from the status). The sessions down are named again at
// the next observation.
func healthRecords(t *transitions.Table) map[string]extender.BGPHealth {
	out := map[string]extender.BGPHealth{}
	for _, rec := range t.Of(transitions.BGPDown) {
		out[rec.Node] = extender.BGPHealth{DownSince: rec.Started, UpSince: rec.UpSince, Orphaning: rec.Orphaning}
	}
	return out
}

// keepHealth makes next BGP health's records: the plan's (state.Ledger.BGPHealth) and the
// policy's BGPDown records, which the nodes step writes to its status before the moves they decide
// (a replacement's promotion, a narrowing) and a new leader resumes; announced are the failures
// announced (the records' Failed). A record's Max is the graceful-restart time (staleHold).
func (r *Reconciler) keepHealth(st *State, next map[string]extender.BGPHealth, announced map[string]bool) {
	restart := restartTime(st.Managed.Resolved)
	for _, rr := range slices.Sorted(maps.Keys(next)) {
		h := next[rr]
		rec := st.trans.Hold(transitions.BGPDown, rr, h.DownSince, transitions.Waits{Max: restart})
		rec.Started, rec.UpSince, rec.Failed = h.DownSince, h.UpSince, announced[rr]
		rec.Orphaning = slices.Clone(h.Orphaning[:min(len(h.Orphaning), maxOrphaningRecorded)])
	}
	st.trans.Drop(transitions.BGPDown, slices.Collect(maps.Keys(next))...)
	r.setBGP(st.Name, next)
	st.health = next
}

// maxOrphaningRecorded bounds the clients a BGPDown record names (v1alpha1.Transition.Orphaning).
const maxOrphaningRecorded = 10

// orphaningNow applies extender.BGPOrphaning (two route reflectors of a client lost at once) to
// what the statuses say now: a route reflector is down when its status, filled in, shows no
// Established session in a family, or has gone stale (sessions.Down), or is late and witnessed down
// (sessions.WitnessedDown), Ready or not; one whose sessions are starting (starting) is not judged. Every
// route reflector is read before any is judged, so that both of a client's are failed in the same
// plan. A stale or late status counts only while another route reflector's status is fresh: when
// every report stopped at once, what failed may be the reports (the API server, calico-node's
// access to it), not BIRD, and the grace stays. A fresh status that lists no Established session
// is calico-node saying that BIRD has none (it reports an empty list when BIRD does not answer).
// It returns the orphaning clients by route reflector, and the route reflectors found down only
// by witnesses (with the witnesses' words, for the record's sessions).
func orphaningNow(rrs []string, have map[string]*apiv3.CalicoNodeStatus, clients map[string][]string, view map[string]*extender.Node,
	ips map[string][]string, now time.Time, starting func(string) bool) (map[string][]string, map[string]string) {
	down := map[string]bool{}
	var stale []string
	fresh := false
	for _, rr := range rrs {
		cns := have[rr]
		if cns == nil || cns.Status.LastUpdated.IsZero() || starting(rr) {
			continue
		}
		if age := now.Sub(cns.Status.LastUpdated.Time); age > sessions.LateAfter {
			stale = append(stale, rr)
			continue
		}
		fresh = true
		if d, _ := sessions.Down(cns, sessions.Addresses(ips, view, rr), clients[rr], view, ips, now); d != 0 {
			down[rr] = true
		}
	}
	var witnessed map[string]string
	if fresh {
		for _, rr := range stale {
			if now.Sub(have[rr].Status.LastUpdated.Time) > sessions.StaleAfter {
				down[rr] = true
			} else if w := sessions.WitnessedDown(rr, have, view, ips, now); w != "" {
				down[rr] = true
				if witnessed == nil {
					witnessed = map[string]string{}
				}
				witnessed[rr] = w
			}
		}
	}
	if len(down) < 2 {
		return nil, nil
	}
	rrsOf := map[string][]string{}
	for rr, cs := range clients {
		for _, c := range cs {
			rrsOf[c] = append(rrsOf[c], rr)
		}
	}
	orph := extender.BGPOrphaning(rrsOf, down)
	for rr := range witnessed {
		if len(orph[rr]) == 0 {
			delete(witnessed, rr)
		}
	}
	return orph, witnessed
}

// justStarted: the route reflector's sessions (re)started less than transitions.DefaultMax ago
// (promoted, renumbered, given clients by a move: moves.go) and none of its present role has been
// seen Established since (sessions.RoleUp). Its sessions are not judged yet: confd renders and BIRD
// establishes them within a few seconds, longer on a loaded node. On the live lab's mesh migration
// (gracePeriod 5 s) route reflectors just promoted were replaced, or given spine standbys, before
// their first sessions came up (10-15 s on two loaded cores), which moved or promoted nodes again.
// A route reflector whose BIRD is dead from the start is replaced transitions.DefaultMax later.
func justStarted(st *State, rr string) bool {
	rec := st.trans.Newest(rr)
	return rec != nil && rec.Starting(st.Now)
}

// rolePeers names the nodes route reflector rr peers with in its present role: its clients (the
// nodes whose route reflectors annotation lists it), the rack route reflectors whose uplink set
// selects it (a spine member's), and the spine members its own uplink set selects (a rack route
// reflector's). uplinks maps each uplink set to the IDs its BGPPeer selects.
func rolePeers(rr string, clients []string, view map[string]*extender.Node, uplinks func() map[string][]string) []string {
	out := slices.Clone(clients)
	id := extender.RouteReflectorID(rr)
	var own []string
	if n := view[rr]; n != nil {
		own = uplinks()[n.Labels[extender.LabelUplinkSet]]
	}
	for name, n := range view {
		if name == rr {
			continue
		}
		if set := n.Labels[extender.LabelUplinkSet]; set != "" && slices.Contains(uplinks()[set], id) ||
			slices.Contains(own, extender.RouteReflectorID(name)) {
			out = append(out, name)
		}
	}
	return out
}

// watchBGPHealth reads the CalicoNodeStatuses of every policy with bgpHealth on every healthEvery
// and queues the policy when what they say differs from what its last reconcile read. It runs on
// the leader only (the controller's sources start with leadership).
func (r *Reconciler) watchBGPHealth(ctx context.Context, q queue) {
	t := time.NewTicker(healthEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, m := range r.Policies.Valid() {
			if p := m.Resolved; p.BGPHealth != nil && !*p.BGPHealth {
				continue
			}
			list, err := r.statuses().List(ctx, m.Policy.Name)
			if err != nil {
				continue // the reconcile says why
			}
			now := r.now()
			r.mu.Lock()
			seen, ok := r.healthSeen[m.Policy.Name]
			r.mu.Unlock()
			if !ok || seen != sessions.Fingerprint(list, now) {
				r.markFull(m.Policy.Name)
				q.Add(request(m.Policy.Name))
			}
		}
	}
}

// bgpDownMessage is the RouteReflectorBGPDown Event's message: every family down ("no BGP session
// Established"), or the families down beside those up ("IPv6 sessions down since ..., IPv4
// Established"): a dual-stack route reflector whose IPv6 sessions are down is replaced for its IPv6
// clients' sake.
func bgpDownMessage(rr string, h extender.BGPHealth, all extender.Families, grace time.Duration) string {
	since := h.DownSince.UTC().Format(time.RFC3339)
	if len(h.Orphaning) > 0 {
		return fmt.Sprintf("%s: Node Ready but no BGP session Established since %s, and every other route reflector of clients %s is down too: its replacement is promoted without waiting for bgpHealth.gracePeriod (%s); down: %s",
			rr, since, joinCapped(h.Orphaning, 10), grace, joinCapped(h.Sessions, 20))
	}
	if up := all &^ h.Families; h.Families != 0 && up != 0 {
		return fmt.Sprintf("%s: Node Ready, %s sessions Established but %s sessions down since %s (bgpHealth.gracePeriod %s): its %s clients have no routes through it, its replacement is promoted; down: %s",
			rr, up, h.Families, since, grace, h.Families, joinCapped(h.Sessions, 20))
	}
	return fmt.Sprintf("%s: Node Ready but no BGP session Established since %s (bgpHealth.gracePeriod %s): its replacement is promoted; down: %s",
		rr, since, grace, joinCapped(h.Sessions, 20))
}
