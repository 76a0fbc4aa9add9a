package bgpmodel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// How routes propagate (BIRD 1.6 with Calico's configuration, every session iBGP in one AS):
//
//   - A node exports its own block to every peer.
//   - A node exports a route learned from an iBGP peer only by route reflection: when the session
//     it came in on or the session it goes out on is an rr-client session (BIRD's
//     bgp_import_control); never back to the peer it came from. Reflecting, it sets ORIGINATOR_ID
//     (the origin) if missing and prepends its own cluster ID to CLUSTER_LIST.
//   - On an rr-client session, a route whose CLUSTER_LIST holds the local cluster ID is neither sent
//     nor accepted (BIRD checks the cluster list only on rr-client sessions); a route whose
//     ORIGINATOR_ID is the receiver's router ID is dropped.
//   - ADD-PATH (`add paths on`): every accepted route is kept as its own path and all of them are
//     advertised, so a node stores one path per valid propagation walk from the origin.
//
// From these rules, the forwarders of a walk (the route reflectors between origin and receiver)
// carry pairwise distinct cluster IDs, and a walk never visits a node twice; a route reflector
// that receives a route from a same-cluster peer stores it but cannot pass it on once its own ID
// is on the list. The model counts, for each origin and receiver, the walks
//
//   origin -> r1 -> ... -> rk -> receiver
//
// where r1..rk are route reflectors with distinct cluster IDs, linked by sessions, r1 a peer of the
// origin, plus the terminal rules (a receiver with the last forwarder's cluster ID accepts from it
// only when the forwarder learnt the route from a client session; the origin never accepts its
// own route back). It counts chains by dynamic programming over (current route reflector, cluster
// IDs used), where route reflectors that are interchangeable (same peers, same cluster-ID role:
// "twins") are counted in bulk: the state records the twin class, not the member, and how many of
// each twin class the chain used, not which; one search per twin class gives every member's
// chains (chain.go). Nodes without a cluster ID never forward; those with the same route
// reflectors are one class, and every figure is computed per class: the cost is in the route
// reflectors and classes, the nodes only add a pass over them. Route counts are float64: exact
// below 2^53.

// Summary holds a model's figures.
type Summary struct {
	Nodes            int     `json:"nodes"`
	Down             int     `json:"down,omitempty"`
	RouteReflectors  int     `json:"routeReflectors"`
	ClusterIDs       int     `json:"clusterIDs"`
	Sessions         int     `json:"sessions"`
	OneSided         int     `json:"oneSidedPeerings,omitempty"`
	MissingPairs     int64   `json:"missingPairs"`
	MaxRoutesPerNode float64 `json:"maxRoutesPerNode"`
	BusiestNode      string  `json:"busiestNode,omitempty"`
	// PathsPerPrefix: paths of one prefix stored over all nodes, including the origin's own.
	MaxPathsPerPrefix  float64 `json:"maxPathsPerPrefix"`
	MeanPathsPerPrefix float64 `json:"meanPathsPerPrefix"`
	TotalRoutes        float64 `json:"totalRoutes"`
	// Exact is false when a count passed 2^53 (it is then rounded; past the float64 range it is
	// the largest float64, so that the figures stay valid JSON).
	Exact bool `json:"exact"`
	// States is the number of chain states the model explored.
	States int `json:"states"`
}

// NodeResult is one node's figures: the other nodes' blocks it learns and the paths it stores
// (its own block included).
type NodeResult struct {
	Name      string  `json:"name"`
	Zone      string  `json:"zone,omitempty"`
	ClusterID string  `json:"clusterID,omitempty"`
	Down      bool    `json:"down,omitempty"`
	Sessions  int     `json:"sessions"`
	Prefixes  int     `json:"prefixes"`
	Missing   int     `json:"missing"`
	Routes    float64 `json:"routes"`
}

// Model is the outcome of propagating every node's block.
type Model struct {
	Summary Summary      `json:"summary"`
	Nodes   []NodeResult `json:"nodes"`

	t       *Topology
	down    []bool
	rrOf    []int32 // node -> route reflector index, -1 for others and down nodes
	rrs     []int32 // route reflector index -> node
	classOf []int32 // plain node -> class, -1 for route reflectors and down nodes
	classes []plainClass
	plain   int // plain nodes up
	// Paths of one block at one node, by kind of origin and receiver (Q: a client class, R: a
	// route reflector): aq[q][r] is the paths route reflector r passes on (or stores) of a block of
	// class q, so a client of class q2 stores sum(aq[q][r], r in q2's route reflectors) (pqq);
	// pQR[q][n], pRQ[o][q2], pRR[o][n] are the paths stored.
	aq     [][]float64
	pQR    [][]float64
	pRQ    [][]float64
	pRR    [][]float64
	direct []map[int32]bool // explicit sessions between plain nodes (without the mesh)
}

// pqq is the number of paths a client of class q2 stores of the block of a client of class q
// (other than itself), without a direct session between the two.
func (m *Model) pqq(q, q2 int32) float64 {
	s := 0.0
	for _, r := range m.classes[q2].rrs {
		s += m.aq[q][r]
	}
	return s
}

type plainClass struct {
	members []int32
	rrs     []int32 // route reflector indexes the members peer with
}

// ErrTooLarge is returned when a topology needs more chain states than the budget allows.
var ErrTooLarge = errors.New("bgpmodel: too many path states")

// MaxStates bounds the chain states one Propagate may explore.
var MaxStates = 50_000_000

// Propagate computes which blocks every node learns and how many paths it stores. down marks
// nodes that are gone (nil: none): their sessions are down and their blocks are not expected.
func (t *Topology) Propagate(down []bool) (*Model, error) {
	n := len(t.Nodes)
	if down != nil && len(down) != n {
		return nil, fmt.Errorf("down mask has %d entries for %d nodes", len(down), n)
	}
	m := &Model{t: t, down: down, rrOf: make([]int32, n), classOf: make([]int32, n), direct: make([]map[int32]bool, n)}
	// Route reflectors and their cluster IDs.
	idIdx := map[string]int32{}
	var rrID []int32
	for i := range t.Nodes {
		m.rrOf[i], m.classOf[i] = -1, -1
		if isDown(down, i) || !t.IsRR(i) {
			continue
		}
		id, ok := idIdx[t.Nodes[i].ClusterID]
		if !ok {
			id = int32(len(idIdx))
			idIdx[t.Nodes[i].ClusterID] = id
		}
		m.rrOf[i] = int32(len(m.rrs))
		m.rrs = append(m.rrs, int32(i))
		rrID = append(rrID, id)
	}
	R := len(m.rrs)
	idCount := make([]int, len(idIdx))
	for _, id := range rrID {
		idCount[id]++
	}
	// The route reflector graph (sorted: route reflector indexes follow node indexes) and each
	// plain node's route reflectors. Nodes whose session lists are one shared slice (Build gives
	// every node of a label group the same one) and that have no direct session with another plain
	// node fall in the same class without a second look.
	hAdj := make([][]int32, R)
	plainKey := map[string]int32{}
	type sharedList struct {
		p *int32
		n int
	}
	byList := map[sharedList]int32{}
	var peers []int32
	var kb []byte
	for i := range t.Nodes {
		if isDown(down, i) {
			continue
		}
		adj := t.adj[i]
		if k := m.rrOf[i]; k >= 0 {
			for _, j := range adj {
				if r := m.rrOf[j]; r >= 0 {
					hAdj[k] = append(hAdj[k], r)
				}
			}
			continue
		}
		m.plain++
		var sl sharedList
		if len(adj) > 0 {
			sl = sharedList{&adj[0], len(adj)}
			if q, ok := byList[sl]; ok {
				m.classes[q].members = append(m.classes[q].members, int32(i))
				m.classOf[i] = q
				continue
			}
		}
		peers, kb = peers[:0], kb[:0]
		direct := false
		for _, j := range adj {
			if isDown(down, int(j)) {
				continue
			}
			if r := m.rrOf[j]; r >= 0 {
				peers = append(peers, r)
				kb = appendU32(kb, uint32(r))
			} else if !t.Mesh {
				if m.direct[i] == nil {
					m.direct[i] = map[int32]bool{}
				}
				m.direct[i][j] = true
				direct = true
			}
		}
		q, ok := plainKey[string(kb)]
		if !ok {
			q = int32(len(m.classes))
			plainKey[string(kb)] = q
			m.classes = append(m.classes, plainClass{rrs: slices.Clone(peers)})
		}
		m.classes[q].members = append(m.classes[q].members, int32(i))
		m.classOf[i] = q
		if len(adj) > 0 && !direct {
			byList[sl] = q
		}
	}

	ch := newChainer(hAdj, rrID, idCount)
	Q := len(m.classes)
	// A client's block: the chains from each of its route reflectors, summed per client class.
	// One search per twin class of first hops; a twin's chains are its representative's, swapped.
	fromRep := map[int32][]float64{}
	aqs := make([][]float64, Q)
	var tmp []float64
	for q := range Q {
		aq := make([]float64, R)
		for _, r1 := range m.classes[q].rrs {
			rep := ch.rep[ch.class[r1]]
			a, ok := fromRep[rep]
			if !ok {
				a = slices.Clone(ch.fromRR(rep))
				fromRep[rep] = a
			}
			if rep != r1 {
				tmp = swapped(tmp, a, rep, r1)
				a = tmp
			}
			for r, v := range a {
				aq[r] += v
			}
		}
		aqs[q] = aq
	}
	// mateSum(ap, n): paths route reflector n accepts from same-cluster peers as a terminal.
	mates := make([][]int32, R)
	for n, peers := range hAdj {
		for _, r := range peers {
			if rrID[r] == rrID[n] {
				mates[n] = append(mates[n], r)
			}
		}
	}
	mateSum := func(ap []float64, nIdx int) float64 {
		s := 0.0
		for _, r := range mates[nIdx] {
			s += ap[r]
		}
		return s
	}
	m.aq, m.pQR = aqs, make([][]float64, Q)
	for q, aq := range aqs {
		m.pQR[q] = make([]float64, R)
		for nIdx := range R {
			m.pQR[q][nIdx] = aq[nIdx] + mateSum(aq, nIdx)
		}
	}
	// A route reflector's own block: one search per twin class.
	m.pRQ, m.pRR = make([][]float64, R), make([][]float64, R)
	var bufA, bufAp []float64
	for cl, rep := range ch.rep {
		a, ap := ch.fromOrigin(rep)
		for _, o := range ch.members[cl] {
			ao, aop := a, ap
			if o != rep {
				bufA, bufAp = swapped(bufA, a, rep, o), swapped(bufAp, ap, rep, o)
				ao, aop = bufA, bufAp
			}
			m.pRQ[o] = make([]float64, Q)
			for q2 := range Q {
				s := 0.0
				for _, r := range m.classes[q2].rrs {
					s += ao[r]
					if r == o {
						s++ // the route reflector's own client: directly
					}
				}
				m.pRQ[o][q2] = s
			}
			m.pRR[o] = make([]float64, R)
			for nIdx := range R {
				if nIdx != int(o) {
					m.pRR[o][nIdx] = ao[nIdx] + mateSum(aop, nIdx)
				}
			}
		}
	}
	if ch.over || ch.states > MaxStates {
		return nil, fmt.Errorf("%w: %d explored, budget %d", ErrTooLarge, ch.states, MaxStates)
	}
	m.summarize(idIdx, ch.states)
	return m, nil
}

func (m *Model) summarize(ids map[string]int32, states int) {
	t := m.t
	s := &m.Summary
	s.Exact, s.States = true, states
	exact := func(v float64) {
		if v >= 1<<53 {
			s.Exact = false
		}
	}
	alive := 0
	for i := range t.Nodes {
		if !isDown(m.down, i) {
			alive++
		}
	}
	s.Nodes, s.Down = alive, len(t.Nodes)-alive
	s.RouteReflectors, s.ClusterIDs = len(m.rrs), len(ids)
	s.Sessions, s.OneSided = t.SessionCount(m.down), t.OneSided
	m.Nodes = make([]NodeResult, len(t.Nodes))
	size := func(q int) int { return len(m.classes[q].members) }
	// What every member of a client class learns from the other classes and the route
	// reflectors; what a route reflector learns. Sums over client classes go through the route
	// reflectors: w[r] is the paths r passes on of all clients' blocks, v[r] its clients.
	Q, R := len(m.classes), len(m.rrs)
	w, v := make([]float64, R), make([]float64, R)
	for q, aq := range m.aq {
		k := float64(size(q))
		for r, p := range aq {
			w[r] += p * k
		}
		for _, r := range m.classes[q].rrs {
			v[r] += k
		}
	}
	// Which route reflectors pass a class's blocks on, as bit sets; classes with the same set
	// together.
	words := (R + 63) / 64
	type reachSet struct {
		bits    []uint64
		members int
	}
	var reach []reachSet
	reachOf := map[string]int{}
	var kb []byte
	for q, aq := range m.aq {
		bits := make([]uint64, words)
		kb = kb[:0]
		for r, p := range aq {
			if p > 0 {
				bits[r/64] |= 1 << (r % 64)
			}
		}
		for _, x := range bits {
			kb = binary.LittleEndian.AppendUint64(kb, x)
		}
		d, ok := reachOf[string(kb)]
		if !ok {
			d = len(reach)
			reachOf[string(kb)] = d
			reach = append(reach, reachSet{bits: bits})
		}
		reach[d].members += size(q)
	}
	classHas, classRoutes := make([]int, Q), make([]float64, Q)
	mask := make([]uint64, words)
	for q2 := range Q {
		self := m.pqq(int32(q2), int32(q2))
		routes := 1.0
		for _, r := range m.classes[q2].rrs {
			if x := w[r]; !math.IsInf(x, 0) {
				routes += x - m.aq[q2][r]
				continue
			}
			// Past the float64 range, sum without the class's own member term to subtract.
			for q, aq := range m.aq {
				k := size(q)
				if q == q2 {
					k--
				}
				routes += aq[r] * float64(k)
			}
		}
		has := 0
		if t.Mesh {
			has = m.plain - 1
		} else {
			clear(mask)
			for _, r := range m.classes[q2].rrs {
				mask[r/64] |= 1 << (r % 64)
			}
			for _, d := range reach {
				for i, x := range d.bits {
					if x&mask[i] != 0 {
						has += d.members
						break
					}
				}
			}
			if self > 0 {
				has--
			}
		}
		classHas[q2], classRoutes[q2] = has, routes
	}
	// The route reflectors' blocks, row by row (the same order of sums as column by column).
	for o := range m.rrs {
		for q2, p := range m.pRQ[o] {
			classRoutes[q2] += p
			if p > 0 {
				classHas[q2]++
			}
		}
	}
	rrHas, rrRoutes := make([]int, R), make([]float64, R)
	for k := range rrRoutes {
		rrRoutes[k] = 1
	}
	for q, row := range m.pQR {
		k := size(q)
		for n, p := range row {
			rrRoutes[n] += p * float64(k)
			if p > 0 {
				rrHas[n] += k
			}
		}
	}
	for o := range m.rrs {
		for n, p := range m.pRR[o] {
			rrRoutes[n] += p
			if p > 0 {
				rrHas[n]++
			}
		}
	}
	for i, nd := range t.Nodes {
		nr := &m.Nodes[i]
		nr.Name, nr.Zone, nr.ClusterID = nd.Name, nd.Zone, nd.ClusterID
		if isDown(m.down, i) {
			nr.Down = true
			continue
		}
		if m.down == nil {
			nr.Sessions = len(t.adj[i])
		} else {
			for _, j := range t.adj[i] {
				if !m.down[j] {
					nr.Sessions++
				}
			}
		}
		if t.Mesh && !t.IsRR(i) {
			nr.Sessions = len(m.rrPeersOf(i)) + m.plain - 1
		}
		var has int
		var routes float64
		if q2 := m.classOf[i]; q2 >= 0 {
			has, routes = classHas[q2], classRoutes[q2]
			if t.Mesh {
				routes += float64(m.plain - 1)
			} else {
				for j := range m.direct[i] {
					routes++
					if m.pqq(m.classOf[j], q2) == 0 {
						has++
					}
				}
			}
		} else {
			has, routes = rrHas[m.rrOf[i]], rrRoutes[m.rrOf[i]]
		}
		routes = finite(routes)
		nr.Prefixes, nr.Missing, nr.Routes = has, alive-1-has, routes
		s.MissingPairs += int64(nr.Missing)
		s.TotalRoutes += routes
		exact(routes)
		if routes > s.MaxRoutesPerNode {
			s.MaxRoutesPerNode, s.BusiestNode = routes, nd.Name
		}
	}
	// Paths per prefix.
	origins := 0
	for q := range m.classes {
		total := 1.0
		for _, r := range m.classes[q].rrs {
			v[r]-- // the clients of r, but the origin
		}
		for r, p := range m.aq[q] {
			if v[r] > 0 {
				total += p * v[r]
			}
		}
		for _, r := range m.classes[q].rrs {
			v[r]++
		}
		for k := range m.rrs {
			total += m.pQR[q][k]
		}
		for _, o := range m.classes[q].members {
			tot := total
			if t.Mesh {
				tot += float64(m.plain - 1)
			} else {
				tot += float64(len(m.direct[o]))
			}
			m.prefix(tot)
			origins++
		}
	}
	for o := range m.rrs {
		total := 1.0
		for q2 := range m.classes {
			total += m.pRQ[o][q2] * float64(size(q2))
		}
		for k := range m.rrs {
			total += m.pRR[o][k]
		}
		m.prefix(total)
		origins++
	}
	if origins > 0 {
		s.MeanPathsPerPrefix /= float64(origins)
	}
	exact(s.TotalRoutes)
	s.TotalRoutes, s.MaxPathsPerPrefix, s.MeanPathsPerPrefix = finite(s.TotalRoutes), finite(s.MaxPathsPerPrefix), finite(s.MeanPathsPerPrefix)
}

// finite caps a count past the float64 range.
func finite(v float64) float64 { return min(v, math.MaxFloat64) }

func (m *Model) prefix(total float64) {
	s := &m.Summary
	s.MeanPathsPerPrefix += total
	s.MaxPathsPerPrefix = math.Max(s.MaxPathsPerPrefix, total)
}

func (m *Model) rrPeersOf(i int) []int32 {
	if q := m.classOf[i]; q >= 0 {
		return m.classes[q].rrs
	}
	return nil
}

// Paths returns the number of paths node n stores for node o's block (1 for its own block, 0 when
// either is down).
func (m *Model) Paths(n, o int) float64 {
	if isDown(m.down, n) || isDown(m.down, o) {
		return 0
	}
	if n == o {
		return 1
	}
	qo, qn := m.classOf[o], m.classOf[n]
	switch {
	case qo >= 0 && qn >= 0:
		p := m.pqq(qo, qn)
		if m.t.Mesh || m.direct[n][int32(o)] {
			p++
		}
		return p
	case qo >= 0:
		return m.pQR[qo][m.rrOf[n]]
	case qn >= 0:
		return m.pRQ[m.rrOf[o]][qn]
	default:
		return m.pRR[m.rrOf[o]][m.rrOf[n]]
	}
}

// Has reports whether node n learns node o's block (always for its own).
func (m *Model) Has(n, o int) bool { return m.Paths(n, o) > 0 }

// Missing returns the names of the nodes up whose blocks node n does not learn.
func (m *Model) Missing(n int) []string {
	var out []string
	if isDown(m.down, n) || m.Nodes[n].Missing == 0 {
		return out
	}
	for o := range m.t.Nodes {
		if o != n && !isDown(m.down, o) && !m.Has(n, o) {
			out = append(out, m.t.Nodes[o].Name)
		}
	}
	return out
}

// MissingPairs returns up to limit (receiver, origin) pairs of nodes up where the receiver lacks
// the origin's block.
func (m *Model) MissingPairs(limit int) [][2]string {
	var out [][2]string
	for n := range m.t.Nodes {
		if m.Nodes[n].Missing == 0 || m.Nodes[n].Down {
			continue
		}
		for _, o := range m.Missing(n) {
			if len(out) == limit {
				return out
			}
			out = append(out, [2]string{m.t.Nodes[n].Name, o})
		}
	}
	return out
}

// Topology returns the topology the model was computed on.
func (m *Model) Topology() *Topology { return m.t }
