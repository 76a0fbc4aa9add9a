package bgpmodel

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// maxMeshTransitionNodes bounds the nodes of a transition whose before or after state has Calico's
// node-to-node mesh on: its sessions are listed one by one.
const maxMeshTransitionNodes = 2000

// Transition is what applying a plan does to the BGP sessions of the cluster as it is, and what the
// nodes reach while it happens. A session is a pair of nodes that both configure the other; its
// rendered settings are, at each end, whether that end treats the other as a route reflector
// client and with which cluster ID (Calico's bird.cfg.template renders `rr client; rr cluster id`
// when the two ends' cluster IDs differ). BIRD restarts a protocol whose settings change on
// `birdc configure`, with a Cease: its routes go at once, graceful restart does not keep them.
type Transition struct {
	// Sessions of the state before and after.
	SessionsBefore int `json:"sessionsBefore"`
	SessionsAfter  int `json:"sessionsAfter"`
	// Added: sessions only the plan has; Removed: sessions only the cluster as it is has;
	// Restarted: sessions of both whose rendered settings change (they go down and come back).
	Added     int `json:"sessionsAdded"`
	Removed   int `json:"sessionsRemoved"`
	Restarted int `json:"sessionsRestarted"`
	// RestartsByNode: the nodes with restarted sessions and how many, most first (at most 20).
	RestartsByNode []NodeCount `json:"restartsByNode,omitempty"`
	// MissingBefore, MissingAfter: node pairs (receiver, origin; both up) without a route in the
	// states before and after. MissingBetween: the same in the state while the plan is applied in
	// one step (only the sessions both states have with the same settings are up).
	MissingBefore  int64 `json:"missingPairsBefore"`
	MissingBetween int64 `json:"missingPairsBetween"`
	MissingAfter   int64 `json:"missingPairsAfter"`
	// PairsAtRisk: pairs the one-step change loses for a moment that the end state has
	// (MissingBetween - MissingAfter, at least 0), and examples of them.
	PairsAtRisk int64       `json:"pairsAtRisk"`
	AtRisk      [][2]string `json:"atRisk,omitempty"`
	// KeptRolesAtRisk: the pairs at risk between two nodes that keep their role (a route
	// reflector with the same cluster ID, or a client, in both states); with Calico's BIRD
	// configuration every session of a node whose role changes restarts, so the others are the
	// ones a plan can spare.
	KeptRolesAtRisk int64 `json:"keptRolesAtRisk"`
	// Steps: the same change as make-before-break steps (add, change, remove), each with the pairs
	// missing while it is applied; only the steps that change something are listed.
	Steps []TransitionStep `json:"steps"`
	// PeakRoutes: the busiest node's routes in the fullest state the steps go through (the
	// sessions before plus the added ones), beside its routes before and after.
	RoutesBefore float64 `json:"routesBefore"`
	RoutesAfter  float64 `json:"routesAfter"`
	PeakRoutes   float64 `json:"peakRoutes"`
}

// NodeCount is a node and a count.
type NodeCount struct {
	Node  string `json:"node"`
	Count int    `json:"count"`
}

// TransitionStep is one step of a transition.
type TransitionStep struct {
	// Kind: add (sessions whose ends keep their cluster IDs come up, nothing goes down), change
	// (cluster IDs change: those sessions restart, added sessions touching the changed nodes come
	// up), remove (the sessions the plan no longer has go).
	Kind     string `json:"kind"`
	Sessions int    `json:"sessions"`
	// MissingPairs while the step is applied, beyond those the state after it still misses;
	// KeptRoles: those between two nodes that keep their role.
	MissingPairs int64 `json:"missingPairs"`
	KeptRoles    int64 `json:"keptRolesMissingPairs"`
}

// String is the one-line form the plan table prints.
func (tr *Transition) String() string {
	var steps []string
	for _, s := range tr.Steps {
		steps = append(steps, fmt.Sprintf("%s %d (%d pairs)", s.Kind, s.Sessions, s.MissingPairs))
	}
	return fmt.Sprintf("%d sessions added, %d removed, %d restarted; %d node pairs at risk in one step (%d between nodes that keep their role); steps: %s; busiest node's routes %.0f -> peak %.0f -> %.0f",
		tr.Added, tr.Removed, tr.Restarted, tr.PairsAtRisk, tr.KeptRolesAtRisk, strings.Join(steps, ", "), tr.RoutesBefore, tr.PeakRoutes, tr.RoutesAfter)
}

// sessionEnd is how one end renders a session: the cluster ID it reflects with, "" when it does not
// treat the peer as a route reflector client.
type sessionSettings struct{ a, b string }

func (t *Topology) settings(i, j int) sessionSettings {
	var s sessionSettings
	if t.RRClient(i, j) {
		s.a = t.Nodes[i].ClusterID
	}
	if t.RRClient(j, i) {
		s.b = t.Nodes[j].ClusterID
	}
	return s
}

// sessionsByName lists a topology's sessions (the mesh's too) by node names, name order inside.
func (t *Topology) sessionsByName() (map[[2]string]sessionSettings, error) {
	out := make(map[[2]string]sessionSettings, len(t.Sessions))
	add := func(i, j int) {
		a, b := t.Nodes[i].Name, t.Nodes[j].Name
		if b < a {
			a, b, i, j = b, a, j, i
		}
		out[[2]string{a, b}] = t.settings(i, j)
	}
	for _, s := range t.Sessions {
		add(int(s[0]), int(s[1]))
	}
	if t.Mesh {
		if len(t.Nodes) > maxMeshTransitionNodes {
			return nil, fmt.Errorf("the node-to-node mesh of %d nodes: transitions are modelled up to %d", len(t.Nodes), maxMeshTransitionNodes)
		}
		for i := range t.Nodes {
			for j := i + 1; j < len(t.Nodes); j++ {
				if !t.IsRR(i) && !t.IsRR(j) {
					add(i, j)
				}
			}
		}
	}
	return out, nil
}

// withSessions is a topology of nodes with exactly the given sessions (names not in nodes are
// skipped), no mesh.
func withSessions(nodes []Node, sessions [][2]string) *Topology {
	t := &Topology{Nodes: nodes, adj: make([][]int32, len(nodes)), index: make(map[string]int, len(nodes))}
	for i, n := range nodes {
		t.index[n.Name] = i
	}
	for _, s := range sessions {
		i, ok1 := t.index[s[0]]
		j, ok2 := t.index[s[1]]
		if !ok1 || !ok2 || i == j {
			continue
		}
		a, b := int32(min(i, j)), int32(max(i, j))
		t.Sessions = append(t.Sessions, [2]int32{a, b})
		t.adj[a] = append(t.adj[a], b)
		t.adj[b] = append(t.adj[b], a)
	}
	slices.SortFunc(t.Sessions, func(x, y [2]int32) int { return cmp.Or(cmp.Compare(x[0], y[0]), cmp.Compare(x[1], y[1])) })
	for i := range t.adj {
		slices.Sort(t.adj[i])
	}
	return t
}

// NewTransition compares the cluster as it is (before) with the plan about to be applied (after).
// down names the nodes already down (a dead or NotReady route reflector): they are down in every
// state. Nodes only one state has are left out of the other's figures.
func NewTransition(before, after *Topology, down map[string]bool) (*Transition, error) {
	sb, err := before.sessionsByName()
	if err != nil {
		return nil, err
	}
	sa, err := after.sessionsByName()
	if err != nil {
		return nil, err
	}
	tr := &Transition{SessionsBefore: len(sb), SessionsAfter: len(sa)}
	idBefore := map[string]string{}
	for _, n := range before.Nodes {
		idBefore[n.Name] = n.ClusterID
	}
	keepsID := func(n string) bool {
		i := after.Index(n)
		id, ok := idBefore[n]
		return i >= 0 && ok && after.Nodes[i].ClusterID == id
	}
	restarts := map[string]int{}
	var stable, addedFirst [][2]string
	for k, s := range sa {
		was, ok := sb[k]
		switch {
		case !ok:
			tr.Added++
			if keepsID(k[0]) && keepsID(k[1]) {
				addedFirst = append(addedFirst, k)
			}
		case was != s:
			tr.Restarted++
			restarts[k[0]]++
			restarts[k[1]]++
		default:
			stable = append(stable, k)
		}
	}
	var removed [][2]string
	for k := range sb {
		if _, ok := sa[k]; !ok {
			tr.Removed++
			removed = append(removed, k)
		}
	}
	for n, c := range restarts {
		tr.RestartsByNode = append(tr.RestartsByNode, NodeCount{n, c})
	}
	slices.SortFunc(tr.RestartsByNode, func(x, y NodeCount) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), strings.Compare(x.Node, y.Node))
	})
	tr.RestartsByNode = tr.RestartsByNode[:min(20, len(tr.RestartsByNode))]

	// The states: before and after as they are; in between, the nodes as the plan leaves them with
	// only the stable sessions up; the steps' in-between states likewise.
	eval := func(t *Topology) (*Model, error) {
		mask := make([]bool, len(t.Nodes))
		for i, n := range t.Nodes {
			mask[i] = down[n.Name]
		}
		return t.Propagate(mask)
	}
	mb, err := eval(before)
	if err != nil {
		return nil, fmt.Errorf("state before: %w", err)
	}
	ma, err := eval(after)
	if err != nil {
		return nil, fmt.Errorf("state after: %w", err)
	}
	tr.MissingBefore, tr.MissingAfter = mb.Summary.MissingPairs, ma.Summary.MissingPairs
	tr.RoutesBefore, tr.RoutesAfter = mb.Summary.MaxRoutesPerNode, ma.Summary.MaxRoutesPerNode
	mid, err := eval(withSessions(after.Nodes, stable))
	if err != nil {
		return nil, fmt.Errorf("state between: %w", err)
	}
	tr.MissingBetween = mid.Summary.MissingPairs
	tr.PairsAtRisk = max(0, tr.MissingBetween-tr.MissingAfter)
	if tr.PairsAtRisk > 0 {
		tr.AtRisk, tr.KeptRolesAtRisk = atRisk(mid, ma, 10, keepsID)
	}

	// Steps. add: the before state with the sessions whose ends keep their IDs added (nothing goes
	// down: the pairs the before state misses). change: the nodes as after, with the sessions not
	// restarted up (before's unchanged ones, the first additions, and the removals still in place).
	// remove: the after state.
	full := slices.Concat(keys(sb), addedFirst)
	mFull, err := eval(withSessions(before.Nodes, full))
	if err != nil {
		return nil, fmt.Errorf("state with the added sessions: %w", err)
	}
	tr.PeakRoutes = max(tr.RoutesBefore, mFull.Summary.MaxRoutesPerNode, tr.RoutesAfter)
	if len(addedFirst) > 0 {
		tr.Steps = append(tr.Steps, TransitionStep{Kind: "add", Sessions: len(addedFirst)}) // nothing goes down
	}
	changed := tr.Restarted + tr.Added - len(addedFirst)
	if changed > 0 {
		// Sessions to be removed stay up through the change when their ends keep their IDs.
		up := slices.Concat(stable, addedFirst)
		for _, k := range removed {
			if keepsID(k[0]) && keepsID(k[1]) {
				up = append(up, k)
			}
		}
		mChange, err := eval(withSessions(after.Nodes, up))
		if err != nil {
			return nil, fmt.Errorf("state of the change step: %w", err)
		}
		step := TransitionStep{Kind: "change", Sessions: changed, MissingPairs: max(0, mChange.Summary.MissingPairs-tr.MissingAfter)}
		if step.MissingPairs > 0 {
			_, step.KeptRoles = atRisk(mChange, ma, 0, keepsID)
		}
		tr.Steps = append(tr.Steps, step)
	}
	if len(removed) > 0 {
		tr.Steps = append(tr.Steps, TransitionStep{Kind: "remove", Sessions: len(removed)})
	}
	return tr, nil
}

// ClusterTransition is the transition from the cluster as it is (its nodes' labels and annotations,
// its BGPPeers) to a plan of those nodes, the nodes that are not Ready down in every state: what
// `plan --bgppeers` reports and the reconciler's transition step says.
func ClusterTransition(in extender.Input, res *extender.Result, nodes []*extender.Node, peers []apiv3.BGPPeer) (*Transition, error) {
	zone := corev1.LabelTopologyZone
	if in.Policy != nil {
		zone = in.Policy.ZoneLabel
	}
	before, err := FromCluster(nodes, peers, zone, Options{})
	if err != nil {
		return nil, fmt.Errorf("the cluster as it is: %w", err)
	}
	after, err := FromPlan(in, res, Options{})
	if err != nil {
		return nil, fmt.Errorf("the plan: %w", err)
	}
	down := map[string]bool{}
	for _, n := range nodes {
		if !extender.IsReady(n) {
			down[n.Name] = true
		}
	}
	return NewTransition(before, after, down)
}

func keys(m map[[2]string]sessionSettings) [][2]string {
	out := make([][2]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, func(x, y [2]string) int { return cmp.Or(strings.Compare(x[0], y[0]), strings.Compare(x[1], y[1])) })
	return out
}

// atRisk lists up to limit pairs (receiver, origin) mid misses that after has, and counts those
// between two nodes that keep their role. mid has after's nodes in after's order. It looks at each
// receiver's counts and checks only the nodes that do not keep their role one by one, so it costs
// the nodes times the changed nodes, not the pairs (65,000 nodes: every node misses a promoted
// node's block in the in-between state).
func atRisk(mid, after *Model, limit int, kept func(string) bool) ([][2]string, int64) {
	var changed []int
	for i, n := range after.t.Nodes {
		if !kept(n.Name) && !isDown(after.down, i) {
			changed = append(changed, i)
		}
	}
	var out [][2]string
	var keptRoles int64
	for n := range after.t.Nodes {
		if isDown(after.down, n) {
			continue
		}
		d := mid.Nodes[n].Missing - after.Nodes[n].Missing
		if d <= 0 {
			continue
		}
		name := after.t.Nodes[n].Name
		if len(out) < limit {
			for o := range after.t.Nodes {
				if len(out) == limit {
					break
				}
				if o != n && !isDown(after.down, o) && !mid.Has(n, o) && after.Has(n, o) {
					out = append(out, [2]string{name, after.t.Nodes[o].Name})
				}
			}
		}
		if !kept(name) {
			continue
		}
		for _, o := range changed {
			if o != n && !mid.Has(n, o) && after.Has(n, o) {
				d--
			}
		}
		keptRoles += int64(max(d, 0))
	}
	return out, keptRoles
}
