// Package transitions is the reconciler's one record of the moves in flight: a route reflector
// whose BGP sessions (re)started (renumbered, promoted, given clients or rack route reflectors by
// a transitional set, released by a deleted policy's release), when, and how long the moves that
// rely on those sessions wait (and two steps' waits: MeshOff, Adopt). One rule decides every such
// wait (Record.Wait), one freshness rule decides which CalicoNodeStatus report may settle it
// (Record.Fresh), and the records live in the policy's status (status.transitions): the
// reconciler writes them there before the move they record, so that a new leader (a failover, a
// `helm upgrade` rolling the replicas) reads them back and resumes each wait where it stood,
// shortening none and assuming no route reflector settled.
//
// The package decides waits only; which move goes (the graph model's checks, the transitional
// sets, the planes) stays with the reconciler's steps.
package transitions

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// Kind is what started a record.
type Kind string

// The kinds of records.
const (
	// Renumber: a route reflector keeping its role changed its cluster ID (the cluster-ID
	// staging's record: the next renumbering waits for its sessions).
	Renumber Kind = "Renumber"
	// SessionsRestart: the node was promoted or renumbered; every session it has (re)starts.
	SessionsRestart Kind = "SessionsRestart"
	// ClientMove: a transitional peering set gave the route reflector clients.
	ClientMove Kind = "ClientMove"
	// UplinkMove: a transitional uplink set gave the spine member rack route reflectors.
	UplinkMove Kind = "UplinkMove"
	// SetInherited: a transitional set some node carries selects the route reflector and no record
	// said when (a leader before this record existed): its wait starts when it was found.
	SetInherited Kind = "SetInherited"
	// ReleaseStep: a deleted policy's release released the route reflector; the next one waits
	// for the keeper's sessions from then.
	ReleaseStep Kind = "ReleaseStep"
	// MeshOff and Adopt are a step's wait (Hold): the mesh migration's, its Node the layout's
	// fingerprint (layout@hash), and the adopt step's for a hand-written BGPPeer, its Node
	// name@resourceVersion; a changed layout or BGPPeer is another record. No node name has an '@',
	// so no call about a node sees them, and their step drops them (Drop), not Expire: Max bounds
	// the wait, and the step must still find it then to make its move.
	MeshOff Kind = "MeshOff"
	Adopt   Kind = "Adopt"
	// Sessions is the session verifier's record of a node whose sessions with its present peers a
	// step awaits (a handover's replacement, the mesh's and an adoption's route reflectors, a held
	// move's or the last renumbering's route reflector, the release's keeper): Up once one report
	// made after it started shows every one of them Established. Its Node is the node and a
	// fingerprint of those peers (Subject): other peers are another record, and any record of the
	// node started later starts it again (Start). The verifier drops those no step needs (Drop).
	Sessions Kind = "Sessions"
	// BGPDown is BGP health's record of a route reflector seen with no Established session since
	// Started (extender.BGPHealth, its DownSince): the grace period counts from then, for a new
	// leader too. Its Max is bgpPeer.maxRestartTime: a set keeps a route reflector that orphaned a
	// client (Orphaning) until then, as its clients' BIRDs hold the routes learnt over it. Its
	// step keeps it (Drop) while the route reflector is down, or back for less than the hold; no
	// wait of the node's sessions reads it.
	BGPDown Kind = "BGPDown"
)

// SessionsWaits are a Sessions record's bounds: a report counts from its start (Min 0).
var SessionsWaits = Waits{Settle: DefaultSettle, Max: DefaultMax}

// Subject is the Sessions record's Node for node and its awaited peers (in any order).
func Subject(node string, peers []string) string {
	h := fnv.New64a()
	for _, p := range slices.Sorted(slices.Values(peers)) {
		fmt.Fprintf(h, "%s;", p)
	}
	return fmt.Sprintf("%s@%016x", node, h.Sum64())
}

// of: the record's key is the node's own, or its Sessions record's (BGP health's is not: is).
func (k key) of(node string) bool {
	return k.is(node) || k.kind == Sessions && strings.HasPrefix(k.node, node+"@")
}

// is: the record is the node's own and about its sessions' (re)start (not BGP health's).
func (k key) is(node string) bool { return k.node == node && k.kind != BGPDown }

// What a record's Sessions field says of the reports read since it started.
const (
	SessionsReported    = "Reported"
	SessionsEstablished = "Established"
	// SessionsSettled: no session was awaited (Settled), no report read.
	SessionsSettled = "Settled"
)

// Waits are a record's bounds.
type Waits struct {
	// Min: nothing relying on the sessions goes sooner, and a CalicoNodeStatus report counts only
	// when made at least Min after the start (a report made before BIRD reconfigured still shows
	// the old sessions Established).
	Min time.Duration
	// Settle is the wait when no report can tell: confd renders within a second and BIRD
	// re-establishes within a few (1-4 s on the live lab).
	Settle time.Duration
	// Max bounds the wait (a dead peer never comes back): the moves relying on it then go.
	Max time.Duration
}

// Every kind's bounds today.
const (
	DefaultMin    = 3 * time.Second
	DefaultSettle = 10 * time.Second
	DefaultMax    = time.Minute
)

// DefaultWaits are every kind's bounds today.
var DefaultWaits = Waits{Min: DefaultMin, Settle: DefaultSettle, Max: DefaultMax}

// Retry is how soon a wait that only a CalicoNodeStatus report can end is looked at again.
const Retry = time.Second

// Record is one move in flight.
type Record struct {
	Kind    Kind
	Node    string
	Started time.Time
	Waits
	// Seen: a fresh report (Fresh) of the node was read; Up: it showed every awaited session
	// Established (or none was awaited: Settled); Alive: BGP health saw a session of the node's
	// role Established since Started.
	Seen, Up, Alive bool
	// Pending: started, its move not yet confirmed made (Restamp confirms it).
	Pending bool
	// Resumed: when a new leader read the record, no report seen by then (FromAPI). Without a
	// fresh report, its Settle counts from then: the old leader may have died before it asked
	// calico-node for one (the CalicoNodeStatus the handover creates).
	Resumed time.Time
	// Orphaning and UpSince are a BGPDown record's (extender.BGPHealth's); Failed: its failure was
	// announced.
	Orphaning []string
	UpSince   time.Time
	Failed    bool
}

// Verify is what a wait reads of the sessions.
type Verify uint8

const (
	// Timed: no report is read (handover Timed): Settle.
	Timed Verify = iota
	// Reports: CalicoNodeStatus reports are read (handover BGPSessions), and none of the policy's
	// was ever seen filled in: calico-node may not report (before 3.22), so a record without a
	// fresh report by Settle goes as without verification.
	Reports
	// Reporting: reports are read and calico-node reports in this cluster (a record of the
	// policy's was seen, or BGP health's statuses were filled in): a record waits for a fresh
	// report until Max. A late confd or BIRD (a report made after the change still shows the old
	// sessions until BIRD loads it) then delays the next move, never lets it go early.
	Reporting
)

// Wait is how long a move relying on the record's sessions must still wait at now (0: go): Min
// at least; then, when the sessions can be read (v), until a fresh report shows every awaited
// session Established (Reports: without any fresh report, Settle, from the start or from when a
// new leader resumed it), otherwise (Timed) Settle; never more than Max.
func (r *Record) Wait(now time.Time, v Verify) time.Duration {
	since := now.Sub(r.Started)
	switch {
	case since >= r.Max:
		return 0
	case since < r.Min:
		return r.Min - since
	}
	if v == Timed {
		return max(0, r.Settle-since)
	}
	if r.Up || (v == Reports && !r.Seen && now.Sub(later(r.Started, r.Resumed)) >= r.Settle) {
		return 0 // back, or no report to read: as without verification
	}
	return Retry
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Fresh: a report made at reported can show the sessions the record awaits.
func (r *Record) Fresh(reported time.Time) bool { return !reported.Before(r.Started.Add(r.Min)) }

// Starting: the sessions started less than Max ago and none was seen up since.
func (r *Record) Starting(now time.Time) bool {
	return !r.Up && !r.Alive && now.Sub(r.Started) < r.Max
}

type key struct {
	kind Kind
	node string
}

// Table holds a policy's records.
type Table struct {
	recs map[key]*Record
	// ReportsSeen is when a fresh report was first read for one of the records (the policy's
	// status.sessionReportsSeen; zero: never): calico-node reports in this cluster.
	ReportsSeen time.Time
}

// FromAPI reads the records a policy's status holds (a new leader's start, at now). A record of an
// unknown kind or without a node is skipped. A pending record (its move written, the old leader
// gone before it confirmed the move) starts again at now: the move may have gone at any moment up
// to now, and a wait counted from the record's start could be too short. A record no report was
// seen for is Resumed at now.
func FromAPI(list []v1alpha1.Transition, now time.Time) *Table {
	t := &Table{}
	for _, tr := range list {
		if tr.Node == "" || !slices.Contains(kinds, Kind(tr.Kind)) {
			continue
		}
		w := Waits{Min: tr.MinWait.Duration, Settle: tr.SettleWait.Duration, Max: tr.MaxWait.Duration}
		if w.Max <= 0 {
			w = DefaultWaits
		}
		rec := &Record{Kind: Kind(tr.Kind), Node: tr.Node, Started: tr.StartedAt.Time, Waits: w,
			Seen: tr.Sessions == SessionsReported || tr.Sessions == SessionsEstablished,
			Up:   tr.Sessions == SessionsEstablished || tr.Sessions == SessionsSettled, Alive: tr.Alive, Orphaning: tr.Orphaning, Failed: tr.Failed}
		if tr.UpSince != nil {
			rec.UpSince = tr.UpSince.Time
		}
		if tr.Pending {
			rec.Started, rec.Seen, rec.Up, rec.Alive = now, false, false, false
		}
		if !rec.Seen && !rec.Up {
			rec.Resumed = now
		}
		t.put(rec)
	}
	return t
}

// kinds are the kinds a record may have.
var kinds = []Kind{Renumber, SessionsRestart, ClientMove, UplinkMove, SetInherited, ReleaseStep, MeshOff, Adopt, Sessions, BGPDown}

// API is the table as the policy's status holds it, sorted by kind and node.
func (t *Table) API() []v1alpha1.Transition {
	if t == nil || len(t.recs) == 0 {
		return nil
	}
	out := make([]v1alpha1.Transition, 0, len(t.recs))
	for _, r := range t.sorted() {
		tr := v1alpha1.Transition{Kind: string(r.Kind), Node: r.Node, StartedAt: metav1.NewMicroTime(r.Started),
			MinWait: metav1.Duration{Duration: r.Min}, SettleWait: metav1.Duration{Duration: r.Settle},
			MaxWait: metav1.Duration{Duration: r.Max}, Alive: r.Alive, Pending: r.Pending, Orphaning: r.Orphaning, Failed: r.Failed}
		if !r.UpSince.IsZero() {
			t := metav1.NewMicroTime(r.UpSince)
			tr.UpSince = &t
		}
		switch {
		case r.Up && !r.Seen:
			tr.Sessions = SessionsSettled
		case r.Up:
			tr.Sessions = SessionsEstablished
		case r.Seen:
			tr.Sessions = SessionsReported
		}
		out = append(out, tr)
	}
	return out
}

func (t *Table) sorted() []*Record {
	out := slices.Collect(maps.Values(t.recs))
	slices.SortFunc(out, func(a, b *Record) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Node, b.Node))
	})
	return out
}

func (t *Table) put(r *Record) {
	if t.recs == nil {
		t.recs = map[key]*Record{}
	}
	t.recs[key{r.Kind, r.Node}] = r
}

// Start records that the sessions of these nodes (re)start now for the kind's reason, in place of
// the kind's record of each; their Sessions records start again.
func (t *Table) Start(kind Kind, now time.Time, nodes ...string) {
	for _, n := range nodes {
		t.restart(n)
		t.put(&Record{Kind: kind, Node: n, Started: now, Waits: DefaultWaits, Pending: true})
	}
}

// restart drops the node's Sessions records: its sessions (re)start.
func (t *Table) restart(node string) {
	for k := range t.recs {
		if k.kind == Sessions && k.of(node) {
			delete(t.recs, k)
		}
	}
}

// Hold is a wait for the subject: its record, started (confirmed, not pending) at now when there
// is none, its bounds made w. A step's own wait (MeshOff, Adopt), or a start no record held (a
// Renumber a leader of a release before the records made), so that a later leader's wait counts
// from the same start. A record it starts of a node starts the node's Sessions records again.
func (t *Table) Hold(kind Kind, subject string, now time.Time, w Waits) *Record {
	r := t.Get(kind, subject)
	if r == nil {
		if kind != Sessions && kind != BGPDown {
			t.restart(subject)
		}
		r = &Record{Kind: kind, Node: subject, Started: now}
		t.put(r)
	}
	r.Waits = w
	return r
}

// Drop removes the kind's records but those of the subjects kept.
func (t *Table) Drop(kind Kind, keep ...string) {
	for k := range t.recs {
		if k.kind == kind && !slices.Contains(keep, k.node) {
			delete(t.recs, k)
		}
	}
}

// Get is the kind's record of the node (nil: none).
func (t *Table) Get(kind Kind, node string) *Record {
	if t == nil {
		return nil
	}
	return t.recs[key{kind, node}]
}

// Of are the kind's records, sorted by node.
func (t *Table) Of(kind Kind) []*Record {
	var out []*Record
	for _, r := range t.sorted() {
		if r.Kind == kind {
			out = append(out, r)
		}
	}
	return out
}

// Has: the node has a record of any kind but BGPDown.
func (t *Table) Has(node string) bool {
	for k := range t.recs {
		if k.is(node) {
			return true
		}
	}
	return false
}

// Latest is the kind's most recently started record (nil: none); ties go to the first node by
// name.
func (t *Table) Latest(kind Kind) *Record {
	var out *Record
	for _, r := range t.sorted() {
		if r.Kind == kind && (out == nil || r.Started.After(out.Started)) {
			out = r
		}
	}
	return out
}

// Newest is the node's most recently started record of any kind but ReleaseStep and BGPDown
// (nil: none).
func (t *Table) Newest(node string) *Record {
	var out *Record
	for _, r := range t.sorted() {
		if (key{r.Kind, r.Node}).is(node) && r.Kind != ReleaseStep && (out == nil || r.Started.After(out.Started)) {
			out = r
		}
	}
	return out
}

// Wait is the longest wait of the node's records but ReleaseStep and BGPDown (0: none, or all
// settled).
func (t *Table) Wait(node string, now time.Time, v Verify) time.Duration {
	var w time.Duration
	for k, r := range t.recs {
		if k.is(node) && k.kind != ReleaseStep {
			w = max(w, r.Wait(now, v))
		}
	}
	return w
}

// Reported: a report was ever read for one of the records (ReportsSeen).
func (t *Table) Reported() bool { return !t.ReportsSeen.IsZero() }

// Stale: a report of the node made at reported is too early for one of its records (of kinds, or
// of any kind but ReleaseStep and BGPDown when none is given).
func (t *Table) Stale(node string, reported time.Time, kinds ...Kind) bool {
	for k, r := range t.recs {
		if !k.is(node) || k.kind == ReleaseStep || (len(kinds) > 0 && !slices.Contains(kinds, k.kind)) {
			continue
		}
		if !r.Fresh(reported) {
			return true
		}
	}
	return false
}

// Observe is the session verifier's finding from a report of the node made at reported: missing
// awaited sessions were not Established. Only the records the report is fresh for take it (the
// node's Sessions records too).
func (t *Table) Observe(node string, reported time.Time, missing int) {
	for k, r := range t.recs {
		if k.of(node) && r.Fresh(reported) {
			r.Seen, r.Up = true, missing == 0
			if t.ReportsSeen.IsZero() {
				t.ReportsSeen = reported
			}
		}
	}
}

// Settled marks the node's records Up without a report: no session is awaited (a route reflector
// without clients). They stay not Seen: no report says that calico-node reports (Reported).
func (t *Table) Settled(node string, kinds ...Kind) {
	for k, r := range t.recs {
		if k.is(node) && (len(kinds) == 0 || slices.Contains(kinds, k.kind)) {
			r.Up = true
		}
	}
}

// SeenAlive: BGP health saw a session of the node's role Established in a report made at
// reported.
func (t *Table) SeenAlive(node string, reported time.Time) {
	for k, r := range t.recs {
		if k.is(node) && !reported.Before(r.Started) {
			r.Alive = true
		}
	}
}

// Restamp confirms the records started at began (a reconcile's start) once the writes they
// record are made, and moves them to now: the sessions (re)start then, and a reconcile on a
// loaded machine can take several seconds.
func (t *Table) Restamp(began, now time.Time) {
	for _, r := range t.recs {
		if r.Pending && r.Started.Equal(began) {
			if now.After(r.Started) {
				r.Started = now
			}
			r.Pending = false
		}
	}
}

// Expire drops the records that have run their course (Max after they started) and returns
// those of nodes that are gone (exists false), which a new leader may find in a status written
// before the node was deleted. A step's wait is its step's to drop.
func (t *Table) Expire(now time.Time, exists func(node string) bool) (gone []Record) {
	for _, r := range t.sorted() {
		switch {
		case r.stepOwned():
			continue
		case !exists(r.Node):
			gone = append(gone, *r)
		case now.Sub(r.Started) < r.Max:
			continue
		}
		delete(t.recs, key{r.Kind, r.Node})
	}
	return gone
}

// stepOwned: a step's wait (MeshOff, Adopt), the verifier's (Sessions) or BGP health's
// (BGPDown), which its step drops.
func (r *Record) stepOwned() bool {
	return r.Kind == MeshOff || r.Kind == Adopt || r.Kind == Sessions || r.Kind == BGPDown
}

// NextExpiry is when the first record that Expire drops at its Max runs its course (zero: none).
func (t *Table) NextExpiry() time.Time {
	var out time.Time
	for _, r := range t.recs {
		if r.stepOwned() {
			continue
		}
		if e := r.Started.Add(r.Max); out.IsZero() || e.Before(out) {
			out = e
		}
	}
	return out
}

// Len is the number of records.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return len(t.recs)
}
