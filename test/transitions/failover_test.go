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
)

const (
	failoverNodes = 18
	// settleRule is the product's wait between two renumberings of route reflectors that keep
	// their role when no CalicoNodeStatus can tell (internal/reconciler/stages.go idSettle,
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

// watchRenumberings records every cluster-ID change of an active route reflector that stays one.
func watchRenumberings(t *testing.T, w *world) *testenv.NodeChanges {
	t.Helper()
	return testenv.WatchNodeChanges(t, w.admin, func(n *corev1.Node) string {
		if _, rr := n.Labels["calico-route-reflector"]; !rr || extender.IsDraining(extender.FromNode(n)) {
			return ""
		}
		return n.Annotations[extender.AnnotationClusterID]
	})
}

// policyTransitions lists the policy's status.transitions (kind node startedAt pending).
func (w *world) policyTransitions() []string {
	p, err := w.dyn.Resource(policyGVR).Get(w.t.Context(), "default", metav1.GetOptions{})
	require.NoError(w.t, err)
	list, _, _ := unstructured.NestedSlice(p.Object, "status", "transitions")
	var out []string
	for _, x := range list {
		m, _ := x.(map[string]any)
		out = append(out, fmt.Sprintf("%v %v %v pending=%v", m["kind"], m["node"], m["startedAt"], m["pending"]))
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

// TestFailoverRenumberingOnRealBIRD is issue 51's live acceptance of the moves-in-flight records:
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
// a time (idSettle, 10 s apart without calico-node). The test's own watch of the Nodes sees the first renumbering and the leader is
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
// It runs in make test: 3.1-3.2 minutes on 2 cores (setup 30 s to every pair routed, the lease
// 16-18 s, six renumberings 10 s apart, the final checks), more than the 2.5 minutes aimed at.
//
// Runs on 2026-11-28, every BIRD read every 100 ms (every 200 ms since 2026-11-29, sampleEvery)
// (go test -count=1 -v -run 'TestFailoverRenumberingOnRealBIRD$' ./test/transitions/, load average 1.5 to 4.5 beside other helpers' tests). Gaps between
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
func TestFailoverRenumberingOnRealBIRD(t *testing.T) {
	failoverRenumbering(t, false)
}

// TestFailoverPendingRenumberingOnRealBIRDLarge is TestFailoverRenumberingOnRealBIRD with the
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
	if os.Getenv(testenv.EnvAll) == "" {
		t.Skip("the live failover proof at a pending record: make test-all (" + testenv.EnvAll + "=1)")
	}
	failoverRenumbering(t, true)
}

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

// failoverRenumbering is TestFailoverRenumberingOnRealBIRD; pending: the leader is killed at the
// next renumbering's pending record rather than right after the first renumbering.
func failoverRenumbering(t *testing.T, pending bool) {
	if testing.Short() {
		t.Skip("the live failover proof: needs kube-apiserver, confd and BIRD (hack/tools.sh)")
	}
	if err := bgpverify.NetnsAvailable(); err != nil {
		t.Skipf("the live failover proof runs BIRD in network namespaces (root): %v", err)
	}
	start := time.Now()
	leaderArgs := []string{"--leader-elect", "--leader-election-namespace=" + testenv.ChartNamespace}
	w := newWorld(t, false, failoverPolicy("{type: Hierarchical, maxRackSize: 10}"), leaderArgs...)
	leader, err := testenv.NewProduct(testenv.ProductOptions{Dir: t.TempDir(), Bin: w.product.Cmd.Path, Args: leaderArgs})
	require.NoError(t, err)
	require.NoError(t, leader.Start(t.Context(), w.env.KubeconfigPath(testenv.UserServiceAccount), time.Minute))
	t.Cleanup(leader.Stop)
	w.keepOnFailure("serve-2.log", func() string { return readLog(leader.Log) })
	w.product.Stop() // releases the lease
	w.eventually("the second replica leads", time.Minute, func() error {
		if !strings.Contains(readLog(leader.Log), "successfully acquired lease") {
			return fmt.Errorf("no lease acquired in %s", leader.Log)
		}
		return nil
	})
	killedHolder := w.leaseHolder()
	require.NotEmpty(t, killedHolder)
	require.NoError(t, w.product.Restart(t.Context(), time.Minute), "starting the first replica again")
	w.env.AwaitWebhooks(t, 30*time.Second)

	names := nodeNames(failoverNodes)
	lab, err := bgpverify.StartLab(w.env.KubeconfigPath(testenv.UserAdmin), names)
	require.NoError(t, err)
	t.Cleanup(lab.Close)
	for i, n := range names {
		w.join(n, zones[i%3], bgpverify.NodeAddress(i).String(), bgpverify.Block(i).String())
	}
	w.eventually("12 route reflectors (Hierarchical, racks of 10)", time.Minute, func() error { return w.settled(12) })
	h := startHistory(t, w, lab, names, start, sampleEvery)

	before := w.roles()
	renums := watchRenumberings(t, w)
	const event = "leader killed between two renumberings (Hierarchical to DualPlane)"
	h.s.Begin(event)
	out, stderr, err := w.env.KubectlStdin(t, testenv.UserAdmin, failoverPolicy("{type: DualPlane, maxRackSize: 10}"), "apply", "-f", "-")
	require.NoError(t, err, "apply policy\n%s%s", out, stderr)
	applied := time.Now()
	w.eventually("the first renumbering", time.Minute, func() error {
		if len(renums.All()) == 0 {
			return fmt.Errorf("no route reflector renumbered yet")
		}
		return nil
	})
	first := renums.All()[0]
	if pending {
		next := w.pendingRenumber(first.Node, time.Minute)
		require.NoError(t, syscall.Kill(-leader.Cmd.Process.Pid, syscall.SIGKILL))
		t.Logf("leader SIGKILLed at the pending Renumber record of %s", next)
	} else {
		require.Equal(t, killedHolder, w.leaseHolder(), "the second replica still holds the lease")
		require.NoError(t, syscall.Kill(-leader.Cmd.Process.Pid, syscall.SIGKILL))
	}
	killed := time.Now()
	t.Logf("first renumbering %s %s -> %s seen %v after the apply; leader SIGKILLed %v after it; records then: %v",
		first.Node, first.From, first.To, first.At.Sub(applied).Round(10*time.Millisecond), killed.Sub(first.At).Round(10*time.Millisecond), w.policyTransitions())
	var took time.Duration
	w.eventually("the first replica takes the lease", time.Minute, func() error {
		if hl := w.leaseHolder(); hl == "" || hl == killedHolder {
			return fmt.Errorf("lease held by %q", hl)
		}
		took = time.Since(killed)
		return nil
	})
	t.Logf("the first replica took the lease %v after the kill; records it read: %v", took.Round(100*time.Millisecond), w.policyTransitions())

	// The transition is over when the layout settled and no record is left, and stays so.
	for {
		n := len(renums.All())
		h.settle(failoverNodes)
		w.eventually("no transition left in the policy's status", 2*time.Minute, func() error {
			if tr := w.policyTransitions(); len(tr) > 0 {
				return fmt.Errorf("transitions: %v", tr)
			}
			return nil
		})
		time.Sleep(settleRule + 2*time.Second)
		if len(renums.All()) == n && len(w.policyTransitions()) == 0 {
			break
		}
	}
	f := h.s.End()
	after := w.roles()
	seq := renums.All()

	// The gaps between successive renumberings, the one across the kill marked.
	gaps, short := testenv.Spacing(seq, applied, settleRule-renumberSlack, func(before, r testenv.NodeChange) string {
		if before.At.Before(killed) && !r.At.Before(killed) {
			return " (across the kill)"
		}
		return ""
	})
	assert.Empty(t, short, "renumbered less than %v after the last", settleRule-renumberSlack)
	t.Logf("renumberings (from the apply):\n  %s", strings.Join(gaps, "\n  "))
	require.GreaterOrEqual(t, len(seq), 2, "several route reflectors renumbered")
	require.True(t, seq[len(seq)-1].At.After(killed), "a renumbering after the kill: the new leader resumed the staging")

	// Every route reflector planned in place, active, none draining, no node in a transitional set.
	p, err := w.dyn.Resource(policyGVR).Get(t.Context(), "default", metav1.GetOptions{})
	require.NoError(t, err)
	desired, _, _ := unstructured.NestedInt64(p.Object, "status", "desiredRouteReflectors")
	have, _, _ := unstructured.NestedInt64(p.Object, "status", "routeReflectors")
	require.Equal(t, desired, have, "route reflectors planned and in place")
	require.NoError(t, w.settled(int(desired)))
	require.Empty(t, after.transitional())
	t.Logf("roles changed: %s", before.diff(after))

	// Pair-samples: none lost between nodes that keep their role and cluster ID; those with a
	// renumbered route reflector at one end are reported.
	keeps := func(n string) bool {
		return before.id[n] == after.id[n] && before.ready[n] && after.ready[n]
	}
	kept, pairs := f.MissingWhere(keeps2(keeps))
	all, _ := f.MissingWhere(func(a, b string) bool { return true })
	t.Logf("%s", f.String())
	t.Logf("pair-samples lost: %d between nodes that keep their role and cluster ID, %d in all (the rest with a renumbered or demoted node at one end); %d renumbered; %v in all",
		kept, all, len(seq), time.Since(start).Round(time.Second))
	if len(f.Restarts) > 0 {
		t.Logf("restarted sessions: %s", strings.Join(f.RestartedSessions(), " "))
	}
	assert.Zerof(t, kept, "pair-samples lost between nodes that keep their role: %s", strings.Join(head(pairs, 12), " "))
	require.NoError(t, h.s.Err(), "sampling")
	h.finish()
}

func keeps2(keeps func(string) bool) func(a, b string) bool {
	return func(a, b string) bool { return keeps(a) && keeps(b) }
}
