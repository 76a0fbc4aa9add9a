package extender

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// Result is a plan: the route reflectors, each client's route reflectors, the BGPPeers and the
// labels and annotations every managed node should carry.
type Result struct {
	Policy          string           `json:"policy"`
	Summary         Summary          `json:"summary"`
	RouteReflectors []RouteReflector `json:"routeReflectors"`
	Clients         []Client         `json:"clients"`
	BGPPeers        []BGPPeer        `json:"bgpPeers"`
	Nodes           []NodeState      `json:"nodes"`
	Zones           []ZoneCount      `json:"zones"`
	Ineligible      []Ineligible     `json:"ineligible,omitempty"`
	// ScoredDown are the managed nodes a score plugin ranked down (ScoreExplainer), by name.
	ScoredDown []ScoredDown `json:"scoredDown,omitempty"`
	Conditions []Condition  `json:"conditions"`
	// Recommendations is the stabilization history to pass to the next plan.
	Recommendations []Recommendation `json:"-"`
	// RecheckAt is when a decision of this plan changes by the clock alone (a route reflector's
	// NotReady grace period ends); zero when none does.
	RecheckAt time.Time `json:"-"`
	// Drills are the failure drills of this plan when the input had a DrillFunc (nil otherwise);
	// DrillsErr says why they could not run.
	Drills    []Drill `json:"-"`
	DrillsErr error   `json:"-"`
	// HandedOver are the route reflectors this plan hands over because the stable plan failed its
	// drills and this one fails fewer (see safest), sorted; nil otherwise.
	HandedOver []string `json:"-"`

	// facts[i] is what the planner read of node Nodes[i], for NewAdmitState.
	facts []nodeFacts
	now   time.Time // the input's Now
	// counts are the counts the plan stabilized, by key (Time unset); stable is the first time
	// after now at which the clock alone may change the plan (zero: never; now: at any later
	// time). See At.
	counts []Recommendation
	stable time.Time
}

// nodeFacts is what the admission state needs of a node besides its planned state.
type nodeFacts struct {
	read              bool // false for a node the input lacks
	zone              string
	healthy, eligible bool
	awaited           bool
	hasID             bool
	id                uint32 // the cluster ID the node carries now, when hasID
	families          Families
}

func factsOf(n *NodeInfo) nodeFacts {
	return nodeFacts{read: true, zone: n.Zone, healthy: n.Healthy(), eligible: n.Eligible, awaited: n.Awaited, hasID: n.HasClusterID, id: n.ClusterID,
		families: n.Families}
}

// Summary holds the plan's figures (the design's statistics table).
type Summary struct {
	Nodes                           int    `json:"nodes"`
	HealthyNodes                    int    `json:"healthyNodes"`
	EligibleNodes                   int    `json:"eligibleNodes"`
	DesiredRouteReflectors          int    `json:"desiredRouteReflectors"`
	RouteReflectors                 int    `json:"routeReflectors"`
	DrainingRouteReflectors         int    `json:"drainingRouteReflectors"`
	Topology                        string `json:"topology"`
	ClusterIDs                      int    `json:"clusterIDs"`
	Redundancy                      int    `json:"redundancy"`
	MaxClientsPerRouteReflector     int    `json:"maxClientsPerRouteReflector"`
	MaxRouteReflectorsPerRR         int    `json:"maxRouteReflectorsPerRouteReflector"`
	MaxConnectionsPerRouteReflector int    `json:"maxConnectionsPerRouteReflector"`
	BGPPeers                        int    `json:"bgpPeers"`
	Degraded                        bool   `json:"degraded"`
}

// RouteReflector is one route reflector of the plan.
type RouteReflector struct {
	Node      string `json:"node"`
	Zone      string `json:"zone"`
	ClusterID string `json:"clusterID"`
	Rack      string `json:"rack,omitempty"`
	Spine     bool   `json:"spine,omitempty"`
	Plane     int    `json:"plane,omitempty"`
	// StandbyFor names the NotReady spine member this spine route reflector stands in for.
	StandbyFor  string `json:"standbyFor,omitempty"`
	Draining    bool   `json:"draining,omitempty"`
	Clients     int    `json:"clients"`
	Connections int    `json:"connections"`
}

// Client is a node that is not a route reflector, with the route reflectors it peers with.
type Client struct {
	Node            string   `json:"node"`
	Zone            string   `json:"zone"`
	RouteReflectors []string `json:"routeReflectors"`
	PeeringSet      string   `json:"peeringSet,omitempty"`
	Rack            string   `json:"rack,omitempty"`
}

// NodeState is what the plan wants on a node: the labels and annotations this product owns, as it
// would set them. An owned key that is absent here must be absent on the node. The maps are read
// only: clients with the same owned state share them.
type NodeState struct {
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// ZoneCount holds the counts of one zone.
type ZoneCount struct {
	Zone            string   `json:"zone"`
	Nodes           int      `json:"nodes"`
	Desired         int      `json:"desiredRouteReflectors"`
	RouteReflectors int      `json:"routeReflectors"`
	ClusterIDs      []string `json:"clusterIDs,omitempty"`
}

// Ineligible is a managed node that may not be a route reflector, and why.
type Ineligible struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
	// Rule is the rule of the filter that rejected the node (FilterPlugin.Rule), the name the
	// node validator's denials and metrics use.
	Rule string `json:"rule,omitempty"`
}

// ScoredDown is a node a score plugin ranked after the others, and why.
type ScoredDown struct {
	Node   string      `json:"node"`
	Score  string      `json:"score"`
	Reason ScoreReason `json:"reason"`
	// Detail names what on the node gave the reason ("label karpenter.sh/capacity-type=spot").
	Detail string `json:"detail"`
	// RouteReflector: the node is a route reflector of the plan all the same.
	RouteReflector bool `json:"routeReflector,omitempty"`
}

// Condition is a Degraded condition of the plan.
type Condition struct {
	Type    string `json:"type"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// explain appends why the plan's score plugins ranked n down (ScoreExplainer), if they did.
func (pl *planner) explain(out []ScoredDown, n *NodeInfo, rr bool) []ScoredDown {
	for _, sp := range pl.in.Scores {
		if e, ok := sp.(ScoreExplainer); ok {
			if why, detail := e.Explain(pl.p, n); why != "" {
				out = append(out, ScoredDown{Node: n.Name, Score: sp.Name(), Reason: why, Detail: detail, RouteReflector: rr})
			}
		}
	}
	return out
}

func (pl *planner) result() *Result {
	p := pl.p
	res := &Result{Policy: p.Name, Recommendations: pl.recs, now: pl.in.Now, RecheckAt: pl.recheck}
	for _, n := range pl.nodes {
		if n.WithinNotReadyGrace(p) {
			if end := n.NotReadySince.Add(p.NotReadyGrace); res.RecheckAt.IsZero() || end.Before(res.RecheckAt) {
				res.RecheckAt = end
			}
		}
	}
	pl.markTopLevel()
	s := &res.Summary
	s.Nodes, s.HealthyNodes, s.EligibleNodes = len(pl.nodes), pl.healthy, len(pl.ranked)
	s.DesiredRouteReflectors = pl.desired
	s.Topology = string(p.Topology)

	// Sessions: each node with its route reflectors, plus the mesh of route reflectors.
	clients := make([]int, len(pl.nodes)) // per route reflector node: clients
	rrPeers := make([]int, len(pl.nodes))
	var rrs []int
	for i := range pl.dec {
		if pl.dec[i].role != roleClient {
			rrs = append(rrs, i)
		}
	}
	meshed := !pl.racked()
	var edges map[[2]int]bool // route reflector sessions when they do not all mesh
	if !meshed {
		edges = map[[2]int]bool{}
	}
	for i, d := range pl.dec {
		for _, list := range [2][]int{d.peers, d.uplinks} {
			for _, j := range list {
				switch {
				case j == i:
				case d.role == roleClient:
					clients[j]++
				case !meshed:
					edges[[2]int{min(i, j), max(i, j)}] = true
				}
			}
		}
	}
	if meshed {
		for _, i := range rrs {
			rrPeers[i] = len(rrs) - 1
		}
	}
	for e := range edges {
		rrPeers[e[0]]++
		rrPeers[e[1]]++
	}

	ids := map[uint32]bool{}
	zone := map[string]*ZoneCount{}
	for _, z := range pl.zones {
		zone[z] = &ZoneCount{Zone: z, Desired: pl.zoneWant[z]}
	}
	for _, n := range pl.nodes {
		zone[n.Zone].Nodes++
	}
	sets, uplinks := map[string][]int{}, map[string][]int{}
	memo := peeringSets{}
	shared := clientStates{}
	res.Nodes = make([]NodeState, 0, len(pl.nodes))
	res.Clients = make([]Client, 0, len(pl.nodes))
	res.facts = make([]nodeFacts, 0, len(pl.nodes))
	for i, n := range pl.nodes {
		d := &pl.dec[i]
		if d.role == roleClient {
			res.Clients = append(res.Clients, pl.clientResult(n, d, memo, sets))
			st := shared.get(pl, n, d, memo)
			st.Name = n.Name
			res.Nodes = append(res.Nodes, st)
			res.facts = append(res.facts, factsOf(n))
			if !n.Eligible {
				res.Ineligible = append(res.Ineligible, Ineligible{Node: n.Name, Reason: n.Reason, Rule: n.Rule})
			}
			continue
		}
		st := NodeState{Name: n.Name, Labels: make(map[string]string, 4), Annotations: make(map[string]string, 4)}
		id := policy.ClusterIDString(d.id)
		rr := RouteReflector{Node: n.Name, Zone: n.Zone, ClusterID: id, Spine: d.spine, Draining: d.role == roleDraining,
			Clients: clients[i], Connections: clients[i] + rrPeers[i], Plane: d.plane, StandbyFor: d.standbyFor}
		if pl.racked() {
			rr.Rack = d.rack
		}
		res.RouteReflectors = append(res.RouteReflectors, rr)
		st.Labels[p.RRLabelKey] = p.RRLabelValue
		st.Labels[LabelRouteReflectorID] = RouteReflectorID(n.Name)
		if pl.topLevel[i] {
			st.Labels[LabelTopLevel] = ""
		}
		st.Annotations[AnnotationClusterID] = id
		protect(p, n.Node.Annotations, st.Annotations)
		if d.role == roleDraining {
			st.Annotations[AnnotationDrainingSince] = d.since.UTC().Format(time.RFC3339)
			if reason := n.drainingReason(p); reason != "" {
				st.Annotations[AnnotationDrainingReason] = reason
				if n.Plane > 0 {
					st.Annotations[AnnotationPlane] = strconv.Itoa(n.Plane) // taken back when Ready again
				}
			}
			s.DrainingRouteReflectors++
		} else {
			s.RouteReflectors++
			ids[d.id] = true
			zc := zone[n.Zone]
			zc.RouteReflectors++
			if !slices.Contains(zc.ClusterIDs, id) {
				zc.ClusterIDs = append(zc.ClusterIDs, id)
			}
			s.MaxClientsPerRouteReflector = max(s.MaxClientsPerRouteReflector, clients[i])
			s.MaxRouteReflectorsPerRR = max(s.MaxRouteReflectorsPerRR, rrPeers[i])
			s.MaxConnectionsPerRouteReflector = max(s.MaxConnectionsPerRouteReflector, clients[i]+rrPeers[i])
		}
		if pl.racked() {
			st.Annotations[AnnotationRack] = d.rack
		}
		if d.plane > 0 && d.role == roleActive {
			st.Annotations[AnnotationPlane] = strconv.Itoa(d.plane)
			if d.standbyFor != "" {
				st.Annotations[AnnotationStandbyFor] = d.standbyFor
			}
		}
		if len(d.peers) > 0 {
			ps := memo.of(pl, n, d)
			sets[ps.name] = d.peers
			st.Labels[LabelPeeringSet] = ps.name
		}
		if len(d.uplinks) > 0 {
			ps := memo.get(pl, d.uplinks)
			uplinks[ps.name] = d.uplinks
			st.Labels[LabelUplinkSet] = ps.name
		}
		res.Nodes = append(res.Nodes, st)
		res.facts = append(res.facts, factsOf(n))
		if !n.Eligible {
			res.Ineligible = append(res.Ineligible, Ineligible{Node: n.Name, Reason: n.Reason, Rule: n.Rule})
		}
	}
	for i, n := range pl.nodes {
		res.ScoredDown = pl.explain(res.ScoredDown, n, pl.dec[i].role != roleClient)
	}
	s.ClusterIDs = len(ids)
	s.Redundancy = p.Redundancy
	if len(res.Clients) > 0 {
		s.Redundancy = len(res.Clients[0].RouteReflectors)
		for _, c := range res.Clients {
			s.Redundancy = min(s.Redundancy, len(c.RouteReflectors))
		}
	}
	for _, z := range pl.zones {
		res.Zones = append(res.Zones, *zone[z])
	}
	res.BGPPeers = pl.bgpPeers(sets, uplinks, meshed && len(rrs) > 0)
	s.BGPPeers = len(res.BGPPeers)
	if c := pl.clientsMissingFamily(); c != nil {
		pl.degraded = append(pl.degraded, *c)
	}
	for _, c := range pl.degraded {
		res.Conditions = append(res.Conditions, Condition{Type: "Degraded", Reason: c.reason, Message: c.message})
	}
	if p.MaxClientsPerRR > 0 && s.MaxClientsPerRouteReflector > p.MaxClientsPerRR && len(res.Conditions) == 0 {
		res.Conditions = append(res.Conditions, Condition{Type: "Degraded", Reason: ReasonMaxClients,
			Message: fmt.Sprintf("a route reflector has %d clients; maxClientsPerRouteReflector is %d", s.MaxClientsPerRouteReflector, p.MaxClientsPerRR)})
	}
	if s.RouteReflectors < p.Min && len(res.Conditions) == 0 {
		res.Conditions = append(res.Conditions, Condition{Type: "Degraded", Reason: ReasonNotEnoughEligibleNodes,
			Message: fmt.Sprintf("%d route reflectors from %d eligible of %d nodes; policy requires at least %d", s.RouteReflectors, s.EligibleNodes, s.Nodes, p.Min)})
	}
	if s.RouteReflectors > 0 && s.RouteReflectors < 2 && len(res.Clients) > 0 && len(res.Conditions) == 0 {
		res.Conditions = append(res.Conditions, Condition{Type: "Degraded", Reason: ReasonQuorumAtRisk, Message: "a single route reflector: its failure cuts every client off"})
	}
	s.Degraded = len(res.Conditions) > 0
	if res.RouteReflectors == nil {
		res.RouteReflectors = []RouteReflector{}
	}
	if res.Clients == nil {
		res.Clients = []Client{}
	}
	return res
}

// peeringSet is a set of route reflectors many nodes share: computed once per distinct set.
type peeringSet struct {
	name   string
	peers  []int
	names  []string // shared by every client of the set: read only
	joined string
}

// peeringSets memoizes the sets of a plan: by their route reflectors, and DualPlane's by rack.
type peeringSets map[string]*peeringSet

// of returns the peering set of a decision. A DualPlane rack's nodes (its clients and its route
// reflectors) peer with the rack's route reflectors, and their set is named after the rack
// (RackSetName) rather than after its route reflectors: a new route reflector in the rack changes
// the set's BGPPeer, not the labels of the rack's nodes. A node of the rack whose peers differ from
// the rack's set (none in the plans DualPlane makes today) gets a set named after its route
// reflectors, as every other topology's nodes.
func (m peeringSets) of(pl *planner, n *NodeInfo, d *decision) *peeringSet {
	if pl.p.Topology != v1alpha1.DualPlane || d.rack == "" || d.spine || d.role == roleDraining {
		return m.get(pl, d.peers)
	}
	name := rackSetName(pl.p.Name, n.Zone, d.rack)
	key := "rack\x00" + name
	if ps, ok := m[key]; ok {
		if slices.Equal(ps.peers, d.peers) {
			return ps
		}
		return m.get(pl, d.peers)
	}
	ps := *m.get(pl, d.peers)
	ps.name = name
	m[key] = &ps
	return &ps
}

func (m peeringSets) get(pl *planner, peers []int) *peeringSet {
	key := make([]byte, 0, 4*len(peers))
	for _, j := range peers {
		key = append(key, byte(j>>24), byte(j>>16), byte(j>>8), byte(j))
	}
	if ps, ok := m[string(key)]; ok {
		return ps
	}
	names := make([]string, len(peers))
	for k, j := range peers {
		names[k] = pl.nodes[j].Name
	}
	ps := &peeringSet{name: peeringSetName(names), peers: peers, names: names, joined: strings.Join(names, ",")}
	m[string(key)] = ps
	return ps
}

// clientResult is a client's entry in the plan.
func (pl *planner) clientResult(n *NodeInfo, d *decision, memo peeringSets, sets map[string][]int) Client {
	c := Client{Node: n.Name, Zone: n.Zone, RouteReflectors: []string{}}
	if len(d.peers) > 0 {
		ps := memo.of(pl, n, d)
		sets[ps.name] = d.peers
		c.RouteReflectors, c.PeeringSet = ps.names, ps.name
	}
	if pl.racked() {
		c.Rack = d.rack
	}
	return c
}

// clientStates shares one set of label and annotation maps among the clients whose owned state is
// the same (same peering set, same rack): thousands of clients, a handful of distinct states.
type clientStates map[[2]string]NodeState

func (m clientStates) get(pl *planner, n *NodeInfo, d *decision, memo peeringSets) NodeState {
	var key [2]string
	var ps *peeringSet
	if len(d.peers) > 0 {
		ps = memo.of(pl, n, d)
		key[0] = ps.name
	}
	if pl.racked() {
		key[1] = d.rack
	}
	if st, ok := m[key]; ok {
		return st
	}
	var set, joined, rack string
	if ps != nil {
		set, joined = ps.name, ps.joined
	}
	if pl.racked() {
		rack = d.rack
	}
	st := clientState(set, joined, rack)
	m[key] = st
	return st
}

// clientState is the owned state of a client: its peering set and route reflectors (when it has
// any) and its rack (when the topology has racks). The planner and the admission path share it.
func clientState(set, joinedRRs, rack string) NodeState {
	st := NodeState{Labels: make(map[string]string, 1), Annotations: make(map[string]string, 2)}
	if set != "" {
		st.Labels[LabelPeeringSet] = set
		st.Annotations[AnnotationRouteReflectors] = joinedRRs
	}
	if rack != "" {
		st.Annotations[AnnotationRack] = rack
	}
	return st
}

// peeringSetName is a stable name for a set of route reflectors: a hash of their sorted names.
func peeringSetName(sortedNames []string) string {
	return shortHash(strings.Join(sortedNames, ","))
}

// RackSetName names the peering set of a DualPlane rack of a policy: "rack-" and a hash of both
// (a set's name is a label value and, with BGPPeerPrefix, the name of its BGPPeer, unique across
// policies).
func RackSetName(policyName, rack string) string {
	return "rack-" + shortHash(policyName+"/"+rack)
}

func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:5])
}

// racked reports whether the topology puts nodes in racks (and route reflectors do not all mesh).
// markTopLevel picks, when other policies or nodes outside every policy exist, the route reflectors
// that peer with them: the
// active spine members, or every active route reflector when the plan has no spine.
func (pl *planner) markTopLevel() {
	if !pl.in.CrossPolicy && pl.in.OutsideSelector == "" {
		return
	}
	hasSpine := false
	for i := range pl.dec {
		hasSpine = hasSpine || pl.dec[i].role == roleActive && pl.dec[i].spine
	}
	pl.topLevel = map[int]bool{}
	for i := range pl.dec {
		if pl.dec[i].role == roleActive && (pl.dec[i].spine || !hasSpine) {
			pl.topLevel[i] = true
		}
	}
}

func (pl *planner) racked() bool {
	return pl.p.Topology == v1alpha1.Hierarchical || pl.p.Topology == v1alpha1.DualPlane
}

// Degraded returns the plan's first Degraded condition, or nil.
func (r *Result) Degraded() *Condition {
	if len(r.Conditions) == 0 {
		return nil
	}
	return &r.Conditions[0]
}

func sortedKeys[M ~map[K]V, K cmp.Ordered, V any](m M) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Health returns the healthy nodes the plan counted, in all and by zone (every zone of the plan's
// nodes, 0 included).
func (r *Result) Health() HealthCounts {
	h := HealthCounts{ByZone: map[string]int{}}
	for _, f := range r.facts {
		h.ByZone[f.zone] += b2i(f.healthy)
		h.Total += b2i(f.healthy)
	}
	return h
}
