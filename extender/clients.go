package extender

import (
	"cmp"
	"slices"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// rrSet is the active route reflectors of a plan, in rank order, with their load.
type rrSet struct {
	nodes  []int    // node indexes
	zone   []string // per route reflector
	zoneID []int    // per route reflector, an index of zone names
	id     []uint32
	load   []int
	byNode map[int]int // node index -> position
	byZone map[string][]int
	// zoneIndex numbers the zones of the route reflectors.
	zoneIndex map[string]int
	group     []int // per route reflector, an index of its cluster ID

	// scratch for bestRR, all false between calls
	usedGroup, usedZone, taken []bool
}

func (pl *planner) activeSet() *rrSet {
	var act []int
	for i := range pl.dec {
		if pl.dec[i].role == roleActive {
			act = append(act, i)
		}
	}
	slices.SortFunc(act, func(a, b int) int { return cmp.Compare(pl.nodes[a].rank, pl.nodes[b].rank) })
	zones := make([]string, len(act))
	ids := make([]uint32, len(act))
	for k, i := range act {
		zones[k], ids[k] = pl.nodes[i].Zone, pl.dec[i].id
	}
	return newRRSet(act, zones, ids, nil)
}

// newRRSet builds the set of route reflectors nodes (in preference order) with their zones, cluster
// IDs and loads (nil: none yet). The planner and the admission path pick from it alike (pickRR).
func newRRSet(nodes []int, zones []string, ids []uint32, loads []int) *rrSet {
	s := &rrSet{nodes: nodes, zone: zones, id: ids, byNode: make(map[int]int, len(nodes)), byZone: map[string][]int{}, zoneIndex: map[string]int{}}
	for k, i := range nodes {
		if _, ok := s.zoneIndex[zones[k]]; !ok {
			s.zoneIndex[zones[k]] = len(s.zoneIndex)
		}
		s.zoneID = append(s.zoneID, s.zoneIndex[zones[k]])
		s.byNode[i] = k
		s.byZone[zones[k]] = append(s.byZone[zones[k]], k)
	}
	groups := map[uint32]int{}
	for _, id := range ids {
		if _, ok := groups[id]; !ok {
			groups[id] = len(groups)
		}
		s.group = append(s.group, groups[id])
	}
	s.load = loads
	if s.load == nil {
		s.load = make([]int, len(nodes))
	}
	s.usedGroup = make([]bool, len(groups))
	s.usedZone = make([]bool, len(s.zoneIndex))
	s.taken = make([]bool, len(nodes))
	return s
}

func (pl *planner) drainingNodes() []int { return pl.nodesWithRole(roleDraining) }

func (pl *planner) clientNodes() []int { return pl.nodesWithRole(roleClient) }

// nodesWithRole returns the indexes of the nodes the plan gives role, in node order.
func (pl *planner) nodesWithRole(r role) []int {
	var out []int
	for i := range pl.dec {
		if pl.dec[i].role == r {
			out = append(out, i)
		}
	}
	return out
}

// setPeers records a node's route reflectors, sorted by name.
func (pl *planner) setPeers(i int, peers []int) {
	slices.SortFunc(peers, func(a, b int) int { return cmp.Compare(pl.nodes[a].Name, pl.nodes[b].Name) })
	pl.dec[i].peers = peers
}

// fallbackToDraining gives every client the draining route reflectors when the plan has no active
// one, so that no client is left without a route reflector. It reports whether it did.
func (pl *planner) fallbackToDraining(clients []int) bool {
	dr := pl.drainingNodes()
	if len(dr) == 0 {
		return false
	}
	pl.degrade(ReasonQuorumAtRisk, "no eligible route reflector; clients stay on the route reflectors being handed over")
	for _, c := range clients {
		pl.setPeers(c, slices.Clone(dr))
	}
	return true
}

// assignMultiClients gives each client `redundancy` route reflectors of pairwise distinct cluster
// IDs as far as the groups allow: the first from its own zone, the second from another zone, the
// rest from any zone, each time the least-loaded one. A client keeps its current route reflectors
// while they stay valid and not overloaded. Picks go in rounds over all clients, so that loads stay
// balanced whatever the order of the clients.
func (pl *planner) assignMultiClients() {
	s := pl.activeSet()
	clients := pl.clientNodes()
	if len(s.nodes) == 0 {
		pl.fallbackToDraining(clients)
		return
	}
	distinct := map[uint32]bool{}
	for _, id := range s.id {
		distinct[id] = true
	}
	r := clientRedundancy(pl.p, len(s.nodes), len(distinct))
	perGroupLimit := len(distinct) < r // groups cannot all be distinct
	zonesWithRR := len(s.byZone)
	capLoad := loadCap(len(clients), r, len(s.nodes))

	chosen := make([][]int, len(clients))
	for ci, c := range clients {
		n := pl.nodes[c]
		var ch []int
		for _, name := range n.CurrentRRs {
			o, ok := pl.byName[name]
			if !ok || len(ch) == r {
				continue
			}
			k, ok := s.byNode[o.index]
			if !ok || slices.Contains(ch, k) || s.load[k] >= capLoad {
				continue
			}
			if !perGroupLimit && groupUsed(s, ch, s.id[k]) {
				continue
			}
			ch = append(ch, k)
			s.load[k]++
		}
		// Make room for the zone rules.
		for len(ch) > 0 && len(ch)+zoneNeeds(s, n.Zone, ch, zonesWithRR) > r {
			last := ch[len(ch)-1]
			s.load[last]--
			ch = ch[:len(ch)-1]
		}
		chosen[ci] = ch
	}
	for round := 0; round < r; round++ {
		for ci, c := range clients {
			if len(chosen[ci]) >= r {
				continue
			}
			k := pickRR(s, pl.nodes[c].Zone, chosen[ci], zonesWithRR)
			if k < 0 {
				continue
			}
			chosen[ci] = append(chosen[ci], k)
			s.load[k]++
		}
	}
	if len(distinct) >= 2 && r >= 2 {
		for ci, c := range clients {
			s.mixGroups(chosen[ci], pl.nodes[c].Zone, zonesWithRR)
		}
	}
	for ci, c := range clients {
		peers := make([]int, len(chosen[ci]))
		for j, k := range chosen[ci] {
			peers[j] = s.nodes[k]
		}
		pl.setPeers(c, peers)
	}
	if v := pl.p.ClusterIDMode; pl.p.Topology == v1alpha1.MultiCluster && v == v1alpha1.Grouped && len(distinct) == 1 && len(s.nodes) > 1 {
		pl.degrade(ReasonQuorumAtRisk, "all route reflectors share one cluster ID; clients peer with a quorum of them")
	}
}

// clientRedundancy is the number of route reflectors a MultiCluster client peers with, given the
// active route reflectors and their distinct cluster IDs. The planner and the admission path share it.
func clientRedundancy(p *policy.Resolved, active, distinct int) int {
	r := min(p.Redundancy, active)
	switch {
	case distinct == 1 && active > 1:
		// One shared cluster ID: the route reflectors do not pass on their clients' routes to each
		// other, so every two clients must share one: a quorum (projectcalico/calico#2735).
		r = max(r, active/2+1)
	case r < 2 && active > distinct:
		// Two clients on different route reflectors of one group would not learn each other's routes.
		r = 2
	}
	return r
}

// loadCap is the load above which a client's current route reflector is not kept (1.25 times the
// mean, so that a scale-up rebalances): the planner and the admission path share it.
func loadCap(clients, r, active int) int {
	return (clients*r+active-1)/active*5/4 + 1
}

// mixGroups makes sure a client with two or more route reflectors has two cluster IDs: with one,
// it does not learn the routes of a client on other route reflectors of that ID
// (projectcalico/calico#2735). The zone rules can force it (the only other zone with RRs has just
// the ID of the client's own-zone pick), so one pick is swapped for the least-loaded route reflector
// of another ID: in the same zone when there is one, else in a zone that keeps the zone rules.
func (s *rrSet) mixGroups(ch []int, zone string, zonesWithRR int) {
	if len(ch) < 2 {
		return
	}
	g := s.group[ch[0]]
	for _, k := range ch[1:] {
		if s.group[k] != g {
			return
		}
	}
	swap := func(j int, ok func(k int) bool) bool {
		best := -1
		for k := range s.nodes {
			if s.group[k] == g || slices.Contains(ch, k) || !ok(k) {
				continue
			}
			if best < 0 || s.load[k] < s.load[best] {
				best = k
			}
		}
		if best < 0 {
			return false
		}
		s.load[ch[j]]--
		s.load[best]++
		ch[j] = best
		return true
	}
	for j := len(ch) - 1; j >= 0; j-- {
		if swap(j, func(k int) bool { return s.zoneID[k] == s.zoneID[ch[j]] }) {
			return
		}
	}
	needs := zoneNeeds(s, zone, ch, zonesWithRR)
	for j := len(ch) - 1; j >= 0; j-- {
		old := ch[j]
		keeps := func(k int) bool {
			ch[j] = k
			defer func() { ch[j] = old }()
			return zoneNeeds(s, zone, ch, zonesWithRR) <= needs
		}
		if swap(j, keeps) {
			return
		}
	}
}

func groupUsed(s *rrSet, ch []int, id uint32) bool {
	for _, k := range ch {
		if s.id[k] == id {
			return true
		}
	}
	return false
}

func needOwnZone(s *rrSet, zone string, ch []int) bool {
	return len(s.byZone[zone]) > 0 && !zoneUsed(s, ch, s.zoneIndex[zone])
}

// needSecondZone: two zones have route reflectors but the client's are all in one zone.
func needSecondZone(s *rrSet, ch []int, zonesWithRR int) bool {
	return zonesWithRR >= 2 && len(ch) > 0 && distinctZones(s, ch) < 2
}

// zoneNeeds counts the picks still needed for a route reflector in the client's own zone and for
// route reflectors in two zones.
func zoneNeeds(s *rrSet, zone string, ch []int, zonesWithRR int) int {
	need, zones := 0, distinctZones(s, ch)
	if needOwnZone(s, zone, ch) {
		need++
		zones++
	}
	if zonesWithRR >= 2 && zones < 2 {
		need += 2 - zones
	}
	return need
}

func distinctZones(s *rrSet, ch []int) int {
	n := 0
	for i, k := range ch {
		if !zoneUsed(s, ch[:i], s.zoneID[k]) {
			n++
		}
	}
	return n
}

// pickRR chooses the next route reflector for a client in zone that has ch: from its own zone
// first, then from another zone, then from any; a cluster ID it does not have yet, then the least
// loaded, then a zone it does not use yet, then the set's order (rank in the planner, name in
// admission). It returns -1 when none is left. The planner and the admission path share it.
func pickRR(s *rrSet, zone string, ch []int, zonesWithRR int) int {
	mode := pickAny
	switch {
	case needOwnZone(s, zone, ch):
		mode = pickOwnZone
	case needSecondZone(s, ch, zonesWithRR):
		mode = pickNewZone
	}
	own := -1
	if z, ok := s.zoneIndex[zone]; ok {
		own = z
	}
	best := s.bestRR(ch, mode, own)
	if best < 0 {
		best = s.bestRR(ch, pickAny, own)
	}
	return best
}

const (
	pickAny     = iota
	pickOwnZone // a route reflector in the client's zone
	pickNewZone // a route reflector in a zone the client does not use yet
)

// bestRR returns the best candidate for mode: a cluster ID the client does not have yet, then the
// lowest load, then a zone it does not use yet, then rank; -1 when there is none.
func (s *rrSet) bestRR(ch []int, mode, own int) int {
	for _, k := range ch {
		s.usedGroup[s.group[k]] = true
		s.usedZone[s.zoneID[k]] = true
		s.taken[k] = true
	}
	best := -1
	var bestKey [3]int
	for k := range s.nodes {
		if s.taken[k] || mode == pickOwnZone && s.zoneID[k] != own || mode == pickNewZone && s.usedZone[s.zoneID[k]] {
			continue
		}
		key := [3]int{b2i(s.usedGroup[s.group[k]]), s.load[k], b2i(s.usedZone[s.zoneID[k]])}
		if best < 0 || slices.Compare(key[:], bestKey[:]) < 0 {
			best, bestKey = k, key
		}
	}
	for _, k := range ch {
		s.usedGroup[s.group[k]] = false
		s.usedZone[s.zoneID[k]] = false
		s.taken[k] = false
	}
	return best
}

func zoneUsed(s *rrSet, ch []int, zone int) bool {
	for _, k := range ch {
		if s.zoneID[k] == zone {
			return true
		}
	}
	return false
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
