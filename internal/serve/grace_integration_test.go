package serve_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// TestNotReadyGraceOnRealAPIServer: a route reflector NotReady for 12 s (a kubelet blip, reported
// through nodes/status as a kubelet does) and Ready again keeps its role, with no draining mark and
// no role-change Event; NotReady past notReadyGracePeriod it is replaced, then demoted. Another
// one, NotReady past the grace period and Ready again before its removalDelay ends, takes its role
// back and loses the draining mark; its replacement drains instead.
func TestNotReadyGraceOnRealAPIServer(t *testing.T) {
	t.Parallel() // beside the other waiting tests: its time is the grace period and the blip, not the CPU
	w := newWorld(t)
	w.applyDefaultPolicy(`
  topology: {type: MultiCluster}
  notReadyGracePeriod: 20s
  removalDelay: 2s
  behavior: {scaleDown: {stabilizationWindowSeconds: 0}}
`)
	w.joinCluster(12)
	w.eventually("settled on 3 route reflectors", 60*time.Second, func() error { return w.snapshot().settled(3) })
	victim := slices.Sorted(maps.Keys(w.snapshot().rrs))[0]
	roleEvents := func() string {
		out, _, _ := w.kubectl(testenv.UserAdmin, "get", "events", "-A", "--field-selector", "involvedObject.name="+victim,
			"-o", "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}")
		return out
	}
	// Its promotion's Event is recorded asynchronously: wait for it, or it would arrive during
	// the blip and read as a role change there.
	var before string
	w.eventually("the victim's promotion Event", 30*time.Second, func() error {
		if before = roleEvents(); !strings.Contains(before, "RouteReflectorPromoted") {
			return fmt.Errorf("events of %s: %q", victim, before)
		}
		return nil
	})

	w.ready(victim, false)
	for end := time.Now().Add(12 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
		s := w.snapshot()
		if _, ok := s.rrs[victim]; !ok {
			require.Fail(t, fmt.Sprintf("%s lost its role %v before the end of a 12 s NotReady blip", victim, time.Until(end)))
		}
		if d := s.nodes[victim].Annotations[extender.AnnotationDrainingSince]; d != "" {
			require.Fail(t, fmt.Sprintf("%s marked draining (%s) within the grace period", victim, d))
		}
	}
	w.ready(victim, true)
	time.Sleep(2 * time.Second)
	if _, ok := w.snapshot().rrs[victim]; !ok {
		require.Fail(t, fmt.Sprintf("%s lost its role after the blip", victim))
	}
	if after := roleEvents(); after != before {
		require.Fail(t, fmt.Sprintf("role-change Events for %s after a blip: %q (before %q)", victim, after, before))
	}

	// Past the grace period: replaced, then demoted.
	start := time.Now()
	w.ready(victim, false)
	w.eventually("replaced and demoted after the grace period", 90*time.Second, func() error {
		s := w.snapshot()
		if _, ok := s.rrs[victim]; ok {
			return fmt.Errorf("%s still a route reflector after %v", victim, time.Since(start).Round(time.Second))
		}
		if len(s.rrs) != 3 {
			return fmt.Errorf("%d route reflectors", len(s.rrs))
		}
		return nil
	})
	if took := time.Since(start); took < 20*time.Second {
		require.Fail(t, fmt.Sprintf("%s demoted %v after going NotReady, within the 20 s grace period", victim, took.Round(time.Second)))
	}
	ev := roleEvents()
	for _, want := range []string{"RouteReflectorDraining", "RouteReflectorDemoted"} {
		require.Truef(t, strings.Contains(ev, want), "events of %s: %q, want %s", victim, ev, want)
	}
	t.Logf("%s replaced and demoted %v after going NotReady (grace 20 s)", victim, time.Since(start).Round(time.Second))

	// Ready again before the replacement takes over (removalDelay 5m): the role comes back.
	w.applyDefaultPolicy(`
  topology: {type: MultiCluster}
  notReadyGracePeriod: 20s
  removalDelay: 5m
  behavior: {scaleDown: {stabilizationWindowSeconds: 0}}
`)
	second := slices.Sorted(maps.Keys(w.snapshot().rrs))[0]
	w.ready(second, false)
	w.eventually(second+" draining past the grace period", 90*time.Second, func() error {
		n := w.snapshot().nodes[second]
		if n.Annotations[extender.AnnotationDrainingSince] == "" || n.Annotations[extender.AnnotationDrainingReason] != extender.DrainingReasonNotReady {
			return fmt.Errorf("%s not marked draining for NotReady: %v", second, n.Annotations)
		}
		return nil
	})
	w.ready(second, true)
	w.eventually(second+" takes its role back", 30*time.Second, func() error {
		s := w.snapshot()
		n := s.nodes[second]
		if _, ok := s.rrs[second]; !ok || n.Annotations[extender.AnnotationDrainingSince] != "" || n.Annotations[extender.AnnotationDrainingReason] != "" {
			return fmt.Errorf("%s: route reflector %v, annotations %v", second, ok, n.Annotations)
		}
		active := 0
		for name := range s.rrs {
			if s.nodes[name].Annotations[extender.AnnotationDrainingSince] == "" {
				active++
			}
		}
		if active != 3 {
			return fmt.Errorf("%d active route reflectors, want 3 (the replacement draining): %s", active, s.roles())
		}
		return nil
	})
}
