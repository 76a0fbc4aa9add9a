package extender

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLifeRackReplacementKeepsClusterIDs replays the cases of the transitions issue in which a rack
// route reflector's replacement used to give its surviving mate a fresh cluster ID (the rack's ID
// assignment counted the draining route reflector's ID as taken): a changed ID restarts every BGP
// session of the mate in BIRD, and with the replaced one dead the mate is the rack's only working
// route reflector. life.step checks after every step that no route reflector that keeps its role
// changes its ID; this test also checks that the replacement takes the rack's ID.
func TestLifeRackReplacementKeepsClusterIDs(t *testing.T) {
	cases := []struct {
		name         string
		nodes, zones int
		rack         int32
		event        string // cordon, notready, notready-back
	}{
		{"one rack, cordon", 300, 3, 300, "cordon"},
		{"one rack, NotReady past the grace", 30, 3, 300, "notready"},
		{"racks of 50, cordon", 300, 3, 50, "cordon"},
		{"racks of 50, NotReady past the grace", 300, 3, 50, "notready"},
		{"racks of 50, NotReady and Ready again", 300, 3, 50, "notready-back"},
		{"racks of 10 in 60, NotReady past the grace", 60, 3, 10, "notready"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := resolve(t, dualSpec(tc.rack))
			l := newLife(t, p, cluster(tc.nodes, tc.zones))
			l.settle(time.Minute, 3)
			l.requireSafe("fresh")
			var gone RouteReflector
			for _, rr := range l.res.RouteReflectors {
				if !rr.Spine && !rr.Draining && rr.Plane == 1 {
					gone = rr
					break
				}
			}
			require.NotEmpty(t, gone.Node, "a rack route reflector of plane 1")
			rackID := gone.ClusterID
			n := l.node(gone.Node)
			switch tc.event {
			case "cordon":
				n.Spec.Unschedulable = true
			default:
				setReady(n, false, l.now)
			}
			l.settle(time.Minute, 5)
			if tc.event == "notready-back" {
				setReady(n, true, l.now)
				l.settle(time.Minute, 5)
			}
			l.settle(p.RemovalDelay, 2)
			l.requireSafe(fmt.Sprintf("%s %s", tc.event, gone.Node))
			inRack := 0
			for _, rr := range l.res.RouteReflectors {
				if rr.Rack == gone.Rack && !rr.Spine {
					require.Equal(t, rackID, rr.ClusterID, "route reflector %s of rack %s", rr.Node, rr.Rack)
					inRack++
				}
			}
			require.GreaterOrEqual(t, inRack, 2, "rack %s has its two planes", gone.Rack)
		})
	}
}

// renumbered lists the route reflectors active in both plans whose cluster ID changed, whatever
// their place.
func renumbered(prev, r *Result) []string {
	was := map[string]string{}
	for _, rr := range prev.RouteReflectors {
		if !rr.Draining {
			was[rr.Node] = rr.ClusterID
		}
	}
	var out []string
	for _, rr := range r.RouteReflectors {
		if id, ok := was[rr.Node]; ok && !rr.Draining && id != rr.ClusterID {
			out = append(out, fmt.Sprintf("%s %s -> %s", rr.Node, id, rr.ClusterID))
		}
	}
	return out
}

// TestLifeSpineRelabelRenumbersOnePlane: a spine member relabelled into the other member's zone
// used to become a rack route reflector of its new zone with a fresh ID in the same plan in which a
// rack route reflector took its place in the spine: two IDs of one plane changed at once, and the
// plane's spine restarted every session. Now the old member drains with the spine's ID, and each
// plan renumbers at most one route reflector.
func TestLifeSpineRelabelRenumbersOnePlane(t *testing.T) {
	p := resolve(t, dualSpec(50))
	l := newLife(t, p, cluster(300, 3))
	l.settle(time.Minute, 3)
	l.requireSafe("fresh")
	for plane := 1; plane <= 2; plane++ {
		sp := l.spine()
		moved := l.node(sp[plane].Node)
		other := sp[3-plane]
		moved.Labels["topology.kubernetes.io/zone"] = other.Zone
		for i := range 10 {
			prev := l.res
			l.step(time.Minute)
			require.LessOrEqual(t, len(renumbered(prev, l.res)), 1, "plane %d, step %d after relabelling %s: %v", plane, i, moved.Name, renumbered(prev, l.res))
		}
		l.settle(p.RemovalDelay, 2)
		l.requireSafe("spine member " + moved.Name + " relabelled into " + other.Zone)
	}
}
