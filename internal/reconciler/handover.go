package reconciler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/sessions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// The BGPSessions handover.
//
// With `handover: BGPSessions` a draining route reflector loses its role as soon as each of its
// replacements (the planned route reflectors of its zone, else of its cluster ID, else all) reports
// an Established session with every Ready client that peers with it. The replacement's side is
// read: one Calico CalicoNodeStatus (class BGP) per replacement lists all its peers, so one object
// per replacement suffices. The session verifier (verify.go) reads it: at most MaxNodeStatuses such
// objects exist at once (calico-node spends CPU on every node that has one); the other replacements
// wait their turn, and a replacement seen with every client Established is its Up Sessions record
// (persisted: a new leader does not read it again), so its object is deleted. Every object carries
// the managed-by and policy labels and is deleted when the handover ends.
//
// A confirmed handover moves the draining mark back by removalDelay, so that the next plan makes
// the route reflector a client (the planner's rule) and the demote step takes its role. Without
// confirmation the planner does so when removalDelay has passed: the handover has timed out, the
// policy is Degraded (HandoverTimeout) for a while and a Warning Event names the clients that
// never established.
//
// Clients are matched by IP, per address family: Calico's BGP addresses (the
// projectcalico.org/IPv4Address and IPv6Address annotations calico-node writes), else the node's
// InternalIPs. A client counts as established when, in every family both it and the replacement
// have an address of, its address of the family has an Established session in that family's list
// (peersV4 for IPv4, peersV6 for IPv6; see internal/sessions, families.go): IPv4-only, IPv6-only
// and dual-stack clusters alike. The informer cache keeps both (see state.StripNode), so no extra
// read is needed.

// Handover constants.
const (
	// MaxNodeStatuses bounds the CalicoNodeStatus objects of a policy at any moment.
	MaxNodeStatuses = 3

	ReasonHandoverTimeout = "HandoverTimeout"
	EventHandoverTimeout  = "HandoverTimeout"
	EventHandedOver       = "RouteReflectorHandedOver"
)

// handoverMemo is what the reconciler remembers of a policy's handovers between reconciles (lost
// on restart: the sessions are then read again).
type handoverMemo struct {
	// announced: the pending changes last recorded as Events (Observe mode).
	announced []string
	// reported: draining route reflectors (name and mark) whose timeout was reported.
	reported map[string]bool
	// statusesChecked: the verifier's last list found no CalicoNodeStatus object (no list needed
	// until it needs one, or bgpHealth's read of the same reconcile keeps some: State.HealthStatuses).
	statusesChecked bool
	// meshOff: the mesh was turned off.
	meshOff bool
	// adoptRetry: hand-written BGPPeer (name@resourceVersion) -> when the graph model may be asked
	// again after refusing it.
	adoptRetry map[string]time.Time
	// trans: the moves in flight (internal/transitions): route reflectors whose sessions
	// (re)started lately (renumbered, promoted, given clients or rack route reflectors by a move,
	// released), which the next cluster-ID change, the moves between sets and the release's next
	// step wait for, and the mesh's and the adopt step's waits (MeshOff, Adopt). Read from the
	// policy's status by the load step of this leader's first reconcile (and put in State.trans by
	// every load step: the steps read them there), written back there before the moves they
	// record (persistTransitions); persisted is what the status holds.
	trans         *transitions.Table
	persisted     []v1alpha1.Transition
	persistedSeen time.Time // the status's sessionReportsSeen
	loaded        bool
	// writesRead: unrecordedRenumber has read the route reflectors' last writes.
	writesRead bool
	// moveSets: the BGPPeers of the transitional peering and uplink sets this leader has looked
	// at (adoptTransitionalSets).
	moveSets map[string]bool
}

var handoverTimeouts = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "calico_rr_autoscaler_handover_timeouts_total",
	Help: "BGPSessions handovers that reached removalDelay before every moving client was Established.",
}, []string{"policy"})

func init() { metrics.Registry.MustRegister(handoverTimeouts) }

func (r *Reconciler) memo(name string) *handoverMemo {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.memos == nil {
		r.memos = map[string]*handoverMemo{}
	}
	m := r.memos[name]
	if m == nil {
		m = &handoverMemo{reported: map[string]bool{},
			adoptRetry: map[string]time.Time{}, moveSets: map[string]bool{}, trans: &transitions.Table{}}
		r.memos[name] = m
	}
	return m
}

func (r *Reconciler) reader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// handover runs the BGPSessions handover (see above) on what the session verifier read.
func (r *Reconciler) handover(ctx context.Context, st *State) error {
	p := st.Managed.Resolved
	m := r.memo(st.Name)
	if !verifies(st) {
		return nil
	}
	draining, clients := drainingRRs(st), clientsByRR(st)
	var patches []nodePatch
	for _, d := range draining {
		if !r.handoverInPlace(st, d) {
			continue
		}
		to := replacementsAll(st, d)
		missing := unverified(st, clients, to)
		cur := st.View[d]
		mark := cur.Annotations[extender.AnnotationDrainingSince]
		if !slices.Contains(st.Demotions, d) {
			if len(missing) > 0 {
				continue
			}
			// Confirmed: move the mark back so that the next plan makes it a client.
			since, err := time.Parse(time.RFC3339, mark)
			back := st.Now.Add(-p.RemovalDelay).Truncate(time.Second)
			if err == nil && !since.After(back) {
				continue // already released
			}
			ts := back.Format(time.RFC3339)
			patches = append(patches, nodePatch{name: d, ann: map[string]*string{extender.AnnotationDrainingSince: &ts}})
			// The planner demotes it next, by the mark moved back, maybe with its clients
			// rebalanced onto route reflectors not verified here: that is no timeout.
			m.reported[d+"@"+ts] = true
			st.handoverTimeout = "" // handed over: the condition goes (degradedCondition)
			st.handedOver = true
			// On the node too: the policy's Events share one spam-filter budget (25, then one per
			// 5 min), which a rebalancing cluster can spend before this one.
			r.Recorder.Eventf(nodeRef(d, cur), corev1.EventTypeNormal, EventHandedOver,
				"Handed over: every moving client has an Established BGP session with %s", strings.Join(to, ", "))
			r.Recorder.Eventf(st.Policy, corev1.EventTypeNormal, EventHandedOver, "%s: every moving client has an Established BGP session with %s", d, strings.Join(to, ", "))
			continue
		}
		// The planner demotes it: removalDelay has passed.
		if len(missing) == 0 || m.reported[d+"@"+mark] {
			continue
		}
		m.reported[d+"@"+mark] = true
		msg := fmt.Sprintf("%s: handover timed out after %s; clients that never established a BGP session with %s: %s",
			d, p.RemovalDelay, strings.Join(to, ", "), joinCapped(lackingNames(st, to, missing), 20))
		st.handoverTimeout, st.handedOver = msg, false
		r.Recorder.Event(nodeRef(d, cur), corev1.EventTypeWarning, EventHandoverTimeout, msg)
		r.Recorder.Event(st.Policy, corev1.EventTypeWarning, EventHandoverTimeout, msg)
		handoverTimeouts.WithLabelValues(st.Name).Inc()
	}
	if len(patches) > 0 {
		st.requeue(100 * time.Millisecond)
	}
	return r.applyPatches(ctx, st, patches)
}

// degradedCondition is the HandoverTimeout condition while it holds: from a timeout of this
// reconcile, or as the policy's status holds it (the condition's lastTransitionTime is the timeout,
// so a new leader keeps it as long), for removalDelay (at least a minute) after the timeout, unless
// a handover of this reconcile was confirmed. nil: none.
func degradedCondition(st *State, s *v1alpha1.RouteReflectorPolicyStatus) *metav1.Condition {
	c := metav1.Condition{Type: ConditionDegraded, Status: metav1.ConditionTrue, Reason: ReasonHandoverTimeout, Message: st.handoverTimeout,
		ObservedGeneration: st.Policy.Generation, LastTransitionTime: metav1.NewTime(st.Now)}
	if old := meta.FindStatusCondition(s.Conditions, ConditionDegraded); c.Message == "" && !st.handedOver && old != nil &&
		old.Status == metav1.ConditionTrue && old.Reason == ReasonHandoverTimeout {
		c.Message, c.LastTransitionTime = old.Message, old.LastTransitionTime
	}
	until := c.LastTransitionTime.Add(max(st.Managed.Resolved.RemovalDelay, time.Minute))
	if c.Message == "" || !st.Now.Before(until) {
		return nil
	}
	st.requeue(until.Sub(st.Now) + time.Second)
	return &c
}

// lackingNames names the clients, each with the families it was last seen lacking when it has
// others (its addresses' families): "node-07 (IPv6)", a dual-stack client whose IPv6 session
// never came up while its IPv4 one did.
func lackingNames(st *State, rrs, clients []string) []string {
	out := make([]string, 0, len(clients))
	for _, c := range clients {
		var fams extender.Families
		for _, rr := range rrs {
			fams |= st.lacking[rr][c]
		}
		if fams != 0 && fams != sessions.IPsFamilies(sessions.Addresses(st.sessionIPs, st.View, c)) {
			out = append(out, fmt.Sprintf("%s (%s)", c, fams))
			continue
		}
		out = append(out, c)
	}
	return out
}

// clientsByRR maps each route reflector to the Ready clients of the view that peer with it.
func clientsByRR(st *State) map[string][]string {
	p := st.Managed.Resolved
	return rrClients(st.View, func(n *extender.Node) bool {
		return isCurrentRR(p, n) || !extender.IsReady(n) || n.DeletionTimestamp != nil
	})
}

// rrClients maps each route reflector to the nodes of view whose route reflectors annotation
// lists it (sorted), the nodes skip reports aside.
func rrClients(view map[string]*extender.Node, skip func(*extender.Node) bool) map[string][]string {
	out := map[string][]string{}
	for name, n := range view {
		if skip(n) {
			continue
		}
		for _, rr := range strings.Split(n.Annotations[extender.AnnotationRouteReflectors], ",") {
			if rr != "" {
				out[rr] = append(out[rr], name)
			}
		}
	}
	for rr := range out {
		slices.Sort(out[rr])
	}
	return out
}

// drainingRRs are the route reflectors being handed over: draining in the plan, or made clients.
func drainingRRs(st *State) []string {
	var out []string
	for _, rr := range st.Result.RouteReflectors {
		if rr.Draining && st.View[rr.Node] != nil {
			out = append(out, rr.Node)
		}
	}
	for _, d := range st.Demotions {
		if !slices.Contains(out, d) && st.View[d] != nil {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}

// handoverInPlace: every planned route reflector carries its role and no client peers with d any
// more (nor a rack route reflector through its uplink set), so the sessions to check are the ones
// that matter.
func (r *Reconciler) handoverInPlace(st *State, d string) bool {
	if !replacementsInPlace(st) || len(uplinkHolders(st, d)) > 0 {
		return false
	}
	for _, n := range st.View {
		if slices.Contains(strings.Split(n.Annotations[extender.AnnotationRouteReflectors], ","), d) {
			return false
		}
	}
	return true
}

// replacementsInPlace: every active route reflector of the plan carries the role label and its
// planned cluster ID, so nothing is left to a node losing its role.
func replacementsInPlace(st *State) bool {
	p := st.Managed.Resolved
	for _, rr := range st.Result.RouteReflectors {
		if rr.Draining {
			continue
		}
		n := st.View[rr.Node]
		if n == nil || !p.IsRouteReflectorLabel(n.Labels) || n.Annotations[extender.AnnotationClusterID] != rr.ClusterID {
			return false
		}
	}
	return true
}

// replacementsAll are the planned active route reflectors of a node's zone, else of its cluster
// ID, else all of them, sorted: those that take its clients over.
func replacementsAll(st *State, name string) []string {
	n := st.View[name]
	if n == nil {
		return nil
	}
	zone := n.Labels[st.Managed.Resolved.ZoneLabel]
	id := n.Annotations[extender.AnnotationClusterID]
	var byZone, byID, all []string
	for _, rr := range st.Result.RouteReflectors {
		if rr.Draining || rr.Node == name {
			continue
		}
		all = append(all, rr.Node)
		if rr.Zone == zone {
			byZone = append(byZone, rr.Node)
		}
		if rr.ClusterID == id {
			byID = append(byID, rr.Node)
		}
	}
	out := byZone
	if len(out) == 0 {
		out = byID
	}
	if len(out) == 0 {
		out = all
	}
	slices.Sort(out)
	return out
}

func isCurrentRR(p *policy.Resolved, n *extender.Node) bool {
	if !p.IsRouteReflectorLabel(n.Labels) {
		return false
	}
	_, ok := policy.ParseClusterID(n.Annotations[extender.AnnotationClusterID])
	return ok
}

func joinCapped(names []string, limit int) string {
	if len(names) <= limit {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:limit], ", "), len(names)-limit)
}
