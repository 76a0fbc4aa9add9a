package extender

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
)

// planHierarchical: `redundancy` route reflectors per rack with one cluster ID per rack, under a
// spine of `redundancy` route reflectors that share the first cluster ID and spread over the zones.
// Clients peer with their rack's route reflectors, rack route reflectors with every spine route
// reflector; rack route reflectors of different racks do not peer.
func (pl *planner) planHierarchical() {
	p := pl.p
	pl.assignRacks()
	base := pl.spineID

	// The spine: current spine members first, balanced over the zones.
	spineN := min(p.Redundancy, p.Max)
	byZone := map[string][]*NodeInfo{}
	for _, n := range pl.ranked {
		byZone[n.Zone] = append(byZone[n.Zone], n)
	}
	isSpine := func(n *NodeInfo) bool { return n.CurrentRR && !n.Draining() && n.HasClusterID && n.ClusterID == base }
	for z := range byZone {
		slices.SortStableFunc(byZone[z], func(a, b *NodeInfo) int { return cmp.Compare(b2i(isSpine(b)), b2i(isSpine(a))) })
	}
	// Racks and their eligible members.
	rackMembers := map[string][]*NodeInfo{}
	var racks []string
	for i := range pl.nodes {
		r := pl.dec[i].rack
		if _, ok := rackMembers[r]; !ok {
			racks = append(racks, r)
			rackMembers[r] = nil
		}
	}
	slices.Sort(racks)

	spine := pl.selectSpine(spineN, byZone)
	inSpine := map[*NodeInfo]bool{}
	for _, n := range spine {
		inSpine[n] = true
	}
	for _, n := range pl.ranked {
		if !inSpine[n] {
			r := pl.dec[n.index].rack
			rackMembers[r] = append(rackMembers[r], n)
		}
	}
	// Per-rack count, lowered while the total exceeds maxRouteReflectors.
	per := p.Redundancy
	total := func(limit int) int {
		t := len(spine)
		for _, r := range racks {
			t += min(limit, len(rackMembers[r]))
		}
		return t
	}
	for per > 1 && total(per) > p.Max {
		per--
	}
	budget := p.Max - len(spine)
	want := map[string]int{}
	for _, r := range racks {
		w := min(per, len(rackMembers[r]), max(budget, 0))
		want[r] = w
		budget -= w
	}
	planned := len(spine)
	for _, r := range racks {
		planned += want[r]
	}
	pl.desired = len(racks)*p.Redundancy + spineN
	if per < p.Redundancy || total(per) > planned {
		pl.degrade(ReasonMaxRouteReflectors, fmt.Sprintf("%d racks need %d route reflectors but maxRouteReflectors is %d", len(racks), pl.desired, p.Max))
	}
	if len(spine) < spineN {
		pl.degrade(ReasonNotEnoughEligibleNodes, fmt.Sprintf("%d eligible nodes for a spine of %d route reflectors", len(spine), spineN))
	}
	if planned < p.Min {
		pl.degrade(ReasonNotEnoughEligibleNodes, fmt.Sprintf("%d route reflectors planned, policy requires at least %d", planned, p.Min))
	}
	for _, n := range spine {
		pl.activate(n, base)
		pl.dec[n.index].spine = true
		pl.zoneWant[n.Zone]++
	}
	rackRRs := map[string][]*NodeInfo{}
	for _, r := range racks {
		for _, n := range rackMembers[r][:want[r]] {
			pl.activate(n, 0)
			rackRRs[r] = append(rackRRs[r], n)
			pl.zoneWant[n.Zone]++
		}
	}
	pl.retire()
	pl.assignRackIDs(racks, rackRRs)

	// Sessions.
	spineIdx := make([]int, len(spine))
	for i, n := range spine {
		spineIdx[i] = n.index
	}
	if len(spine) == 0 {
		// No spine: every rack route reflector must then mesh with the others.
		for _, r := range racks {
			for _, n := range rackRRs[r] {
				spineIdx = append(spineIdx, n.index)
			}
		}
	}
	for i := range pl.dec {
		d := &pl.dec[i]
		switch {
		case d.role == roleClient:
			var peers []int
			for _, n := range rackRRs[d.rack] {
				peers = append(peers, n.index)
			}
			if len(peers) == 0 {
				peers = slices.Clone(spineIdx)
			}
			if len(peers) == 0 {
				peers = pl.drainingNodes()
			}
			pl.setPeers(i, peers)
		case d.role == roleDraining:
			pl.setPeers(i, pl.withSameID(i, slices.Clone(spineIdx)))
		default: // spine and rack route reflectors peer with the spine
			pl.setPeers(i, slices.Clone(spineIdx))
		}
	}
}

func (pl *planner) selectSpine(n int, byZone map[string][]*NodeInfo) []*NodeInfo {
	// zoneQuotas orders zones by current route reflectors and size; reuse it on the spine candidates.
	q := pl.zoneQuotas(n, byZone, nil)
	var out []*NodeInfo
	for _, z := range pl.zones {
		out = append(out, byZone[z][:q[z]]...)
	}
	slices.SortFunc(out, func(a, b *NodeInfo) int { return cmp.Compare(a.rank, b.rank) })
	return out
}

// assignRackIDs gives each rack one cluster ID (the spine has the first): the one its route
// reflectors carry, the draining ones of the rack included, when no other rack holds it, else the
// lowest free one. A rack whose route reflector is replaced keeps its ID: the replacement takes it
// and the surviving mate keeps it (two route reflectors of a rack sharing an ID while one drains is
// the rack's usual redundancy), because a changed ID restarts every BGP session of the mate in BIRD
// while the drained one may already be dead. An ID a draining route reflector of another rack
// carries goes to no rack but the one whose own route reflectors carry it: the draining one's
// remaining clients still reach the cluster through it.
func (pl *planner) assignRackIDs(racks []string, rackRRs map[string][]*NodeInfo) {
	base := pl.spineID
	drainingIn := map[string]map[uint32]int{} // rack -> IDs its draining route reflectors carry
	for i, n := range pl.nodes {
		if pl.dec[i].role == roleDraining && n.HasClusterID && n.ClusterID != base {
			// The rack it drains from (its ID is that rack's), not the one a relabel puts it in.
			r := n.Rack
			if r == "" {
				r = pl.dec[i].rack
			}
			if drainingIn[r] == nil {
				drainingIn[r] = map[uint32]int{}
			}
			drainingIn[r][n.ClusterID]++
		}
	}
	// heldElsewhere: an ID a draining route reflector of a rack other than r carries.
	heldElsewhere := func(r string, id uint32) bool {
		for other, ids := range drainingIn {
			if other != r && ids[id] > 0 {
				return true
			}
		}
		return false
	}
	used := map[uint32]bool{base: true}
	rackID := map[string]uint32{}
	// Two passes: first the racks by the route reflectors that stayed in them (the draining ones of
	// the rack included), then the racks that only have route reflectors that moved in (a relabel,
	// a split): a route reflector that moves does not take its old rack's ID along.
	for _, stayed := range []bool{true, false} {
		for _, r := range racks {
			if _, done := rackID[r]; done || len(rackRRs[r]) == 0 {
				continue
			}
			count := map[uint32]int{}
			for _, n := range rackRRs[r] {
				if n.HasClusterID && n.CurrentRR && n.ClusterID != base && (n.Rack == r) == stayed {
					count[n.ClusterID]++
				}
			}
			// A rack's own route reflectors keep its ID even while a draining route reflector that
			// moved away carries it too (it peers with them: withSameID); route reflectors that
			// moved in do not take an ID another rack's draining route reflector carries. A rack
			// whose route reflectors are all new takes the ID of the ones draining from it.
			free := func(id uint32) bool { return !used[id] && (stayed || !heldElsewhere(r, id)) }
			best, ok := mostCarried(count, free)
			if !ok && stayed {
				best, ok = mostCarried(drainingIn[r], free)
			}
			if ok {
				used[best] = true
				rackID[r] = best
			}
		}
	}
	var fresh []string
	for _, r := range racks {
		if _, done := rackID[r]; !done && len(rackRRs[r]) > 0 {
			fresh = append(fresh, r)
		}
	}
	for _, ids := range drainingIn {
		for id := range ids {
			used[id] = true
		}
	}
	alloc := pl.newIDAllocator(base, used)
	for _, r := range fresh {
		rackID[r] = alloc.take()
	}
	for _, r := range racks {
		for _, n := range rackRRs[r] {
			pl.dec[n.index].id = rackID[r]
		}
	}
}

// assignRacks puts every managed node in a rack: its rackLabel's value (the zone when the rack
// label is the zone label), or its zone when it has none. Racks larger than maxRackSize are split
// into parts of at most that size: a node keeps its part while it stays and the part is not over
// the limit; other nodes go to the emptiest part.
func (pl *planner) assignRacks() {
	p := pl.p
	baseOf := func(n *NodeInfo) string {
		if v := n.Node.Labels[p.RackLabel]; v != "" {
			return v
		}
		if n.Zone == "" {
			return "unracked"
		}
		return n.Zone + "-unracked"
	}
	groups := map[string][]int{}
	var bases []string
	for i, n := range pl.nodes {
		b := baseOf(n)
		if _, ok := groups[b]; !ok {
			bases = append(bases, b)
		}
		groups[b] = append(groups[b], i)
	}
	for _, b := range bases {
		members := groups[b]
		k := (len(members) + p.MaxRackSize - 1) / p.MaxRackSize
		if k <= 1 {
			for _, i := range members {
				pl.dec[i].rack = b
			}
			continue
		}
		names := make([]string, k)
		index := map[string]int{}
		for j := range names {
			names[j] = b + "-" + strconv.Itoa(j+1)
			index[names[j]] = j
		}
		size := make([]int, k)
		var rest []int
		for _, i := range members {
			if j, ok := index[pl.nodes[i].Rack]; ok && size[j] < p.MaxRackSize {
				pl.dec[i].rack = names[j]
				size[j]++
				continue
			}
			rest = append(rest, i)
		}
		for _, i := range rest {
			best := 0
			for j := range size {
				if size[j] < size[best] {
					best = j
				}
			}
			pl.dec[i].rack = names[best]
			size[best]++
		}
	}
}
