package extender

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// planDualPlane: a cluster that fits in one rack is one rack across its zones; a larger one has
// every zone split into racks of at most maxRackSize nodes (smaller when minRouteReflectors needs
// more racks); each rack has
// `redundancy` route reflectors that share the rack's cluster ID, one in each plane; a spine of one
// route reflector per plane (sharing the first cluster ID, spread over the zones) links the racks
// once there are two or more. Sessions:
//
//   - a rack's clients and its route reflectors share one peering set: the rack's route reflectors
//     (so they also peer with each other);
//   - a rack route reflector of plane k peers with the spine member of plane k (its uplink set);
//   - the spine members peer with each other.
//
// Why it is cheap: a route leaves its rack once per plane, the spine member of that plane passes it
// to the plane's rack route reflectors, and a spine member or rack route reflector that learns it
// from a same-cluster peer cannot pass it on (its own cluster ID is on the cluster list). Every
// client stores `redundancy` paths per prefix (one per rack route reflector), the route reflectors
// about as many, at any size. Why it is safe: the planes are independent paths between any two
// racks, and the route reflectors of a rack peer with each other, so losing a spine member, a rack
// route reflector or a zone (the spine spreads over the zones; a rack lives in one zone) leaves
// every surviving node a path.
//
// A rack with no eligible node in a plane gives that plane's spine member to its clients instead,
// so a client still peers with `redundancy` route reflectors.
func (pl *planner) planDualPlane() {
	p := pl.p
	planes := p.Redundancy
	racks := pl.assignZoneRacks()
	base := pl.spineID

	// The spine, when there are two racks or more.
	spineOf := make([]*NodeInfo, planes+1) // by plane, 1-based
	taken := map[*NodeInfo]bool{}
	standbyOf := make([]*NodeInfo, planes+1) // by plane: a standby for a NotReady member
	if len(racks) > 1 {
		pl.selectPlaneSpine(spineOf, taken)
	}
	// Rack route reflectors: plane by plane over all racks, so that a cap leaves each rack one.
	rackRR := make(map[string][]*NodeInfo, len(racks)) // rack -> by plane (1-based), nil when none
	eligible := make(map[string][]*NodeInfo, len(racks))
	for _, n := range pl.ranked {
		if !taken[n] {
			r := pl.dec[n.index].rack
			eligible[r] = append(eligible[r], n)
		}
	}
	for _, r := range racks {
		rackRR[r] = make([]*NodeInfo, planes+1)
		// Current route reflectors of this rack keep their plane; one drained while NotReady and
		// Ready again takes its plane back first.
		for _, returning := range []bool{true, false} {
			for _, n := range eligible[r] {
				if n.Plane >= 1 && n.Plane <= planes && rackRR[r][n.Plane] == nil &&
					(returning && n.DrainedWhileNotReady() && n.ClusterID != pl.spineID || !returning && pl.isRackRR(n)) {
					rackRR[r][n.Plane] = n
					taken[n] = true
				}
			}
		}
	}
	spineCount := countSet(spineOf[1:])
	budget := p.Max - spineCount
	for _, r := range racks {
		for k := 1; k <= planes; k++ {
			if rackRR[r][k] != nil {
				budget--
			}
		}
	}
	// Kept route reflectors beyond maxRouteReflectors (the spine grew, or the policy's max went
	// down) give way from the highest plane and the last rack, so that each rack keeps one longest.
	capped := false
	for k := planes; k >= 1 && budget < 0; k-- {
		for _, r := range slices.Backward(racks) {
			if budget >= 0 {
				break
			}
			if n := rackRR[r][k]; n != nil {
				rackRR[r][k], taken[n] = nil, false
				budget++
				capped = true
			}
		}
	}
	for k := 1; k <= planes; k++ {
		for _, r := range racks {
			if rackRR[r][k] != nil {
				continue
			}
			// A node of a zone none of the rack's route reflectors is in, else any (a rack that
			// spans zones keeps its planes apart). A spine member the spine no longer keeps (a
			// relabel moved it) drains with the spine's ID instead of taking a rack's fresh one in
			// the plan that gives its place to a rack route reflector: one plane's IDs per step.
			free := func(n *NodeInfo) bool { return !taken[n] && !(len(racks) > 1 && pl.leftSpine(n)) }
			i := slices.IndexFunc(eligible[r], func(n *NodeInfo) bool {
				return free(n) && !slices.ContainsFunc(rackRR[r][1:], func(x *NodeInfo) bool { return x != nil && x.Zone == n.Zone })
			})
			if i < 0 {
				i = slices.IndexFunc(eligible[r], free)
			}
			if i < 0 {
				continue
			}
			if budget <= 0 {
				capped = true
				continue
			}
			rackRR[r][k] = eligible[r][i]
			taken[eligible[r][i]] = true
			budget--
		}
	}
	planned := spineCount
	for _, r := range racks {
		for _, n := range rackRR[r][1:] {
			if n != nil {
				planned++
			}
		}
	}
	// Standbys for NotReady spine members, within maxRouteReflectors.
	if len(racks) > 1 {
		pl.selectStandbys(spineOf, standbyOf, taken, p.Max-planned)
		planned += countSet(standbyOf)
	}
	pl.desired = planned
	if len(racks) > 1 {
		pl.desired = max(pl.desired, len(racks)*planes+planes)
	}
	if capped {
		pl.degrade(ReasonMaxRouteReflectors, fmt.Sprintf("%d racks need %d route reflectors but maxRouteReflectors is %d", len(racks), len(racks)*planes+spineCount, p.Max))
	}
	if len(racks) > 1 && spineCount < planes {
		pl.degrade(ReasonNotEnoughEligibleNodes, fmt.Sprintf("%d eligible nodes for a spine of %d route reflectors", spineCount, planes))
	}
	if z, ok := sharedZone(spineOf); ok && len(pl.zones) > 1 && !pl.eligibleOutside(z, taken) {
		pl.degrade(ReasonPlanesInOneZone, fmt.Sprintf("the spine's planes share zone %s: no eligible node of another zone can take one (losing %s would cut the others' racks apart)", z, z))
	}
	if len(racks) == 1 && racks[0] == ZoneRackName("", 1) && len(pl.zones) > 1 {
		if z, ok := sharedZone(rackRR[racks[0]]); ok && !pl.eligibleOutside(z, taken) {
			pl.degrade(ReasonPlanesInOneZone, fmt.Sprintf("the route reflectors of the cluster's one rack share zone %s: no eligible node of another zone can take one (losing %s would leave the other zones' nodes without one)", z, z))
		}
	}
	if planned < p.Min && planned < pl.eligibleCount() {
		pl.degrade(ReasonNotEnoughEligibleNodes, fmt.Sprintf("%d route reflectors planned, policy requires at least %d", planned, p.Min))
	}

	// Roles and cluster IDs.
	for k, n := range spineOf {
		if n == nil {
			continue
		}
		pl.activate(n, base)
		d := &pl.dec[n.index]
		d.spine, d.plane = true, k
		pl.zoneWant[n.Zone]++
		if sb := standbyOf[k]; sb != nil {
			pl.activate(sb, base)
			d := &pl.dec[sb.index]
			d.spine, d.plane, d.standbyFor = true, k, n.Name
		}
	}
	byRack := make(map[string][]*NodeInfo, len(racks))
	for _, r := range racks {
		for k, n := range rackRR[r] {
			if n == nil {
				continue
			}
			pl.activate(n, 0)
			pl.dec[n.index].plane = k
			byRack[r] = append(byRack[r], n)
			pl.zoneWant[n.Zone]++
		}
	}
	pl.retire()
	pl.assignRackIDs(racks, byRack)

	// Sessions.
	var spine []int
	for _, n := range slices.Concat(spineOf, standbyOf) {
		if n != nil {
			spine = append(spine, n.index)
		}
	}
	// A plane's spine route reflectors: its member, and its standby while the member is NotReady.
	planeSpine := func(k int) []int {
		var out []int
		for _, n := range []*NodeInfo{spineOf[k], standbyOf[k]} {
			if n != nil {
				out = append(out, n.index)
			}
		}
		return out
	}
	borrowed := pl.borrowRackRRs(racks, rackRR)
	rackSet := make(map[string][]int, len(racks))
	onSpine := map[int][]string{} // plane -> racks whose clients peer with its spine member
	for _, r := range racks {
		var set []int
		for k := 1; k <= planes; k++ {
			switch {
			case rackRR[r][k] != nil:
				set = append(set, rackRR[r][k].index)
			case borrowed[r][k] != nil:
				set = append(set, borrowed[r][k].index)
			case spineOf[k] != nil:
				set = append(set, planeSpine(k)...)
				onSpine[k] = append(onSpine[k], r)
			}
		}
		if len(set) == 0 {
			set = slices.Clone(spine)
		}
		rackSet[r] = set
	}
	pl.degradeRacksOnSpine(onSpine, spineOf)
	draining := pl.drainingNodes()
	for i := range pl.dec {
		d := &pl.dec[i]
		switch {
		case d.spine:
			pl.setPeers(i, slices.Clone(spine))
		case d.role == roleActive:
			pl.setPeers(i, slices.Clone(rackSet[d.rack]))
			if up := planeSpine(d.plane); len(up) > 0 {
				d.uplinks = up
			} else {
				d.uplinks = slices.Clone(spine)
			}
			pl.sortPeers(d.uplinks)
		case d.role == roleDraining:
			// Still connected while its clients move: the spine, else its rack.
			switch {
			case len(spine) > 0:
				pl.setPeers(i, pl.withSameID(i, slices.Clone(spine)))
			case len(rackSet[d.rack]) > 0:
				pl.setPeers(i, pl.withSameID(i, slices.Clone(rackSet[d.rack])))
			default: // nothing active to hand over to: the draining route reflectors mesh
				pl.setPeers(i, slices.DeleteFunc(pl.drainingNodes(), func(j int) bool { return j == i }))
			}
		default:
			peers := slices.Clone(rackSet[d.rack])
			if len(peers) == 0 {
				peers = slices.Clone(draining)
			}
			pl.setPeers(i, peers)
		}
	}
}

// borrowRackRRs gives a rack without a route reflector in a plane (too few eligible nodes) that
// plane's route reflector of another rack of its zone with room (in name order), never a spine
// member, so that one spine member does not serve every short rack's clients; room is
// maxClientsPerRouteReflector (0: no bound) over the clients the route reflector already serves.
// Not from another zone: a rack whose two planes both depend on another zone (its own plane's
// uplink and the borrowed one) is cut off when that zone dies (the life tests show it). A rack
// that finds none keeps the plane's spine member. It returns, per rack, the borrowed route
// reflector by plane.
func (pl *planner) borrowRackRRs(racks []string, rackRR map[string][]*NodeInfo) map[string][]*NodeInfo {
	planes := pl.p.Redundancy
	size, zone := map[string]int{}, map[string]string{}
	for i, n := range pl.nodes {
		r := pl.dec[i].rack
		zone[r] = n.Zone
		if pl.dec[i].role == roleClient {
			size[r]++
		}
	}
	load := map[*NodeInfo]int{}
	for _, r := range racks {
		for _, n := range rackRR[r][1:] {
			if n != nil {
				load[n] += size[r]
			}
		}
	}
	out := make(map[string][]*NodeInfo, len(racks))
	for _, r := range racks {
		out[r] = make([]*NodeInfo, planes+1)
		for k := 1; k <= planes; k++ {
			if rackRR[r][k] != nil || size[r] == 0 {
				continue
			}
			var best *NodeInfo
			for _, r2 := range racks {
				b := rackRR[r2][k]
				if best != nil || r2 == r || b == nil || zone[r2] != zone[r] {
					continue
				}
				if pl.p.MaxClientsPerRR == 0 || load[b]+size[r] <= pl.p.MaxClientsPerRR {
					best = b
				}
			}
			if best == nil {
				continue
			}
			out[r][k] = best
			load[best] += size[r]
		}
	}
	return out
}

// degradeRacksOnSpine says which racks found no route reflector of a plane in themselves nor one to
// borrow in their zone (too few eligible nodes): their clients peer with the plane's spine member,
// which then reflects for them as well as for the other route reflectors (more clients, more paths
// per prefix on the busiest node). The policy is Degraded with the racks, the member and its
// clients, so that the operator knows which zone needs eligible nodes.
func (pl *planner) degradeRacksOnSpine(onSpine map[int][]string, spineOf []*NodeInfo) {
	clients := map[string]int{}
	for i := range pl.dec {
		if pl.dec[i].role == roleClient {
			clients[pl.dec[i].rack]++
		}
	}
	for k := 1; k < len(spineOf); k++ {
		n := 0
		var racks []string
		for _, r := range onSpine[k] {
			if clients[r] > 0 {
				n += clients[r]
				racks = append(racks, r)
			}
		}
		if n == 0 {
			continue
		}
		msg := fmt.Sprintf("racks %s have no eligible node for plane %d and none to borrow in their zone: their %d clients peer with spine member %s",
			strings.Join(racks, ", "), k, n, spineOf[k].Name)
		if pl.p.MaxClientsPerRR > 0 {
			msg += fmt.Sprintf(" (maxClientsPerRouteReflector %d)", pl.p.MaxClientsPerRR)
		}
		pl.degrade(ReasonRacksOnSpine, msg)
	}
}

// leftSpine reports whether n is a current spine route reflector (the spine's ID, not draining);
// by the time rack route reflectors are picked, one that is not taken is one the spine let go.
func (pl *planner) leftSpine(n *NodeInfo) bool {
	return n.CurrentRR && !n.Draining() && n.HasClusterID && n.ClusterID == pl.spineID
}

// isRackRR reports whether n is an active rack route reflector now (not a spine member).
func (pl *planner) isRackRR(n *NodeInfo) bool {
	return n.CurrentRR && !n.Draining() && n.HasClusterID && n.ClusterID != pl.spineID
}

// selectPlaneSpine picks one spine member per plane: the current one when it is still eligible,
// else the best-ranked eligible node of the zone with the fewest spine members (another zone comes
// before everything else: a spine in one zone loses every cross-zone route with it), then not a
// rack route reflector, then from a rack with eligible nodes to spare, so that the planes spread
// over the zones.
func (pl *planner) selectPlaneSpine(spineOf []*NodeInfo, taken map[*NodeInfo]bool) {
	base := pl.spineID
	spare := pl.spareByRack(len(spineOf) - 1)
	perZone := map[string]int{}
	// Current members keep their plane; a standby takes its plane only when the member is gone.
	for _, standby := range []bool{false, true} {
		for _, n := range pl.ranked {
			k := n.Plane
			if (n.StandbyFor != "") == standby && n.CurrentRR && !n.Draining() && n.HasClusterID && n.ClusterID == base &&
				k >= 1 && k < len(spineOf) && spineOf[k] == nil {
				spineOf[k] = n
				taken[n] = true
				perZone[n.Zone]++
			}
		}
	}
	for k := 1; k < len(spineOf); k++ {
		if spineOf[k] != nil {
			continue
		}
		best := pl.bestSpineCandidate(taken, perZone, spare, func(*NodeInfo) bool { return true })
		if best == nil {
			return
		}
		spineOf[k] = best
		taken[best] = true
		perZone[best.Zone]++
		spare[pl.dec[best.index].rack]--
	}
}

// spareByRack counts each rack's eligible nodes beyond its planes (bestSpineCandidate's spare).
func (pl *planner) spareByRack(planes int) map[string]int {
	spare := map[string]int{}
	for _, n := range pl.ranked {
		spare[pl.dec[n.index].rack]++
	}
	for r := range spare {
		spare[r] -= planes
	}
	return spare
}

// bestSpineCandidate returns the eligible node not taken that ok accepts, best for the spine: in
// the zone with the fewest spine members (perZone), then not a rack route reflector, then from a
// rack with eligible nodes to spare, then by rank; nil when there is none.
func (pl *planner) bestSpineCandidate(taken map[*NodeInfo]bool, perZone, spare map[string]int, ok func(*NodeInfo) bool) *NodeInfo {
	var best *NodeInfo
	better := func(n *NodeInfo) bool {
		if best == nil {
			return true
		}
		if a, b := perZone[n.Zone], perZone[best.Zone]; a != b {
			return a < b
		}
		if a, b := pl.isRackRR(n), pl.isRackRR(best); a != b {
			return !a
		}
		if a, b := spare[pl.dec[n.index].rack] > 0, spare[pl.dec[best.index].rack] > 0; a != b {
			return a
		}
		return n.rank < best.rank
	}
	for _, n := range pl.ranked {
		if !taken[n] && ok(n) && better(n) {
			best = n
		}
	}
	return best
}

// selectStandbys gives every plane whose spine member is NotReady (within its grace period: it
// keeps its role) a standby, so that the cluster does not hang on the other plane alone for the
// grace period: the current standby for that member when it is still eligible and Ready, else the
// best Ready candidate (bestSpineCandidate). When the member is Ready again the standby is no
// longer selected and drains; when the member is drained, the standby takes its plane
// (selectPlaneSpine). Standbys are chosen after the rack route reflectors, within budget (what
// maxRouteReflectors leaves).
func (pl *planner) selectStandbys(spineOf, standbyOf []*NodeInfo, taken map[*NodeInfo]bool, budget int) {
	perZone, spare := map[string]int{}, pl.spareByRack(len(spineOf)-1)
	for _, n := range spineOf {
		if n != nil {
			perZone[n.Zone]++
		}
	}
	for k := 1; k < len(spineOf) && countSet(standbyOf) < budget; k++ {
		m := spineOf[k]
		if m == nil || m.Ready && !m.BGP.Suspect() {
			continue
		}
		for _, n := range pl.ranked {
			if !taken[n] && n.Ready && !n.BGP.Suspect() && n.StandbyFor == m.Name && n.Plane == k && n.CurrentRR && !n.Draining() &&
				n.HasClusterID && n.ClusterID == pl.spineID {
				standbyOf[k] = n
				break
			}
		}
		if standbyOf[k] == nil {
			// The standby stands where the member would: its zone counts without the member.
			perZone[m.Zone]--
			standbyOf[k] = pl.bestSpineCandidate(taken, perZone, spare, func(n *NodeInfo) bool { return n.Ready && !n.BGP.Suspect() })
			perZone[m.Zone]++
		}
		if sb := standbyOf[k]; sb != nil {
			taken[sb] = true
			perZone[sb.Zone]++
			spare[pl.dec[sb.index].rack]--
		}
	}
}

// sharedZone returns a zone that holds two of the route reflectors (a spine's members, a rack's),
// if any.
func sharedZone(spineOf []*NodeInfo) (string, bool) {
	seen := map[string]bool{}
	for _, n := range spineOf {
		if n == nil {
			continue
		}
		if seen[n.Zone] {
			return n.Zone, true
		}
		seen[n.Zone] = true
	}
	return "", false
}

// eligibleOutside reports whether an eligible node of another zone than z is free (not taken).
func (pl *planner) eligibleOutside(z string, taken map[*NodeInfo]bool) bool {
	return slices.ContainsFunc(pl.ranked, func(n *NodeInfo) bool { return n.Zone != z && !taken[n] })
}

// countSet counts the non-nil entries.
func countSet(ns []*NodeInfo) int {
	c := 0
	for _, n := range ns {
		if n != nil {
			c++
		}
	}
	return c
}

func (pl *planner) sortPeers(peers []int) {
	slices.SortFunc(peers, func(a, b int) int { return cmp.Compare(pl.nodes[a].Name, pl.nodes[b].Name) })
}

// rackMargin is how far below a rack boundary a zone must shrink before two of its racks merge: a
// tenth of a rack, at least one node.
func rackMargin(maxRackSize int) int { return max(1, maxRackSize/10) }

// ZoneRackName names rack j (from 1) of a zone.
func ZoneRackName(zone string, j int) string {
	if zone == "" {
		return "rack-" + strconv.Itoa(j)
	}
	return zone + "-rack-" + strconv.Itoa(j)
}

// rackSetName names the peering set of the nodes of zone in rack: the rack's (RackSetName), and
// in a cluster planned as one rack, its zone's first rack's: the rack its nodes stay in when the
// cluster splits into racks (assignZoneRacks), so the split relabels none of them.
func rackSetName(policyName, zone, rack string) string {
	if rack == ZoneRackName("", 1) {
		rack = ZoneRackName(zone, 1)
	}
	return RackSetName(policyName, rack)
}

// zoneRackIndex returns j when rack is ZoneRackName(zone, j).
func zoneRackIndex(zone, rack string) (int, bool) {
	prefix := "rack-"
	if zone != "" {
		prefix = zone + "-rack-"
	}
	s, ok := strings.CutPrefix(rack, prefix)
	if !ok {
		return 0, false
	}
	j, err := strconv.Atoi(s)
	return j, err == nil && j > 0 && strconv.Itoa(j) == s
}

// ZoneRacks is the number of racks a zone of n nodes gets when it has cur racks now (0: none yet):
// enough that no rack exceeds maxRackSize, and no fewer than now unless the zone has shrunk a
// margin below the boundary.
func ZoneRacks(n, cur, maxRackSize int) int {
	need := max(1, (n+maxRackSize-1)/maxRackSize)
	if cur < need {
		return need
	}
	if cur > 1 && n <= (cur-1)*maxRackSize-rackMargin(maxRackSize) {
		return need
	}
	return cur
}

// assignZoneRacks puts every managed node in a rack of its zone (DualPlane) and returns the racks,
// sorted. A node keeps its rack while it stays and the rack stays and
// has room; a new node, or one whose rack was merged away, goes to the emptiest rack of its zone.
// A zone splits into more racks only when it outgrows them (the new racks fill with the nodes that
// join; no node moves) and merges its smallest racks away only beyond the margin.
func (pl *planner) assignZoneRacks() []string {
	byZone := map[string][]int{}
	for i, n := range pl.nodes {
		byZone[n.Zone] = append(byZone[n.Zone], i)
	}
	size := pl.rackSize(byZone)
	if pl.oneRack(size) {
		// The cluster fits in one rack: one rack across the zones, its route reflectors in
		// distinct zones, no spine.
		rack := ZoneRackName("", 1)
		for i := range pl.nodes {
			pl.dec[i].rack = rack
		}
		return []string{rack}
	}
	var racks []string
	for _, z := range pl.zones {
		idx := byZone[z]
		count := map[int]int{}
		cur := make([]int, len(idx)) // each node's current rack index, 0 when none
		for k, i := range idx {
			j, ok := zoneRackIndex(z, pl.nodes[i].Rack)
			if !ok && pl.nodes[i].Rack == ZoneRackName("", 1) {
				j, ok = 1, true // the one rack the cluster had: the zone's first rack (rackSetName)
			}
			if ok {
				count[j]++
				cur[k] = j
			}
		}
		k := ZoneRacks(len(idx), len(count), size)
		// The racks that stay: the fullest current ones (then the lowest index); new ones take the
		// lowest free index.
		have := sortedKeys(count)
		slices.SortStableFunc(have, func(a, b int) int { return cmp.Compare(count[b], count[a]) })
		keep := map[int]bool{}
		for _, j := range have[:min(k, len(have))] {
			keep[j] = true
		}
		for j := 1; len(keep) < k; j++ {
			keep[j] = true
		}
		names := sortedKeys(keep)
		pos := make(map[int]int, k)
		for p, j := range names {
			pos[j] = p
		}
		fill := make([]int, len(names))
		rackName := make([]string, len(names))
		for p, j := range names {
			rackName[p] = ZoneRackName(z, j)
		}
		var rest []int
		for k, i := range idx {
			if j := cur[k]; j > 0 && keep[j] && fill[pos[j]] < size {
				fill[pos[j]]++
				pl.dec[i].rack = rackName[pos[j]]
				continue
			}
			rest = append(rest, i)
		}
		for _, i := range rest {
			best := emptiestRack(fill)
			fill[best]++
			pl.dec[i].rack = rackName[best]
		}
		for _, j := range names {
			racks = append(racks, ZoneRackName(z, j))
		}
	}
	slices.Sort(racks)
	return racks
}

// rackSize is the largest rack size up to maxRackSize that gives the racks minRouteReflectors
// needs (each rack has `redundancy` route reflectors, the spine as many more once there are two
// racks or more): a policy's minimum is met with smaller racks, not by breaking the layout.
func (pl *planner) rackSize(byZone map[string][]int) int {
	size, planes := pl.p.MaxRackSize, pl.p.Redundancy
	if planes < 1 || pl.p.Min <= planes {
		return size
	}
	need := max(2, (pl.p.Min-planes+planes-1)/planes) // racks, with a spine
	racks := func(s int) int {
		n := 0
		for _, idx := range byZone {
			n += (len(idx) + s - 1) / s
		}
		return n
	}
	for size > 1 && racks(size) < need {
		size--
	}
	return size
}

// oneRack reports whether the whole cluster is planned as one rack: it has at most size nodes,
// and either it is one rack already (or has no racks yet), or it has shrunk a margin below size.
func (pl *planner) oneRack(size int) bool {
	n := len(pl.nodes)
	if n > size {
		return false
	}
	single, racked := 0, 0
	for _, x := range pl.nodes {
		if x.Rack != "" {
			racked++
			if x.Rack == ZoneRackName("", 1) {
				single++
			}
		}
	}
	return racked == 0 || 2*single > racked || n <= size-rackMargin(size)
}

// emptiestRack returns the position of the rack with the fewest nodes (fill, in rack index
// order), the first on a tie: where the planner and the admission path put a node that has no rack.
func emptiestRack(fill []int) int {
	best := 0
	for k := 1; k < len(fill); k++ {
		if fill[k] < fill[best] {
			best = k
		}
	}
	return best
}
