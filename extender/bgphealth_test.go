package extender

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// bgpSpec is dualSpec with bgpHealth.gracePeriod 5s and a 3s scale-down window (the hold).
func bgpSpec(rack int32) v1alpha1.RouteReflectorPolicySpec {
	s := dualSpec(rack)
	s.BGPHealth = &v1alpha1.BGPHealth{GracePeriod: &metav1.Duration{Duration: 5 * time.Second}}
	s.Behavior = &v1alpha1.Behavior{ScaleDown: &v1alpha1.ScaleDown{StabilizationWindowSeconds: i32(3)}}
	return s
}

// TestBGPHealthObserve: the record's life through observations (down or up, seconds after t0).
func TestBGPHealthObserve(t *testing.T) {
	p := resolve(t, bgpSpec(20))
	require.Equal(t, 5*time.Second, p.BGPGrace)
	require.Equal(t, 3*time.Second, BGPHold(p))
	type obs struct {
		at   int
		down bool
	}
	tests := []struct {
		name string
		seq  []obs
		// after the last observation: is the record kept, and is the route reflector failed at
		// the time of the last observation
		kept, failed bool
	}{
		{"never down", []obs{{0, false}, {10, false}}, false, false},
		{"down within the grace period", []obs{{0, true}, {4, true}}, true, false},
		{"down for the grace period", []obs{{0, true}, {5, true}}, true, true},
		{"back within the grace period: never failed", []obs{{0, true}, {4, false}}, false, false},
		{"back after failing: failed for the hold", []obs{{0, true}, {6, true}, {7, false}, {9, false}}, true, true},
		{"back for the hold: healthy", []obs{{0, true}, {6, true}, {7, false}, {10, false}}, false, false},
		{"down again during the hold: the hold starts over", []obs{{0, true}, {6, true}, {7, false}, {9, true}, {11, false}, {13, false}}, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h BGPHealth
			kept := false
			var now time.Time
			for _, o := range tt.seq {
				now = t0.Add(time.Duration(o.at) * time.Second)
				h, kept = h.Observe(o.down, []string{"a"}, now, p)
				if !kept {
					h = BGPHealth{}
				}
			}
			assert.Equal(t, tt.kept, kept, "kept")
			assert.Equal(t, tt.failed, h.Failed(now, p), "failed")
		})
	}
}

// TestBGPSessionsFilter: the filter rejects a Ready node failed by its sessions only.
func TestBGPSessionsFilter(t *testing.T) {
	p := resolve(t, bgpSpec(20))
	now := t0.Add(time.Hour)
	tests := []struct {
		name  string
		ready bool
		h     BGPHealth
		want  string
	}{
		{"no record", true, BGPHealth{}, ""},
		{"within the grace period", true, BGPHealth{DownSince: now.Add(-4 * time.Second)}, ""},
		{"past the grace period", true, BGPHealth{DownSince: now.Add(-5 * time.Second)}, ReasonBGPDown},
		{"back, within the hold", true, BGPHealth{DownSince: now.Add(-time.Minute), UpSince: now.Add(-2 * time.Second)}, ReasonBGPDown},
		{"back for the hold", true, BGPHealth{DownSince: now.Add(-time.Minute), UpSince: now.Add(-3 * time.Second)}, ""},
		{"NotReady: NodeReady's business", false, BGPHealth{DownSince: now.Add(-time.Minute)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := node("n1", "zone-a", 1)
			setReady(n, tt.ready, now.Add(-time.Hour))
			ni := NewNodeInfo(n, p)
			ni.Now, ni.BGP = now, tt.h
			assert.Equal(t, tt.want, NewBGPSessions().Filter(p, ni))
			RunFilters(DefaultFilters(), p, ni)
			if tt.want != "" {
				assert.Equal(t, RuleBGPDownNode, ni.Rule, "the default filters run it")
			}
		})
	}
}

// TestLifeRouteReflectorBGPDown: a rack route reflector and a spine member whose sessions go down
// while their Nodes stay Ready keep their role within the grace period, are replaced past it (the
// replacement in the same rack and plane, a spine standby at once), drain with the reason BGPDown,
// and take their role back when their sessions have been back for the hold. Every plan passes its
// drills.
func TestLifeRouteReflectorBGPDown(t *testing.T) {
	for _, spine := range []bool{false, true} {
		t.Run(fmt.Sprintf("spine=%v", spine), func(t *testing.T) {
			p := resolve(t, bgpSpec(20))
			p.RemovalDelay = time.Minute
			l := newLife(t, p, cluster(120, 3))
			l.settle(time.Minute, 3)
			var victim RouteReflector
			for _, rr := range l.res.RouteReflectors {
				if rr.Spine == spine && !rr.Draining && rr.StandbyFor == "" {
					victim = rr
					break
				}
			}
			require.NotEmpty(t, victim.Node)
			l.bgp = map[string]BGPHealth{victim.Node: {DownSince: l.now, Sessions: []string{"all"}}}
			l.step(time.Second)
			require.False(t, rrNames(l.res)[victim.Node].Draining, "keeps its role within the grace period")
			require.Equal(t, l.now.Add(4*time.Second), l.res.RecheckAt, "the plan wakes up when the grace period ends")
			if spine {
				var sb string
				for _, rr := range l.res.RouteReflectors {
					if rr.StandbyFor == victim.Node {
						sb = rr.Node
					}
				}
				require.NotEmpty(t, sb, "a standby for the spine member at once: %v", l.res.RouteReflectors)
			}
			l.step(4 * time.Second)
			got := rrNames(l.res)[victim.Node]
			require.True(t, got.Draining, "replaced past the grace period")
			require.Equal(t, DrainingReasonBGPDown, l.node(victim.Node).Annotations[AnnotationDrainingReason])
			var repl RouteReflector
			for _, rr := range l.res.RouteReflectors {
				if !rr.Draining && rr.Plane == victim.Plane && (spine || rr.Rack == victim.Rack) && rr.Spine == victim.Spine && rr.Node != victim.Node {
					repl = rr
				}
			}
			require.NotEmpty(t, repl.Node, "a replacement in %s plane %d: %v", victim.Rack, victim.Plane, l.res.RouteReflectors)
			require.Empty(t, FailedDrills(l.res.Drills))
			for _, c := range l.res.Clients {
				require.NotContains(t, c.RouteReflectors, victim.Node, "client %s moved off", c.Node)
			}

			// Sessions back: failed for the hold still, then healthy.
			h := l.bgp[victim.Node]
			h.UpSince = l.now.Add(5 * time.Second)
			l.bgp[victim.Node] = h
			l.step(5 * time.Second)
			require.True(t, rrNames(l.res)[victim.Node].Draining, "still draining within the hold")
			delete(l.bgp, victim.Node)
			l.step(3 * time.Second)
			if !spine {
				require.False(t, rrNames(l.res)[victim.Node].Draining, "a rack route reflector takes its plane back")
				require.True(t, rrNames(l.res)[repl.Node].Draining, "the replacement drains")
			}
			l.settle(p.RemovalDelay/5, 6)
			l.requireSafe("after the BGP outage")
			if !spine {
				require.Equal(t, victim.Plane, rrNames(l.res)[victim.Node].Plane)
				_, still := rrNames(l.res)[repl.Node]
				require.False(t, still, "the replacement %s is released", repl.Node)
			}
		})
	}
}

// TestBGPDownReason: the filter's reason names the families down when others are up.
func TestBGPDownReason(t *testing.T) {
	for _, tc := range []struct {
		name       string
		down, node Families
		want       string
	}{
		{"the record does not say", 0, FamilyIPv4 | FamilyIPv6, ReasonBGPDown},
		{"IPv4-only node, IPv4 down", FamilyIPv4, FamilyIPv4, ReasonBGPDown},
		{"dual stack, both down", FamilyIPv4 | FamilyIPv6, FamilyIPv4 | FamilyIPv6, ReasonBGPDown},
		{"dual stack, IPv6 down", FamilyIPv6, FamilyIPv4 | FamilyIPv6,
			"node's IPv6 BGP sessions have been down for longer than bgpHealth.gracePeriod (its Node is Ready, IPv4 up): its IPv6 clients have no routes through it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, BGPDownReason(BGPHealth{Families: tc.down}, tc.node))
		})
	}
}
