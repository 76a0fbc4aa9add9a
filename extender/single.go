package extender

import (
	"cmp"
	"fmt"
	"slices"
)

// planSingle: every zone is its own route reflector cluster with its own cluster ID and a count
// from that zone's healthy nodes; clients peer with every route reflector of their zone; all route
// reflectors mesh. (One cluster ID shared across zones would lose cross-zone routes:
// projectcalico/calico#2735.)
func (pl *planner) planSingle() {
	p := pl.p
	byZone := pl.rankedByZone()
	healthy := map[string]int{}
	for _, n := range pl.nodes {
		if n.Healthy() {
			healthy[n.Zone]++
		}
	}
	want := map[string]int{}
	total := 0
	for _, z := range pl.zones {
		w := 0
		if healthy[z] > 0 {
			w = DesiredCount(p, healthy[z])
		}
		w = pl.stabilize(z, w)
		pl.desired += w
		if w > len(byZone[z]) {
			if healthy[z] > 0 {
				pl.degrade(ReasonNotEnoughEligibleNodes, fmt.Sprintf("zone %q has %d eligible nodes for %d desired route reflectors", z, len(byZone[z]), w))
			}
			w = len(byZone[z])
		}
		want[z] = w
		total += w
	}
	// Stay within maxRouteReflectors: take from the largest zones, never below one per zone.
	for total > p.Max {
		big := ""
		for _, z := range pl.zones {
			if want[z] > 1 && (big == "" || want[z] > want[big]) {
				big = z
			}
		}
		if big == "" {
			break
		}
		want[big]--
		total--
	}
	if total > p.Max {
		pl.degrade(ReasonMaxRouteReflectors, fmt.Sprintf("%d zones need a route reflector each but maxRouteReflectors is %d", total, p.Max))
		for i := len(pl.zones) - 1; i >= 0 && total > p.Max; i-- {
			if z := pl.zones[i]; want[z] > 0 {
				want[z]--
				total--
			}
		}
	}
	for _, z := range pl.zones {
		pl.zoneWant[z] = want[z]
		for _, n := range byZone[z][:want[z]] {
			pl.activate(n, 0)
		}
	}
	pl.retire()
	pl.assignZoneIDs()
	pl.assignZoneClients()
}

// assignZoneIDs gives each zone one cluster ID: the one its current route reflectors carry when no
// other zone holds it, else the lowest free one.
func (pl *planner) assignZoneIDs() {
	count := map[string]map[uint32]int{}
	owned := map[uint32]bool{} // (by a zone; the zone of unlabelled nodes is "")
	for i, n := range pl.nodes {
		if pl.dec[i].role == roleClient || !n.HasClusterID {
			continue
		}
		if count[n.Zone] == nil {
			count[n.Zone] = map[uint32]int{}
		}
		count[n.Zone][n.ClusterID]++
	}
	zones := slices.Clone(pl.zones)
	total := func(z string) (t int) {
		for _, c := range count[z] {
			t += c
		}
		return t
	}
	slices.SortStableFunc(zones, func(a, b string) int { return cmp.Compare(total(b), total(a)) })
	zoneID := map[string]uint32{}
	used := map[uint32]bool{}
	var fresh []string
	for _, z := range zones {
		best, ok := mostCarried(count[z], func(id uint32) bool { return !owned[id] })
		if !ok {
			fresh = append(fresh, z)
			continue
		}
		owned[best] = true
		zoneID[z] = best
		used[best] = true
	}
	// IDs of draining route reflectors in other zones are not free either.
	for i, n := range pl.nodes {
		if pl.dec[i].role == roleDraining && n.HasClusterID {
			used[n.ClusterID] = true
		}
	}
	alloc := pl.newIDAllocator(pl.p.BaseClusterID, used)
	slices.Sort(fresh)
	for _, z := range fresh {
		zoneID[z] = alloc.take()
	}
	for i, n := range pl.nodes {
		if pl.dec[i].role == roleActive {
			pl.dec[i].id = zoneID[n.Zone]
		}
	}
}

// assignZoneClients peers each client with every route reflector of its zone; a zone without one
// borrows those of the zone with the most.
func (pl *planner) assignZoneClients() {
	s := pl.activeSet()
	clients := pl.clientNodes()
	if len(s.nodes) == 0 {
		pl.fallbackToDraining(clients)
		return
	}
	fallback := ""
	for _, z := range pl.zones {
		if len(s.byZone[z]) > len(s.byZone[fallback]) || fallback == "" && len(s.byZone[z]) > 0 {
			fallback = z
		}
	}
	for _, c := range clients {
		z := pl.nodes[c].Zone
		if len(s.byZone[z]) == 0 {
			z = fallback
		}
		peers := make([]int, 0, len(s.byZone[z]))
		for _, k := range s.byZone[z] {
			peers = append(peers, s.nodes[k])
		}
		pl.setPeers(c, peers)
	}
}

// mostCarried returns the free cluster ID that most nodes carry in count (the lowest on a tie), and
// false when no free ID is carried.
func mostCarried(count map[uint32]int, free func(uint32) bool) (uint32, bool) {
	best, bestN := uint32(0), 0
	for id, c := range count {
		if free(id) && (c > bestN || c == bestN && id < best) {
			best, bestN = id, c
		}
	}
	return best, bestN > 0
}
