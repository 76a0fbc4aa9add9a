package chart

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

const (
	// settleRule is the product's wait between two renumberings of route reflectors that keep
	// their role when no CalicoNodeStatus can tell (internal/reconciler/stages.go transitions.DefaultSettle,
	// transitions.DefaultSettle; bgpHealth is off here), in 0.2.0 as in this release.
	settleRule = 10 * time.Second
	// renumberSlack: the test sees each renumbering when its watch event arrives, not when the
	// product wrote it; two arrivals can be closer than the writes by the watch's jitter.
	renumberSlack = 500 * time.Millisecond
	// inFlightValues: Hierarchical racks of 10 on 30 nodes in 3 zones, 12 route reflectors; the
	// change to inFlightChange (racks of 8: 21) renumbers 6 that keep their role.
	inFlightValues = "policy: {spec: {topology: {type: Hierarchical, maxRackSize: 10}, removalDelay: 3s, bgpHealth: {enabled: false}}}\n"
	inFlightChange = "policy: {spec: {topology: {type: Hierarchical, maxRackSize: 8}, removalDelay: 3s, bgpHealth: {enabled: false}}}\n"
)

// TestChartUpgradeWithTransitionInFlightLarge is TestChartUpgradeMovesNothing with a transition in
// flight (issue 51 item 5): a route reflector that keeps its role but changes its cluster ID
// restarts its BGP sessions, so the product renumbers such route reflectors one at a time, each
// at least the settle rule (10 s here) after the last. This release keeps a record of each
// renumbering in the policy's status.transitions; 0.2.0 kept it in memory only, so the first
// leader of this release finds no record of what a 0.2.0 leader renumbered just before it lost
// the lease.
//
// The previous release is installed as TestChartUpgradeMovesNothing installs it, but on
// Hierarchical racks of 10 (12 route reflectors on the 30 nodes). With the 0.2.0 replicas leading,
// the operator changes the chart's values to racks of 8 (21 route reflectors) and runs `helm
// upgrade` of the same chart: 6 route reflectors keep their role and must be renumbered, one per
// 10 s. Once the test's watch of the Nodes sees the first renumbering (the cluster-ID annotation
// of a node that keeps the route-reflector label and is not draining), `helm upgrade` to this
// chart with the same values and the rollout of the replicas to this binary follow at once, with
// TestChartUpgradeMovesNothing's label changes going on (no joins: see below). The rollout takes
// the old follower first, as the Deployment controller would when the older pod leads (it deletes
// the newer pod first), and the old leader gets SIGTERM right after its next renumbering is seen:
// the lease goes from the 0.2.0 leader to a replica of this release, whose first reconcile comes
// about 2 s after it takes the lease, well inside the settle time. (Had the old leader gone first
// and the 0.2.0 follower taken the lease, that 0.2.0 leader, staging in memory, would renumber the
// next at once: a fault of 0.2.0 that no upgrade can fix; TestChartUpgradeMovesNothing, with
// nothing in flight, takes the leader first.)
//
// Required: no two renumberings of kept route reflectors closer together than the settle rule
// less the watch's jitter (0.5 s; a slow machine makes gaps longer, never shorter), the one across
// the lease handover included; a renumbering after the handover (the transition was in flight);
// the transition completes (as many route reflectors as desired, none draining, no node left in a
// transitional set, status.transitions empty, and no renumbering for 12 s more); and what
// TestChartUpgradeMovesNothing requires of any upgrade (checkUpgraded: 0 admissions failed open,
// the Service never without endpoints, the policy never deleted, the current CRD). It logs the
// renumberings with their gaps and the lease handovers.
//
// It takes about 2.5 to 3 minutes on two shared cores (the transition alone about a minute), more
// than make test's budget allows beyond TestChartUpgradeMovesNothing: make test-all runs it.
//
// Measured on 2026-12-01, two loaded cores (gaps between successive renumberings as the watch saw
// them; the first is 0.2.0's, the one across the handover marked; times are when each run ended):
//   - 20:55, the first fix (060f649) reverted: FAILED as it should. node-03 renumbered 2.62 s
//     after the change, node-04 9.91 s later (0.2.0), the 0.2.0 leader stopped 0.08 s after it,
//     the lease taken 0.7 s later, and the new leader renumbered node-05 2.79 s after node-04
//     (2.72 s after the stop); then 10.07, 10.06, 10.17 s. 152 s.
//   - 20:58, with the fix: passed, 159 s. Gaps 9.92 s (0.2.0), 12.90 s across the handover (the
//     new leader waited 10 s from its load), then 10.06, 10.04, 10.16 s.
//   - 21:02, with the fix: passed, 180 s. Gaps 9.99 s, 15.45 s across the handover (lease taken
//     3.1 s after the stop), then 10.13, 10.06, 11.41 s.
//   - 21:24, the fix as it landed (4985de4, which replaced 060f649: the new leader keeps the last
//     write of the product's field manager to a kept route reflector, from its Node's
//     managedFields, as the Renumber record): passed, 174 s. node-04 renumbered by 0.2.0 at
//     13.51 s, the old leader stopped 0.01 s later, the lease taken 1.3 s after; node-05 renumbered
//     10.24 s after node-04 (10.23 s after the stop); then 10.16, 10.21, 10.49 s.
//   - 20:52, an earlier version of the test that stopped the old leader once the new replica was
//     ready, not right after a renumbering: with the fix reverted it passed, the new leader's
//     first renumbering falling 9.97 s after the old one's by the timing of that run: the reason
//     the leader now goes right after a renumbering.
//
// The first versions of the test ran TestChartUpgradeMovesNothing's joins too (9 nodes from the
// upgrade on): to DualPlane racks of 15 (20:37) and to racks of 8 (20:45), 0.2.0 renumbered the
// first route reflector, then the other five at once 1.8 s later, while it still led (during the
// current chart's hooks); without the joins (20:49, racks of 8) it staged them 10 s apart. A 0.2.0
// fault, it seems (its staging lets every change go at once where no staged state passes its
// model check), not looked into further: so no node joins here.
func TestChartUpgradeWithTransitionInFlightLarge(t *testing.T) {
	testenv.SlowProof(t)
	u := startUpgrade(t, inFlightValues, 12)
	opensBefore, requestsBefore := apiserverAdmissions(t, u.admin)
	sampled := u.sample()
	renums := testenv.WatchNodeChanges(t, u.admin, func(n *corev1.Node) string {
		if _, rr := n.Labels[policy.DefaultRouteReflectorLabelKey]; !rr || extender.IsDraining(extender.FromNode(n)) {
			return ""
		}
		return n.Annotations[extender.AnnotationClusterID]
	})

	// The change, as an operator of 0.2.0 makes it: the chart's values, `helm upgrade`.
	u.setValues(inFlightChange)
	changed := time.Now()
	u.upgradeChart(u.prev.Chart, u.prev.Bin, false)
	u.eventually("the first renumbering", time.Minute, func() error {
		if len(renums.All()) == 0 {
			return fmt.Errorf("no route reflector renumbered yet")
		}
		return nil
	})
	first := renums.All()[0]
	t.Logf("the first renumbering (0.2.0's leader) %s %s -> %s seen %v after the change", first.Node, first.From, first.To,
		first.At.Sub(changed).Round(10*time.Millisecond))

	traffic := u.startTraffic(u.base, 0)
	t.Cleanup(func() { traffic.stop() })
	u.upgradeToCurrent()
	// The old leader goes right after one of its renumberings: without a record of it, the new
	// leader's first reconcile (about 2 s after it takes the lease) would renumber the next one
	// well inside the settle time.
	handovers := u.rollout(false, func() {
		n := len(renums.All())
		u.eventually("the old leader's next renumbering", 30*time.Second, func() error {
			if len(renums.All()) == n {
				return fmt.Errorf("%d renumberings so far", n)
			}
			return nil
		})
	})
	late := traffic.stop()

	// The transition is over when the layout settled and no record is left, and stays so.
	for {
		n := len(renums.All())
		u.eventually("the transition done", 3*time.Minute, u.transitionDone)
		time.Sleep(settleRule + 2*time.Second)
		if len(renums.All()) == n && u.transitionDone() == nil {
			break
		}
	}
	final := u.quiet(3 * time.Second)
	sampled.stop()

	seq := renums.All()
	var across []string
	lines, short := testenv.Spacing(seq, changed, settleRule-renumberSlack, func(before, c testenv.NodeChange) string {
		mark := ""
		for _, h := range handovers {
			if h.stopped.After(before.At) && h.stopped.Before(c.At) {
				mark += fmt.Sprintf(" (across the handover %s; %v after the old leader stopped)", h, c.At.Sub(h.stopped).Round(10*time.Millisecond))
				across = append(across, c.Node)
			}
		}
		return mark
	})
	var hs []string
	for _, h := range handovers {
		hs = append(hs, fmt.Sprintf("%s (old leader stopped @%v)", h, h.stopped.Sub(changed).Round(10*time.Millisecond)))
	}
	t.Logf("lease handovers: %s; lease holders in turn %d", strings.Join(hs, ", "), len(sampled.holders))
	t.Logf("renumberings of kept route reflectors (from the change):\n  %s", strings.Join(lines, "\n  "))
	assert.Empty(t, short, "renumbered less than %v after the last", settleRule-renumberSlack)
	require.Len(t, handovers, 1, "the old leader handed the lease to a new replica")
	require.True(t, seq[len(seq)-1].At.After(handovers[0].stopped), "a renumbering after the handover: the transition was in flight")
	require.NotEmpty(t, across, "a gap across the handover")
	have, _ := final.counts()
	t.Logf("the transition done: %d route reflectors, %d renumberings; %d samples", have, len(seq), sampled.n)
	u.checkUpgraded(sampled, late, final, opensBefore, requestsBefore)
	t.Logf("TestChartUpgradeWithTransitionInFlightLarge took %s", time.Since(u.begin).Round(time.Millisecond))
}

// transitionDone: the roles settled (settled: every node with a role, none draining, as many
// route reflectors as desired), no node in a transitional set, the policy's status.transitions
// empty.
func (u *upgradeWorld) transitionDone() error {
	if err := u.settled(); err != nil {
		return err
	}
	l, err := u.snapshot()
	if err != nil {
		return err
	}
	for name, n := range l.nodes {
		if n.transitional {
			return fmt.Errorf("%s in a transitional set", name)
		}
	}
	p, err := u.dyn.Resource(policiesGVR).Get(u.t.Context(), "default", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if tr, _, _ := unstructured.NestedSlice(p.Object, "status", "transitions"); len(tr) > 0 {
		return fmt.Errorf("status.transitions: %v", tr)
	}
	return nil
}
