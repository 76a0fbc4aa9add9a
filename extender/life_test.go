package extender

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// life is a cluster living through events: each step plans (with the graph model's drills, as the
// reconciler does) and applies the plan to the nodes.
type life struct {
	t     *testing.T
	p     *policy.Resolved
	nodes []*Node
	now   time.Time
	recs  []Recommendation
	res   *Result
	bgp   map[string]BGPHealth // the leader's BGP health records (Input.BGPHealth)
}

func newLife(t *testing.T, p *policy.Resolved, nodes []*Node) *life {
	t.Helper()
	require.NotNil(t, PlanDrills, "the graph model's drills are wired by model_hook_test.go")
	l := &life{t: t, p: p, nodes: nodes, now: t0.Add(240 * time.Hour)}
	l.step(0)
	return l
}

func (l *life) input() Input {
	return Input{Policy: l.p, Nodes: l.nodes, Now: l.now, Recommendations: l.recs, Drills: PlanDrills, BGPHealth: l.bgp}
}

// step lets d pass, plans and applies the plan.
func (l *life) step(d time.Duration) *Result {
	l.now = l.now.Add(d)
	prev := l.res
	l.res = Plan(l.input())
	require.NoError(l.t, l.res.DrillsErr)
	if prev != nil {
		require.Empty(l.t, clusterIDChanges(prev, l.res), "cluster IDs of route reflectors that keep their role")
	}
	apply(l.p, l.nodes, l.res)
	l.recs = l.res.Recommendations
	return l.res
}

// settle takes n steps of d.
func (l *life) settle(d time.Duration, n int) {
	for range n {
		l.step(d)
	}
}

func (l *life) node(name string) *Node {
	i := slices.IndexFunc(l.nodes, func(n *Node) bool { return n.Name == name })
	require.GreaterOrEqual(l.t, i, 0, name)
	return l.nodes[i]
}

// spine returns the plan's active spine members (not their standbys), by plane.
func (l *life) spine() map[int]RouteReflector {
	out := map[int]RouteReflector{}
	for _, rr := range l.res.RouteReflectors {
		if rr.Spine && !rr.Draining && rr.StandbyFor == "" {
			out[rr.Plane] = rr
		}
	}
	return out
}

// requireSafe: the spine's planes in distinct zones and every drill of the plan passes, and the
// drills agree with a fresh plan of the same nodes where that one passes.
func (l *life) requireSafe(what string) {
	l.t.Helper()
	require.Empty(l.t, FailedDrills(l.res.Drills), "%s: failed drills", what)
	zones := map[string]bool{}
	for _, rr := range l.spine() {
		require.False(l.t, zones[rr.Zone], "%s: two spine members in zone %s: %v", what, rr.Zone, l.spine())
		zones[rr.Zone] = true
	}
	require.NotEmpty(l.t, l.res.Drills, "%s: drills ran", what)
}

func setReady(n *Node, ready bool, at time.Time) {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			n.Status.Conditions[i].Status = st
			n.Status.Conditions[i].LastTransitionTime = metav1.NewTime(at)
		}
	}
}

func zoneNodes(nodes []*Node, zone string) []*Node {
	var out []*Node
	for _, n := range nodes {
		if n.Labels[corev1.LabelTopologyZone] == zone {
			out = append(out, n)
		}
	}
	return out
}

func dualSpec(rack int32) v1alpha1.RouteReflectorPolicySpec {
	return v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: i32(rack)}}
}

// TestLifeZoneOutageAndRecovery: a zone NotReady past the grace period and Ready again leaves the
// spine's planes in distinct zones and every drill passing (it used to leave both spine members in
// the other zone for good: losing that zone then cut every cross-zone pair).
func TestLifeZoneOutageAndRecovery(t *testing.T) {
	p := resolve(t, dualSpec(20))
	l := newLife(t, p, cluster(120, 2))
	l.settle(time.Minute, 10)
	l.requireSafe("fresh")
	for _, n := range zoneNodes(l.nodes, "zone-b") {
		setReady(n, false, l.now)
	}
	l.settle(time.Minute, 10)
	for _, n := range zoneNodes(l.nodes, "zone-b") {
		setReady(n, true, l.now)
	}
	l.settle(time.Minute, 20)
	l.requireSafe("after zone-b's outage and recovery")
}

// TestLifeSpineReplacementPrefersAnotherZone: with few eligible nodes outside one zone, a lost
// spine member's successor comes from another zone rather than from a node that is not a rack
// route reflector of the same zone; a spine member relabelled into the other's zone gets the
// spread back.
func TestLifeSpineReplacementPrefersAnotherZone(t *testing.T) {
	spec := dualSpec(50)
	spec.ForbiddenNodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"no-rr": "true"}}
	p := resolve(t, spec)
	var nodes []*Node
	for i := range 200 {
		zone := []string{"zone-a", "zone-a", "zone-b", "zone-c"}[i%4]
		n := node(fmt.Sprintf("node-%05d", i+1), zone, i)
		nodes = append(nodes, n)
	}
	eligibleOut := map[string]int{}
	for _, n := range nodes {
		z := n.Labels[corev1.LabelTopologyZone]
		if z != "zone-a" {
			if eligibleOut[z] >= 2 {
				n.Labels["no-rr"] = "true"
			}
			eligibleOut[z]++
		}
	}
	l := newLife(t, p, nodes)
	l.settle(time.Minute, 10)
	l.requireSafe("fresh")
	for plane := 1; plane <= 2; plane++ {
		gone := l.spine()[plane].Node
		l.nodes = slices.DeleteFunc(l.nodes, func(n *Node) bool { return n.Name == gone })
		l.settle(time.Minute, 10)
		l.requireSafe("spine member " + gone + " deleted")
	}
	// Relabel a spine member into the other's zone.
	sp := l.spine()
	moved := l.node(sp[2].Node)
	moved.Labels[corev1.LabelTopologyZone] = sp[1].Zone
	l.settle(time.Minute, 20)
	l.requireSafe("spine member " + moved.Name + " relabelled into " + sp[1].Zone)
}

// TestLifeSpineMemberNotReadyGetsAStandby: a spine member NotReady gets a standby for its plane at
// once (not after the grace period), in a zone other than the other plane's member; every drill
// passes meanwhile. A blip ends with the original member and costs one promotion and one demotion;
// a member that stays NotReady past the grace is replaced by its standby with no other promotion.
func TestLifeSpineMemberNotReadyGetsAStandby(t *testing.T) {
	for _, blip := range []bool{true, false} {
		t.Run(fmt.Sprintf("blip=%v", blip), func(t *testing.T) {
			p := resolve(t, dualSpec(20))
			l := newLife(t, p, cluster(180, 3))
			l.settle(time.Minute, 5)
			before := l.spine()
			member := l.node(before[2].Node)
			setReady(member, false, l.now)
			l.step(time.Second)
			var sb RouteReflector
			for _, rr := range l.res.RouteReflectors {
				if rr.StandbyFor == member.Name {
					sb = rr
				}
			}
			require.NotEmpty(t, sb.Node, "a standby for %s at once: %v", member.Name, l.res.RouteReflectors)
			require.Equal(t, 2, sb.Plane)
			require.NotEqual(t, before[1].Zone, sb.Zone, "the standby is not in the other plane's zone")
			require.Empty(t, FailedDrills(l.res.Drills))
			l.settle(time.Second, 3)
			require.Equal(t, member.Name, l.spine()[2].Node, "the member keeps its plane within the grace")
			rrs := rrNames(l.res)
			if blip {
				setReady(member, true, l.now)
				l.step(time.Second)
				require.True(t, rrNames(l.res)[sb.Node].Draining, "the standby drains once the member is Ready")
				l.settle(p.RemovalDelay/10+time.Second, 11)
				require.Equal(t, member.Name, l.spine()[2].Node, "the original member after the blip")
				_, still := rrNames(l.res)[sb.Node]
				require.False(t, still, "the standby %s is released", sb.Node)
			} else {
				l.settle(30*time.Second, 10)
				require.Equal(t, sb.Node, l.spine()[2].Node, "the standby takes the plane")
				require.Empty(t, l.spine()[2].StandbyFor)
				for name := range rrNames(l.res) {
					_, was := rrs[name]
					require.True(t, was, "no other promotion: %s", name)
				}
			}
			l.requireSafe("after the member's outage")
		})
	}
}

// TestDualPlaneSizeFits: a cluster that fits in one rack gets `redundancy` route reflectors in
// distinct zones, whatever its zone count; minRouteReflectors is met with smaller racks.
func TestDualPlaneSizeFits(t *testing.T) {
	tests := []struct {
		nodes, zones int
		min          int32
		want         int // route reflectors; 0: at least min
	}{
		{10, 3, 0, 2}, {24, 12, 0, 2}, {100, 10, 0, 2}, {300, 3, 0, 2},
		{300, 3, 10, 0}, {300, 1, 7, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d nodes in %d zones, min %d", tt.nodes, tt.zones, tt.min), func(t *testing.T) {
			spec := v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{Type: v1alpha1.DualPlane}}
			if tt.min > 0 {
				spec.MinRouteReflectors = i32(tt.min)
			}
			p := resolve(t, spec)
			nodes := cluster(tt.nodes, tt.zones)
			r := Plan(Input{Policy: p, Nodes: nodes, Now: t0.Add(time.Hour), Drills: PlanDrills})
			require.Empty(t, r.Conditions, "not Degraded")
			require.Empty(t, checkInvariants(p, nodes, r))
			if tt.want > 0 {
				require.Len(t, r.RouteReflectors, tt.want)
				zones := map[string]bool{}
				for _, rr := range r.RouteReflectors {
					zones[rr.Zone] = true
				}
				require.Len(t, zones, min(tt.want, tt.zones), "route reflectors in distinct zones: %v", r.RouteReflectors)
			} else {
				require.GreaterOrEqual(t, len(r.RouteReflectors), int(tt.min))
			}
			require.Empty(t, FailedDrills(r.Drills))
		})
	}
}

// TestDualPlaneGrowsOutOfOneRack: nodes join one at a time across the one-rack boundary and back
// down: every plan keeps every route with all nodes up, and the drills pass once settled.
func TestDualPlaneGrowsOutOfOneRack(t *testing.T) {
	p := resolve(t, dualSpec(50))
	l := newLife(t, p, cluster(40, 3))
	check := func(what string) {
		t.Helper()
		require.Empty(t, ModelDrills(Input{Policy: p, Nodes: l.nodes}, l.res, false), what)
	}
	for i := 41; i <= 80; i++ {
		l.nodes = append(l.nodes, node(fmt.Sprintf("node-%05d", i), fmt.Sprintf("zone-%c", 'a'+i%3), i))
		l.step(10 * time.Second)
		check(fmt.Sprintf("join %d", i))
	}
	l.settle(time.Minute, 10)
	require.Greater(t, len(l.spine()), 0, "racks and a spine at 80 nodes")
	l.requireSafe("grown to 80 nodes")
	for len(l.nodes) > 30 {
		l.nodes = l.nodes[:len(l.nodes)-1]
		l.step(10 * time.Second)
		check(fmt.Sprintf("shrink to %d", len(l.nodes)))
	}
	l.settle(time.Minute, 10)
	require.Empty(t, l.spine(), "one rack again at 30 nodes")
	require.Empty(t, FailedDrills(l.res.Drills))
}

// TestDualPlaneShortRackBorrows: a rack whose nodes may not be route reflectors takes its planes'
// route reflectors from another rack of its zone with room, not from the spine; every drill passes.
func TestDualPlaneShortRackBorrows(t *testing.T) {
	spec := dualSpec(30)
	spec.MaxClientsPerRouteReflector = i32(100)
	spec.ForbiddenNodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"no-rr": "true"}}
	p := resolve(t, spec)
	l := newLife(t, p, cluster(180, 3)) // 60 per zone: two racks of 30 each
	l.settle(time.Minute, 3)
	short := "zone-a-rack-2"
	for _, n := range l.nodes {
		if n.Annotations[AnnotationRack] == short {
			n.Labels["no-rr"] = "true"
		}
	}
	l.settle(time.Minute, 10)
	l.requireSafe("a rack without eligible nodes")
	rrs := rrNames(l.res)
	for _, c := range l.res.Clients {
		if c.Rack != short {
			continue
		}
		require.Len(t, c.RouteReflectors, 2, c.Node)
		for _, name := range c.RouteReflectors {
			rr := rrs[name]
			require.False(t, rr.Spine, "%s of the short rack peers with spine member %s", c.Node, name)
			require.Equal(t, "zone-a-rack-1", rr.Rack, "%s borrows from its zone's other rack", c.Node)
		}
	}
	require.LessOrEqual(t, l.res.Summary.MaxClientsPerRouteReflector, 100)
}

// TestDualPlaneShortZoneIsDegraded: a zone of 867 nodes with only 2 eligible nodes (one per rack)
// cannot give its racks a second plane, and its other zones' rack route reflectors have no room
// (maxClientsPerRouteReflector 500): the racks' clients peer with the plane's spine member. The
// plan stays safe (every drill passes) and says so: Degraded, reason RacksShortOfRouteReflectors,
// naming the racks and the member, not a bare "a route reflector has 865 clients".
func TestDualPlaneShortZoneIsDegraded(t *testing.T) {
	spec := v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{Type: v1alpha1.DualPlane}}
	spec.ForbiddenNodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"no-rr": "true"}}
	nodes := cluster(3000, 3)[:2600]
	for i, n := range zoneNodes(nodes, "zone-a") {
		if i >= 2 {
			n.Labels["no-rr"] = "true"
		}
	}
	l := newLife(t, resolve(t, spec), nodes)
	l.settle(time.Minute, 3)
	l.requireSafe("a zone with two eligible nodes")
	c := l.res.Degraded()
	require.NotNil(t, c, "not Degraded")
	require.Equal(t, ReasonRacksOnSpine, c.Reason, c.Message)
	require.Contains(t, c.Message, "zone-a-rack-1, zone-a-rack-2")
	require.Contains(t, c.Message, "spine member "+l.spine()[2].Node)
}

// TestLifeRackRouteReflectorReplacedKeepsLabels: a DualPlane rack's nodes share a peering set named
// after the rack (RackSetName), so when a rack route reflector is replaced the set's BGPPeer changes
// (its peer selector names the new route reflector) and no node of the rack is relabelled: only
// the route reflectors annotation of its clients follows. With sets named after their route
// reflectors, every client of the rack moved to a new set.
func TestLifeRackRouteReflectorReplacedKeepsLabels(t *testing.T) {
	p := resolve(t, dualSpec(20))
	l := newLife(t, p, cluster(120, 2))
	l.settle(time.Minute, 5)
	l.requireSafe("fresh")
	var gone RouteReflector
	for _, rr := range l.res.RouteReflectors {
		if !rr.Spine && !rr.Draining && rr.Plane == 2 {
			gone = rr
			break
		}
	}
	require.NotEmpty(t, gone.Node, "a rack route reflector of plane 2")
	before := map[string]string{}
	for _, n := range l.nodes {
		if n.Annotations[AnnotationRack] == gone.Rack {
			before[n.Name] = n.Labels[LabelPeeringSet]
		}
	}
	set := RackSetName(p.Name, gone.Rack)
	peerOf := func() string {
		for _, bp := range l.res.BGPPeers {
			if bp.Name == BGPPeerPrefix+set {
				return bp.Spec.PeerSelector
			}
		}
		return ""
	}
	selBefore := peerOf()
	require.Contains(t, selBefore, RouteReflectorID(gone.Node))
	setReady(l.node(gone.Node), false, l.now)
	l.settle(time.Minute, 20)
	l.requireSafe("rack route reflector " + gone.Node + " NotReady past the grace")
	var successor string
	for _, rr := range l.res.RouteReflectors {
		if rr.Rack == gone.Rack && rr.Plane == 2 && !rr.Draining && !rr.Spine {
			successor = rr.Node
		}
	}
	require.NotEmpty(t, successor, "rack %s has a plane-2 route reflector again", gone.Rack)
	require.NotEqual(t, gone.Node, successor)
	selAfter := peerOf()
	require.Contains(t, selAfter, RouteReflectorID(successor), "the rack's BGPPeer names the successor")
	require.NotContains(t, selAfter, RouteReflectorID(gone.Node))
	moved := 0
	for _, n := range l.nodes {
		was, ok := before[n.Name]
		if !ok || n.Name == gone.Node || n.Name == successor || n.Annotations[AnnotationRack] != gone.Rack {
			continue
		}
		require.Equal(t, set, n.Labels[LabelPeeringSet], "%s: the rack's set", n.Name)
		require.Equal(t, was, n.Labels[LabelPeeringSet], "%s relabelled", n.Name)
		if _, rr := n.Annotations[AnnotationClusterID]; !rr {
			require.Contains(t, n.Annotations[AnnotationRouteReflectors], successor, n.Name)
			moved++
		}
	}
	require.Positive(t, moved, "clients of rack %s", gone.Rack)
}
