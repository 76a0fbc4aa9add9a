package extender

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// planMulti: route reflectors balanced across zones, all meshed, cluster IDs by group (or one per
// route reflector); each client peers with `redundancy` route reflectors of distinct groups, one
// from its own zone and one from another zone.
func (pl *planner) planMulti() {
	p := pl.p
	want := DesiredCount(p, pl.healthy)
	want = pl.stabilize("", want)
	target := groupTarget(p, want)
	grouped := p.ClusterIDMode != v1alpha1.PerRouteReflector
	pl.desired = target
	awaited, until := pl.awaitedByZone()
	room := pl.eligibleCount()
	for _, c := range awaited {
		room += c
	}
	if target > pl.eligibleCount() && pl.eligibleCount() < p.Min {
		pl.degrade(ReasonNotEnoughEligibleNodes, fmt.Sprintf("%d eligible nodes for %d desired route reflectors (minimum %d)", pl.eligibleCount(), pl.desired, p.Min))
	}
	byZone := pl.rankedByZone()
	quotas := pl.zoneQuotas(min(target, room), byZone, awaited)
	var active []*NodeInfo
	var waiting []string
	for _, z := range pl.zones {
		pl.zoneWant[z] = quotas[z]
		take := min(quotas[z], len(byZone[z]))
		if take < quotas[z] {
			waiting = append(waiting, fmt.Sprintf("%s %d", ZoneName(z), quotas[z]-take))
			pl.recheckBy(until[z])
		}
		for _, n := range byZone[z][:take] {
			pl.activate(n, 0)
			active = append(active, n)
		}
	}
	if len(waiting) > 0 {
		pl.degrade(ReasonWaitingForNodes, fmt.Sprintf("route reflectors wait for NotReady nodes of their zone (%s) for up to notReadyGracePeriod %s before they move to other zones",
			strings.Join(waiting, ", "), p.NotReadyGrace))
	}
	// Keep the global rank order for the ID assignment.
	slices.SortFunc(active, func(a, b *NodeInfo) int { return cmp.Compare(pl.rankOf(a), pl.rankOf(b)) })
	pl.retire()
	if grouped {
		pl.assignGroupIDs(active)
	} else {
		pl.assignPerRRIDs(active)
	}
	pl.assignMultiClients()
}

func (pl *planner) rankOf(n *NodeInfo) int { return n.rank }

// groupTarget rounds a desired count to a multiple of the cluster-ID groups (Grouped): up where
// maxRouteReflectors allows, else down where minRouteReflectors allows, else not at all. The
// planner and the admission path both call it.
func groupTarget(p *policy.Resolved, want int) int {
	if p.ClusterIDMode == v1alpha1.PerRouteReflector || p.Groups <= 1 || want%p.Groups == 0 {
		return want
	}
	up := (want/p.Groups + 1) * p.Groups
	down := want / p.Groups * p.Groups
	switch {
	case up <= p.Max:
		return up
	case down >= p.Min:
		return down
	}
	return want
}

// assignPerRRIDs gives every route reflector its own cluster ID, keeping the current one when no
// higher-ranked route reflector holds it.
func (pl *planner) assignPerRRIDs(active []*NodeInfo) {
	used := pl.drainingIDs()
	var fresh []*NodeInfo
	for _, n := range active {
		if n.HasClusterID && !used[n.ClusterID] {
			used[n.ClusterID] = true
			pl.dec[n.index].id = n.ClusterID
			continue
		}
		fresh = append(fresh, n)
	}
	// An ID that a node the plan demotes still carries is not handed out again until that node has
	// let it go: a new route reflector waiting for it would wait for a demotion that waits for
	// every planned route reflector to be in place.
	for i, n := range pl.nodes {
		if n.HasClusterID && pl.dec[i].role == roleClient {
			used[n.ClusterID] = true
		}
	}
	alloc := pl.newIDAllocator(pl.p.BaseClusterID, used)
	for _, n := range fresh {
		pl.dec[n.index].id = alloc.take()
	}
}

// assignGroupIDs puts every route reflector in one of the policy's cluster-ID groups, of equal
// size: current members keep their group while it has room, a zone's new route reflectors join the
// group that zone already uses, others the group with the most room.
func (pl *planner) assignGroupIDs(active []*NodeInfo) {
	if len(active) == 0 {
		return
	}
	g := min(pl.p.Groups, len(active))
	// The groups: the cluster IDs most used by the current members, then the lowest free ones.
	count := map[uint32]int{}
	for _, n := range active {
		if n.HasClusterID && n.CurrentRR {
			count[n.ClusterID]++
		}
	}
	type idc struct {
		id uint32
		n  int
	}
	var cur []idc
	for id, c := range count {
		cur = append(cur, idc{id, c})
	}
	slices.SortFunc(cur, func(a, b idc) int {
		if c := cmp.Compare(b.n, a.n); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	// Then the groups of route reflectors being handed over: their replacements join them.
	for _, id := range sortedKeys(pl.drainingIDs()) {
		if count[id] == 0 {
			cur = append(cur, idc{id, 0})
		}
	}
	used := map[uint32]bool{}
	var ids []uint32
	for _, c := range cur {
		if len(ids) == g {
			break
		}
		ids = append(ids, c.id)
		used[c.id] = true
	}
	alloc := pl.newIDAllocator(pl.p.BaseClusterID, used)
	for len(ids) < g {
		ids = append(ids, alloc.take())
	}
	slices.Sort(ids)
	// Equal sizes; the remainder goes to the groups with the most current members.
	order := make([]int, g)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(count[ids[b]], count[ids[a]]) })
	room := make([]int, g)
	for k, gi := range order {
		room[gi] = len(active) / g
		if k < len(active)%g {
			room[gi]++
		}
	}
	groupOf := map[uint32]int{}
	for i, id := range ids {
		groupOf[id] = i
	}
	zoneGroup := map[string][]int{} // members per group, per zone
	put := func(n *NodeInfo, gi int) {
		pl.dec[n.index].id = ids[gi]
		room[gi]--
		zg := zoneGroup[n.Zone]
		if zg == nil {
			zg = make([]int, g)
			zoneGroup[n.Zone] = zg
		}
		zg[gi]++
	}
	var rest []*NodeInfo
	for _, n := range active {
		// A current member keeps its group even past the group's share: a changed cluster ID
		// restarts every BGP session of the route reflector in BIRD. New members even the groups out.
		if gi, ok := groupOf[n.ClusterID]; ok && n.HasClusterID && n.CurrentRR {
			put(n, gi)
			continue
		}
		rest = append(rest, n)
	}
	for _, n := range rest {
		best := -1
		if zg := zoneGroup[n.Zone]; zg != nil {
			for gi := range zg {
				if room[gi] > 0 && zg[gi] > 0 && (best < 0 || zg[gi] > zg[best]) {
					best = gi
				}
			}
		}
		if best < 0 {
			for gi := range room {
				if best < 0 || room[gi] > room[best] {
					best = gi
				}
			}
		}
		put(n, best)
	}
}
