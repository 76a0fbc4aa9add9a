package transitions

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

var t0 = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

func TestRecordWait(t *testing.T) {
	for _, tc := range []struct {
		name     string
		since    time.Duration
		seen, up bool
		verify   Verify
		want     time.Duration
	}{
		{name: "before min", since: time.Second, verify: Reports, want: 2 * time.Second},
		{name: "before min, without verification", since: time.Second, want: 2 * time.Second},
		{name: "without verification waits settle", since: 4 * time.Second, want: 6 * time.Second},
		{name: "without verification, settled", since: 10 * time.Second, want: 0},
		{name: "verified up after min", since: 3 * time.Second, seen: true, up: true, verify: Reports, want: 0},
		{name: "verified, a session down: retry", since: 20 * time.Second, seen: true, verify: Reports, want: Retry},
		{name: "verified, no fresh report yet: retry", since: 5 * time.Second, verify: Reports, want: Retry},
		{name: "verified, no report by settle: go", since: 10 * time.Second, verify: Reports, want: 0},
		{name: "max bounds a session that never comes", since: time.Minute, seen: true, verify: Reports, want: 0},
		{name: "calico-node reports: no report by settle still waits", since: 10 * time.Second, verify: Reporting, want: Retry},
		{name: "calico-node reports: a fresh report with every session up", since: 4 * time.Second, seen: true, up: true, verify: Reporting, want: 0},
		{name: "calico-node reports: max bounds the wait", since: time.Minute, verify: Reporting, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Record{Kind: Renumber, Node: "a", Started: t0, Waits: DefaultWaits, Seen: tc.seen, Up: tc.up}
			require.Equal(t, tc.want, r.Wait(t0.Add(tc.since), tc.verify))
		})
	}
}

// TestResumedWaitsSettleForAReport: a record a new leader reads before any report was seen waits
// for a fresh report Settle from the read (verify), not from its start: the old leader may have
// died before it asked calico-node for one. Without verification the start counts.
func TestResumedWaitsSettleForAReport(t *testing.T) {
	tb := FromAPI((&Table{recs: map[key]*Record{{Renumber, "a"}: {Kind: Renumber, Node: "a", Started: t0, Waits: DefaultWaits}}}).API(), t0.Add(20*time.Second))
	r := tb.Get(Renumber, "a")
	require.Equal(t, Retry, r.Wait(t0.Add(21*time.Second), Reports), "1 s after the read, no report")
	require.Zero(t, r.Wait(t0.Add(21*time.Second), Timed), "the time rule counts from the start")
	require.Zero(t, r.Wait(t0.Add(30*time.Second), Reports), "Settle after the read, still no report")
	tb.Observe("a", t0.Add(22*time.Second), 1)
	require.Equal(t, Retry, r.Wait(t0.Add(30*time.Second), Reports), "a report with a session missing")
}

func TestFreshAndObserve(t *testing.T) {
	tb := &Table{}
	tb.Start(ClientMove, t0, "rr")
	require.True(t, tb.Stale("rr", t0.Add(2*time.Second)), "a report made before min is too early")
	tb.Observe("rr", t0.Add(2*time.Second), 0)
	require.False(t, tb.Get(ClientMove, "rr").Up, "a stale report settles nothing")
	require.False(t, tb.Stale("rr", t0.Add(3*time.Second)))
	tb.Observe("rr", t0.Add(3*time.Second), 1)
	require.Equal(t, Retry, tb.Wait("rr", t0.Add(4*time.Second), Reports), "a session down holds the wait")
	tb.Observe("rr", t0.Add(4*time.Second), 0)
	require.Zero(t, tb.Wait("rr", t0.Add(4*time.Second), Reports))
	require.False(t, tb.Get(ClientMove, "rr").Starting(t0.Add(4*time.Second)))
}

func TestTableLatestNewestWait(t *testing.T) {
	tb := &Table{}
	tb.Start(Renumber, t0, "b")
	tb.Start(Renumber, t0.Add(time.Second), "a")
	tb.Start(ReleaseStep, t0.Add(5*time.Second), "a")
	tb.Start(ClientMove, t0.Add(2*time.Second), "b")
	require.Equal(t, "a", tb.Latest(Renumber).Node)
	require.Equal(t, ReleaseStep, tb.Latest(ReleaseStep).Kind)
	require.Equal(t, Renumber, tb.Newest("a").Kind, "a release step is not the node's own sessions")
	require.Equal(t, ClientMove, tb.Newest("b").Kind)
	require.Nil(t, tb.Newest("c"))
	require.Equal(t, 6*time.Second, tb.Wait("b", t0.Add(4*time.Second), Timed), "the longest of b's waits (the renumbering's settle)")
	require.Zero(t, tb.Wait("c", t0, Timed))
	tb.Settled("b")
	require.Equal(t, time.Second, tb.Wait("b", t0.Add(4*time.Second), Reports), "settled still waits min")
	require.Zero(t, tb.Wait("b", t0.Add(5*time.Second), Reports))
}

func TestRoundTripThroughTheAPI(t *testing.T) {
	tb := &Table{}
	tb.Start(Renumber, t0, "a")
	tb.Start(ClientMove, t0, "b")
	tb.Restamp(t0, t0.Add(1500*time.Millisecond))
	tb.Observe("b", t0.Add(5*time.Second), 1)
	tb.SeenAlive("a", t0.Add(4*time.Second))
	tb.Start(ReleaseStep, t0.Add(6*time.Second), "c") // written, the leader dies before its move

	api := tb.API()
	require.Len(t, api, 3)
	later := t0.Add(20 * time.Second)
	back := FromAPI(api, later)
	for _, k := range []struct {
		kind Kind
		node string
	}{{Renumber, "a"}, {ClientMove, "b"}} {
		want := *tb.Get(k.kind, k.node)
		if !want.Seen {
			want.Resumed = later // no report seen: a new leader's Settle counts from its read
		}
		require.Equal(t, want, *back.Get(k.kind, k.node), "%s %s", k.kind, k.node)
	}
	c := back.Get(ReleaseStep, "c")
	require.Equal(t, later, c.Started, "a pending record starts again when read")
	require.False(t, c.Pending)
	again := back.API()
	for i := range api {
		if api[i].Kind != string(ReleaseStep) {
			require.Equal(t, api[i], again[i], "what a new leader reads it writes back unchanged")
		}
	}
}

func TestFromAPISkipsWhatItCannotRead(t *testing.T) {
	back := FromAPI([]v1alpha1.Transition{
		{Kind: "Teleport", Node: "a", StartedAt: metav1.NewMicroTime(t0)},
		{Kind: string(Renumber), StartedAt: metav1.NewMicroTime(t0)},
		{Kind: string(Renumber), Node: "b", StartedAt: metav1.NewMicroTime(t0)}, // no waits: the defaults
	}, t0)
	require.Equal(t, 1, back.Len())
	require.Equal(t, DefaultWaits, back.Get(Renumber, "b").Waits)
}

func TestExpire(t *testing.T) {
	tb := &Table{}
	tb.Start(Renumber, t0, "old")
	tb.Start(Renumber, t0.Add(30*time.Second), "young")
	tb.Start(ClientMove, t0.Add(30*time.Second), "deleted")
	gone := tb.Expire(t0.Add(time.Minute), func(n string) bool { return n != "deleted" })
	require.Len(t, gone, 1)
	require.Equal(t, "deleted", gone[0].Node)
	require.Equal(t, 1, tb.Len())
	require.NotNil(t, tb.Get(Renumber, "young"))
	require.True(t, t0.Add(30*time.Second+DefaultMax).Equal(tb.NextExpiry()), "young's Max: %v", tb.NextExpiry())
	tb.Hold(MeshOff, "layout@1", t0, DefaultWaits) // a step's wait: its step drops it
	require.True(t, t0.Add(30*time.Second+DefaultMax).Equal(tb.NextExpiry()))
	require.True(t, (&Table{}).NextExpiry().IsZero())
}

func TestRestampConfirmsOnlyThisReconcilesRecords(t *testing.T) {
	tb := &Table{}
	tb.Start(Renumber, t0, "a")
	tb.Restamp(t0, t0.Add(time.Second))
	tb.Start(ClientMove, t0.Add(5*time.Second), "b")
	tb.Restamp(t0.Add(5*time.Second), t0.Add(7*time.Second))
	require.Equal(t, t0.Add(time.Second), tb.Get(Renumber, "a").Started, "an earlier reconcile's record keeps its time")
	require.Equal(t, t0.Add(7*time.Second), tb.Get(ClientMove, "b").Started)
	require.False(t, tb.Get(ClientMove, "b").Pending)
}

func TestStepWaits(t *testing.T) {
	tb := &Table{}
	tb.Start(Renumber, t0, "a")
	delay := Waits{Min: 5 * time.Second, Settle: 5 * time.Second, Max: 5 * time.Second}
	r := tb.Hold(Adopt, "peer@1", t0, delay)
	require.Equal(t, 5*time.Second, r.Wait(t0, Timed))
	require.Equal(t, 6*time.Second, r.Wait(t0.Add(-time.Second), Timed), "started after the reconcile's now: all of it")
	require.Same(t, r, tb.Hold(Adopt, "peer@1", t0.Add(2*time.Second), delay), "held: started once")
	require.Equal(t, 3*time.Second, r.Wait(t0.Add(2*time.Second), Timed))
	tb.Hold(Adopt, "other@7", t0.Add(time.Second), delay)
	tb.Hold(MeshOff, "layout@1", t0, delay)
	require.Empty(t, tb.Expire(t0.Add(time.Hour), func(n string) bool { return n == "a" }), "a step's wait is its step's, and names no node")
	require.Equal(t, 3, tb.Len(), "the Renumber record ran its course; the waits stay")
	require.False(t, tb.Has("peer"), "no node's record")
	back := FromAPI(tb.API(), t0.Add(time.Hour))
	want := *r
	want.Resumed = t0.Add(time.Hour)
	require.Equal(t, want, *back.Get(Adopt, "peer@1"), "a new leader resumes it")
	back.Drop(Adopt, "other@7")
	require.Nil(t, back.Get(Adopt, "peer@1"))
	require.NotNil(t, back.Get(Adopt, "other@7"))
	require.NotNil(t, back.Get(MeshOff, "layout@1"), "another kind's kept")
}

// TestReported: a fresh report read for a record tells that calico-node reports, after the
// records are gone too (the reconciler persists ReportsSeen in the policy's status); a record
// Settled without a report does not, and stays Settled across a leader change.
func TestReported(t *testing.T) {
	tb := &Table{}
	tb.Start(Renumber, t0, "a", "b")
	tb.Restamp(t0, t0)
	tb.Settled("a")
	require.False(t, tb.Reported(), "settled without a report")
	back := FromAPI(tb.API(), t0.Add(5*time.Second))
	require.False(t, back.Reported())
	require.Zero(t, back.Wait("a", t0.Add(5*time.Second), Reporting), "settled stays settled")
	require.Equal(t, SessionsSettled, back.API()[0].Sessions)

	tb.Observe("b", t0.Add(2*time.Second), 1)
	require.False(t, tb.Reported(), "a report made before Min is not fresh")
	tb.Observe("b", t0.Add(4*time.Second), 1)
	require.Equal(t, t0.Add(4*time.Second), tb.ReportsSeen)
	tb.Observe("b", t0.Add(6*time.Second), 1)
	require.Equal(t, t0.Add(4*time.Second), tb.ReportsSeen, "the first report stays")
	require.Equal(t, Retry, tb.Wait("b", t0.Add(30*time.Second), Reporting), "a session missing")
	tb.Expire(t0.Add(2*time.Minute), func(string) bool { return true })
	require.Zero(t, tb.Len())
	require.True(t, tb.Reported(), "outlives the records")
}

// TestSessionsRecords: a node's Sessions record is named by its peers, takes the reports made
// since it started, survives the API, is its step's to drop (not Expire's), and starts again with
// any record of the node.
func TestSessionsRecords(t *testing.T) {
	require.Equal(t, Subject("rr-1", []string{"b", "a"}), Subject("rr-1", []string{"a", "b"}))
	require.NotEqual(t, Subject("rr-1", []string{"a"}), Subject("rr-1", []string{"a", "b"}))
	tb := &Table{}
	s := Subject("rr-1", []string{"a", "b"})
	tb.Hold(Sessions, s, t0, SessionsWaits)
	tb.Observe("rr-1", t0.Add(-time.Second), 0)
	require.False(t, tb.Get(Sessions, s).Seen, "a report made before it started")
	tb.Observe("rr-1", t0, 0)
	require.True(t, tb.Get(Sessions, s).Up)
	require.Zero(t, tb.Wait("rr-1", t0, Reporting), "no wait of the node's")
	back := FromAPI(tb.API(), t0.Add(time.Minute))
	require.True(t, back.Get(Sessions, s).Up, "read back Up")
	require.Empty(t, back.Expire(t0.Add(time.Hour), func(string) bool { return false }))
	require.NotNil(t, back.Get(Sessions, s), "not Expire's")
	back.Start(ClientMove, t0.Add(time.Minute), "rr-1")
	require.Nil(t, back.Get(Sessions, s), "the node's sessions restart")
	tb.Hold(Renumber, "rr-1", t0, DefaultWaits)
	require.Nil(t, tb.Get(Sessions, s), "a Renumber held starts it again too")
}

// TestBGPDownRecords: BGP health's record survives the API with its clients and its return, no
// wait or judgement of the node's sessions reads it, it starts nothing again, and it is its step's
// to drop (not Expire's, not even at its Max).
func TestBGPDownRecords(t *testing.T) {
	tb := &Table{}
	tb.Start(ClientMove, t0, "rr-1")
	s := Subject("rr-1", []string{"a"})
	tb.Hold(Sessions, s, t0, SessionsWaits)
	rec := tb.Hold(BGPDown, "rr-1", t0.Add(time.Second), Waits{Max: 2 * time.Minute})
	rec.Orphaning, rec.UpSince, rec.Failed = []string{"a", "b"}, t0.Add(90*time.Second), true
	require.NotNil(t, tb.Get(Sessions, s), "BGP health's record starts no session again")
	require.Equal(t, ClientMove, tb.Newest("rr-1").Kind, "not the node's newest (re)start")
	require.Equal(t, tb.Get(ClientMove, "rr-1").Wait(t0.Add(5*time.Second), Timed), tb.Wait("rr-1", t0.Add(5*time.Second), Timed))
	require.False(t, tb.Stale("rr-1", t0.Add(3*time.Second)), "no freshness rule of its own")
	tb.Observe("rr-1", t0.Add(2*time.Minute), 0)
	tb.SeenAlive("rr-1", t0.Add(2*time.Minute))
	back := FromAPI(tb.API(), t0.Add(3*time.Minute))
	got := back.Get(BGPDown, "rr-1")
	require.NotNil(t, got)
	require.Equal(t, []string{"a", "b"}, got.Orphaning)
	require.Equal(t, t0.Add(90*time.Second), got.UpSince)
	require.True(t, got.Failed)
	require.Equal(t, t0.Add(time.Second), got.Started)
	require.False(t, got.Alive || got.Up || got.Seen, "the sessions' findings are not its")
	require.Equal(t, 2*time.Minute, got.Max)
	back.Expire(t0.Add(time.Hour), func(string) bool { return false })
	require.NotNil(t, back.Get(BGPDown, "rr-1"), "not Expire's")
	back.Drop(BGPDown)
	require.Nil(t, back.Get(BGPDown, "rr-1"))
}
