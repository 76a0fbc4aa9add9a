package extender

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// Incremental admission decisions.
//
// A full plan costs milliseconds at thousands of nodes, too much for every admission request. The
// mutating webhook therefore keeps the last full plan as an AdmitState and decides a joining node
// incrementally: Admit promotes it when its zone is below the plan's desired count and it is
// eligible, with the zone's (or group's) cluster ID, and otherwise makes it a client of the
// least-loaded route reflectors by the planner's rules. Record adds a decision to the state so that
// later decisions count it; the next full plan corrects whatever an incremental decision got wrong.

// AdmitRole is the role an admission decision gives a node.
type AdmitRole int

// The roles of an admission decision.
const (
	// AdmitNone: no decision (no route reflector to peer with, or the topology needs a full plan).
	AdmitNone AdmitRole = iota
	// AdmitClient: the node peers with RouteReflectors through PeeringSet.
	AdmitClient
	// AdmitRouteReflector: the node becomes a route reflector with ClusterID.
	AdmitRouteReflector
)

func (r AdmitRole) String() string {
	switch r {
	case AdmitClient:
		return "client"
	case AdmitRouteReflector:
		return "route-reflector"
	default:
		return "none"
	}
}

// Admission is an incremental decision for one node.
type Admission struct {
	Node string
	Role AdmitRole
	Zone string
	// ClusterID of a new route reflector.
	ClusterID string
	// RouteReflectors (sorted) and PeeringSet of a client; Rack in the Hierarchical topology.
	RouteReflectors []string
	PeeringSet      string
	Rack            string
	// Plane and UplinkSet of a new DualPlane rack route reflector (its PeeringSet is its rack's).
	Plane     int
	UplinkSet string
	// Reason says why, for Events and logs ("zone zone-b below desired 4").
	Reason string
	// Healthy, Eligible and Awaited (see NodeInfo.Awaited) are the facts the decision was taken
	// on. An awaited node is recorded even without a role: its zone keeps a share for it.
	Healthy, Eligible, Awaited bool
	// Families are the node's address families the decision read (see AdmitState.readFamilies).
	Families Families

	planned  *NodeState // the plan's state of a known node whose facts did not change
	topLevel bool       // a new route reflector that peers with other policies' (CrossPolicy)
}

// State returns the owned labels and annotations the decision puts on the node, as a plan's
// NodeState: an owned key absent here must be absent on the node.
func (a *Admission) State(p *policy.Resolved) NodeState {
	if a.planned != nil {
		return *a.planned
	}
	var st NodeState
	switch a.Role {
	case AdmitRouteReflector:
		st = clientState("", "", a.Rack)
		if a.Plane > 0 {
			st.Annotations[AnnotationPlane] = strconv.Itoa(a.Plane)
			st.Labels[LabelPeeringSet] = a.PeeringSet
			if a.UplinkSet != "" {
				st.Labels[LabelUplinkSet] = a.UplinkSet
			}
		}
		st.Labels[p.RRLabelKey] = p.RRLabelValue
		st.Labels[LabelRouteReflectorID] = RouteReflectorID(a.Node)
		if a.topLevel {
			st.Labels[LabelTopLevel] = ""
		}
		st.Annotations[AnnotationClusterID] = a.ClusterID
	case AdmitClient:
		st = clientState(a.PeeringSet, strings.Join(a.RouteReflectors, ","), a.Rack)
	default:
		st = clientState("", "", a.Rack)
	}
	st.Name = a.Node
	return st
}

// AdmitState is the compact view of a plan that incremental decisions work on: per-zone counts,
// the route reflectors with their loads, the peering sets and the facts of every managed node.
// It is not safe for concurrent use; the caller serializes Admit and Record.
type AdmitState struct {
	Policy *policy.Resolved
	// Now is the time of the next decision, for the NotReady grace period (Awaited); it starts at
	// the plan's time, and the caller moves it on before each Admit.
	Now time.Time

	desired int // the plan's desired count (MultiCluster, Hierarchical)
	// registered is the plan's CalicoNodeRegistered filter (the etcd datastore), nil without one:
	// the node webhooks read nodes through the default filters only.
	registered *CalicoNodeRegistered
	healthy    int
	active     int
	zones      map[string]*admitZone
	// nodes indexes nodeList by node name: a map of small values, and the facts in one slice
	// (BenchmarkAdmitStateHeap: 151 heap bytes per node at 65,000 nodes; a map of whole
	// admitNodes held 244).
	nodes    map[string]int32
	nodeList []admitNode
	rrs      map[string]*admitRR
	sets     map[string]*admitSet
	ids      map[uint32]int // active route reflectors per cluster ID
	draining map[uint32]int // draining route reflectors per cluster ID
	// releasing counts cluster IDs that nodes still carry but the plan takes from them.
	releasing map[uint32]int
	reserved  map[uint32]bool // other policies' cluster IDs (Input.ForeignClusterIDs)
	// crossPolicy: other policies or nodes outside every policy exist; a promoted route reflector
	// is top-level (SingleCluster and MultiCluster, the only topologies admission promotes in).
	crossPolicy bool
	clients     int
	// families counts the nodes that peer in each family (FamilyIPv4, FamilyIPv6): their union is
	// what the planner's AddressFamilies filter reads (familiesFilter).
	families map[Families]int
	racks    map[string]*admitRack
	spineID  uint32 // the racked topologies' spine cluster ID (as the planner's)
	// oneRack: DualPlane, and the plan has no rack or only the one rack of a cluster that fits in
	// one (ZoneRackName("", 1)); the zones' first racks the admission path puts nodes in once it is
	// full are not racks of the plan yet.
	oneRack bool
	// remembered takes back out, per node, the decision recorded through Remember.
	remembered map[string]func()
}

type admitZone struct {
	healthy, eligible, active int
	awaited                   int
	desired                   int // the plan's desired count for the zone
	ids                       map[uint32]int
}

type admitNode struct {
	zone              string
	healthy, eligible bool
	awaited           bool
	role              AdmitRole // AdmitRouteReflector for active route reflectors
	draining          bool
	id                uint32
	set               string
	rack              string
	plane             int        // a DualPlane route reflector's plane
	planned           *NodeState // the plan's state of the node (nil for a recorded decision)
	families          Families
}

type admitRR struct {
	zone   string
	id     uint32
	active bool
	load   int
}

type admitSet struct {
	rrs     []string // sorted
	clients int
}

type admitRack struct {
	set     string
	setOfRR bool // set is a route reflector's of the rack (it wins over its clients')
	members int  // clients and route reflectors
	// rrs: the rack's active route reflectors by plane (DualPlane; the spine's are not a rack's),
	// id their cluster ID.
	rrs map[int]string
	id  uint32
}

// admitHeadroom is the room a plan's admission state leaves for the nodes admitted after the plan
// read its input: those Commit replays on it and those admitted until the next plan (a join brings
// a hundred a second, a plan at 65,000 nodes takes about a second). Without it the first of them
// doubled the node list: a second copy of the whole list, 12 MB at 65,000 nodes, live beside the
// plan being built (the join's heap profile, BENCHMARKS.md).
func admitHeadroom(nodes int) int { return max(64, nodes/64) }

// NewAdmitState builds the state of a plan from its input and result.
func NewAdmitState(in Input, res *Result) *AdmitState {
	p := in.Policy
	s := &AdmitState{
		Policy:      p,
		Now:         res.now,
		crossPolicy: in.CrossPolicy || in.OutsideSelector != "",
		desired:     res.Summary.DesiredRouteReflectors,
		zones:       map[string]*admitZone{},
		nodes:       make(map[string]int32, len(res.Nodes)),
		nodeList:    make([]admitNode, 0, len(res.Nodes)+admitHeadroom(len(res.Nodes))),
		rrs:         map[string]*admitRR{},
		sets:        map[string]*admitSet{},
		ids:         map[uint32]int{},
		draining:    map[uint32]int{},
		releasing:   map[uint32]int{},
		racks:       map[string]*admitRack{},
		families:    map[Families]int{},
	}
	for _, f := range in.Filters {
		if r, ok := f.(*CalicoNodeRegistered); ok {
			s.registered = r
		}
	}
	for _, z := range res.Zones {
		s.zone(z.Zone).desired = z.Desired
	}
	for _, c := range res.Clients {
		if c.PeeringSet != "" && s.sets[c.PeeringSet] == nil {
			s.sets[c.PeeringSet] = &admitSet{rrs: slices.Clone(c.RouteReflectors)}
		}
	}
	facts := res.facts
	if len(facts) != len(res.Nodes) {
		facts = readFacts(in, res) // a Result that Plan did not make
	}
	for i := range res.Nodes {
		st, fact := &res.Nodes[i], facts[i]
		if _, seen := s.nodes[st.Name]; seen || !fact.read {
			continue
		}
		f := admitNode{
			zone:     fact.zone,
			healthy:  fact.healthy,
			eligible: fact.eligible,
			awaited:  fact.awaited,
			families: fact.families,
			set:      st.Labels[LabelPeeringSet],
			rack:     st.Annotations[AnnotationRack],
			planned:  st,
		}
		f.plane, _ = strconv.Atoi(st.Annotations[AnnotationPlane])
		want, wantsID := st.Annotations[AnnotationClusterID]
		var wantID uint32
		if wantsID {
			wantID, _ = policy.ParseClusterID(want)
			if _, dr := st.Annotations[AnnotationDrainingSince]; dr {
				f.draining = true
			} else {
				f.role = AdmitRouteReflector
			}
			f.id = wantID
		} else if f.set != "" {
			f.role = AdmitClient
		}
		s.setNode(st.Name, f)
		// A cluster ID the node still carries but the plan takes from it (a demotion that waits
		// for its handover) is not free yet.
		if fact.hasID && (!wantsID || wantID != fact.id) {
			s.releasing[fact.id]++
		}
	}
	s.reserved = reservedIDs(in.ForeignClusterIDs, func(yield func(string, uint32) bool) {
		for i := range res.Nodes {
			if facts[i].read && facts[i].hasID && !yield(res.Nodes[i].Name, facts[i].id) {
				return
			}
		}
	})
	s.spineID = p.BaseClusterID
	for s.reserved[s.spineID] {
		s.spineID++
	}
	// Route reflectors first, so that clients find them.
	for name, f := range s.eachNode {
		if f.role == AdmitRouteReflector || f.draining {
			s.contribute(name, f, 1)
		}
	}
	for name, f := range s.eachNode {
		if f.role != AdmitRouteReflector && !f.draining {
			s.contribute(name, f, 1)
		}
	}
	_, one := s.racks[ZoneRackName("", 1)]
	s.oneRack = p.Topology == v1alpha1.DualPlane && (len(s.racks) == 0 || one && len(s.racks) == 1)
	return s
}

// node returns the state's facts of a node, and whether it holds them.
func (s *AdmitState) node(name string) (admitNode, bool) {
	i, ok := s.nodes[name]
	if !ok {
		return admitNode{}, false
	}
	return s.nodeList[i], true
}

// setNode sets the facts of a node.
func (s *AdmitState) setNode(name string, f admitNode) {
	if i, ok := s.nodes[name]; ok {
		s.nodeList[i] = f
		return
	}
	s.nodes[name] = int32(len(s.nodeList))
	s.nodeList = append(s.nodeList, f)
}

// eachNode yields every node the state holds with its facts, in no order.
func (s *AdmitState) eachNode(yield func(string, admitNode) bool) {
	for name, i := range s.nodes {
		if !yield(name, s.nodeList[i]) {
			return
		}
	}
}

// readFacts reads the facts NewAdmitState needs from the input nodes, for a Result that Plan did
// not make (Plan records them as it reads the nodes).
func readFacts(in Input, res *Result) []nodeFacts {
	byName := make(map[string]*Node, len(in.Nodes))
	for _, n := range in.Nodes {
		if n != nil && byName[n.Name] == nil {
			byName[n.Name] = n
		}
	}
	ineligible := make(map[string]bool, len(res.Ineligible))
	for _, n := range res.Ineligible {
		ineligible[n.Node] = true
	}
	filters := in.Filters
	if filters == nil {
		filters = DefaultFilters()
	}
	out := make([]nodeFacts, len(res.Nodes))
	for i := range res.Nodes {
		if n := byName[res.Nodes[i].Name]; n != nil {
			ni := NewNodeInfo(n, in.Policy)
			ni.Now = in.Now
			ni.BGP = in.BGPHealth[n.Name]
			RunFilters(filters, in.Policy, ni) // Awaited: a NotReady node within its grace
			ni.Eligible = !ineligible[n.Name]
			out[i] = factsOf(ni)
		}
	}
	return out
}

func (s *AdmitState) zone(z string) *admitZone {
	zs := s.zones[z]
	if zs == nil {
		zs = &admitZone{ids: map[uint32]int{}}
		s.zones[z] = zs
	}
	return zs
}

// contribute adds (sign 1) or removes (sign -1) a node's facts and role to the counts.
func (s *AdmitState) contribute(name string, f admitNode, sign int) {
	z := s.zone(f.zone)
	if f.healthy {
		s.healthy += sign
		z.healthy += sign
	}
	if f.eligible {
		z.eligible += sign
	}
	if f.awaited {
		z.awaited += sign
	}
	for _, fam := range AllFamilies {
		if f.families.Has(fam) {
			s.families[fam] += sign
		}
	}
	switch {
	case f.draining:
		s.draining[f.id] += sign
	case f.role == AdmitRouteReflector:
		s.active += sign
		z.active += sign
		s.ids[f.id] += sign
		z.ids[f.id] += sign
		rr := s.rrs[name]
		if rr == nil {
			rr = &admitRR{zone: f.zone, id: f.id}
			s.rrs[name] = rr
		}
		rr.zone, rr.id, rr.active = f.zone, f.id, sign > 0
		if f.rack != "" && s.Policy.Topology == v1alpha1.DualPlane {
			rk := s.rack(f.rack)
			rk.members += sign // a rack's size counts every node in it, as the planner's
			switch {
			case f.plane == 0 || f.id == s.spineID:
			case sign > 0:
				rk.rrs[f.plane], rk.id = name, f.id
				if f.set != "" && (!rk.setOfRR || f.set < rk.set) { // the first name: in any order
					rk.set, rk.setOfRR = f.set, true
				}
			case rk.rrs[f.plane] == name:
				delete(rk.rrs, f.plane)
			}
		}
	case f.role == AdmitClient && f.set != "":
		s.clients += sign
		if set := s.sets[f.set]; set != nil {
			set.clients += sign
			for _, r := range set.rrs {
				if rr := s.rrs[r]; rr != nil {
					rr.load += sign
				}
			}
		}
		if f.rack != "" {
			rk := s.rack(f.rack)
			rk.members += sign
			if sign > 0 && !rk.setOfRR && (rk.set == "" || f.set < rk.set) {
				rk.set = f.set
			}
		}
	}
}

// rackSets returns the peering sets of a DualPlane rack the state knows: set, and in a cluster
// planned as one rack, each zone's set of it (rackSetName).
func (s *AdmitState) rackSets(rack, set string) []string {
	out := []string{set}
	if s.oneRack && rack == ZoneRackName("", 1) {
		for z := range s.zones {
			if name := rackSetName(s.Policy.Name, z, rack); name != set && s.sets[name] != nil {
				out = append(out, name)
			}
		}
	}
	return out
}

// resetSet gives a peering set new route reflectors, moving its clients' load onto them.
func (s *AdmitState) resetSet(name string, rrs []string) {
	set := s.sets[name]
	for _, r := range set.rrs {
		if rr := s.rrs[r]; rr != nil {
			rr.load -= set.clients
		}
	}
	set.rrs = slices.Clone(rrs)
	for _, r := range set.rrs {
		if rr := s.rrs[r]; rr != nil {
			rr.load += set.clients
		}
	}
}

func (s *AdmitState) rack(name string) *admitRack {
	rk := s.racks[name]
	if rk == nil {
		rk = &admitRack{rrs: map[int]string{}}
		s.racks[name] = rk
	}
	return rk
}

// Record adds a decision to the state, so that later decisions count it, and returns the function
// that takes it back out.
func (s *AdmitState) Record(a *Admission) (undo func()) {
	if a.Role == AdmitNone && !a.Awaited {
		return func() {}
	}
	prev, known := s.node(a.Node)
	f := admitNode{zone: a.Zone, healthy: a.Healthy, eligible: a.Eligible, awaited: a.Awaited, role: a.Role, set: a.PeeringSet, rack: a.Rack, plane: a.Plane,
		families: a.Families}
	if a.Role == AdmitRouteReflector {
		f.id, _ = policy.ParseClusterID(a.ClusterID)
		if a.Plane == 0 {
			f.set = ""
		}
	}
	var resetFrom map[string][]string // the rack sets' route reflectors before this one joined them
	if a.PeeringSet != "" && s.sets[a.PeeringSet] == nil {
		s.sets[a.PeeringSet] = &admitSet{rrs: slices.Clone(a.RouteReflectors)}
	}
	if known {
		s.contribute(a.Node, prev, -1)
	}
	s.contribute(a.Node, f, 1)
	s.setNode(a.Node, f)
	if a.Role == AdmitRouteReflector && a.Plane > 0 {
		// A DualPlane rack route reflector: its rack's sets (named after the rack) now have it, and
		// the rack's next clients peer with it (the reconciler updates the sets' BGPPeers).
		for _, name := range s.rackSets(a.Rack, a.PeeringSet) {
			if set := s.sets[name]; !slices.Equal(set.rrs, a.RouteReflectors) {
				if resetFrom == nil {
					resetFrom = map[string][]string{}
				}
				resetFrom[name] = set.rrs
				s.resetSet(name, a.RouteReflectors)
			}
		}
	}
	return func() {
		if cur, ok := s.node(a.Node); !ok || cur != f {
			return // superseded
		}
		for name, rrs := range resetFrom {
			s.resetSet(name, rrs)
		}
		s.contribute(a.Node, f, -1)
		if known {
			s.contribute(a.Node, prev, 1)
			s.setNode(a.Node, prev) // in its own slot
		} else {
			delete(s.nodes, a.Node) // its slot in nodeList stays, unused
		}
	}
}

// Known reports whether the state holds the node, and the role the plan (or a recorded decision)
// gives it.
func (s *AdmitState) Known(name string) (AdmitRole, bool) {
	f, ok := s.node(name)
	return f.role, ok
}

// RouteReflectors returns the number of active route reflectors the state counts.
func (s *AdmitState) RouteReflectors() int { return s.active }

// Admit decides the role of a node that is not a route reflector: a joining node, or one that just
// became eligible. It reads the node through the filters at s.Now, then decides as AdmitNode. It
// does not change the state (see Record).
func (s *AdmitState) Admit(n *Node) Admission {
	ni := NewNodeInfo(n, s.Policy)
	ni.Now = s.Now
	RunFilters(DefaultFilters(), s.Policy, ni)
	return s.AdmitNode(ni)
}

// AdmitNode decides the role of a node already read through the filters (NewNodeInfo, RunFilters):
// the mutating webhook's admission reads each node once (AdmitNodeRequest) and decides here
// (Decide). It does not change the state (see Record).
func (s *AdmitState) AdmitNode(ni *NodeInfo) Admission { return s.admitNode(ni, false) }

// readFamilies completes a node read through the default filters with the address families, as
// the planner reads it: a node that carries no Calico address keeps the families the plan read
// for it (the etcd datastore: the plan read them from its Calico Node), and the planner's
// AddressFamilies filter runs on the families of the policy's nodes, this one's in place of what
// the state had for it (familiesFilter, rejectFamily): in a dual-stack cluster a node without
// both families is no route reflector. It returns ni, or a changed copy.
func (s *AdmitState) readFamilies(ni *NodeInfo) *NodeInfo {
	prev, known := s.node(ni.Name)
	out := ni
	if known && prev.families != 0 && prev.families != ni.Families && !HasCalicoAddress(ni.Node) {
		c := *ni
		c.Families = prev.families
		out = &c
	}
	var union Families
	for _, fam := range AllFamilies {
		n := s.families[fam]
		if known && prev.families.Has(fam) {
			n--
		}
		if n > 0 || out.Families.Has(fam) {
			union |= fam
		}
	}
	f := familiesFilter(union)
	if f == nil || f.Filter(s.Policy, out) == "" {
		return out
	}
	if out == ni {
		c := *ni
		out = &c
	}
	rejectFamily(f, s.Policy, out)
	return out
}

// admitNode is AdmitNode; noPromotion keeps the node from becoming a route reflector.
func (s *AdmitState) admitNode(ni *NodeInfo, noPromotion bool) Admission {
	p := s.Policy
	ni = s.readFamilies(ni)
	if ni.Eligible && s.registered != nil {
		if r := s.registered.Filter(p, ni); r != "" {
			c := *ni
			c.Eligible, c.Reason, c.Rule = false, r, s.registered.Rule()
			ni = &c
		}
	}
	n := ni.Node
	a := Admission{Node: n.Name, Zone: ni.Zone, Healthy: ni.Healthy(), Eligible: ni.Eligible, Awaited: ni.Awaited, Families: ni.Families}
	prev, known := s.node(n.Name)
	if known && prev.zone == a.Zone && prev.healthy == a.Healthy && prev.eligible == a.Eligible && prev.awaited == a.Awaited {
		// A known node whose facts did not change: the plan's answer.
		switch {
		case prev.role == AdmitRouteReflector && noPromotion:
			return a // no role now: the plan being committed gives it
		case prev.role == AdmitRouteReflector:
			a.Role, a.ClusterID, a.Reason = AdmitRouteReflector, policy.ClusterIDString(prev.id), "planned"
			a.Rack, a.planned = prev.rack, prev.planned
			return a
		case prev.role == AdmitClient && s.validSet(prev.set):
			a.Role, a.PeeringSet, a.Rack, a.Reason = AdmitClient, prev.set, prev.rack, "planned"
			a.RouteReflectors = slices.Clone(s.sets[prev.set].rrs)
			a.planned = prev.planned
			return a
		}
	}
	// Counts with this node's new facts in place of its old ones.
	healthy := s.healthy + b2i(a.Healthy)
	zoneHealthy := s.zones[a.Zone].healthyOr0() + b2i(a.Healthy)
	eligible, awaited := map[string]int{}, map[string]int{}
	for z, zs := range s.zones {
		eligible[z], awaited[z] = zs.eligible, zs.awaited
	}
	eligible[a.Zone] += b2i(a.Eligible)
	awaited[a.Zone] += b2i(a.Awaited)
	if known {
		healthy -= b2i(prev.healthy)
		if prev.zone == a.Zone {
			zoneHealthy -= b2i(prev.healthy)
		}
		eligible[prev.zone] -= b2i(prev.eligible)
		awaited[prev.zone] -= b2i(prev.awaited)
	}
	// Racked topologies promote by rack (DualPlane: promoteRackRR; Hierarchical in the reconciler
	// only): a new rack route reflector changes its rack's peering set.
	racked := p.Topology == v1alpha1.Hierarchical || p.Topology == v1alpha1.DualPlane
	if a.Eligible && !racked && s.active < p.Max && !noPromotion {
		if want, ok := s.promotion(a.Zone, healthy, zoneHealthy, eligible, awaited); ok {
			a.Role = AdmitRouteReflector
			a.ClusterID = policy.ClusterIDString(s.clusterID(a.Zone))
			a.topLevel = s.crossPolicy
			a.Reason = fmt.Sprintf("zone %s below desired %d", ZoneName(a.Zone), want)
			return a
		}
	}
	switch p.Topology {
	case v1alpha1.SingleCluster:
		s.chooseZoneSet(&a)
	case v1alpha1.Hierarchical:
		s.chooseRackSet(&a, n)
	case v1alpha1.DualPlane:
		if a.Eligible && s.active < p.Max && !noPromotion && s.promoteRackRR(&a, ni) {
			return a
		}
		s.chooseZoneRack(&a)
	default:
		s.chooseMultiSet(&a)
	}
	return a
}

func (z *admitZone) healthyOr0() int {
	if z == nil {
		return 0
	}
	return z.healthy
}

// ZoneName is a zone's name for messages: `""` for nodes without a zone label.
func ZoneName(z string) string {
	if z == "" {
		return `""`
	}
	return z
}

// promotion reports whether a new eligible node of zone should become a route reflector, and the
// zone's desired count.
func (s *AdmitState) promotion(zone string, healthy, zoneHealthy int, eligible, awaited map[string]int) (int, bool) {
	p := s.Policy
	cur := 0
	if zs := s.zones[zone]; zs != nil {
		cur = zs.active
	}
	if p.Topology == v1alpha1.SingleCluster {
		want := 0
		if zoneHealthy > 0 {
			want = DesiredCount(p, zoneHealthy)
		}
		if zs := s.zones[zone]; zs != nil {
			want = max(want, zs.desired)
		}
		want = min(want, eligible[zone])
		return want, cur < want
	}
	target := max(groupTarget(p, DesiredCount(p, healthy)), s.desired)
	room := 0
	for z, e := range eligible {
		room += max(e, 0) + max(awaited[z], 0)
	}
	target = min(target, room, p.Max)
	if s.active >= target {
		return target, false
	}
	q := s.quotas(target, eligible, awaited)
	return q[zone], cur < q[zone]
}

// quotas spreads total over the zones as the planner does: zones differ by at most one where they
// have the room (eligible and awaited nodes), and zones that hold more route reflectors come first.
func (s *AdmitState) quotas(total int, eligible, awaited map[string]int) map[string]int {
	zones := make([]string, 0, len(eligible))
	current := make(map[string]int, len(eligible))
	for z := range eligible {
		zones = append(zones, z)
		if zs := s.zones[z]; zs != nil {
			current[z] = zs.active
		}
	}
	return spread(total, zones, current, eligible, awaited)
}

// clusterID picks the cluster ID of a new route reflector in zone.
func (s *AdmitState) clusterID(zone string) uint32 {
	p := s.Policy
	zs := s.zones[zone]
	if p.Topology == v1alpha1.SingleCluster {
		// The zone's ID, else the lowest one no zone and no draining route reflector holds.
		if zs != nil {
			if id, ok := mostUsed(zs.ids); ok {
				return id
			}
		}
		return s.freeID()
	}
	if p.ClusterIDMode == v1alpha1.PerRouteReflector {
		return s.freeID()
	}
	groups := 0
	for _, c := range s.ids {
		if c > 0 {
			groups++
		}
	}
	g := min(p.Groups, s.active+1)
	if groups < g {
		// A new group: a draining route reflector's group first (its replacement joins it).
		var drained []uint32
		for id, c := range s.draining {
			if c > 0 && s.ids[id] == 0 {
				drained = append(drained, id)
			}
		}
		if len(drained) > 0 {
			return slices.Min(drained)
		}
		return s.freeID()
	}
	// Equal group sizes: a group of this zone with room, else the smallest group.
	room := (s.active + 1 + g - 1) / g
	best, bestKey := uint32(0), [3]int{}
	first := true
	for id, c := range s.ids {
		if c <= 0 {
			continue
		}
		inZone := 0
		if zs != nil {
			inZone = zs.ids[id]
		}
		key := [3]int{b2i(c >= room), -inZone, c}
		if first || slices.Compare(key[:], bestKey[:]) < 0 || key == bestKey && id < best {
			best, bestKey, first = id, key, false
		}
	}
	return best
}

func mostUsed(ids map[uint32]int) (uint32, bool) {
	best, n := uint32(0), 0
	for id, c := range ids {
		if c > n || c == n && c > 0 && id < best {
			best, n = id, c
		}
	}
	return best, n > 0
}

// freeID is the lowest cluster ID from the policy's first one that no route reflector holds and no
// other policy's node carries.
func (s *AdmitState) freeID() uint32 {
	id := s.Policy.BaseClusterID
	for s.ids[id] > 0 || s.draining[id] > 0 || s.releasing[id] > 0 || s.reserved[id] {
		id++
	}
	return id
}

// validSet reports whether a peering set exists and all its route reflectors are active.
func (s *AdmitState) validSet(name string) bool {
	set := s.sets[name]
	if set == nil || len(set.rrs) == 0 {
		return false
	}
	for _, r := range set.rrs {
		if rr := s.rrs[r]; rr == nil || !rr.active {
			return false
		}
	}
	return true
}

func (s *AdmitState) activeRRs() []string {
	var out []string
	for name, rr := range s.rrs {
		if rr.active {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func (s *AdmitState) setClient(a *Admission, rrs []string) {
	if len(rrs) == 0 {
		return
	}
	slices.Sort(rrs)
	a.Role = AdmitClient
	a.RouteReflectors = rrs
	a.PeeringSet = peeringSetName(rrs)
	if a.Reason == "" {
		a.Reason = "client of " + strings.Join(rrs, ",")
	}
}

// chooseZoneSet (SingleCluster): every active route reflector of the zone, else of the zone with
// the most.
func (s *AdmitState) chooseZoneSet(a *Admission) {
	byZone := map[string][]string{}
	for _, name := range s.activeRRs() {
		z := s.rrs[name].zone
		byZone[z] = append(byZone[z], name)
	}
	rrs := byZone[a.Zone]
	if len(rrs) == 0 {
		for _, z := range slices.Sorted(maps.Keys(byZone)) {
			if len(byZone[z]) > len(rrs) {
				rrs = byZone[z]
			}
		}
	}
	s.setClient(a, slices.Clone(rrs))
}

// chooseRackSet (Hierarchical): the peering set of the node's rack.
func (s *AdmitState) chooseRackSet(a *Admission, n *Node) {
	p := s.Policy
	base := n.Labels[p.RackLabel]
	if base == "" {
		base = "unracked"
		if a.Zone != "" {
			base = a.Zone + "-unracked"
		}
	}
	rack := ""
	if rk := s.racks[base]; rk != nil {
		rack = base
	} else {
		// A split rack: its emptiest part.
		best := -1
		for name, rk := range s.racks {
			suffix, ok := strings.CutPrefix(name, base+"-")
			if _, err := strconv.Atoi(suffix); !ok || err != nil {
				continue
			}
			if best < 0 || rk.members < best || rk.members == best && name < rack {
				rack, best = name, rk.members
			}
		}
	}
	if rack == "" || !s.validSet(s.racks[rack].set) {
		return
	}
	a.Rack = rack
	set := s.racks[rack].set
	a.Role, a.PeeringSet, a.RouteReflectors = AdmitClient, set, slices.Clone(s.sets[set].rrs)
	a.Reason = "client of rack " + rack
}

// chooseZoneRack (DualPlane): the node's rack (roomyZoneRack) and its peering set, as a client. In
// a cluster planned as one rack, a node's set is its zone's (rackSetName), with the one rack's route
// reflectors; once the one rack is full, the node goes to its zone's first rack, where the
// reconciler's split keeps it, in the same set. A zone without racks, or whose racks are full (it
// must split), gets its route reflectors from promoteRackRR, or waits for the reconciler.
func (s *AdmitState) chooseZoneRack(a *Admission) {
	one := ZoneRackName("", 1)
	rack := s.knownRack(a.Node, a.Zone, "")
	ok := rack != ""
	if !ok {
		rack, ok = s.roomyZoneRack(a.Zone)
	}
	if !ok {
		if !s.oneRack || ZoneRackName(a.Zone, 1) == one {
			return
		}
		rack = ZoneRackName(a.Zone, 1)
	}
	var set string
	if s.oneRack {
		set = rackSetName(s.Policy.Name, a.Zone, one)
	} else if rk := s.racks[rack]; rk != nil {
		set = rk.set
	}
	rrs := s.sets[set]
	if !s.validSet(set) {
		// The first node of its zone in the one rack: the one rack's route reflectors.
		if rk := s.racks[one]; s.oneRack && rk != nil && s.validSet(rk.set) {
			rrs = s.sets[rk.set]
		} else {
			return
		}
	}
	a.Rack = rack
	a.Role, a.PeeringSet, a.RouteReflectors = AdmitClient, set, slices.Clone(rrs.rrs)
	a.Reason = "client of rack " + rack
}

// chooseMultiSet (MultiCluster): `redundancy` route reflectors of distinct cluster IDs, one in the
// client's zone and two zones in all where the route reflectors allow, least loaded first. An
// existing peering set (its BGPPeer exists already) is preferred when it follows the same rules.
func (s *AdmitState) chooseMultiSet(a *Admission) {
	act := s.activeRRs()
	if len(act) == 0 {
		return
	}
	distinct := 0
	for _, c := range s.ids {
		if c > 0 {
			distinct++
		}
	}
	r := clientRedundancy(s.Policy, len(act), distinct)
	zonesWithRR := 0
	for _, zs := range s.zones {
		if zs.active > 0 {
			zonesWithRR++
		}
	}
	capLoad := loadCap(s.clients+1, r, len(act))
	score := func(rrs []string) [5]int {
		zones := map[string]bool{}
		groups := map[uint32]bool{}
		maxLoad, sum := 0, 0
		for _, name := range rrs {
			rr := s.rrs[name]
			zones[rr.zone] = true
			groups[rr.id] = true
			maxLoad = max(maxLoad, rr.load)
			sum += rr.load
		}
		var k [5]int
		if zs := s.zones[a.Zone]; zs != nil && zs.active > 0 && !zones[a.Zone] {
			k[0] = 1
		}
		if zonesWithRR >= 2 && len(zones) < 2 {
			k[1] = 1
		}
		k[2] = min(r, distinct) - len(groups)
		k[3] = b2i(maxLoad >= capLoad)
		k[4] = sum
		return k
	}
	fresh := s.greedyMulti(a.Zone, act, r, zonesWithRR)
	best, bestScore := fresh, score(fresh)
	bestScore[4] += len(fresh) // a new set waits for its BGPPeer: prefer an existing one on a tie
	for _, name := range slices.Sorted(maps.Keys(s.sets)) {
		set := s.sets[name]
		if len(set.rrs) != r || !s.validSet(name) {
			continue
		}
		if k := score(set.rrs); slices.Compare(k[:], bestScore[:]) < 0 {
			best, bestScore = set.rrs, k
		}
	}
	s.setClient(a, slices.Clone(best))
}

// greedyMulti picks r route reflectors one at a time with the planner's own pickRR, over the
// active route reflectors (act, by name) and their loads.
func (s *AdmitState) greedyMulti(zone string, act []string, r, zonesWithRR int) []string {
	nodes := make([]int, len(act))
	zones := make([]string, len(act))
	ids := make([]uint32, len(act))
	loads := make([]int, len(act))
	for k, name := range act {
		rr := s.rrs[name]
		nodes[k], zones[k], ids[k], loads[k] = k, rr.zone, rr.id, rr.load
	}
	set := newRRSet(nodes, zones, ids, loads)
	var ch []int
	for len(ch) < r {
		k := pickRR(set, zone, ch, zonesWithRR)
		if k < 0 {
			break
		}
		ch = append(ch, k)
	}
	out := make([]string, len(ch))
	for i, k := range ch {
		out[i] = act[k]
	}
	return out
}
