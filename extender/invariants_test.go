package extender

import (
	"fmt"
	"slices"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// checkInvariants returns every violated plan invariant; the unit tests and the fuzz test share it.
func checkInvariants(p *policy.Resolved, nodes []*Node, r *Result) []string {
	var bad []string
	fail := func(f string, a ...any) { bad = append(bad, fmt.Sprintf(f, a...)) }
	byName := map[string]*Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	degraded := len(r.Conditions) > 0
	rrs := map[string]RouteReflector{}
	active := 0
	ids := map[string]int{}
	for _, rr := range r.RouteReflectors {
		rrs[rr.Node] = rr
		if rr.Draining {
			continue
		}
		active++
		ids[rr.ClusterID]++
		n := byName[rr.Node]
		ni := NewNodeInfo(n, p)
		ni.Now = r.now
		RunFilters(DefaultFilters(), p, ni)
		if !ni.Eligible {
			fail("route reflector %s is not eligible: %s", rr.Node, ni.Reason)
		}
	}
	if active != r.Summary.RouteReflectors {
		fail("summary says %d route reflectors, list has %d active", r.Summary.RouteReflectors, active)
	}
	if !degraded && (active < p.Min || active > p.Max) {
		fail("%d route reflectors outside [%d, %d] and not Degraded", active, p.Min, p.Max)
	}
	if active > p.Max && p.Topology != v1alpha1.SingleCluster {
		fail("%d route reflectors above maxRouteReflectors %d", active, p.Max)
	}
	if len(r.RouteReflectors)+len(r.Clients) != r.Summary.Nodes {
		fail("%d route reflectors + %d clients != %d nodes", len(r.RouteReflectors), len(r.Clients), r.Summary.Nodes)
	}
	for _, c := range r.Clients {
		if len(r.RouteReflectors) > 0 && len(c.RouteReflectors) == 0 {
			fail("client %s has no route reflector", c.Node)
		}
		for _, name := range c.RouteReflectors {
			if _, ok := rrs[name]; !ok {
				fail("client %s peers with %s, which is not a route reflector", c.Node, name)
			}
		}
	}
	zonesWithRR := map[string]bool{}
	for _, rr := range r.RouteReflectors {
		if !rr.Draining {
			zonesWithRR[rr.Zone] = true
		}
	}
	switch p.Topology {
	case v1alpha1.SingleCluster:
		zoneID := map[string]string{}
		idZone := map[string]string{}
		for _, rr := range r.RouteReflectors {
			if rr.Draining {
				continue
			}
			if z, ok := idZone[rr.ClusterID]; ok && z != rr.Zone {
				fail("zones %q and %q share cluster ID %s", z, rr.Zone, rr.ClusterID)
			}
			if id, ok := zoneID[rr.Zone]; ok && id != rr.ClusterID {
				fail("zone %q has two cluster IDs %s and %s", rr.Zone, id, rr.ClusterID)
			}
			idZone[rr.ClusterID], zoneID[rr.Zone] = rr.Zone, rr.ClusterID
		}
		bad = append(bad, routesPropagate(r, rrs, nil)...)
	case v1alpha1.MultiCluster:
		if p.ClusterIDMode == v1alpha1.PerRouteReflector {
			for id, n := range ids {
				if n > 1 {
					fail("PerRouteReflector: cluster ID %s used %d times", id, n)
				}
			}
		} else if len(ids) > p.Groups {
			fail("Grouped: %d cluster IDs for %d groups", len(ids), p.Groups)
		}
		want := min(p.Redundancy, active)
		for _, c := range r.Clients {
			if active > 0 && len(c.RouteReflectors) < want {
				fail("client %s has %d route reflectors, want %d", c.Node, len(c.RouteReflectors), want)
			}
			if len(zonesWithRR) >= 2 && len(c.RouteReflectors) >= 2 {
				zs := map[string]bool{}
				for _, name := range c.RouteReflectors {
					zs[rrs[name].Zone] = true
				}
				if len(zs) < 2 {
					fail("client %s: route reflectors %v all in one zone", c.Node, c.RouteReflectors)
				}
			}
		}
		bad = append(bad, routesPropagate(r, rrs, nil)...)
		if len(zonesWithRR) >= 3 && zoneFailureSafe(p, r) {
			for z := range zonesWithRR {
				bad = append(bad, routesPropagate(r, rrs, func(zone string) bool { return zone == z })...)
			}
		}
	case v1alpha1.Hierarchical:
		rackRRs := map[string][]string{}
		var spine []string
		for _, rr := range r.RouteReflectors {
			switch {
			case rr.Draining:
			case rr.Spine:
				spine = append(spine, rr.Node)
			default:
				rackRRs[rr.Rack] = append(rackRRs[rr.Rack], rr.Node)
			}
		}
		for _, c := range r.Clients {
			if want := rackRRs[c.Rack]; len(want) > 0 && !sameSet(want, c.RouteReflectors) {
				fail("client %s in rack %s peers with %v, not its rack's %v", c.Node, c.Rack, c.RouteReflectors, want)
			}
		}
		members := map[string][]string{} // BGPPeer name -> route reflector IDs it selects
		for _, b := range r.BGPPeers {
			members[b.Name] = selectorIDs(b.Spec.PeerSelector)
		}
		idName := map[string]string{}
		for _, rr := range r.RouteReflectors {
			idName[RouteReflectorID(rr.Node)] = rr.Node
		}
		peersOf := map[string][]string{}
		for _, s := range r.Nodes {
			if set := s.Labels[LabelPeeringSet]; set != "" {
				for _, id := range members[BGPPeerPrefix+set] {
					peersOf[s.Name] = append(peersOf[s.Name], idName[id])
				}
			}
		}
		for _, list := range rackRRs {
			for _, name := range list {
				if !sameSet(spine, peersOf[name]) {
					fail("rack route reflector %s peers with %v, not the spine %v", name, peersOf[name], spine)
				}
			}
		}
	case v1alpha1.DualPlane:
		bad = append(bad, dualPlaneInvariants(p, nodes, r)...)
	}
	return bad
}

// dualPlaneInvariants are the default layout's safety rules: every client peers with
// min(redundancy, eligible nodes) route reflectors, its rack's or its planes' spine members; no
// route reflector over the client bound; a rack's route reflectors share one cluster ID no other
// rack holds, the spine holds the first one; a rack lives in one zone and is no larger than
// maxRackSize; and the graph model (when the test binary wires it, see ModelDrills) finds every
// route with all nodes up and, with two planes or more and a plan that is not Degraded, after the
// loss of any zone and after the loss of any route reflector.
func dualPlaneInvariants(p *policy.Resolved, nodes []*Node, r *Result) []string {
	var bad []string
	fail := func(f string, a ...any) { bad = append(bad, fmt.Sprintf(f, a...)) }
	degraded := len(r.Conditions) > 0
	want := min(p.Redundancy, r.Summary.EligibleNodes)
	rackOf := map[string]string{}
	rackID := map[string]string{}
	idRack := map[string]string{}
	base := policy.ClusterIDString(p.BaseClusterID)
	for _, rr := range r.RouteReflectors {
		if rr.Draining {
			continue
		}
		if !degraded && rr.Clients > p.MaxClientsPerRR && p.MaxClientsPerRR > 0 {
			fail("route reflector %s has %d clients, more than %d", rr.Node, rr.Clients, p.MaxClientsPerRR)
		}
		if rr.Spine {
			if rr.ClusterID != base {
				fail("spine member %s carries %s, not %s", rr.Node, rr.ClusterID, base)
			}
			continue
		}
		rackOf[rr.Node] = rr.Rack
		if id, ok := rackID[rr.Rack]; ok && id != rr.ClusterID {
			fail("rack %s has two cluster IDs %s and %s", rr.Rack, id, rr.ClusterID)
		}
		if other, ok := idRack[rr.ClusterID]; ok && other != rr.Rack || rr.ClusterID == base {
			fail("cluster ID %s of rack %s is also held by %q", rr.ClusterID, rr.Rack, other)
		}
		rackID[rr.Rack], idRack[rr.ClusterID] = rr.ClusterID, rr.Rack
	}
	if !degraded && p.MaxClientsPerRR > 0 && r.Summary.MaxClientsPerRouteReflector > p.MaxClientsPerRR {
		fail("summary: %d clients per route reflector, more than %d", r.Summary.MaxClientsPerRouteReflector, p.MaxClientsPerRR)
	}
	rrs := map[string]RouteReflector{}
	for _, rr := range r.RouteReflectors {
		rrs[rr.Node] = rr
	}
	for _, c := range r.Clients {
		if r.Summary.RouteReflectors > 0 && len(c.RouteReflectors) < min(want, r.Summary.RouteReflectors) {
			fail("client %s has %d route reflectors %v, want %d", c.Node, len(c.RouteReflectors), c.RouteReflectors, want)
		}
		// Another rack's route reflector only for a plane the client's rack has none in (borrowed).
		own := map[int]bool{}
		for _, rr := range r.RouteReflectors {
			if rr.Rack == c.Rack && !rr.Spine && !rr.Draining {
				own[rr.Plane] = true
			}
		}
		for _, name := range c.RouteReflectors {
			if rr := rrs[name]; !rr.Spine && !rr.Draining && rr.Rack != c.Rack && own[rr.Plane] {
				fail("client %s of rack %s peers with %s of rack %s, plane %d, which its rack has", c.Node, c.Rack, name, rr.Rack, rr.Plane)
			}
		}
	}
	zoneOf := map[string]string{}
	size := map[string]int{}
	for _, n := range nodes {
		if p.NodeSelector.Matches(labelSet(n.Labels)) {
			zoneOf[n.Name] = n.Labels[p.ZoneLabel]
		}
	}
	rackZone := map[string]string{}
	for _, st := range r.Nodes {
		rack := st.Annotations[AnnotationRack]
		size[rack]++
		if z, ok := rackZone[rack]; ok && z != zoneOf[st.Name] && rack != ZoneRackName("", 1) {
			fail("rack %s spans zones %q and %q", rack, z, zoneOf[st.Name])
		}
		rackZone[rack] = zoneOf[st.Name]
	}
	for rack, n := range size {
		if n > p.MaxRackSize {
			fail("rack %s has %d nodes, more than maxRackSize %d", rack, n, p.MaxRackSize)
		}
	}
	if ModelDrills != nil && len(bad) == 0 && len(r.RouteReflectors) > 0 {
		// (A plan without any route reflector leaves the routes to Calico's node-to-node mesh.)
		// Survival of a lost zone or route reflector is promised with two planes or more and a
		// plan that is not Degraded (a spine short of members is), wherever a fresh plan of the
		// same nodes survives it (a cluster whose eligible nodes all sit in one zone cannot).
		drills := p.Redundancy >= 2 && !degraded
		failed := ModelDrills(Input{Policy: p, Nodes: nodes}, r, drills)
		if drills && len(failed) > 0 && PlanDrills != nil {
			fin := Input{Policy: p, Nodes: withoutRoles(Input{Policy: p, Nodes: nodes}, nil), Now: r.now}
			if fd, err := PlanDrills(fin, Plan(fin)); err == nil && len(FailedDrills(fd)) > 0 {
				failed = ModelDrills(Input{Policy: p, Nodes: nodes}, r, false)
			}
		}
		bad = append(bad, failed...)
	}
	return bad
}

// routesPropagate checks, for every two clients A and B (among those whose zone is not failed),
// that one of B's surviving route reflectors is one of A's or carries a cluster ID different from
// one of A's: RFC 4456 says such a route reflector learns A's routes. Route reflectors mesh.
func routesPropagate(r *Result, rrs map[string]RouteReflector, failed func(zone string) bool) []string {
	type client struct {
		name string
		rrs  []string
		ids  map[string]bool
	}
	var cs []client
	for _, c := range r.Clients {
		if failed != nil && failed(c.Zone) {
			continue
		}
		cl := client{name: c.Node, ids: map[string]bool{}}
		for _, name := range c.RouteReflectors {
			rr := rrs[name]
			if failed != nil && failed(rr.Zone) {
				continue
			}
			cl.rrs = append(cl.rrs, name)
			cl.ids[rr.ClusterID] = true
		}
		if len(c.RouteReflectors) > 0 && len(cl.rrs) == 0 {
			return []string{fmt.Sprintf("client %s loses every route reflector %v when its zone fails", c.Node, c.RouteReflectors)}
		}
		cs = append(cs, cl)
	}
	// A pair fails only when both clients' route reflectors carry one and the same cluster ID and
	// they share none.
	single := map[string][]client{}
	for _, c := range cs {
		if len(c.ids) == 1 {
			for id := range c.ids {
				single[id] = append(single[id], c)
			}
		}
	}
	for id, group := range single {
		for i := range group {
			for j := i + 1; j < len(group); j++ {
				if !intersects(group[i].rrs, group[j].rrs) {
					what := "routes are lost"
					if failed != nil {
						what = "routes are lost after a zone failure"
					}
					return []string{fmt.Sprintf("clients %s %v and %s %v only use cluster ID %s without a shared route reflector: %s",
						group[i].name, group[i].rrs, group[j].name, group[j].rrs, id, what)}
				}
			}
		}
	}
	return nil
}

// selectorIDs extracts the IDs of "routereflector.io/rr-id in {'a', 'b'}".
func selectorIDs(sel string) []string {
	var out []string
	inQuote := false
	cur := []rune{}
	for _, c := range sel {
		switch {
		case c == '\'' && inQuote:
			out = append(out, string(cur))
			cur = cur[:0]
			inQuote = false
		case c == '\'':
			inQuote = true
		case inQuote:
			cur = append(cur, c)
		}
	}
	return out
}

func intersects(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// zoneFailureSafe says whether the layout promises that routes survive the loss of a zone:
// PerRouteReflector with two or more route reflectors per client (every ID differs), or Grouped with
// three or more groups that each zone's route reflectors keep to (a zone's route reflectors in one
// group) and three or more route reflectors per client, so that the survivors keep two IDs.
func zoneFailureSafe(p *policy.Resolved, r *Result) bool {
	if p.ClusterIDMode == v1alpha1.PerRouteReflector {
		return p.Redundancy >= 2
	}
	if p.Redundancy < 3 || p.Groups < 3 {
		return false
	}
	zoneID := map[string]string{}
	for _, rr := range r.RouteReflectors {
		if rr.Draining {
			continue
		}
		if id, ok := zoneID[rr.Zone]; ok && id != rr.ClusterID {
			return false
		}
		zoneID[rr.Zone] = rr.ClusterID
	}
	return true
}

// clusterIDChanges lists the route reflectors that keep their role from prev to r (active, not
// draining, in both; the same spine or rack place, plane, standby and zone) and still changed their
// cluster ID: a changed ID restarts every BGP session of the route reflector in BIRD (confd renders
// `rr cluster id` on each of them), so the README promises IDs for a route reflector's, group's,
// zone's or rack's whole life. A Hierarchical or DualPlane rack may change its ID only when the
// rack itself is new to the route reflector (the node moved racks).
func clusterIDChanges(prev, r *Result) []string {
	before := make(map[string]RouteReflector, len(prev.RouteReflectors))
	for _, rr := range prev.RouteReflectors {
		if !rr.Draining {
			before[rr.Node] = rr
		}
	}
	var bad []string
	for _, rr := range r.RouteReflectors {
		was, ok := before[rr.Node]
		if !ok || rr.Draining || was.ClusterID == rr.ClusterID {
			continue
		}
		if was.Zone != rr.Zone || was.Rack != rr.Rack || was.Spine != rr.Spine || was.Plane != rr.Plane || was.StandbyFor != rr.StandbyFor {
			continue
		}
		bad = append(bad, fmt.Sprintf("route reflector %s (zone %s, rack %q, spine %v, plane %d) kept its role but its cluster ID changed from %s to %s",
			rr.Node, rr.Zone, rr.Rack, rr.Spine, rr.Plane, was.ClusterID, rr.ClusterID))
	}
	return bad
}
