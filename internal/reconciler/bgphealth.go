package reconciler

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
)

// BGP health (the policy's bgpHealth, see extender.BGPHealth for the planner's rules).
//
// The leader keeps one CalicoNodeStatus (class BGP, updated every NodeStatusPeriod seconds) per
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
// other sessions stay up. A status calico-node has not updated for staleAfter counts as down too
// (calico-node, and with it BIRD, is not running); one never filled in is not judged (a calico-node
// older than 3.22 does not fill them in).
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
	// staleAfter: a status not updated for three periods.
	staleAfter = 3 * NodeStatusPeriod * time.Second
	// healthEvery: how often the statuses are read.
	healthEvery = NodeStatusPeriod * time.Second / 2
)

var bgpDownGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "calico_rr_autoscaler_route_reflectors_bgp_down",
	Help: "Route reflectors whose Node is Ready but whose BGP sessions are down: within bgpHealth.gracePeriod (state=\"grace\") or past it, replaced (state=\"failed\").",
}, []string{"policy", "state"})

func init() { metrics.Registry.MustRegister(bgpDownGauge) }

// BGPHealthRecords returns the BGP health records of every policy's route reflectors, by node
// (state.Ledger.BGPHealth).
func (r *Reconciler) BGPHealthRecords() map[string]extender.BGPHealth {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out map[string]extender.BGPHealth
	for _, recs := range r.bgp {
		if out == nil {
			out = map[string]extender.BGPHealth{}
		}
		maps.Copy(out, recs)
	}
	return out
}

func (r *Reconciler) setBGP(policy string, recs map[string]extender.BGPHealth) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bgp == nil {
		r.bgp = map[string]map[string]extender.BGPHealth{}
	}
	if len(recs) == 0 {
		delete(r.bgp, policy)
		return
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
		r.setBGP(st.Name, nil)
		bgpDownGauge.DeletePartialMatch(prometheus.Labels{"policy": st.Name})
		return nil
	}
	valid, ok := r.validNow(st)
	if !ok {
		return nil
	}
	nodes := state.Partition(valid, r.Nodes.List())[st.Name]
	view := make(map[string]*corev1.Node, len(nodes))
	var rrs []string
	for _, n := range nodes {
		view[n.Name] = n
		if isCurrentRR(p, n) {
			rrs = append(rrs, n.Name)
		}
	}
	slices.Sort(rrs)
	list, err := r.nodeStatuses().List(ctx, map[string]string{extender.LabelManagedBy: extender.ManagedByValue, extender.LabelPolicy: st.Name})
	if err != nil {
		r.setBGP(st.Name, nil)
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			if p.BGPHealth != nil { // asked for explicitly
				r.Log.Error(err, "bgpHealth is on but the CalicoNodeStatus API cannot be used", "policy", st.Name)
			}
			return nil
		}
		r.Log.Error(err, "bgpHealth: listing CalicoNodeStatuses", "policy", st.Name)
		st.requeue(NodeStatusPeriod * time.Second)
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
	r.healthSeen[st.Name] = healthFingerprint(list, st.Now)
	r.mu.Unlock()
	st.HealthStatuses = make(map[string]bool, len(rrs))
	for _, rr := range rrs {
		st.HealthStatuses[rr] = true
		if have[rr] != nil {
			continue
		}
		obj := r.nodeStatus(st.Name, rr)
		if err := r.nodeStatuses().Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			r.Log.Error(err, "bgpHealth: creating CalicoNodeStatus", "node", rr)
		}
	}
	m := r.memo(st.Name)
	m.statusesChecked = false // the handover lists them again
	if m.bgpAnnounced == nil {
		m.bgpAnnounced = map[string]bool{}
	}

	r.mu.Lock()
	prev := r.bgp[st.Name]
	r.mu.Unlock()
	clients := clientsOf(p, view)
	ips := r.calicoBGPAddresses(ctx, len(rrs) > 0)
	next := map[string]extender.BGPHealth{}
	grace, failed := 0, 0
	for _, rr := range rrs {
		cns := have[rr]
		h, had := prev[rr]
		if cns == nil || cns.Status.LastUpdated.IsZero() || !extender.IsReady(view[rr]) {
			if had && extender.IsReady(view[rr]) {
				next[rr] = h // not reported yet: no judgement
			}
			continue
		}
		down, sessions := sessionsDown(cns, clients[rr], view, ips, st.Now)
		nh, keep := h.Observe(down, sessions, st.Now, p)
		wasFailed, isFailed := m.bgpAnnounced[rr], keep && nh.Failed(st.Now, p)
		if keep {
			next[rr] = nh
			switch {
			case nh.Suspect() && !isFailed:
				grace++
				st.requeue(nh.DownSince.Add(p.BGPGrace).Sub(st.Now) + 100*time.Millisecond)
			case isFailed:
				failed++
			}
			if !nh.UpSince.IsZero() {
				st.requeue(nh.UpSince.Add(extender.BGPHold(p)).Sub(st.Now) + 100*time.Millisecond)
			}
		}
		ref := nodeRef(rr, view[rr])
		switch {
		case isFailed && !wasFailed:
			m.bgpAnnounced[rr] = true
			msg := fmt.Sprintf("%s: Node Ready but no BGP session Established since %s (bgpHealth.gracePeriod %s): its replacement is promoted; down: %s",
				rr, nh.DownSince.UTC().Format(time.RFC3339), p.BGPGrace, joinCapped(nh.Sessions, 20))
			r.Recorder.Event(ref, corev1.EventTypeWarning, EventBGPDown, msg)
			r.Recorder.Event(st.Policy, corev1.EventTypeWarning, EventBGPDown, msg)
			r.Log.Info("route reflector BGP down", "policy", st.Name, "node", rr, "reason", EventBGPDown, "sessions", nh.Sessions)
		case wasFailed && !keep:
			delete(m.bgpAnnounced, rr)
			msg := fmt.Sprintf("%s: BGP sessions Established again for %s: it may be a route reflector again", rr, extender.BGPHold(p))
			r.Recorder.Event(ref, corev1.EventTypeNormal, EventBGPUp, msg)
			r.Recorder.Event(st.Policy, corev1.EventTypeNormal, EventBGPUp, msg)
		}
	}
	for rr := range m.bgpAnnounced {
		if _, ok := next[rr]; !ok {
			delete(m.bgpAnnounced, rr) // no longer a route reflector
		}
	}
	r.setBGP(st.Name, next)
	bgpDownGauge.WithLabelValues(st.Name, "grace").Set(float64(grace))
	bgpDownGauge.WithLabelValues(st.Name, "failed").Set(float64(failed))
	return nil
}

// healthFingerprint is what the statuses say that the plan reads: per route reflector, whether its
// status is filled in, stale, and has an Established session.
func healthFingerprint(list []*apiv3.CalicoNodeStatus, now time.Time) string {
	parts := make([]string, 0, len(list))
	for _, o := range list {
		last := o.Status.LastUpdated.Time
		up := slices.ContainsFunc(append(slices.Clone(o.Status.BGP.PeersV4), o.Status.BGP.PeersV6...),
			func(p apiv3.CalicoNodePeer) bool { return p.State == apiv3.BGPSessionStateEstablished })
		parts = append(parts, fmt.Sprintf("%s:%t:%t:%t", o.Spec.Node, last.IsZero(), now.Sub(last) > staleAfter, up))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
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
			list, err := r.nodeStatuses().List(ctx, map[string]string{extender.LabelManagedBy: extender.ManagedByValue, extender.LabelPolicy: m.Policy.Name})
			if err != nil {
				continue // the reconcile says why
			}
			now := r.now()
			r.mu.Lock()
			seen, ok := r.healthSeen[m.Policy.Name]
			r.mu.Unlock()
			if !ok || seen != healthFingerprint(list, now) {
				r.markFull(m.Policy.Name)
				q.Add(request(m.Policy.Name))
			}
		}
	}
}

// clientsOf maps each route reflector to the clients of view that peer with it (Ready or not).
func clientsOf(p interface{ IsRouteReflectorLabel(map[string]string) bool }, view map[string]*corev1.Node) map[string][]string {
	return rrClients(view, func(n *corev1.Node) bool { return p.IsRouteReflectorLabel(n.Labels) })
}

// sessionsDown reads a route reflector's CalicoNodeStatus: down when no session is Established
// (or the status is stale), with the sessions that are not Established: its clients' first (by
// name and address), then its other peers'.
func sessionsDown(cns *apiv3.CalicoNodeStatus, clients []string, view map[string]*corev1.Node, calicoIPs map[string][]string, now time.Time) (bool, []string) {
	if last := cns.Status.LastUpdated.Time; now.Sub(last) > staleAfter {
		return true, []string{fmt.Sprintf("all (calico-node has not reported since %s)", last.UTC().Format(time.RFC3339))}
	}
	peers := append(slices.Clone(cns.Status.BGP.PeersV4), cns.Status.BGP.PeersV6...)
	state := map[string]apiv3.BGPSessionState{}
	established := 0
	for _, p := range peers {
		if ip := net.ParseIP(p.PeerIP); ip != nil {
			state[ip.String()] = p.State
		}
		if p.State == apiv3.BGPSessionStateEstablished {
			established++
		}
	}
	if established > 0 {
		return false, nil
	}
	var out []string
	seen := map[string]bool{}
	for _, c := range clients {
		ips, ok := calicoIPs[c]
		if !ok {
			ips = nodeIPs(view[c])
		}
		for _, ip := range ips {
			seen[ip] = true
			s := string(state[ip])
			if s == "" {
				s = "no session"
			}
			out = append(out, fmt.Sprintf("%s (%s, %s)", c, ip, s))
		}
	}
	for _, p := range peers {
		if ip := net.ParseIP(p.PeerIP); ip != nil && !seen[ip.String()] {
			out = append(out, fmt.Sprintf("%s (%s)", ip, p.State))
		}
	}
	if len(out) == 0 {
		out = []string{"all (no BGP session reported)"}
	}
	return true, out
}
