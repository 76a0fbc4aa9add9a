package serve_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// TestSpineStandbyOnRealAPIServer: a DualPlane spine member that goes NotReady (through nodes/status,
// as a kubelet reports it) gets a standby for its plane within 30 s, not after the grace period (2
// min; the bound was 5 s until a `.ci/run` on 2026-12-02, load from the live BIRD tests beside it,
// saw none in 5 s); after
// a 20 s blip the member keeps its plane and the standby is released: one promotion and one
// demotion, no other role change. The planner's side of this is TestLifeSpineMemberNotReadyGetsAStandby;
// this test proves the reconciler acts on the status update at once.
func TestSpineStandbyOnRealAPIServer(t *testing.T) {
	t.Parallel() // beside the other waiting tests: its time is the 20 s blip, not the CPU
	w := newWorld(t)
	w.applyDefaultPolicy(`
  topology: {type: DualPlane, maxRackSize: 10}
  notReadyGracePeriod: 2m
  removalDelay: 2s
`)
	w.joinCluster(30) // 3 zones of 10: a rack per zone and a spine, 8 route reflectors
	w.eventually("settled on 8 route reflectors", 60*time.Second, func() error { return w.snapshot().settled(8) })
	spineOf := func(s *snapshot) map[string]string { // spine member or standby -> plane
		out := map[string]string{}
		for name, id := range s.rrs {
			if id == "224.0.0.1" && s.nodes[name].Annotations[extender.AnnotationDrainingSince] == "" {
				out[name] = s.nodes[name].Annotations[extender.AnnotationPlane]
			}
		}
		return out
	}
	before := w.snapshot()
	var victim string
	for name, plane := range spineOf(before) {
		if plane == "2" {
			victim = name
		}
	}
	require.NotEmpty(t, victim, "a plane-2 spine member: %s", before.roles())
	rrsBefore := slices.Sorted(maps.Keys(before.rrs))

	start := time.Now()
	w.ready(victim, false)
	var standby string
	w.eventually("a standby for "+victim, 30*time.Second, func() error {
		s := w.snapshot()
		for name := range spineOf(s) {
			if s.nodes[name].Annotations[extender.AnnotationStandbyFor] == victim {
				standby = name
				return nil
			}
		}
		return fmt.Errorf("no standby yet: %s", s.roles())
	})
	t.Logf("standby %s for %s after %v", standby, victim, time.Since(start).Round(100*time.Millisecond))
	time.Sleep(20*time.Second - time.Since(start))
	w.ready(victim, true)
	w.eventually("the standby released", 30*time.Second, func() error {
		s := w.snapshot()
		if _, ok := s.rrs[standby]; ok {
			return fmt.Errorf("%s still a route reflector: %s", standby, s.roles())
		}
		if spineOf(s)[victim] != "2" {
			return fmt.Errorf("%s is not plane 2's member: %s", victim, s.roles())
		}
		return s.settled(8)
	})
	require.Equal(t, rrsBefore, slices.Sorted(maps.Keys(w.snapshot().rrs)), "the same route reflectors after the blip")
	// Events are recorded asynchronously: wait for the demotion's, then count.
	w.eventually("the standby's role Events", 10*time.Second, func() error {
		if n := len(w.events("Node", standby, "RouteReflectorDemoted")); n == 0 {
			return fmt.Errorf("no demotion Event for %s yet", standby)
		}
		return nil
	})
	require.Len(t, w.events("Node", standby, "RouteReflectorPromoted"), 1, "one promotion")
	require.Len(t, w.events("Node", standby, "RouteReflectorDemoted"), 1, "one demotion")
}
