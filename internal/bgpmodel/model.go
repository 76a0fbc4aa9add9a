package bgpmodel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
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
// "twins") are counted in bulk: the state records how many of each twin class the chain used, not
// which. Nodes without a cluster ID never forward; those with the same route reflectors are treated
// as one class. Route counts are float64: exact below 2^53.

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
	// Exact is false when a count passed 2^53 (it is then rounded).
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
	pQQ     [][]float64
	pQR     [][]float64
	pRQ     [][]float64
	pRR     [][]float64
	direct  []map[int32]bool // explicit sessions between plain nodes (without the mesh)
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
	// The route reflector graph and each plain node's route reflectors.
	hAdj := make([][]int32, R)
	plainKey := map[string]int32{}
	var sb strings.Builder
	for i := range t.Nodes {
		if isDown(down, i) {
			continue
		}
		if k := m.rrOf[i]; k >= 0 {
			for _, j := range t.adj[i] {
				if r := m.rrOf[j]; r >= 0 {
					hAdj[k] = append(hAdj[k], r)
				}
			}
			continue
		}
		m.plain++
		var peers []int32
		for _, j := range t.adj[i] {
			if isDown(down, int(j)) {
				continue
			}
			if r := m.rrOf[j]; r >= 0 {
				peers = append(peers, r)
			} else if !t.Mesh {
				if m.direct[i] == nil {
					m.direct[i] = map[int32]bool{}
				}
				m.direct[i][j] = true
			}
		}
		slices.Sort(peers)
		sb.Reset()
		for _, r := range peers {
			sb.WriteString(fmt.Sprint(r))
			sb.WriteByte(',')
		}
		q, ok := plainKey[sb.String()]
		if !ok {
			q = int32(len(m.classes))
			plainKey[sb.String()] = q
			m.classes = append(m.classes, plainClass{rrs: peers})
		}
		m.classes[q].members = append(m.classes[q].members, int32(i))
		m.classOf[i] = q
	}
	for k := range hAdj {
		slices.Sort(hAdj[k])
	}

	ch := newChainer(hAdj, rrID, idCount)
	// Chains from each route reflector for origins without a cluster ID.
	A := make([][]float64, R)
	for r1 := range R {
		A[r1], _ = ch.run(int32(r1), -1, false)
	}
	// Chains for each route reflector's own block.
	Ao := make([][]float64, R)
	Aop := make([][]float64, R)
	for o := range R {
		Ao[o], Aop[o] = make([]float64, R), make([]float64, R)
		for _, r1 := range hAdj[o] {
			a, ap := ch.run(r1, int32(o), rrID[r1] == rrID[o])
			for r := range R {
				Ao[o][r] += a[r]
				Aop[o][r] += ap[r]
			}
		}
	}
	if ch.states > MaxStates {
		return nil, fmt.Errorf("%w: %d explored, budget %d", ErrTooLarge, ch.states, MaxStates)
	}
	// mateSum(a, n): paths a route reflector n accepts from same-cluster peers as a terminal.
	mateSum := func(ap []float64, nIdx int) float64 {
		s := 0.0
		for _, r := range hAdj[nIdx] {
			if rrID[r] == rrID[nIdx] {
				s += ap[r]
			}
		}
		return s
	}
	Q := len(m.classes)
	m.pQQ, m.pQR = make([][]float64, Q), make([][]float64, Q)
	for q := range Q {
		aq := make([]float64, R)
		for _, r1 := range m.classes[q].rrs {
			for r := range R {
				aq[r] += A[r1][r]
			}
		}
		m.pQQ[q] = make([]float64, Q)
		for q2 := range Q {
			s := 0.0
			for _, r := range m.classes[q2].rrs {
				s += aq[r]
			}
			m.pQQ[q][q2] = s
		}
		m.pQR[q] = make([]float64, R)
		for nIdx := range R {
			m.pQR[q][nIdx] = aq[nIdx] + mateSum(aq, nIdx)
		}
	}
	m.pRQ, m.pRR = make([][]float64, R), make([][]float64, R)
	for o := range R {
		m.pRQ[o] = make([]float64, Q)
		for q2 := range Q {
			s := 0.0
			for _, r := range m.classes[q2].rrs {
				s += Ao[o][r]
				if r == int32(o) {
					s++ // the route reflector's own client: directly
				}
			}
			m.pRQ[o][q2] = s
		}
		m.pRR[o] = make([]float64, R)
		for nIdx := range R {
			if nIdx != o {
				m.pRR[o][nIdx] = Ao[o][nIdx] + mateSum(Aop[o], nIdx)
			}
		}
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
	for i, nd := range t.Nodes {
		nr := &m.Nodes[i]
		nr.Name, nr.Zone, nr.ClusterID = nd.Name, nd.Zone, nd.ClusterID
		if isDown(m.down, i) {
			nr.Down = true
			continue
		}
		for _, j := range t.adj[i] {
			if !isDown(m.down, int(j)) {
				nr.Sessions++
			}
		}
		if t.Mesh && !t.IsRR(i) {
			nr.Sessions = len(m.rrPeersOf(i)) + m.plain - 1
		}
		has, routes := 0, 1.0
		if q2 := m.classOf[i]; q2 >= 0 {
			for q := range m.classes {
				k := size(q)
				if q == int(q2) {
					k--
				}
				p := m.pQQ[q][q2]
				routes += p * float64(k)
				if p > 0 || t.Mesh {
					has += k
				}
			}
			for o := range m.rrs {
				p := m.pRQ[o][q2]
				routes += p
				if p > 0 {
					has++
				}
			}
			if t.Mesh {
				routes += float64(m.plain - 1)
			} else {
				for j := range m.direct[i] {
					routes++
					if m.pQQ[m.classOf[j]][q2] == 0 {
						has++
					}
				}
			}
		} else {
			k := m.rrOf[i]
			for q := range m.classes {
				p := m.pQR[q][k]
				routes += p * float64(size(q))
				if p > 0 {
					has += size(q)
				}
			}
			for o := range m.rrs {
				p := m.pRR[o][k]
				routes += p
				if p > 0 {
					has++
				}
			}
		}
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
		for q2 := range m.classes {
			k := size(q2)
			if q2 == q {
				k--
			}
			total += m.pQQ[q][q2] * float64(k)
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
}

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
		p := m.pQQ[qo][qn]
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

// chainer counts forwarder chains on the route reflector graph.
type chainer struct {
	adj     [][]int32
	id      []int32
	shared  []int32 // cluster ID -> bit index when more than one route reflector carries it, else -1
	words   int
	class   []int32 // twin class of each route reflector
	members [][]int32
	uniq    []int32 // twin class -> index among classes of unique-ID members, -1 for shared-ID classes
	nUniq   int
	states  int
}

func newChainer(adj [][]int32, id []int32, idCount []int) *chainer {
	R := len(adj)
	c := &chainer{adj: adj, id: id, shared: make([]int32, len(idCount)), class: make([]int32, R)}
	nb := int32(0)
	for i, k := range idCount {
		c.shared[i] = -1
		if k > 1 {
			c.shared[i] = nb
			nb++
		}
	}
	c.words = (int(nb) + 63) / 64
	// Twin classes: same open neighbourhood (false twins) or same closed one (true twins), and the
	// same cluster ID when it is shared, or each its own unshared ID.
	idKey := func(r int) string {
		if s := c.shared[id[r]]; s >= 0 {
			return fmt.Sprint("s", id[r])
		}
		return "u"
	}
	nbKey := func(r int, closed bool) string {
		var sb strings.Builder
		sb.WriteString(idKey(r))
		list := adj[r]
		if closed {
			list = append(slices.Clone(list), int32(r))
			slices.Sort(list)
		}
		for _, x := range list {
			fmt.Fprintf(&sb, ",%d", x)
		}
		return sb.String()
	}
	open, closedG := map[string][]int32{}, map[string][]int32{}
	for r := range R {
		open[nbKey(r, false)] = append(open[nbKey(r, false)], int32(r))
		closedG[nbKey(r, true)] = append(closedG[nbKey(r, true)], int32(r))
	}
	for r := range c.class {
		c.class[r] = -1
	}
	assign := func(g []int32) {
		cl := int32(len(c.members))
		for _, r := range g {
			c.class[r] = cl
		}
		c.members = append(c.members, g)
	}
	for r := range R {
		if c.class[r] >= 0 {
			continue
		}
		if g := closedG[nbKey(r, true)]; len(g) > 1 {
			assign(g)
		} else if g := open[nbKey(r, false)]; len(g) > 1 {
			assign(g)
		} else {
			assign([]int32{int32(r)})
		}
	}
	c.uniq = make([]int32, len(c.members))
	for cl, g := range c.members {
		c.uniq[cl] = -1
		if c.shared[id[g[0]]] < 0 {
			c.uniq[cl] = int32(c.nUniq)
			c.nUniq++
		}
	}
	return c
}

type chainState struct {
	r     int32
	bits  []uint64
	count []uint16 // per unique-ID twin class: free members used
	first bool
}

// run counts the chains starting at route reflector r1 for an origin o (a route reflector index,
// or -1 for a node without a cluster ID). It returns, per route reflector, the chains that reach
// it (it stores each), and those among them it learnt over a client session (it may reflect them
// to same-cluster peers). sameID says the origin shares r1's cluster ID (r1 learnt the origin's own
// route over a non-client session).
func (c *chainer) run(r1, o int32, sameID bool) (a, ap []float64) {
	R := len(c.adj)
	a, ap = make([]float64, R), make([]float64, R)
	free := func(x int32) bool { return x != r1 && x != o }
	freeCount := make([]int, len(c.members))
	for cl, g := range c.members {
		for _, x := range g {
			if free(x) {
				freeCount[cl]++
			}
		}
	}
	key := func(s *chainState) string {
		b := make([]byte, 0, 4+8*len(s.bits)+2*len(s.count))
		b = binary.LittleEndian.AppendUint32(b, uint32(s.r))
		for _, w := range s.bits {
			b = binary.LittleEndian.AppendUint64(b, w)
		}
		for _, k := range s.count {
			b = binary.LittleEndian.AppendUint16(b, k)
		}
		return string(b)
	}
	type entry struct {
		s *chainState
		f float64
	}
	start := &chainState{r: r1, bits: make([]uint64, c.words), count: make([]uint16, c.nUniq), first: true}
	if b := c.shared[c.id[r1]]; b >= 0 {
		start.bits[b/64] |= 1 << (b % 64)
	}
	layer := []entry{{start, 1}}
	for len(layer) > 0 {
		c.states += len(layer)
		if c.states > MaxStates {
			return a, ap
		}
		next := map[string]int{}
		var nextL []entry
		for _, e := range layer {
			s, f := e.s, e.f
			a[s.r] += f
			if !(s.first && sameID) {
				ap[s.r] += f
			}
			for _, r2 := range c.adj[s.r] {
				if !free(r2) {
					continue
				}
				g := f
				ns := &chainState{r: r2, bits: s.bits, count: s.count}
				if b := c.shared[c.id[r2]]; b >= 0 {
					if s.bits[b/64]&(1<<(b%64)) != 0 {
						continue
					}
					ns.bits = slices.Clone(s.bits)
					ns.bits[b/64] |= 1 << (b % 64)
				} else {
					cl := c.class[r2]
					u := c.uniq[cl]
					in := 0
					if free(s.r) && c.class[s.r] == cl {
						in = 1
					}
					avail := freeCount[cl] - in
					used := int(s.count[u]) - in
					if avail-used <= 0 {
						continue
					}
					// Chains at s that have not used r2: the used members of its class are
					// spread evenly over the free ones (the members are interchangeable).
					g = f * float64(avail-used) / float64(avail)
					ns.count = slices.Clone(s.count)
					ns.count[u]++
				}
				k := key(ns)
				if idx, ok := next[k]; ok {
					nextL[idx].f += g
				} else {
					next[k] = len(nextL)
					nextL = append(nextL, entry{ns, g})
				}
			}
		}
		layer = nextL
	}
	return a, ap
}
