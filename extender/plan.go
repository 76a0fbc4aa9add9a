package extender

import (
	"cmp"
	"iter"
	"slices"
	"time"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// Input is everything a plan depends on.
type Input struct {
	Policy *policy.Resolved
	// Nodes are the cluster's nodes; those the policy does not select are ignored.
	Nodes []*Node
	// Now is the time of the decision (the planner never reads a clock).
	Now time.Time
	// Recommendations is the stabilization history returned by the previous plan.
	Recommendations []Recommendation
	// ForeignClusterIDs are the cluster IDs that nodes outside this policy carry (other policies'
	// route reflectors), each with its holder: the smallest node name (see ForeignClusterIDs).
	// The plan never hands them out, and a node of this policy that carries one keeps it only
	// when its name sorts before the holder's, so two policies resolve a collision the same way
	// and only one of them moves. Cluster IDs must be unique across policies: route reflectors
	// of two policies that share one drop each other's routes.
	ForeignClusterIDs map[uint32]string
	// CrossPolicy: other policies exist. The plan's top-level route reflectors carry
	// LabelTopLevel and one more BGPPeer (CrossPolicyBGPPeerName) peers them with every policy's,
	// so that routes cross between the policies' node pools.
	CrossPolicy bool
	// OutsideSelector is the Calico selector of the nodes no policy selects (OutsideSelector), ""
	// when every node is in a policy. The plan's top-level route reflectors take them as clients
	// (OutsideBGPPeerName), so they keep every route whether Calico's node-to-node mesh is on
	// (which route reflectors leave) or off.
	OutsideSelector string
	// Filters and Scores default to DefaultFilters and DefaultScores.
	Filters []FilterPlugin
	Scores  []ScorePlugin
	// BGPHealth is what the leader saw of the route reflectors' BGP sessions, by node (bgpHealth;
	// nil: nothing, or bgpHealth off). See BGPHealth.
	BGPHealth map[string]BGPHealth
	// Drills, when set, runs the failure drills on the plan: the planner then prefers a plan that
	// passes them (see safest) and puts them on the result.
	Drills DrillFunc
}

// Degraded reasons.
const (
	ReasonNotEnoughEligibleNodes = "NotEnoughEligibleNodes"
	ReasonQuorumAtRisk           = "QuorumAtRisk"
	ReasonMaxRouteReflectors     = "MaxRouteReflectorsReached"
	ReasonMaxClients             = "MaxClientsPerRouteReflectorExceeded"
	ReasonWaitingForNodes        = "WaitingForNodes"
	ReasonPlanesInOneZone        = "PlanesInOneZone"
	ReasonRacksOnSpine           = "RacksShortOfRouteReflectors"
)

type role uint8

const (
	roleClient role = iota
	roleActive
	roleDraining
)

// planner holds one plan's working state.
type planner struct {
	in      Input
	p       *policy.Resolved
	nodes   []*NodeInfo // managed nodes, by name
	byName  map[string]*NodeInfo
	zones   []string // sorted
	ranked  []*NodeInfo
	healthy int

	desired  int
	zoneWant map[string]int
	recs     []Recommendation
	counts   []Recommendation // the counts stabilized (stabilize), without their time
	degraded []condition
	recheck  time.Time // when the plan changes by the clock alone (zero: never)
	// reserved: other policies' cluster IDs this plan may not use; spineID: the spine's cluster
	// ID in the racked topologies (the policy's first one unless another policy holds it).
	reserved map[uint32]bool
	spineID  uint32
	// topLevel: the route reflectors (node indexes) that peer with other policies' (CrossPolicy).
	topLevel map[int]bool

	// decisions, indexed like nodes
	dec []decision
}

type decision struct {
	role  role
	id    uint32
	peers []int // indexes of the route reflectors this node peers with (sorted by name)
	// uplinks: the spine route reflectors a DualPlane rack route reflector peers with (sorted).
	uplinks []int
	rack    string
	plane   int // DualPlane: the route reflector's plane (1..redundancy)
	spine   bool
	// standbyFor: a DualPlane spine standby, the NotReady member it stands in for.
	standbyFor string
	since      time.Time
}

type condition struct{ reason, message string }

// Plan computes the route reflector plan: the stable one (current roles kept where the policy
// allows), or with Input.Drills the safest (see safest).
func Plan(in Input) *Result {
	res := planOnce(in)
	if in.Drills == nil {
		return res
	}
	return safest(in, res)
}

func planOnce(in Input) *Result {
	pl := newPlanner(in)
	switch pl.p.Topology {
	case v1alpha1.SingleCluster:
		pl.planSingle()
	case v1alpha1.Hierarchical:
		pl.planHierarchical()
	case v1alpha1.DualPlane:
		pl.planDualPlane()
	default:
		pl.planMulti()
	}
	res := pl.result()
	res.counts, res.stable = pl.counts, pl.stableUntil(res)
	return res
}

func newPlanner(in Input) *planner {
	p := in.Policy
	if in.Filters == nil {
		in.Filters = DefaultFilters()
	}
	if in.Scores == nil {
		in.Scores = DefaultScores()
	}
	pl := &planner{in: in, p: p, byName: make(map[string]*NodeInfo, len(in.Nodes)), zoneWant: map[string]int{}}
	zoneSet := map[string]struct{}{}
	for _, n := range in.Nodes {
		if n == nil || !p.NodeSelector.Matches(labelSet(n.Labels)) {
			continue
		}
		if _, dup := pl.byName[n.Name]; dup {
			continue
		}
		ni := NewNodeInfo(n, p)
		ni.Now = in.Now
		ni.BGP = in.BGPHealth[n.Name]
		if h := ni.BGP; h.Suspect() && ni.CurrentRR && in.Now.Before(h.DownSince.Add(p.BGPGrace)) {
			pl.recheckBy(h.DownSince.Add(p.BGPGrace)) // its grace period ends
		}
		RunFilters(in.Filters, p, ni)
		pl.byName[n.Name] = ni
		pl.nodes = append(pl.nodes, ni)
		zoneSet[ni.Zone] = struct{}{}
		if ni.Healthy() {
			pl.healthy++
		}
	}
	pl.filterFamilies()
	slices.SortFunc(pl.nodes, func(a, b *NodeInfo) int { return cmp.Compare(a.Name, b.Name) })
	for z := range zoneSet {
		pl.zones = append(pl.zones, z)
	}
	slices.Sort(pl.zones)
	pl.reserveIDs()
	pl.dec = make([]decision, len(pl.nodes))
	for i, n := range pl.nodes {
		n.index = i
	}
	pl.rank()
	return pl
}

// rank orders the eligible nodes by score vector, highest first, then by name.
func (pl *planner) rank() {
	type scored struct {
		n *NodeInfo
		s [4]int64
	}
	k := len(pl.in.Scores)
	all := make([]scored, 0, len(pl.nodes))
	for _, n := range pl.nodes {
		if !n.Eligible {
			continue
		}
		var s scored
		s.n = n
		for i := 0; i < k && i < len(s.s); i++ {
			s.s[i] = pl.in.Scores[i].Score(pl.p, n)
		}
		all = append(all, s)
	}
	slices.SortStableFunc(all, func(a, b scored) int {
		for i := range a.s {
			if c := cmp.Compare(b.s[i], a.s[i]); c != 0 {
				return c
			}
		}
		return cmp.Compare(a.n.Name, b.n.Name)
	})
	pl.ranked = make([]*NodeInfo, len(all))
	for i := range all {
		pl.ranked[i] = all[i].n
		all[i].n.rank = i
	}
}

func (pl *planner) eligibleCount() int { return len(pl.ranked) }

func (pl *planner) degrade(reason, msg string) {
	pl.degraded = append(pl.degraded, condition{reason, msg})
}

// rankedByZone returns the ranked eligible nodes of each zone.
func (pl *planner) rankedByZone() map[string][]*NodeInfo {
	m := map[string][]*NodeInfo{}
	for _, n := range pl.ranked {
		m[n.Zone] = append(m[n.Zone], n)
	}
	return m
}

// zoneQuotas spreads total over the zones so that they differ by at most one where they have the
// eligible nodes; a zone short of nodes spills its share into the next zones. Zones that already
// hold more route reflectors come first, so a remainder does not move roles between zones. Awaited
// nodes (nil: none) count as room: a zone whose nodes are still turning Ready keeps its share.
func (pl *planner) zoneQuotas(total int, byZone map[string][]*NodeInfo, awaited map[string]int) map[string]int {
	current := map[string]int{}
	for _, n := range pl.ranked {
		if n.CurrentRR && !n.Draining() {
			current[n.Zone]++
		}
	}
	eligible := make(map[string]int, len(pl.zones))
	for _, z := range pl.zones {
		eligible[z] = len(byZone[z])
	}
	return spread(total, pl.zones, current, eligible, awaited)
}

// awaitedByZone counts the awaited nodes of each zone (see NodeInfo.Awaited) and returns, per
// zone, the earliest time one stops being awaited.
func (pl *planner) awaitedByZone() (map[string]int, map[string]time.Time) {
	count, until := map[string]int{}, map[string]time.Time{}
	for _, n := range pl.nodes {
		if !n.Awaited {
			continue
		}
		count[n.Zone]++
		if u, ok := until[n.Zone]; !ok || n.AwaitedUntil(pl.p).Before(u) {
			until[n.Zone] = n.AwaitedUntil(pl.p)
		}
	}
	return count, until
}

// recheckBy makes the plan's RecheckAt no later than t.
func (pl *planner) recheckBy(t time.Time) {
	if pl.recheck.IsZero() || t.Before(pl.recheck) {
		pl.recheck = t
	}
}

// spread gives total out over the zones one at a time, round after round, each zone up to its
// room (eligible plus awaited nodes): zones differ by at most one where they have the room, a zone
// without room spills into the others. Zones with more current route reflectors, then more
// eligible nodes, then more room, then by name, come first in every round: a zone with eligible
// nodes is served before one that only awaits nodes. The planner and the incremental admission
// share it.
func spread(total int, zones []string, current, eligible, awaited map[string]int) map[string]int {
	order := slices.Clone(zones)
	slices.Sort(order)
	room := make(map[string]int, len(order))
	for _, z := range order {
		room[z] = eligible[z] + awaited[z]
	}
	slices.SortStableFunc(order, func(a, b string) int {
		if c := cmp.Compare(current[b], current[a]); c != 0 {
			return c
		}
		if c := cmp.Compare(eligible[b], eligible[a]); c != 0 {
			return c
		}
		return cmp.Compare(room[b], room[a])
	})
	q := make(map[string]int, len(order))
	for total > 0 {
		progress := false
		for _, z := range order {
			if total == 0 {
				break
			}
			if q[z] < room[z] {
				q[z]++
				total--
				progress = true
			}
		}
		if !progress {
			break
		}
	}
	return q
}

// activate makes n an active route reflector with cluster ID id.
func (pl *planner) activate(n *NodeInfo, id uint32) {
	d := &pl.dec[n.index]
	d.role, d.id = roleActive, id
}

// retire decides what happens to current route reflectors the plan no longer selects: they keep
// their role, draining, until removalDelay has passed since they started draining; while the plan
// has no active route reflector at all they are never dropped, so no client is left without one.
func (pl *planner) retire() {
	anyActive := false
	for i := range pl.dec {
		if pl.dec[i].role == roleActive {
			anyActive = true
			break
		}
	}
	for i, n := range pl.nodes {
		d := &pl.dec[i]
		if d.role == roleActive || !n.CurrentRR {
			continue
		}
		since := n.DrainingSince
		if since.IsZero() || since.After(pl.in.Now) {
			since = pl.in.Now
		}
		if anyActive && !pl.in.Now.Before(since.Add(pl.p.RemovalDelay)) {
			continue // handed over: becomes a client
		}
		d.role, d.since = roleDraining, since
		if n.HasClusterID {
			d.id = n.ClusterID
		} else {
			d.id = pl.p.BaseClusterID
		}
	}
}

// withDrainingTwins appends to the peers of draining route reflector i the other draining route
// reflectors with its cluster ID. Two of them that share the spine's ID and peer only with the
// spine would never learn each other's routes: the spine treats both as non-clients and reflects
// nothing between them (found by the churn test: two spine members cordoned in a row).
func (pl *planner) withDrainingTwins(i int, peers []int) []int {
	for j := range pl.dec {
		if j != i && pl.dec[j].role == roleDraining && pl.dec[j].id == pl.dec[i].id && !slices.Contains(peers, j) {
			peers = append(peers, j)
		}
	}
	return peers
}

// withSameID appends to the peers of draining route reflector i every other route reflector that
// carries its cluster ID, draining or active (withDrainingTwins, then the active ones: a rack's
// route reflectors while one of the rack drains, since the rack keeps its ID). Its other peers
// (the spine) reflect the routes of those same-ID route reflectors' clients to it with that ID on
// their cluster list, so it would drop them; the same-ID ones reflect them to it directly.
func (pl *planner) withSameID(i int, peers []int) []int {
	peers = pl.withDrainingTwins(i, peers)
	for j := range pl.dec {
		if j != i && pl.dec[j].role == roleActive && pl.dec[j].id == pl.dec[i].id && !slices.Contains(peers, j) {
			peers = append(peers, j)
		}
	}
	return peers
}

// usedIDs returns the cluster IDs held by draining route reflectors.
func (pl *planner) drainingIDs() map[uint32]bool {
	m := map[uint32]bool{}
	for i := range pl.dec {
		if pl.dec[i].role == roleDraining {
			m[pl.dec[i].id] = true
		}
	}
	return m
}

// idAllocator hands out the lowest free cluster IDs from the policy's first one upward.
type idAllocator struct {
	next uint32
	used map[uint32]bool
}

// newIDAllocator returns an allocator from base that skips used and the IDs other policies hold.
func (pl *planner) newIDAllocator(base uint32, used map[uint32]bool) *idAllocator {
	for id := range pl.reserved {
		used[id] = true
	}
	return &idAllocator{next: base, used: used}
}

// reserveIDs reads the other policies' cluster IDs: those this plan may not use, and the nodes of
// this policy that must give theirs up (they lose the collision, see Input.ForeignClusterIDs).
func (pl *planner) reserveIDs() {
	pl.reserved = reservedIDs(pl.in.ForeignClusterIDs, func(yield func(string, uint32) bool) {
		for _, n := range pl.nodes {
			if n.HasClusterID && !yield(n.Name, n.ClusterID) {
				return
			}
		}
	})
	for _, n := range pl.nodes {
		if n.HasClusterID && pl.reserved[n.ClusterID] {
			n.HasClusterID = false // another policy's: this node gets a new one
		}
	}
	pl.spineID = pl.p.BaseClusterID
	for pl.reserved[pl.spineID] {
		pl.spineID++
	}
}

// reservedIDs returns the foreign cluster IDs a policy may not use: all of them but those that one
// of its own nodes (name, ID) carries with a name sorting before the foreign holder's.
func reservedIDs(foreign map[uint32]string, own iter.Seq2[string, uint32]) map[uint32]bool {
	if len(foreign) == 0 {
		return nil
	}
	out := make(map[uint32]bool, len(foreign))
	for id := range foreign {
		out[id] = true
	}
	for name, id := range own {
		if holder, ok := foreign[id]; ok && name < holder {
			delete(out, id)
		}
	}
	return out
}

// ForeignClusterIDs returns the cluster IDs carried by the nodes of all that are not in own (the
// nodes of other policies, or of none), each with the smallest name of a node carrying it: the
// ForeignClusterIDs of a policy's Input.
func ForeignClusterIDs(all, own []*Node) map[uint32]string {
	mine := make(map[string]bool, len(own))
	for _, n := range own {
		mine[n.Name] = true
	}
	var out map[uint32]string
	for _, n := range all {
		s, ok := n.Annotations[AnnotationClusterID]
		if !ok || mine[n.Name] {
			continue
		}
		id, ok := policy.ParseClusterID(s)
		if !ok {
			continue
		}
		if out == nil {
			out = map[uint32]string{}
		}
		if h, seen := out[id]; !seen || n.Name < h {
			out[id] = n.Name
		}
	}
	return out
}

func (a *idAllocator) take() uint32 {
	for a.used[a.next] {
		a.next++
	}
	id := a.next
	a.used[id] = true
	a.next++
	return id
}

func (a *idAllocator) reserve(id uint32) { a.used[id] = true }
