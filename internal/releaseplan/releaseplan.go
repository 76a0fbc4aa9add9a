// Package releaseplan decides a deleted policy's release through one route reflector, the keeper,
// with the graph model (internal/bgpmodel): which keeper keeps every node within Bound times its
// steady state (the larger of what it holds in the layout before the release and after it, the
// mesh or the layout kept), and which route reflector may lose its role next without losing a
// pair. It reads nothing and writes nothing: the reconciler's release steps give it the cluster
// and carry out its answers (internal/reconciler, release.go and cleanup.go).
package releaseplan

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

const (
	// Bound is how many times its steady state a node may hold during a release.
	Bound = 2.0
	// keeperCandidates bounds the route reflectors tried as the keeper.
	keeperCandidates = 4
	// NoKeeper is a release without a release BGPPeer of its own: every route reflector goes one
	// at a time, each when the graph model finds every pair without it (another policy's keeper
	// being released may peer with every node already).
	NoKeeper = "-"
)

// RestoresMesh says whether deleting the policy may turn the node-to-node mesh back on, with
// clusterNodes nodes in the cluster, and why not.
func RestoresMesh(p *policy.Resolved, clusterNodes int) (bool, string) {
	switch p.ReleaseMesh {
	case v1alpha1.ReleaseMeshRestore:
		return true, ""
	case v1alpha1.ReleaseMeshKeep:
		return false, "spec.release.nodeToNodeMesh is Keep"
	}
	if clusterNodes > p.MaxMeshNodes {
		return false, fmt.Sprintf("the cluster has %d nodes, more than spec.release.maxMeshNodes (%d): a node-to-node mesh there would hold %d sessions per node",
			clusterNodes, p.MaxMeshNodes, clusterNodes-1)
	}
	return true, ""
}

// Sim is the cluster as the graph model sees it during a policy's release.
type Sim struct {
	p      *policy.Resolved
	name   string
	nodes  []*extender.Node // by name
	peers  []apiv3.BGPPeer  // every BGPPeer but the policy's release BGPPeer
	bridge string           // the release BGPPeer's name
}

// New is the cluster of nodes and BGPPeers (every one of the cluster's) for the release of policy
// p named name.
func New(p *policy.Resolved, name string, nodes []*extender.Node, peers []*apiv3.BGPPeer) *Sim {
	s := &Sim{p: p, name: name, nodes: slices.Clone(nodes), bridge: extender.ReleaseBGPPeer(p, "").Name}
	for _, b := range peers {
		if b.Name != s.bridge {
			s.peers = append(s.peers, *b)
		}
	}
	slices.SortFunc(s.nodes, func(a, b *extender.Node) int { return strings.Compare(a.Name, b.Name) })
	return s
}

// Nodes are the cluster's nodes, by name.
func (s *Sim) Nodes() []*extender.Node { return s.nodes }

// Node is the node of that name (nil: none).
func (s *Sim) Node(name string) *extender.Node {
	i, ok := slices.BinarySearchFunc(s.nodes, name, func(n *extender.Node, name string) int { return strings.Compare(n.Name, name) })
	if !ok {
		return nil
	}
	return s.nodes[i]
}

// PolicyRRs are the policy's nodes that carry a cluster ID, by name.
func (s *Sim) PolicyRRs() []string {
	var out []string
	for _, n := range s.nodes {
		if s.p.NodeSelector.Matches(labels.Set(n.Labels)) {
			if _, ok := policy.ParseClusterID(n.Annotations[extender.AnnotationClusterID]); ok {
				out = append(out, n.Name)
			}
		}
	}
	return out
}

// Model propagates the cluster with the released nodes (or every node of the policy when all)
// stripped of the policy's labels and annotations, the release BGPPeer to keeper ("" none), the
// policy's other BGPPeers unless dropPeers, and the mesh on or off; with the node down gone (none
// when not given): its sessions down, its block not expected.
func (s *Sim) Model(released map[string]bool, all bool, keeper string, dropPeers, mesh bool, down ...string) (*bgpmodel.Model, error) {
	nodes := make([]*extender.Node, len(s.nodes))
	for i, n := range s.nodes {
		if (all || released[n.Name]) && s.p.NodeSelector.Matches(labels.Set(n.Labels)) {
			c := n.DeepCopy()
			for _, k := range extender.OwnedLabelKeys(s.p.RRLabelKey) {
				delete(c.Labels, k)
			}
			for _, k := range extender.OwnedAnnotationKeys() {
				delete(c.Annotations, k)
			}
			n = c
		}
		nodes[i] = n
	}
	var peers []apiv3.BGPPeer
	for _, b := range s.peers {
		if dropPeers && b.Labels[extender.LabelManagedBy] == extender.ManagedByValue && b.Labels[extender.LabelPolicy] == s.name {
			continue
		}
		peers = append(peers, b)
	}
	if keeper != "" && keeper != NoKeeper {
		b := extender.ReleaseBGPPeer(s.p, keeper)
		peers = append(peers, apiv3.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: b.Name, Labels: b.Labels}, Spec: b.Spec})
	}
	topo, err := bgpmodel.FromCluster(nodes, peers, s.p.ZoneLabel, bgpmodel.Options{NodeToNodeMesh: mesh})
	if err != nil {
		return nil, fmt.Errorf("graph model of policy %s's release: %w", s.name, err)
	}
	var mask []bool
	if len(down) > 0 {
		if mask, err = topo.NamesDown(down...); err != nil {
			return nil, fmt.Errorf("graph model of policy %s's release: %w", s.name, err)
		}
	}
	m, err := topo.Propagate(mask)
	if err != nil {
		return nil, fmt.Errorf("graph model of policy %s's release: %w", s.name, err)
	}
	return m, nil
}

// canGo says whether route reflector rr may lose its role on top of released: the graph model
// finds every pair both while its sessions restart (rr down in the state before: its cluster ID
// changes, so every session of it restarts) and after (rr released). It returns the state after.
func (s *Sim) canGo(released map[string]bool, rr, keeper string, mesh bool) (*bgpmodel.Model, bool, error) {
	m, err := s.Model(released, false, keeper, false, mesh, rr)
	if err != nil || m.Summary.MissingPairs > 0 {
		return nil, false, err
	}
	with := maps.Clone(released)
	if with == nil {
		with = map[string]bool{}
	}
	with[rr] = true
	if m, err = s.Model(with, false, keeper, false, mesh); err != nil || m.Summary.MissingPairs > 0 {
		return nil, false, err
	}
	return m, true, nil
}

// Next is the first route reflector of the policy other than keeper (by name) whose release, on
// top of the current state, loses no pair; "" when none can go yet; left counts those to go.
func (s *Sim) Next(keeper string, mesh bool) (next string, left int, err error) {
	var todo []string
	for _, rr := range s.PolicyRRs() {
		if rr != keeper {
			todo = append(todo, rr)
		}
	}
	for _, rr := range todo {
		_, ok, err := s.canGo(nil, rr, keeper, mesh)
		if err != nil {
			return "", 0, err
		}
		if ok {
			return rr, len(todo), nil
		}
	}
	return "", len(todo), nil
}

// Plan is a keeper and the peak of its release, as multiples of the steady state.
type Plan struct {
	Keeper                   string // "": none fits
	PeakRoutes, PeakSessions float64
	Steps                    int
	Why                      string // when no keeper fits: the best candidate's failure
}

// steady holds every node's steady state: the larger of the layout before and after the release.
type steady struct {
	routes   []float64
	sessions []int
	rr       []bool // a route reflector before the release (the sessions bound applies to these)
}

func (st *steady) peak(m *bgpmodel.Model) (routes, sessions float64) {
	for i, n := range m.Nodes {
		if st.routes[i] > 0 {
			routes = max(routes, n.Routes/st.routes[i])
		}
		if st.rr[i] && st.sessions[i] > 0 {
			sessions = max(sessions, float64(n.Sessions)/float64(st.sessions[i]))
		}
	}
	return routes, sessions
}

// Plan simulates the release through each candidate keeper, from the state the cluster is in
// (the mesh on or off) to every node of the policy released with the mesh on: the release BGPPeer
// written, the other route reflectors released one at a time (each the first whose release loses
// no pair), then the mesh on (when off), then the keeper. It returns the candidate with the lowest
// peak within the bound, or none (with why).
func (s *Sim) Plan(mesh bool) Plan {
	before, err := s.Model(nil, false, "", false, mesh)
	if err != nil {
		return Plan{Why: err.Error()}
	}
	after, err := s.Model(nil, true, "", true, true)
	if err != nil {
		return Plan{Why: err.Error()}
	}
	sd := steady{routes: make([]float64, len(before.Nodes)), sessions: make([]int, len(before.Nodes)), rr: make([]bool, len(before.Nodes))}
	for i := range before.Nodes {
		sd.routes[i] = max(before.Nodes[i].Routes, after.Nodes[i].Routes)
		sd.sessions[i] = max(before.Nodes[i].Sessions, after.Nodes[i].Sessions)
		sd.rr[i] = before.Nodes[i].ClusterID != ""
	}
	rrs := s.PolicyRRs()
	// Candidates: the route reflectors with the fewest sessions to other route reflectors (the
	// fewest chains through the keeper), then by name.
	topo := before.Topology()
	rrPeers := func(name string) int {
		i, c := topo.Index(name), 0
		for _, j := range topo.Peers(i) {
			if topo.IsRR(int(j)) {
				c++
			}
		}
		return c
	}
	// The top-level route reflectors are tried too: only they reach other policies' route
	// reflectors (the cross-policy BGPPeer), which may need the policy's nodes through the keeper.
	cands := slices.Clone(rrs)
	slices.SortStableFunc(cands, func(a, b string) int { return rrPeers(a) - rrPeers(b) })
	cands = cands[:min(len(cands), keeperCandidates)]
	for _, rr := range rrs {
		if _, top := s.Node(rr).Labels[extender.LabelTopLevel]; top && !slices.Contains(cands, rr) {
			cands = append(cands, rr)
		}
	}
	cands = append([]string{NoKeeper}, cands...)
	best := Plan{}
	for _, k := range cands {
		pl := Plan{Keeper: k}
		fail := ""
		released := map[string]bool{}
		check := func(m *bgpmodel.Model, what string) bool {
			if m.Summary.MissingPairs > 0 && m != after {
				fail = fmt.Sprintf("through %s: %s loses %d pairs", k, what, m.Summary.MissingPairs)
				return false
			}
			r, ss := sd.peak(m)
			pl.PeakRoutes, pl.PeakSessions = max(pl.PeakRoutes, r), max(pl.PeakSessions, ss)
			pl.Steps++
			if pl.PeakRoutes > Bound || pl.PeakSessions > Bound {
				fail = fmt.Sprintf("through %s: %s holds %.2f times the steady routes, %.2f the sessions", k, what, pl.PeakRoutes, pl.PeakSessions)
				return false
			}
			return true
		}
		ok := func() bool {
			m, err := s.Model(released, false, k, false, mesh)
			if err != nil || !check(m, "the release BGPPeer") {
				return false
			}
			last := len(rrs) - 1 // the keeper goes with the clients
			if k == NoKeeper {
				last = len(rrs)
			}
			for len(released) < last {
				moved := false
				for _, rr := range rrs {
					if rr == k || released[rr] {
						continue
					}
					m, ok, err := s.canGo(released, rr, k, mesh)
					if err == nil && ok {
						released[rr] = true
						if !check(m, "releasing "+rr) {
							return false
						}
						moved = true
						break
					}
				}
				if !moved {
					fail = fmt.Sprintf("through %s: no route reflector can go without losing a pair", k)
					return false
				}
			}
			if !mesh {
				m, err := s.Model(released, false, k, false, true)
				if err != nil || !check(m, "the mesh back on") {
					return false
				}
			}
			// The keeper goes when the graph model finds every pair without it (the
			// reconciler's waitWhileReleaseLoses): other policies being deleted may still have
			// route reflectors that reach this policy's nodes only through it.
			return check(after, "the keeper released")
		}()
		if !ok {
			if best.Keeper == "" {
				best.Why = strings.TrimPrefix(best.Why+"; "+fail, "; ")
			}
			continue
		}
		if best.Keeper == "" || pl.PeakRoutes < best.PeakRoutes {
			best = pl
		}
	}
	return best
}
