package transitions

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/reconciler"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// sessionsPolicy is the transitions test's policy with the handover on BGP sessions: a draining
// route reflector loses its role once its replacements' CalicoNodeStatuses show every client
// Established, and a move between sets waits for a fresh report of the new route reflector
// (internal/transitions Record.Wait); removalDelay, the handover's timeout, is 60 s, so that a
// demotion before it is a confirmed handover.
func sessionsPolicy(topology string) string {
	return strings.NewReplacer("removalDelay: 3s", "removalDelay: 60s\n  handover: BGPSessions",
		"topology: {type: DualPlane, maxRackSize: 10}", "topology: "+topology).Replace(policy)
}

// clientMove is a write of the product that took route reflectors from a client's list
// (AnnotationRouteReflectors), when the test's watch saw it, with the route reflectors whose
// session was Established on the client's BIRD then.
type clientMove struct {
	node           string
	from, to       []string
	fromSet, toSet string // the client's peering set before and after the write
	at             time.Time
	up             map[string]bool
}

// early lists the route reflectors the client keeps from its previous list whose session was not
// Established when the write was seen: the client left a route reflector while the ones it had
// been given to take its place were not up.
func (m clientMove) early() []string {
	var out []string
	for _, rr := range m.to {
		if slices.Contains(m.from, rr) && !m.up[rr] {
			out = append(out, rr)
		}
	}
	return out
}

// leavesTransitional: the client's set before the write was a transitional one.
func (m clientMove) leavesTransitional() bool { return extender.IsTransitionalSet(m.fromSet) }

func (m clientMove) String() string {
	var up []string
	for _, rr := range m.to {
		up = append(up, fmt.Sprintf("%s=%t", rr, m.up[rr]))
	}
	return fmt.Sprintf("%s [%s] -> [%s] (%s) Established: %s", m.node, strings.Join(m.from, " "), strings.Join(m.to, " "), m.toSet, strings.Join(up, " "))
}

// demotion is a route reflector seen losing its role, with every running node's Established
// sessions (by peer) on its BIRD then.
type demotion struct {
	at time.Time
	up map[string]map[string]bool
}

// moveWatch records, from a watch of the Nodes, the product's writes the failover tests check
// against the BIRDs: every client move that drops route reflectors and every demotion, with the
// sessions Established then.
type moveWatch struct {
	mu       sync.Mutex
	moves    []clientMove
	demoted  map[string]demotion
	promoted map[string]time.Time // first seen an active route reflector
}

func (m *moveWatch) snapshot() ([]clientMove, map[string]demotion, map[string]time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.moves), maps.Clone(m.demoted), maps.Clone(m.promoted)
}

// changes counts what the watch recorded (for failover.complete).
func (m *moveWatch) changes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.moves) + len(m.demoted) + len(m.promoted)
}

func rrList(n *corev1.Node) []string {
	if v := n.Annotations[extender.AnnotationRouteReflectors]; v != "" {
		return strings.Split(v, ",")
	}
	return nil
}

// watchMoves starts a moveWatch; the channel it returns is closed the first time trigger accepts a
// Node the watch delivers (with the version before).
func (f *failover) watchMoves(trigger func(prev, cur *corev1.Node) bool) (*moveWatch, <-chan struct{}) {
	m := &moveWatch{demoted: map[string]demotion{}, promoted: map[string]time.Time{}}
	fired := make(chan struct{})
	var once sync.Once
	testenv.WatchNodes(f.t, f.w.admin, func(prev, cur *corev1.Node, at time.Time) {
		if trigger(prev, cur) {
			once.Do(func() { close(fired) })
		}
		if prev == nil {
			return
		}
		wasRR, isRR := prev.Annotations[extender.AnnotationClusterID] != "", cur.Annotations[extender.AnnotationClusterID] != ""
		switch {
		case activeID(prev) == "" && activeID(cur) != "":
			m.mu.Lock()
			if _, ok := m.promoted[cur.Name]; !ok {
				m.promoted[cur.Name] = at
			}
			m.mu.Unlock()
		case wasRR && !isRR:
			d := demotion{at: at, up: map[string]map[string]bool{}}
			for _, n := range f.names {
				if f.lab.Running(n) {
					d.up[n] = f.h.sessionsUp(n)
				}
			}
			m.mu.Lock()
			m.demoted[cur.Name] = d
			m.mu.Unlock()
		case !wasRR && !isRR:
			from, to := rrList(prev), rrList(cur)
			if fs, ts := prev.Labels[extender.LabelPeeringSet], cur.Labels[extender.LabelPeeringSet]; fs != ts {
				// A client's annotation lists its planned route reflectors, then the old ones its
				// set still has, whichever its transitional set peers with: its sessions are its
				// sets' BGPPeers'.
				from, to = f.setMembers(fs), f.setMembers(ts)
			}
			if !slices.ContainsFunc(from, func(rr string) bool { return !slices.Contains(to, rr) }) {
				return // nothing dropped
			}
			mv := clientMove{node: cur.Name, from: from, to: to, fromSet: prev.Labels[extender.LabelPeeringSet],
				toSet: cur.Labels[extender.LabelPeeringSet], at: at, up: f.h.sessionsUp(cur.Name)}
			m.mu.Lock()
			m.moves = append(m.moves, mv)
			m.mu.Unlock()
		}
	})
	return m, fired
}

// setMembers names the route reflectors a peering set's BGPPeer selects (by their route
// reflector IDs), read from the API (nil when it cannot be read).
func (f *failover) setMembers(set string) []string {
	if set == "" {
		return nil
	}
	p, err := f.w.dyn.Resource(bgpPeersGVR).Get(f.t.Context(), extender.SetBGPPeerName(extender.LabelPeeringSet, set), metav1.GetOptions{})
	if err != nil {
		return nil
	}
	sel, _, _ := unstructured.NestedString(p.Object, "spec", "peerSelector")
	ids, _ := extender.PeerRouteReflectorIDs(sel)
	var out []string
	for _, n := range f.names {
		if slices.Contains(ids, extender.RouteReflectorID(n)) {
			out = append(out, n)
		}
	}
	return out
}

// statusReport is one CalicoNodeStatus report (the harness's status reporter), when the test's
// watch saw it: the node, its lastUpdated, the peers (by name) it lists Established, with their
// since column.
type statusReport struct {
	node    string
	updated time.Time
	at      time.Time
	up      map[string]bool
	since   map[string]string
}

type statusWatch struct {
	mu      sync.Mutex
	reports []statusReport
}

// before returns node's last report seen before at, if any.
func (s *statusWatch) before(node string, at time.Time) (statusReport, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.reports) - 1; i >= 0; i-- {
		if r := s.reports[i]; r.node == node && r.at.Before(at) {
			return r, true
		}
	}
	return statusReport{}, false
}

// find returns the last report of node seen before at, written at or after from, that match takes.
func (s *statusWatch) find(node string, from, at time.Time, match func(statusReport) bool) (statusReport, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.reports) - 1; i >= 0; i-- {
		if r := s.reports[i]; r.node == node && r.at.Before(at) && !r.updated.Before(from) && match(r) {
			return r, true
		}
	}
	return statusReport{}, false
}

// watchStatuses records every CalicoNodeStatus report with a BGP status.
func (f *failover) watchStatuses() *statusWatch {
	t := f.t
	t.Helper()
	s := &statusWatch{}
	byAddr := f.h.nodeByAddr()
	wi, err := f.w.dyn.Resource(nodeStatusGVR).Watch(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	t.Cleanup(wi.Stop)
	go func() {
		for ev := range wi.ResultChan() {
			o, ok := ev.Object.(*unstructured.Unstructured)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			node, _, _ := unstructured.NestedString(o.Object, "spec", "node")
			last, _, _ := unstructured.NestedString(o.Object, "status", "lastUpdated")
			updated, err := time.Parse(time.RFC3339, last)
			if err != nil {
				continue // not reported yet
			}
			r := statusReport{node: node, updated: updated, at: time.Now(), up: map[string]bool{}, since: map[string]string{}}
			peers, _, _ := unstructured.NestedSlice(o.Object, "status", "bgp", "peersV4")
			for _, p := range peers {
				pm, _ := p.(map[string]any)
				if pm["state"] == "Established" {
					peer := byAddr[fmt.Sprint(pm["peerIP"])]
					r.up[peer] = true
					r.since[peer] = fmt.Sprint(pm["since"])
				}
			}
			s.mu.Lock()
			s.reports = append(s.reports, r)
			s.mu.Unlock()
		}
	}()
	return s
}

// eventsWith lists the cluster's Events of this reason (as world.events prints them).
func (f *failover) eventsWith(reason string) []string {
	var out []string
	for _, l := range strings.Split(f.w.events(), "\n") {
		if strings.Contains(l, " "+reason+" ") {
			out = append(out, l)
		}
	}
	return out
}

// checkMoves asserts that no client left a route reflector while one it keeps from its previous
// set (given earlier to take the place of the one it leaves) had no Established session on its
// BIRD, and logs every move. A move is a change of the client's peering set (its route reflectors
// those its sets' BGPPeers select: setMembers) or, in the same set, a route reflector gone from its
// annotation (a set whose BGPPeer is narrowed, as a cordon's rack set).
func (f *failover) checkMoves(moves []clientMove) {
	f.t.Helper()
	var lines, early []string
	for _, m := range moves {
		rel := "before"
		if !m.at.Before(f.killed) {
			rel = "after"
		}
		lines = append(lines, fmt.Sprintf("%s @%v %s the kill", m, m.at.Sub(f.killed).Round(10*time.Millisecond), rel))
		if e := m.early(); len(e) > 0 {
			early = append(early, fmt.Sprintf("%s (not Established: %v)", m.node, e))
		}
	}
	f.t.Logf("client moves (from the kill):\n  %s", strings.Join(lines, "\n  "))
	assert.Emptyf(f.t, early, "clients moved while a route reflector they keep had no Established session")
}

// checkDemotion asserts that rr was demoted only once each of its former clients had an
// Established session, on its BIRD and in its new route reflectors' last CalicoNodeStatus report
// seen before (statuses nil, when no status reporter runs: BIRD only), with every route reflector it ends with.
func (f *failover) checkDemotion(rr string, d demotion, clients []string, after *roles, statuses *statusWatch) {
	t := f.t
	t.Helper()
	var lacking, unreported []string
	for _, c := range clients {
		for _, to := range strings.Split(after.rrs[c], ",") {
			if !d.up[c][to] {
				lacking = append(lacking, c+"->"+to)
			}
			if statuses == nil {
				continue
			}
			r, ok := statuses.before(to, d.at)
			switch {
			case !ok:
				unreported = append(unreported, fmt.Sprintf("%s->%s (no report of %s)", to, c, to))
			case !r.up[c]:
				unreported = append(unreported, fmt.Sprintf("%s->%s (report of %s seen %v before)", to, c, r.updated.Format("15:04:05"), d.at.Sub(r.at).Round(10*time.Millisecond)))
			}
		}
	}
	t.Logf("%s demoted %v after the kill; its clients %v", rr, d.at.Sub(f.killed).Round(10*time.Millisecond), clients)
	assert.Emptyf(t, lacking, "%s demoted while its clients' sessions with their new route reflectors were not Established on their BIRD", rr)
	assert.Emptyf(t, unreported, "%s demoted before its clients' new route reflectors reported them Established", rr)
}

// TestFailoverMidHandoverOnRealBIRDLarge is issue 51's live acceptance at its third moment: the
// leading replica of the product is SIGKILLed during a cordon handover, after the replacement was
// promoted and before the cordoned route reflector is demoted, and the other replica, which takes
// the lease when it expires, finishes the handover from what the API holds (the draining mark,
// the records of the policy's status, the CalicoNodeStatuses).
//
// On the failover harness (failoverRenumbering's: 18 nodes in 3 zones running BIRD 1.6
// configured by Calico's confd, two replicas of `serve` with leader election, every BIRD read every
// 200 ms), DualPlane racks of 10 (a rack per zone, 8 route reflectors), the handover on BGP
// sessions (sessionsPolicy: removalDelay 60 s is its timeout) and calico-node's status reporter
// played into the product's CalicoNodeStatuses every second. A rack route reflector of zone-a is
// cordoned (TestTransitionsOnRealBIRD's event (i)); the test's watch of the Nodes sees the
// replacement promoted and the leader is SIGKILLed at once (its lease is not released). It asserts:
// 0 pair-samples lost between nodes that keep their role and cluster ID; the cordoned route
// reflector demoted after the kill (the new leader finished the handover) and only once each of
// its former clients had an Established session with each route reflector it ends with, both on
// the client's BIRD (read when the demotion was seen) and in those route reflectors' last
// CalicoNodeStatus report seen before it; no HandoverTimeout Event, a RouteReflectorHandedOver
// Event for it; no client left a route reflector while one it keeps from its previous list (given
// earlier to take the other's place) had no Established session on its BIRD (checkMoves); the
// transition completes (the layout settles, no node in a transitional set, the policy's
// status.transitions empty, as many route reflectors as planned).
//
// What it checks from the product's write times and the reports, and what not: the test sees each
// write when its watch event arrives (milliseconds after the write), and reads the BIRDs and keeps
// every CalicoNodeStatus report at that moment; a session that came up between the write and the
// watch event would count as up. The product's own reading of the reports (which report it took,
// whether it judged it fresh) is not visible: the test checks the outcome against the reports the
// API held, not the product's reasoning. A client whose move goes in one write (its rack's set
// keeps the cordoned route reflector's settled rack mate) is given the replacement while the
// replacement's sessions are still coming up: by the moves' rule (internal/reconciler moves.go)
// its routes stay with the mate meanwhile, so that is not counted as early; the cordoned one's
// demotion is what the replacement's sessions gate.
//
// What a faster test cannot prove: TestReconcileFailoverMidHandover (internal/reconciler) hands the
// handover to a new reconciler in-process from the same fake client, with the sessions as the test
// declares them; here the leader is a real process killed with no chance to write anything, the new
// one reads the draining mark, the records and the CalicoNodeStatuses from a real API server after
// a real lease expiry, the sessions are the ones real BIRDs report, and a handover counts as safe
// only if those BIRDs lose no route between the nodes that keep their role.
//
// It runs in make test-all: RRA_TEST_ALL=1 go test -count=1 -v -timeout 30m -run
// 'TestFailoverMidHandoverOnRealBIRDLarge$' ./test/transitions/ (as root); about 2 minutes past
// the setup (the product's build and 18 BIRDs routed: 45 s alone, 12 min while other helpers built
// beside it at load average 45-70).
//
// Runs on 2026-12-01 (load average 40-70 beside other helpers' builds and tests):
//   - 20:37: passed, 860 s (setup 12 min 26 s). node-03 (zone-a-rack-1, plane 1) cordoned; node-09
//     promoted and the leader SIGKILLed 1.04 s after the cordon, node-03's draining mark already
//     written, its clients (node-12, node-15) not yet moved; the lease taken 15.5 s after the
//     kill; the new leader moved both clients [node-03 node-06] -> [node-06 node-09] 18.2 s after
//     the kill (node-06 and node-09 Established on their BIRDs then), confirmed the handover
//     (RouteReflectorHandedOver, node-00, node-06, node-09 reported every client Established) and
//     demoted node-03 20.9 s after the cordon, 4.3 s after the lease was taken, both clients
//     Established with node-06 and node-09 on BIRD and in their reports; no HandoverTimeout; 0
//     pair-samples lost between nodes that keep their role and cluster ID, 570 in all (66 pairs,
//     each with node-03 or node-09 at one end), longest gap 1.8 s (node-03->node-00); 8 sessions
//     restarted, all between node-03, node-06 and node-09; peak 54 routes against 35. (That run
//     read every client move from the clients' annotation; checkMoves now reads a client's sets'
//     BGPPeers when its set changes, which this cordon's clients, keeping their rack set, do not.)
func TestFailoverMidHandoverOnRealBIRDLarge(t *testing.T) {
	skipUnlessAll(t, "the live failover proof during a cordon handover")
	f := startFailover(t, failoverNodes, sessionsPolicy("{type: DualPlane, maxRackSize: 10}"), 8, true)
	w := f.w
	before := w.roles()
	v := before.pick(func(n *corev1.Node) bool { return !before.spine(n) && n.Labels[corev1.LabelTopologyZone] == "zone-a" })
	require.NotEmpty(t, v, "no rack route reflector in zone-a: %v", before.id)
	// The replacement's promotion, once the cordon is written.
	moves, promoted := f.watchMoves(func(prev, cur *corev1.Node) bool {
		return prev != nil && activeID(prev) == "" && activeID(cur) != ""
	})

	f.h.s.Begin("leader killed mid-handover (a rack RR cordoned)")
	t.Logf("cordon %s (rack %s, plane %s, %s)", v, before.rack(v), before.plane(v), before.id[v])
	_, stderr, err := w.env.Kubectl(t, testenv.UserAdmin, "cordon", v)
	require.NoError(t, err, stderr)
	cordoned := time.Now()
	select {
	case <-promoted:
	case <-time.After(time.Minute):
		t.Fatalf("no route reflector promoted within a minute of the cordon")
	}
	f.kill()
	_, demoted, prom := moves.snapshot()
	cur := w.roles()
	require.NotContains(t, demoted, v, "%s demoted before the kill: the kill was not mid-handover", v)
	t.Logf("leader SIGKILLed %v after the cordon, at the promotion of %v; %s draining then: %t; records then: %v",
		f.killed.Sub(cordoned).Round(10*time.Millisecond), slices.Sorted(maps.Keys(prom)), v, cur.draining[v], w.policyTransitions())
	took := f.takeover()

	w.eventually(v+" replaced", 2*time.Minute, func() error { return w.replaced(v) })
	after, demoted := f.finishMoves(before, moves)
	d, ok := demoted[v]
	require.True(t, ok, "%s's demotion not seen", v)
	require.True(t, d.at.After(f.killed), "%s demoted before the kill", v)
	t.Logf("%s demoted %v after the cordon, %v after the lease was taken", v, d.at.Sub(cordoned).Round(10*time.Millisecond), d.at.Sub(f.killed.Add(took)).Round(10*time.Millisecond))
	handed := f.eventsWith(reconciler.EventHandedOver)
	t.Logf("handover Events: %v", handed)
	assert.True(t, slices.ContainsFunc(handed, func(l string) bool { return strings.Contains(l, "Node/"+v+" ") }), "no %s Event for %s", reconciler.EventHandedOver, v)
	f.keptLoss(f.fig, before, after)
	f.h.finish()
}

// finishMoves waits until the transition completes (failover.complete, also counting what
// more count), ends the sampler's window (failover.fig) and checks what the moves' tests share: the
// layout completed, no handover timed out, every demotion seen after the kill (checkDemotion, for
// the clients the demoted route reflector had before and that stay clients) and every client move
// (checkMoves). It returns the roles after and the demotions.
func (f *failover) finishMoves(before *roles, moves *moveWatch, more ...func() int) (*roles, map[string]demotion) {
	t := f.t
	t.Helper()
	f.complete(func() int {
		n := moves.changes()
		for _, c := range more {
			n += c()
		}
		return n
	})
	f.fig = f.h.s.End()
	after := f.w.roles()
	mv, demoted, prom := moves.snapshot()
	for _, n := range slices.Sorted(maps.Keys(prom)) {
		t.Logf("%s promoted %v after the kill", n, prom[n].Sub(f.killed).Round(10*time.Millisecond))
	}
	for _, rr := range slices.Sorted(maps.Keys(demoted)) {
		var clients []string
		for c, rrs := range before.rrs {
			if slices.Contains(strings.Split(rrs, ","), rr) && after.id[c] == "" && !after.draining[c] && after.ready[c] {
				clients = append(clients, c)
			}
		}
		slices.Sort(clients)
		f.checkDemotion(rr, demoted[rr], clients, after, f.statuses)
	}
	f.checkMoves(mv)
	assert.Empty(t, f.eventsWith(reconciler.EventHandoverTimeout), "handover timeouts")
	f.completed(after)
	return after, demoted
}

// splitNodes is the size of TestFailoverMidRackSplitOnRealBIRDLarge: 8 nodes a zone, one rack of 8
// (maxRackSize 10) that splits into two of 4.
const splitNodes = 24

// TestFailoverMidRackSplitOnRealBIRDLarge is issue 51's live acceptance at its second moment: the
// leading replica is SIGKILLed while clients sit in transitional peering sets of a DualPlane rack
// split, and the other replica, once it holds the lease, moves them on from the records of the
// policy's status (ClientMove, SessionsRestart, Renumber) and the transitional sets the nodes carry.
//
// On the failover harness with splitNodes nodes in 3 zones, the policy and status reporter of
// TestFailoverMidHandoverOnRealBIRDLarge (the handover and the moves on BGP sessions), DualPlane
// with maxRackSize 10 (a rack of 8 per zone, 8 route reflectors), the policy's maxRackSize is
// lowered to 4: each zone's rack splits into two, route reflectors are promoted, and clients whose
// set keeps no settled route reflector move make-before-break through transitional sets
// (internal/reconciler moves.go: {old 1, old 2} -> {old 1, old 2, new 1} -> {old 2, new 1, new 2}
// -> {new 1, new 2}). The test's watch of the Nodes sees the first client labelled with a
// transitional set (extender.IsTransitionalSet) and the leader is SIGKILLed at once. It asserts:
// 0 pair-samples lost between nodes that keep their role and cluster ID; the new leader moves
// clients on from their transitional sets; no client leaves a route reflector while one it keeps
// from its previous list (the new one it was given earlier) had no Established session on its
// BIRD when the write was seen (checkMoves); every demotion only once the demoted route
// reflector's former clients had Established sessions with their new route reflectors, on their
// BIRD and in those route reflectors' last CalicoNodeStatus report seen before (checkDemotion); no
// handover timed out; no two renumberings of route reflectors that keep their role closer than the
// settle rule (10 s less the watch's jitter), the one across the leader change included; the
// transition completes (racks of at most 4, no node in a transitional set, the policy's
// status.transitions empty, as many route reflectors as planned). What it checks from the
// product's write times and the reports, and what not, is as in
// TestFailoverMidHandoverOnRealBIRDLarge: the writes as the watch saw them, the BIRDs read then,
// the reports the API held; not which report the product took for fresh.
//
// What a faster test cannot prove: the moves' unit tests (internal/reconciler moves_test.go,
// failover_test.go) check the order of the writes and a new reconciler's first writes from the same
// fake client; here the transitional sets a killed process left are taken over by another process
// from a real API server after a real lease expiry, and each step counts as safe only if real
// BIRDs, rendered by confd from the sets, lose no route between the nodes that keep their role.
//
// It runs in make test-all: RRA_TEST_ALL=1 go test -count=1 -v -timeout 30m -run
// 'TestFailoverMidRackSplitOnRealBIRDLarge$' ./test/transitions/ (as root); about 2.5 minutes past
// the setup (45-90 s).
//
// What it could not check in the runs below: the split demoted no route reflector (the old rack
// route reflectors stay those of the racks' first halves) and renumbered none, so checkDemotion and
// the settle rule's gaps had nothing to check; a client's last move is missed when its old
// transitional set's BGPPeer is already pruned when the watch reads it (one of twelve in the run of
// 20:46).
//
// Runs on 2026-12-01 (load average 40-70 beside other helpers' builds and tests):
//   - 20:40: failed on the test's own check, not the product: it read a client's route reflectors
//     from its annotation, which lists the planned route reflectors first whichever its
//     transitional set peers with, so each client's step {old 1, old 2, new 1} -> {old 2, new 1,
//     new 2} counted new 2 (not yet in its set) as kept and not Established (6 clients). Killed
//     1.23 s after the apply with 5 clients in transitional sets; the lease taken 16.9 s later; 0
//     pair-samples lost between kept nodes (5,932 in all, 241 pairs, each with one of the six
//     promoted nodes at one end), longest gap 9.4 s (node-17->node-13). checkMoves now reads a
//     client's sets' BGPPeers when its set changes.
//   - 20:46: passed, 241 s (setup 1 min 30 s). node-12 to node-17 promoted (two per zone, each
//     zone's rack split in two), the leader SIGKILLed 2.57 s after the apply with 6 clients in
//     transitional sets {old 1, old 2, new 1} and their ClientMove records pending; the lease taken
//     20.2 s after the kill; the new leader moved each client to {old 2, new 1, new 2} 28-31.4 s
//     after the kill (old 2 and new 1 Established on its BIRD every time), then to its new rack set
//     36.8-52.9 s after (both new route reflectors Established); 0 pair-samples lost between nodes
//     that keep their role and cluster ID, 3,574 in all (246 pairs, each with a promoted node at one
//     end), longest gap 8.7 s (node-15->node-14); 2 sessions restarted (node-16->node-19, connection
//     collisions); peak 80 routes against 47.
func TestFailoverMidRackSplitOnRealBIRDLarge(t *testing.T) {
	skipUnlessAll(t, "the live failover proof during a rack split's transitional sets")
	f := startFailover(t, splitNodes, sessionsPolicy("{type: DualPlane, maxRackSize: 10}"), 8, true)
	w := f.w
	before := w.roles()
	renums := watchRenumberings(t, w)
	moves, moving := f.watchMoves(func(_, cur *corev1.Node) bool {
		return extender.IsTransitionalSet(cur.Labels[extender.LabelPeeringSet])
	})

	f.h.s.Begin("leader killed mid rack split (clients in transitional sets)")
	out, stderr, err := w.env.KubectlStdin(t, testenv.UserAdmin, sessionsPolicy("{type: DualPlane, maxRackSize: 4}"), "apply", "-f", "-")
	require.NoError(t, err, "apply policy\n%s%s", out, stderr)
	applied := time.Now()
	select {
	case <-moving:
	case <-time.After(2 * time.Minute):
		t.Fatalf("no client in a transitional set within 2 minutes of the split")
	}
	f.kill()
	cur := w.roles()
	t.Logf("leader SIGKILLed %v after the apply; in transitional sets then: %v; records then: %v",
		f.killed.Sub(applied).Round(10*time.Millisecond), cur.transitional(), w.policyTransitions())
	f.takeover()

	w.eventually("racks of at most 4", 3*time.Minute, func() error {
		if big := w.roles().racksOver(4); len(big) > 0 {
			return fmt.Errorf("racks over 4 nodes: %v", big)
		}
		return w.settledAny()
	})
	after, _ := f.finishMoves(before, moves, func() int { return len(renums.All()) })
	mv, _, _ := moves.snapshot()
	require.True(t, slices.ContainsFunc(mv, func(m clientMove) bool { return m.at.After(f.killed) && m.leavesTransitional() }),
		"the new leader moved no client on from a transitional set")
	f.renumberGaps(renums.All(), applied)
	f.keptLoss(f.fig, before, after)
	f.h.finish()
}
