package transitions

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/tools/bgpverify"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
)

const (
	failoverNodes = 18
	// settleRule is the product's wait between two renumberings of route reflectors that keep
	// their role when no CalicoNodeStatus can tell (internal/reconciler/stages.go transitions.DefaultSettle,
	// transitions.DefaultSettle; bgpHealth is off here).
	settleRule = 10 * time.Second
	// renumberSlack: the test sees each renumbering when its watch event arrives, not when the
	// product wrote it; two arrivals can be closer than the writes by the watch's jitter.
	renumberSlack = 500 * time.Millisecond
)

// failoverPolicy is the transitions test's policy with another topology.
func failoverPolicy(topology string) string {
	return strings.Replace(policy, "topology: {type: DualPlane, maxRackSize: 10}", "topology: "+topology, 1)
}

// policyTransitions lists the policy's status.transitions (kind node startedAt pending).
func (w *world) policyTransitions() []string {
	p, err := w.dyn.Resource(policyGVR).Get(w.t.Context(), "default", metav1.GetOptions{})
	require.NoError(w.t, err)
	list, _, _ := unstructured.NestedSlice(p.Object, "status", "transitions")
	var out []string
	for _, x := range list {
		m, _ := x.(map[string]any)
		out = append(out, fmt.Sprintf("%v %v %v sessions=%v pending=%v", m["kind"], m["node"], m["startedAt"], m["sessions"], m["pending"]))
	}
	if seen, ok, _ := unstructured.NestedString(p.Object, "status", "sessionReportsSeen"); ok && len(out) > 0 {
		out = append(out, "sessionReportsSeen="+seen) // only with records: no record left means none
	}
	return out
}

// leaseHolder is the holder of the product's leader-election Lease.
func (w *world) leaseHolder() string {
	l, err := w.admin.CoordinationV1().Leases(testenv.ChartNamespace).Get(w.t.Context(), "calico-rr-autoscaler", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// TestFailoverRenumberingOnRealBIRDLarge is issue 51's live acceptance of the moves-in-flight records:
// the leading replica of the product is SIGKILLed between two staged renumberings of route
// reflectors that keep their role, and the other replica, which takes the lease when it expires,
// resumes the staging from the records in the policy's status.
//
// 18 nodes in 3 zones run BIRD 1.6 configured by Calico's confd (as TestTransitionsOnRealBIRD);
// two replicas of `serve` run with leader election: the first serves the webhooks, the second
// leads (the first is stopped, releasing its lease, and started again, as
// TestTransitionsHistoryOnRealBIRD does). The cluster settles on Hierarchical maxRackSize 10 (12
// route reflectors); the policy then turns DualPlane maxRackSize 10 (8 route reflectors): 4 are
// demoted and 6 of the 8 that stay (from the spine to a rack and plane) change cluster ID, one at
// a time (transitions.DefaultSettle, 10 s apart without calico-node). The test's own watch of the Nodes sees the first renumbering and the leader is
// SIGKILLed at once (its lease is not released); the Lease's holder then changes to the other
// replica. It asserts: 0 pair-samples lost between nodes that keep their role and cluster ID; no
// two renumberings closer than the settle rule (10 s, less the watch's jitter of 0.5 s), the one
// across the leader change included; the transition completes (the layout settles, no node left
// in a transitional set, the policy's status.transitions empty, no renumbering for 12 s more, as
// many route reflectors as planned). It logs the gaps between successive renumberings.
//
// What a faster test cannot prove: the reconciler's unit tests (failover_test.go in
// internal/reconciler) make a new leader in-process from the same fake client; here the leader is
// a real process killed with no chance to write anything, the new one reads the records from a
// real API server after a real lease expiry, and a renumbering counts as safe only if real BIRDs,
// restarting every session of the renumbered route reflector on `configure`, lose no route
// between the nodes that keep their role.
//
// Caveat: the lease lasts 15 s (internal/serve), longer than the 10 s settle rule, so the gap
// across a SIGKILL is at least the lease's remaining time (13-15 s); the gap assertion can catch
// a new leader renumbering early only when the first renumbering was written well before the
// kill. The records also carry every other wait (ClientMove, SessionsRestart), which this layout
// change exercises less.
//
// It ran in make test until 2026-12-01 (see below): 3.1-3.2 minutes on 2 cores (setup 30 s to every pair routed, the lease
// 16-18 s, six renumberings 10 s apart, the final checks), more than the 2.5 minutes aimed at.
//
// Runs on 2026-11-28, every BIRD read every 100 ms (every 200 ms since 2026-11-29, sampleEvery)
// (go test -count=1 -v -run 'TestFailoverRenumberingOnRealBIRDLarge$' ./test/transitions/, load average 1.5 to 4.5 beside other helpers' tests). Gaps between
// successive renumberings as the test's watch saw them, the first across the kill:
//   - 20:47: failed on an assertion of the test's own (it wanted all 12 route reflectors kept;
//     DualPlane's plan has 8): killed 190 ms after the first renumbering was seen, the lease taken
//     18 s later; gaps 20.32 s, 10.26, 10.67, 10.10, 10.05 s.
//   - 20:51: passed, 184 s. Killed 160 ms after the first renumbering was seen (its record already
//     confirmed); the lease taken 18 s later; gaps 20.40 s, 10.14, 10.68, 10.10, 10.05 s; 0
//     pair-samples lost between nodes that keep their role and cluster ID (8,387 in all, each
//     with a renumbered or demoted node at one end); 45 sessions restarted.
//   - 20:57: passed, 191 s. Killed 60 ms after the first renumbering was seen, its record still
//     pending (the leader died before confirming it); the lease taken 15.7 s later, and the new
//     leader restarted that wait from when it read it: gaps 27.78 s, 10.02, 10.55, 10.12, 10.00 s;
//     0 pair-samples lost between kept nodes (6,394 in all).
//   - 21:09 (the final code): passed, 184 s. Killed 40 ms after the first renumbering was seen;
//     the lease taken 22 s later (the killed leader had confirmed the record just before); gaps
//     24.08 s, 10.04, 10.68, 10.11, 9.98 s (the last under 10 s as the watch saw it: its jitter);
//     0 pair-samples lost between kept nodes (6,367 in all).
//
// Moved from make test to make test-all on 2026-12-01: the run in `.ci/run` on a clean clone at
// 21:48 (beside internal/serve and internal/tools/bgpverify) lost 2 pair-samples between nodes
// that keep their role (node-12->node-14 and node-13->node-14, one sample each; the lab's
// confd/BIRD follow loop stalled 18.2 s once, longest gap 40.5 s node-11->node-14), after passing
// in the run at 21:22 and in every run before. Not yet explained; make test was also over its 10
// minutes on two cores.
func TestFailoverRenumberingOnRealBIRDLarge(t *testing.T) {
	skipUnlessAll(t, "the live failover proof between two renumberings")
	failoverRenumbering(t, killAfterFirst, false)
}

// TestFailoverRenumberingReportedOnRealBIRD is TestFailoverRenumberingOnRealBIRDLarge on a
// cluster whose calico-node reports, as production clusters do: calico-node's status
// reporter is played from each BIRD's protocol table into the product's CalicoNodeStatuses every
// second, and the policy's handover is BGPSessions. The product then holds renumberings apart by
// the reports: the next waits until the last renumbered route reflector's report, made at least
// its Min after the change, shows its client sessions Established and dated after the change
// (BIRD's since column), whatever the reports' or confd's lateness.
//
// It asserts: 0 pair-samples lost between nodes that keep their role and cluster ID; no two
// renumberings closer than the records' Min (3 s, less the watch's jitter), the one across the
// leader change included; before each renumbering, a report of the route reflector renumbered
// before it, written after that renumbering, in which its client sessions are back (at least one
// Established, none Established since before the renumbering); the transition completes.
//
// What a faster test cannot prove: as TestFailoverRenumberingOnRealBIRDLarge (a real process killed,
// the records read back from a real API server after a real lease expiry, real BIRDs restarting
// every session of a renumbered route reflector); besides, the sessions' since as real BIRD prints
// it and calico-node's reporter copies it. The time rule alone (no reports) failed here once under
// CI load: the lab's confd/BIRD follow loop stalled 18.2 s, and two renumberings 10 s apart reached
// BIRD together (2 pair-samples lost, 2026-12-01).
//
// In make test-all again since 2026-12-02 06:17: in make test it passed in three `.ci/run`s on
// clean clones (and alone at load 14, 218 s), then lost 1 pair-sample between kept nodes
// (node-12->node-16) in a fourth (commit edaf228, load 20-25: the lab's follow loop stalled
// 19.1 s, the sampler read 226 samples in 2m55s; every renumbering came after a report of the
// previous route reflector with its client sessions back, 7.0-25.2 s apart). Not yet explained.
// Before that: the shortest live failover case (issue 51). It ran in make test for one stop and
// failed in the second `.ci/run` on a clean clone (2026-12-02 02:50, load from internal/serve and
// bgpverify beside it): the lab's follow loop stalled 15 s, no fresh report of node-04 came within
// its settle time (10 s), and the product's no-report fallback renumbered node-05 10.79 s after
// it, before any report showed node-04's sessions back (0 pair-samples lost between kept nodes all
// the same). Since then the fallback is for clusters whose calico-node was never seen reporting
// (the policy's status.sessionReportsSeen, transitions.Reporting): here the first renumbering's
// report sets it, and a late report only delays the next renumbering, up to its Max. Passed at
// 01:48 and in the `.ci/run` at 02:30 (236 s and 3.3 minutes).
//
// In make test again since 2026-12-02 19:05 (issue 51: "the shortest one in make test"), as
// TestFailoverRenumberingReportedOnRealBIRD (it was ...Large in make test-all): make test took 7.5
// minutes on that day's machine (2 cores), and three runs of it at once beside two busy loops
// passed (154, 185 and 247 s; 0 pair-samples lost between kept nodes, 3,888 to 5,571 in all; the
// lease moved 17.9 s after the kill; the follow loop's longest round 1.8 s).
func TestFailoverRenumberingReportedOnRealBIRD(t *testing.T) {
	failoverRenumbering(t, killAfterFirst, true)
}

// TestFailoverPendingRenumberingOnRealBIRDLarge is TestFailoverRenumberingOnRealBIRDLarge with the
// leader killed at another moment: once the first renumbering is seen, as soon as the test's
// watch of the policy sees the write-ahead record (pending) of the next one, before or just after
// the Node patch it announces. The new leader finds the record pending and restarts its wait from
// when it read it. In make test-all (another 3 minutes).
//
// Runs on 2026-11-28 (RRA_TEST_ALL=1 go test -count=1 -v -run
// 'TestFailoverPendingRenumberingOnRealBIRDLarge$' ./test/transitions/):
//   - 21:01: passed, 204 s. Killed at node-04's pending record, 10.07 s after node-03's
//     renumbering was seen, before its Node patch; the lease taken 19 s later; the new leader
//     renumbered node-04 12 s after (the wait restarted from its read): gaps 41.12 s, 10.10,
//     10.75, 10.06, 10.08 s; 0 pair-samples lost between kept nodes (6,300 in all).
//   - 21:05: passed, 204 s. Killed at node-04's pending record just after its Node patch (seen
//     10.06 s after node-03's, both written by the killed leader); the lease taken 20 s later; the
//     new leader, finding the record pending, renumbered the next (node-05) 32.06 s after node-04:
//     gaps 10.06 s, 32.06, 10.83, 10.04, 10.11 s; 0 pair-samples lost between kept nodes (5,573 in
//     all).
func TestFailoverPendingRenumberingOnRealBIRDLarge(t *testing.T) {
	skipUnlessAll(t, "the live failover proof at a pending record")
	failoverRenumbering(t, killAtPending, false)
}

// skipUnlessAll skips a make test-all proof outside make test-all.
func skipUnlessAll(t *testing.T, what string) {
	t.Helper()
	if os.Getenv(testenv.EnvAll) == "" {
		t.Skip(what + ": make test-all (" + testenv.EnvAll + "=1)")
	}
}

// TestRollingUpgradeMidRenumberingOnRealBIRDLarge is TestFailoverRenumberingOnRealBIRDLarge with a
// `helm upgrade`'s rolling restart in place of the SIGKILL (issue 51: measured before the records,
// the new leader renumbered the second route reflector 4.8 s after the first). The Deployment rolls
// its two replicas with maxSurge 1 and maxUnavailable 0: a third replica starts as soon as the
// policy changes (a pod takes seconds to be ready), the leader gets SIGTERM once it is ready and at
// least 0.9 s after the first renumbering is seen (LeaderElectionReleaseOnCancel: it hands the
// lease over within 2 s, well inside the 10 s settle rule, which the SIGKILL's lease expiry of
// 13-15 s does not test), and then the
// other old replica is replaced (stopped with SIGTERM and started again on its ports, as the
// webhooks' Service would reach its successor). It asserts what TestFailoverRenumberingOnRealBIRDLarge
// does: every gap between renumberings, the ones across both lease handovers included, at least
// the settle rule less the watch's jitter; 0 pair-samples lost between nodes that keep their role
// and cluster ID; the transition completes. In make test-all (about 4 minutes).
//
// Run on 2026-12-01 (RRA_TEST_ALL=1 go test -count=1 -v -timeout 30m -run
// 'TestRollingUpgradeMidRenumberingOnRealBIRDLarge$' ./test/transitions/, load average 11 to 33
// beside other tests): passed, 241 s. The first renumbering (node-03) was seen 0.74 s after the
// apply, the surge replica ready at 2.1 s, the leader's SIGTERM 1.55 s after the first
// renumbering; the lease moved 1.9 s later, and again when the first replica rolled 2.7 s after
// that. Gaps between the six renumberings: 10.19 s (across the first handover), 10.20, 13.16,
// 10.51, 10.43 s; 0 pair-samples lost between nodes that keep their role and cluster ID (1,949 in
// all, each with a renumbered or demoted node at one end); 44 sessions restarted. Again at 20:54 on
// the shared failover harness (load average 2 to 10): passed, 187 s; the leader's SIGTERM 0.93 s
// after the first renumbering, the lease moved 1.1 s later; gaps 10.25 s (across the handover),
// 10.18, 11.33, 10.14, 10.15 s; 0 pair-samples lost between kept nodes (4,201 in all).
func TestRollingUpgradeMidRenumberingOnRealBIRDLarge(t *testing.T) {
	skipUnlessAll(t, "the live rolling-upgrade proof between two renumberings")
	failoverRenumbering(t, rollingUpgrade, false)
}

// failoverMoment is how and when failoverRenumbering takes the leader away.
type failoverMoment int

const (
	// killAfterFirst: SIGKILL right after the first renumbering is seen.
	killAfterFirst failoverMoment = iota
	// killAtPending: SIGKILL at the next renumbering's pending record.
	killAtPending
	// rollingUpgrade: a rolling restart of both replicas, the leader's SIGTERM 0.9 s after the
	// first renumbering is seen.
	rollingUpgrade
)

// pendingRenumber waits until the policy's status holds a pending Renumber record of another node
// than skip and returns that node.
func (w *world) pendingRenumber(skip string, timeout time.Duration) string {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(w.t.Context(), timeout)
	defer cancel()
	wi, err := w.dyn.Resource(policyGVR).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=default"})
	require.NoError(w.t, err)
	defer wi.Stop()
	for ev := range wi.ResultChan() {
		p, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		list, _, _ := unstructured.NestedSlice(p.Object, "status", "transitions")
		for _, x := range list {
			m, _ := x.(map[string]any)
			if m["kind"] == "Renumber" && m["pending"] == true && m["node"] != skip {
				return fmt.Sprint(m["node"])
			}
		}
	}
	w.t.Fatalf("no pending Renumber record of another node than %s within %v", skip, timeout)
	return ""
}

// failover is the harness of the failover tests on the transitions tests' world: two replicas of
// `serve` with leader election (the first serves the webhooks, the second leads: the first is
// stopped, releasing its lease, and started again, as TestTransitionsHistoryOnRealBIRD does), one
// BIRD per node configured by Calico's confd, and the history's sampler.
type failover struct {
	t      *testing.T
	w      *world
	lab    *bgpverify.Lab
	h      *history
	names  []string
	leader *testenv.Product // the leading replica, the one killed
	holder string           // its identity in the Lease
	start  time.Time
	killed time.Time
	fig    bgpverify.TransitionFigures // the window's figures, once finishMoves ended it
	// statuses: the CalicoNodeStatus reports seen, when startFailover plays the status reporter.
	statuses *statusWatch
}

// startFailover starts the failover harness with policy in force and size nodes in 3 zones, waits
// for rrs route reflectors and every pair routed, and starts sampling; with statuses it plays
// calico-node's status reporter into the product's CalicoNodeStatuses (world.reportStatuses) and
// keeps every report (failover.statuses).
func startFailover(t *testing.T, size int, policy string, rrs int, statuses bool) *failover {
	t.Helper()
	return startFailoverMesh(t, size, policy, rrs, statuses, false)
}

// startFailoverMesh is startFailover on a cluster that starts on Calico's node-to-node mesh (mesh
// true: the policy is to turn it off, migrateFromNodeMesh); it waits for the mesh off too before
// the BIRDs' first render.
func startFailoverMesh(t *testing.T, size int, policy string, rrs int, statuses, mesh bool) *failover {
	t.Helper()
	if testing.Short() {
		t.Skip("the live failover proof: needs kube-apiserver, confd and BIRD (hack/tools.sh)")
	}
	if err := bgpverify.NetnsAvailable(); err != nil {
		t.Skipf("the live failover proof runs BIRD in network namespaces (root): %v", err)
	}
	f := &failover{t: t, start: time.Now(), names: nodeNames(size)}
	w := newWorld(t, mesh, policy, leaderArgs...)
	f.w = w
	leader := w.replica("serve-2.log")
	f.leader = leader
	w.product.Stop() // releases the lease
	w.eventually("the second replica leads", time.Minute, func() error {
		if !strings.Contains(readLog(leader.Log), "successfully acquired lease") {
			return fmt.Errorf("no lease acquired in %s", leader.Log)
		}
		return nil
	})
	f.holder = w.leaseHolder()
	require.NotEmpty(t, f.holder)
	require.NoError(t, w.product.Restart(t.Context(), time.Minute), "starting the first replica again")
	w.env.AwaitWebhooks(t, 30*time.Second)

	f.lab = w.startLab(f.names, len(zones))
	w.eventually(fmt.Sprintf("%d route reflectors", rrs), time.Minute, func() error { return w.settled(rrs) })
	if mesh {
		w.eventually("the policy turned the node-to-node mesh off", 2*time.Minute, func() error {
			if w.meshOn() {
				return fmt.Errorf("node-to-node mesh on")
			}
			return nil
		})
	}
	f.h = startHistory(t, w, f.lab, f.names, f.start, sampleEvery)
	if statuses {
		w.reportStatuses(f.lab)
		f.statuses = f.watchStatuses()
	}
	return f
}

// leaderArgs are the flags of `serve` with leader election outside a pod.
var leaderArgs = []string{"--leader-elect", "--leader-election-namespace=" + testenv.ChartNamespace}

// replica starts another replica of the world's product with leader election (no webhooks: the
// API server calls the first), stopped when the test ends; its log is kept as logName on failure.
func (w *world) replica(logName string) *testenv.Product {
	w.t.Helper()
	p, err := testenv.NewProduct(testenv.ProductOptions{Dir: w.t.TempDir(), Bin: w.product.Cmd.Path, Args: leaderArgs})
	require.NoError(w.t, err)
	require.NoError(w.t, p.Start(w.t.Context(), w.env.KubeconfigPath(testenv.UserServiceAccount), time.Minute))
	w.t.Cleanup(p.Stop)
	w.keepOnFailure(logName, func() string { return readLog(p.Log) })
	return p
}

// kill SIGKILLs the leading replica (its lease is not released).
func (f *failover) kill() {
	f.t.Helper()
	require.NoError(f.t, syscall.Kill(-f.leader.Cmd.Process.Pid, syscall.SIGKILL))
	f.killed = time.Now()
}

// takeover waits until the other replica holds the lease and returns how long after the kill.
func (f *failover) takeover() time.Duration {
	f.t.Helper()
	var took time.Duration
	f.w.eventually("another replica takes the lease", time.Minute, func() error {
		if hl := f.w.leaseHolder(); hl == "" || hl == f.holder {
			return fmt.Errorf("lease held by %q", hl)
		}
		took = time.Since(f.killed)
		return nil
	})
	f.t.Logf("the lease moved to %s %v after the leader was stopped; records it read: %v", f.w.leaseHolder(), took.Round(100*time.Millisecond), f.w.policyTransitions())
	return took
}

// complete waits until the transition is over: the layout settled (history.settle), no record left
// in the policy's status, and still so settleRule later with no more of the changes count counts.
// It fails when the status keeps a record for 2 minutes (a record's Max is 1 minute) with no more
// changes counted: renumberings that wait for calico-node's reports come slower on a loaded
// machine, and each is progress.
func (f *failover) complete(count func() int) {
	f.t.Helper()
	for {
		n := count()
		f.h.settle(len(f.names))
		for deadline := time.Now().Add(2 * time.Minute); count() == n; time.Sleep(100 * time.Millisecond) {
			tr := f.w.policyTransitions()
			if len(tr) == 0 {
				time.Sleep(settleRule + 2*time.Second)
				if count() == n && len(f.w.policyTransitions()) == 0 {
					return
				}
				break
			}
			if time.Now().After(deadline) {
				f.t.Fatalf("transitions left in the policy's status 2 minutes with no change counted: %v", tr)
			}
		}
	}
}

// completed asserts the layout the transition ends on: every route reflector planned in place,
// active, none draining, no node in a transitional set.
func (f *failover) completed(after *roles) {
	f.t.Helper()
	p, err := f.w.dyn.Resource(policyGVR).Get(f.t.Context(), "default", metav1.GetOptions{})
	require.NoError(f.t, err)
	desired, _, _ := unstructured.NestedInt64(p.Object, "status", "desiredRouteReflectors")
	have, _, _ := unstructured.NestedInt64(p.Object, "status", "routeReflectors")
	require.Equal(f.t, desired, have, "route reflectors planned and in place")
	require.NoError(f.t, f.w.settled(int(desired)))
	require.Empty(f.t, after.transitional())
}

// keptLoss logs the window's figures and asserts that no pair-sample was lost between nodes that
// keep their role and cluster ID (those with a promoted, demoted or renumbered node at one end are
// reported); it returns the pair-samples lost between kept nodes and in all.
func (f *failover) keptLoss(fig bgpverify.TransitionFigures, before, after *roles) (kept, all int) {
	t := f.t
	t.Helper()
	keeps := func(n string) bool {
		return before.id[n] == after.id[n] && before.ready[n] && after.ready[n]
	}
	kept, pairs := fig.MissingWhere(keeps2(keeps))
	all, _ = fig.MissingWhere(func(a, b string) bool { return true })
	t.Logf("roles changed: %s", before.diff(after))
	t.Logf("%s", fig.String())
	t.Logf("pair-samples lost: %d between nodes that keep their role and cluster ID, %d in all (the rest with a promoted, demoted or renumbered node at one end); %v in all",
		kept, all, time.Since(f.start).Round(time.Second))
	if len(fig.Restarts) > 0 {
		t.Logf("restarted sessions: %s", strings.Join(fig.RestartedSessions(), " "))
	}
	assert.Zerof(t, kept, "pair-samples lost between nodes that keep their role: %s", strings.Join(head(pairs, 12), " "))
	require.NoError(t, f.h.s.Err(), "sampling")
	return kept, all
}

func keeps2(keeps func(string) bool) func(a, b string) bool {
	return func(a, b string) bool { return keeps(a) && keeps(b) }
}

// activeID is the cluster ID of n when it is an active (not draining) route reflector, else "".
func activeID(n *corev1.Node) string {
	if _, rr := n.Labels["calico-route-reflector"]; !rr || extender.IsDraining(extender.FromNode(n)) {
		return ""
	}
	return n.Annotations[extender.AnnotationClusterID]
}

// watchRenumberings records every cluster-ID change of an active route reflector that stays one.
func watchRenumberings(t *testing.T, w *world) *testenv.NodeChanges {
	t.Helper()
	return testenv.WatchNodeChanges(t, w.admin, activeID)
}

// renumberGaps logs the gaps between successive renumberings (the one across the leader change
// marked) and asserts that none is closer than the settle rule (less the watch's jitter).
func (f *failover) renumberGaps(seq []testenv.NodeChange, from time.Time) {
	f.t.Helper()
	f.renumberGapsAtLeast(seq, from, settleRule)
}

// renumberGapsAtLeast is renumberGaps with least for the settle rule.
func (f *failover) renumberGapsAtLeast(seq []testenv.NodeChange, from time.Time, least time.Duration) {
	f.t.Helper()
	gaps, short := testenv.Spacing(seq, from, least-renumberSlack, func(before, c testenv.NodeChange) string {
		if before.At.Before(f.killed) && !c.At.Before(f.killed) {
			return " (across the leader change)"
		}
		return ""
	})
	f.t.Logf("renumberings (from %s):\n  %s", from.Format("15:04:05.000"), strings.Join(gaps, "\n  "))
	assert.Emptyf(f.t, short, "renumbered closer than the settle rule (%v less %v)", least, renumberSlack)
}

// restartsReported asserts that each renumbering after the first came only once a report of the
// route reflector renumbered before it (seen by the test's watch before the next renumbering,
// written at or after the previous one's second) showed its client sessions back: at least one
// Established, and none Established since before that renumbering (BIRD's since column, on the
// report's date, less sinceSlack for the watch's lag behind the write). Clients are the peers that
// are route reflectors in neither before nor after.
func (f *failover) restartsReported(seq []testenv.NodeChange, before, after *roles) {
	f.t.Helper()
	client := func(n string) bool {
		_, a := before.id[n]
		_, b := after.id[n]
		return n != "" && !a && !b && !before.draining[n] && !after.draining[n]
	}
	const sinceSlack = 2 * time.Second
	var lines, early []string
	for i := 1; i < len(seq); i++ {
		prev, next := seq[i-1], seq[i]
		from := prev.At.Truncate(time.Second)
		r, ok := f.statuses.find(prev.Node, from, next.At, func(r statusReport) bool {
			back := 0
			for peer, since := range r.since {
				if !client(peer) {
					continue
				}
				at, ok := clockOn(since, r.updated)
				if !ok || at.Before(from.Add(-sinceSlack)) {
					return false
				}
				back++
			}
			return back > 0
		})
		if !ok {
			early = append(early, fmt.Sprintf("%s renumbered %v after %s, before a report of %s showed its client sessions back",
				next.Node, next.At.Sub(prev.At).Round(10*time.Millisecond), prev.Node, prev.Node))
			continue
		}
		lines = append(lines, fmt.Sprintf("%s: %s's report of %s (seen %v after its renumbering) had its client sessions back",
			next.Node, prev.Node, r.updated.Format("15:04:05"), r.at.Sub(prev.At).Round(10*time.Millisecond)))
	}
	f.t.Logf("reports before each renumbering:\n  %s", strings.Join(lines, "\n  "))
	assert.Emptyf(f.t, early, "renumbered before the last renumbered route reflector's sessions were reported back")
}

// clockOn reads a since column of BIRD's `show protocols` (hh:mm:ss, UTC here) on on's date.
func clockOn(since string, on time.Time) (time.Time, bool) {
	c, err := time.Parse(time.TimeOnly, since)
	if err != nil {
		return time.Time{}, false
	}
	u := on.UTC()
	at := time.Date(u.Year(), u.Month(), u.Day(), c.Hour(), c.Minute(), c.Second(), 0, time.UTC)
	if at.After(u.Add(time.Minute)) {
		at = at.AddDate(0, 0, -1)
	}
	return at, true
}

// failoverRenumbering is TestFailoverRenumberingOnRealBIRDLarge with the leader taken away at
// moment; reported: with calico-node's status reports and handover BGPSessions
// (TestFailoverRenumberingReportedOnRealBIRD, in make test).
func failoverRenumbering(t *testing.T, moment failoverMoment, reported bool) {
	pol := failoverPolicy
	if reported {
		pol = func(topology string) string {
			return strings.Replace(failoverPolicy(topology), "  removalDelay: 3s\n", "  removalDelay: 3s\n  handover: BGPSessions\n", 1)
		}
	}
	f := startFailover(t, failoverNodes, pol("{type: Hierarchical, maxRackSize: 10}"), 12, reported)
	w := f.w
	before := w.roles()
	renums := watchRenumberings(t, w)
	const event = "leader killed between two renumberings (Hierarchical to DualPlane)"
	f.h.s.Begin(event)
	out, stderr, err := w.env.KubectlStdin(t, testenv.UserAdmin, pol("{type: DualPlane, maxRackSize: 10}"), "apply", "-f", "-")
	require.NoError(t, err, "apply policy\n%s%s", out, stderr)
	applied := time.Now()
	var surge *testenv.Product
	if moment == rollingUpgrade {
		// The upgraded Deployment's first new pod, started while the staging begins.
		surge = w.replica("serve-3.log")
		t.Logf("surge replica ready %v after the apply", time.Since(applied).Round(10*time.Millisecond))
	}
	w.eventually("the first renumbering", time.Minute, func() error {
		if len(renums.All()) == 0 {
			return fmt.Errorf("no route reflector renumbered yet")
		}
		return nil
	})
	first := renums.All()[0]
	switch moment {
	case killAtPending:
		next := w.pendingRenumber(first.Node, time.Minute)
		f.kill()
		t.Logf("leader SIGKILLed at the pending Renumber record of %s", next)
	case killAfterFirst:
		require.Equal(t, f.holder, w.leaseHolder(), "the second replica still holds the lease")
		f.kill()
	case rollingUpgrade:
		require.Equal(t, f.holder, w.leaseHolder(), "the second replica still holds the lease")
		time.Sleep(time.Until(first.At.Add(900 * time.Millisecond)))
		f.leader.Stop() // SIGTERM: the lease is released at once
		f.killed = time.Now()
	}
	t.Logf("first renumbering %s %s -> %s seen %v after the apply; leader stopped (%s) %v after it; records then: %v",
		first.Node, first.From, first.To, first.At.Sub(applied).Round(10*time.Millisecond), map[bool]string{true: "SIGTERM", false: "SIGKILL"}[moment == rollingUpgrade],
		f.killed.Sub(first.At).Round(10*time.Millisecond), w.policyTransitions())
	f.takeover()
	if moment == rollingUpgrade {
		// The other old replica rolls too: stopped with SIGTERM (a second handover when it took
		// the lease), its successor started on the same ports.
		holder := w.leaseHolder()
		firstLeads := !strings.Contains(readLog(surge.Log), "successfully acquired lease")
		require.NoError(t, w.product.Restart(t.Context(), time.Minute), "rolling the first replica")
		w.eventually("a live replica holds the lease", time.Minute, func() error {
			if hl := w.leaseHolder(); hl == "" || hl == f.holder || (firstLeads && hl == holder) {
				return fmt.Errorf("lease held by %q", hl)
			}
			return nil
		})
		t.Logf("first replica rolled %v after the leader's SIGTERM; the lease is %s's (was %s's)", time.Since(f.killed).Round(100*time.Millisecond), w.leaseHolder(), holder)
	}

	// The transition is over when the layout settled and no record is left, and stays so.
	f.complete(func() int { return len(renums.All()) })
	fig := f.h.s.End()
	after := w.roles()
	seq := renums.All()
	if reported {
		f.renumberGapsAtLeast(seq, applied, transitions.DefaultMin)
		f.restartsReported(seq, before, after)
	} else {
		f.renumberGaps(seq, applied)
	}
	require.GreaterOrEqual(t, len(seq), 2, "several route reflectors renumbered")
	require.True(t, seq[len(seq)-1].At.After(f.killed), "a renumbering after the kill: the new leader resumed the staging")
	f.completed(after)
	f.keptLoss(fig, before, after)
	t.Logf("%d renumbered", len(seq))
	f.h.finish()
}
