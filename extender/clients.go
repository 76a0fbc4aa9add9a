package extender

import (
	"cmp"
	"slices"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// rrSet is the active route reflectors of a plan, in rank order, with their load.
type rrSet struct {
	nodes  []int    // node indexes
	zone   []string // per route reflector
	id     []uint32
	load   []int
	byNode map[int]int // node index -> position
	byZone map[string][]int
}

func (pl *planner) activeSet() *rrSet {
	s := &rrSet{byNode: map[int]int{}, byZone: map[string][]int{}}
	var act []int
	for i := range pl.dec {
		if pl.dec[i].role == roleActive {
			act = append(act, i)
		}
	}
	slices.SortFunc(act, func(a, b int) int { return cmp.Compare(pl.nodes[a].rank, pl.nodes[b].rank) })
	for k, i := range act {
		s.nodes = append(s.nodes, i)
		s.zone = append(s.zone, pl.nodes[i].Zone)
		s.id = append(s.id, pl.dec[i].id)
		s.byNode[i] = k
		s.byZone[pl.nodes[i].Zone] = append(s.byZone[pl.nodes[i].Zone], k)
	}
	s.load = make([]int, len(act))
	return s
}

func (pl *planner) drainingNodes() []int {
	var out []int
	for i := range pl.dec {
		if pl.dec[i].role == roleDraining {
			out = append(out, i)
		}
	}
	return out
}

func (pl *planner) clientNodes() []int {
	var out []int
	for i := range pl.dec {
		if pl.dec[i].role == roleClient {
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
	r := min(pl.p.Redundancy, len(s.nodes))
	switch {
	case len(distinct) == 1 && len(s.nodes) > 1:
		// One shared cluster ID: the route reflectors do not pass on their clients' routes to each
		// other, so every two clients must share one: a quorum (projectcalico/calico#2735).
		r = max(r, len(s.nodes)/2+1)
	case r < 2 && len(s.nodes) > len(distinct):
		// Two clients on different route reflectors of one group would not learn each other's routes.
		r = 2
	}
	perGroupLimit := len(distinct) < r // groups cannot all be distinct
	zonesWithRR := len(s.byZone)
	capLoad := (len(clients)*r+len(s.nodes)-1)/len(s.nodes)*5/4 + 1

	chosen := make([][]int, len(clients))
	for ci, c := range clients {
		n := pl.nodes[c]
		var ch []int
		for _, name := range n.CurrentRRs {
			o, ok := pl.byName[name]
			if !ok || len(ch) == r {
				continue
			}
			k, ok := s.byNode[pl.idx[o]]
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
		for len(ch) > 0 {
			need := 0
			if pl.needOwnZone(s, n.Zone, ch) {
				need++
			}
			if pl.needOtherZone(s, n.Zone, ch, zonesWithRR) {
				need++
			}
			if len(ch)+need <= r {
				break
			}
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
			k := pl.pickRR(s, pl.nodes[c].Zone, chosen[ci], zonesWithRR)
			if k < 0 {
				continue
			}
			chosen[ci] = append(chosen[ci], k)
			s.load[k]++
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

func groupUsed(s *rrSet, ch []int, id uint32) bool {
	for _, k := range ch {
		if s.id[k] == id {
			return true
		}
	}
	return false
}

func (pl *planner) needOwnZone(s *rrSet, zone string, ch []int) bool {
	if len(s.byZone[zone]) == 0 {
		return false
	}
	for _, k := range ch {
		if s.zone[k] == zone {
			return false
		}
	}
	return true
}

func (pl *planner) needOtherZone(s *rrSet, zone string, ch []int, zonesWithRR int) bool {
	others := zonesWithRR
	if len(s.byZone[zone]) > 0 {
		others--
	}
	if others == 0 {
		return false
	}
	for _, k := range ch {
		if s.zone[k] != zone {
			return false
		}
	}
	return true
}

// pickRR chooses the next route reflector for a client in zone that has ch: from its own zone
// first, then from another zone, then from any; a cluster ID it does not have yet, then the least
// loaded, then a zone it does not use yet, then rank. It returns -1 when none is left.
func (pl *planner) pickRR(s *rrSet, zone string, ch []int, zonesWithRR int) int {
	accept := func(k int) bool { return true }
	switch {
	case pl.needOwnZone(s, zone, ch):
		accept = func(k int) bool { return s.zone[k] == zone }
	case pl.needOtherZone(s, zone, ch, zonesWithRR):
		accept = func(k int) bool { return s.zone[k] != zone }
	}
	best := pl.bestRR(s, ch, accept)
	if best < 0 {
		best = pl.bestRR(s, ch, func(int) bool { return true })
	}
	return best
}

func (pl *planner) bestRR(s *rrSet, ch []int, accept func(int) bool) int {
	best := -1
	var bestKey [3]int
	for k := range s.nodes {
		if !accept(k) || slices.Contains(ch, k) {
			continue
		}
		key := [3]int{b2i(groupUsed(s, ch, s.id[k])), s.load[k], b2i(zoneUsed(s, ch, s.zone[k]))}
		if best < 0 || less3(key, bestKey) {
			best, bestKey = k, key
		}
	}
	return best
}

func zoneUsed(s *rrSet, ch []int, zone string) bool {
	for _, k := range ch {
		if s.zone[k] == zone {
			return true
		}
	}
	return false
}

func less3(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
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
