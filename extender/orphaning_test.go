package extender

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBGPOrphaning: the rule for two route reflectors of a client lost at once (calico#9259) names,
// for each route reflector down, the clients whose every route reflector is down; one route
// reflector down, one client's single route reflector, or a client with one still up name nothing.
func TestBGPOrphaning(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rrsOf map[string][]string
		down  []string
		want  map[string][]string
	}{
		{"nothing down", map[string][]string{"c1": {"a", "b"}}, nil, nil},
		{"one of two down: the grace applies", map[string][]string{"c1": {"a", "b"}, "c2": {"a", "b"}}, []string{"a"}, nil},
		{"both of a rack down", map[string][]string{"c1": {"a", "b"}, "c2": {"a", "b"}, "c3": {"c", "d"}}, []string{"a", "b"},
			map[string][]string{"a": {"c1", "c2"}, "b": {"c1", "c2"}}},
		{"two down without a common client", map[string][]string{"c1": {"a", "b"}, "c2": {"c", "d"}}, []string{"a", "c"}, nil},
		{"a client's single route reflector down: no orphaning (its blip keeps the grace)", map[string][]string{"c1": {"a"}}, []string{"a"}, nil},
		{"two of three down", map[string][]string{"c1": {"a", "b", "c"}}, []string{"a", "b"}, nil},
		{"three of three down", map[string][]string{"c1": {"a", "b", "c"}}, []string{"a", "b", "c"},
			map[string][]string{"a": {"c1"}, "b": {"c1"}, "c": {"c1"}}},
		{"a client in a transitional set (old and new route reflectors), a new one up", map[string][]string{"c1": {"a", "b", "e"}}, []string{"a", "b"}, nil},
		{"overlapping sets (MultiCluster): only the clients all of whose are down", map[string][]string{"c1": {"a", "b"}, "c2": {"b", "c"}, "c3": {"a", "c"}},
			[]string{"a", "b"}, map[string][]string{"a": {"c1"}, "b": {"c1"}}},
		{"a client with none", map[string][]string{"c1": nil}, []string{"a", "b"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			down := map[string]bool{}
			for _, d := range tc.down {
				down[d] = true
			}
			assert.Equal(t, tc.want, BGPOrphaning(tc.rrsOf, down))
		})
	}
}

// TestBGPHealthOrphaningSkipsTheGrace: a record with Orphaning is failed at once, stays failed
// while down, counts healthy again only after the hold; the BGPSessions filter and NodeReady reject
// it at once (no gracePeriod, no notReadyGracePeriod), and the reason says why.
func TestBGPHealthOrphaningSkipsTheGrace(t *testing.T) {
	p := resolve(t, bgpSpec(20))
	now := t0.Add(time.Hour)
	orph := []string{"c1", "c2"}
	for _, tc := range []struct {
		name   string
		ready  bool
		h      BGPHealth
		failed bool
		reason string
	}{
		{"down a second, orphaning: failed at once", true, BGPHealth{DownSince: now.Add(-time.Second), Orphaning: orph}, true, BGPDownReason(BGPHealth{Orphaning: orph}, FamilyIPv4)},
		{"down a second, not orphaning: within the grace", true, BGPHealth{DownSince: now.Add(-time.Second)}, false, ""},
		{"just seen down, orphaning", true, BGPHealth{DownSince: now, Orphaning: orph}, true, BGPDownReason(BGPHealth{Orphaning: orph}, FamilyIPv4)},
		{"back within the hold", true, BGPHealth{DownSince: now.Add(-2 * time.Second), UpSince: now.Add(-time.Second), Orphaning: orph}, true, BGPDownReason(BGPHealth{Orphaning: orph}, FamilyIPv4)},
		{"back for the hold", true, BGPHealth{DownSince: now.Add(-5 * time.Second), UpSince: now.Add(-3 * time.Second), Orphaning: orph}, false, ""},
		{"NotReady, orphaning: no notReadyGracePeriod", false, BGPHealth{DownSince: now.Add(-time.Second), Orphaning: orph}, true, ReasonNotReady},
		{"NotReady, not orphaning: within notReadyGracePeriod", false, BGPHealth{}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.failed, tc.h.Failed(now, p))
			n := node("n1", "zone-a", 1)
			n.Labels["calico-route-reflector"] = ""
			n.Annotations = map[string]string{AnnotationClusterID: "244.0.0.1"}
			setReady(n, tc.ready, now.Add(-2*time.Second))
			ni := NewNodeInfo(n, p)
			ni.Now, ni.BGP, ni.CurrentRR = now, tc.h, true
			RunFilters(DefaultFilters(), p, ni)
			assert.Equal(t, tc.reason, ni.Reason)
		})
	}
	require.Contains(t, BGPDownReason(BGPHealth{Orphaning: orph}, FamilyIPv4), "every other route reflector of its clients c1, c2")

	// Observe: an orphaning record that comes back within the grace is failed for the hold (it was
	// replaced), not healthy at once.
	h := BGPHealth{DownSince: now, Orphaning: orph}
	h, kept := h.Observe(false, nil, now.Add(time.Second), p)
	require.True(t, kept)
	require.True(t, h.Failed(now.Add(time.Second), p))
	h, kept = h.Observe(false, nil, now.Add(time.Second+BGPHold(p)), p)
	require.False(t, kept)
}

// TestLifeTwoRouteReflectorsOfARackDown: a DualPlane rack's two route reflectors seen down in the
// same observation while their Nodes stay Ready (both BIRDs stopped, calico#9259), each record
// naming the clients left with no route reflector: one plan replaces both (no gracePeriod), every
// client of the rack peers with two new route reflectors of its rack, and the plan passes its
// drills.
func TestLifeTwoRouteReflectorsOfARackDown(t *testing.T) {
	s := bgpSpec(20)
	p := resolve(t, s)
	p.BGPGrace = 2 * time.Minute
	p.RemovalDelay = time.Minute
	l := newLife(t, p, cluster(60, 3))
	l.settle(time.Minute, 3)
	var victims []RouteReflector
	for _, rr := range l.res.RouteReflectors {
		if !rr.Spine && !rr.Draining && (len(victims) == 0 || rr.Rack == victims[0].Rack) {
			victims = append(victims, rr)
		}
	}
	require.Len(t, victims, 2, "a rack's two route reflectors: %v", l.res.RouteReflectors)
	rack := victims[0].Rack
	var orphans []string
	for _, c := range l.res.Clients {
		if len(c.RouteReflectors) == 2 && (c.RouteReflectors[0] == victims[0].Node || c.RouteReflectors[1] == victims[0].Node) {
			orphans = append(orphans, c.Node)
		}
	}
	require.NotEmpty(t, orphans)
	l.bgp = map[string]BGPHealth{}
	for _, v := range victims {
		l.bgp[v.Node] = BGPHealth{DownSince: l.now, Sessions: []string{"all"}, Orphaning: orphans}
	}
	l.step(time.Second)
	got := rrNames(l.res)
	for _, v := range victims {
		require.True(t, got[v.Node].Draining, "%s replaced in the first plan, without the grace: %v", v.Node, l.res.RouteReflectors)
		require.Equal(t, DrainingReasonBGPDown, l.node(v.Node).Annotations[AnnotationDrainingReason])
	}
	var repl []string
	for _, rr := range l.res.RouteReflectors {
		if rr.Rack == rack && !rr.Spine && !rr.Draining {
			repl = append(repl, rr.Node)
		}
	}
	require.Len(t, repl, 2, "both planes of %s replaced in the same plan: %v", rack, l.res.RouteReflectors)
	require.Empty(t, FailedDrills(l.res.Drills))
	for _, c := range l.res.Clients {
		for _, v := range victims {
			require.NotContains(t, c.RouteReflectors, v.Node, "client %s moved off", c.Node)
		}
	}
}
