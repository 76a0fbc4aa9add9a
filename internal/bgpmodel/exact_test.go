package bgpmodel

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoselector"
)

// The original implementation of Build and Propagate, before the fast paths: slow but simple, the
// reference of the cross-check tests.

// buildExact is the original Build (one evaluation per label group, pairs marked in a map), kept
// as the reference the fast Build is checked against. It derives the sessions confd configures from BGPPeers: a BGPPeer configures, on every node
// its nodeSelector (or node) selects — every node when both are empty — a peering with every node
// its peerSelector selects; confd adds the reverse peering on the peer nodes unless reversePeering
// is Manual. A node never peers with itself. A session establishes only when both ends configure
// it. BGPPeers with a peerIP (not a node) are ignored.
func buildExact(nodes []Node, peers []extender.BGPPeer, opts Options) (*Topology, error) {
	if opts.MaxPairs <= 0 {
		opts.MaxPairs = 50_000_000
	}
	t := &Topology{Nodes: nodes, Mesh: opts.NodeToNodeMesh, index: make(map[string]int, len(nodes)), adj: make([][]int32, len(nodes))}
	// (the original always had the index)
	for i, n := range nodes {
		if _, dup := t.index[n.Name]; dup {
			return nil, fmt.Errorf("node %q appears twice", n.Name)
		}
		t.index[n.Name] = i
	}
	type parsed struct {
		node, peer *calicoselector.Selector
		spec       *apiv3.BGPPeerSpec
	}
	ps := make([]parsed, len(peers))
	var all []*calicoselector.Selector
	for i := range peers {
		p := &peers[i]
		ps[i].spec = &p.Spec
		var err error
		if p.Spec.NodeSelector != "" {
			if ps[i].node, err = calicoselector.Parse(p.Spec.NodeSelector); err != nil {
				return nil, fmt.Errorf("BGPPeer %s: nodeSelector: %v", p.Name, err)
			}
			all = append(all, ps[i].node)
		}
		if p.Spec.PeerSelector != "" {
			if ps[i].peer, err = calicoselector.Parse(p.Spec.PeerSelector); err != nil {
				return nil, fmt.Errorf("BGPPeer %s: peerSelector: %v", p.Name, err)
			}
			all = append(all, ps[i].peer)
		}
	}
	// Group nodes that agree on every label the selectors name: one evaluation per group.
	keySet := map[string]bool{}
	for _, n := range nodes {
		for k := range n.Labels {
			keySet[k] = true
		}
	}
	keys := calicoselector.KeysIn(mapKeys(keySet), all...)
	groupOf := map[string]int{}
	var groups [][]int32
	var groupLabels []map[string]string
	var sb strings.Builder
	for i, n := range nodes {
		sb.Reset()
		proj := map[string]string{}
		for _, k := range keys {
			if v, ok := n.Labels[k]; ok {
				proj[k] = v
				sb.WriteString(k)
				sb.WriteByte(0)
				sb.WriteString(v)
				sb.WriteByte(1)
			}
		}
		g, ok := groupOf[sb.String()]
		if !ok {
			g = len(groups)
			groupOf[sb.String()] = g
			groups = append(groups, nil)
			groupLabels = append(groupLabels, proj)
		}
		groups[g] = append(groups[g], int32(i))
	}
	match := func(s *calicoselector.Selector) []int32 {
		var out []int32
		for g, gl := range groupLabels {
			if s.Matches(gl) {
				out = append(out, groups[g]...)
			}
		}
		return out
	}
	allNodes := make([]int32, len(nodes))
	for i := range allNodes {
		allNodes[i] = int32(i)
	}
	cfg := map[uint64]uint8{} // (lo<<32 | hi) -> bit 1: lo configures hi, bit 2: hi configures lo
	mark := func(from, to int32) {
		if from == to {
			return
		}
		lo, hi, bit := from, to, uint8(1)
		if lo > hi {
			lo, hi, bit = hi, lo, 2
		}
		cfg[uint64(lo)<<32|uint64(hi)] |= bit
	}
	for i, p := range ps {
		var local []int32
		switch {
		case p.node != nil:
			local = match(p.node)
		case p.spec.Node != "":
			if j, ok := t.index[p.spec.Node]; ok {
				local = []int32{int32(j)}
			}
		default:
			local = allNodes
		}
		if p.peer == nil {
			continue // a peerIP: not a node of the plan
		}
		remote := match(p.peer)
		if len(local)*len(remote) > opts.MaxPairs {
			return nil, fmt.Errorf("BGPPeer %s selects %d x %d node pairs, more than %d", peers[i].Name, len(local), len(remote), opts.MaxPairs)
		}
		reverse := p.spec.ReversePeering == nil || *p.spec.ReversePeering != apiv3.ReversePeeringManual
		for _, l := range local {
			for _, r := range remote {
				mark(l, r)
				if reverse {
					mark(r, l)
				}
			}
		}
	}
	for k, v := range cfg {
		if v != 3 {
			t.OneSided++
			continue
		}
		lo, hi := int32(k>>32), int32(k&0xffffffff)
		t.Sessions = append(t.Sessions, [2]int32{lo, hi})
		t.adj[lo] = append(t.adj[lo], hi)
		t.adj[hi] = append(t.adj[hi], lo)
	}
	slices.SortFunc(t.Sessions, func(a, b [2]int32) int {
		if a[0] != b[0] {
			return int(a[0] - b[0])
		}
		return int(a[1] - b[1])
	})
	for i := range t.adj {
		slices.Sort(t.adj[i])
	}
	return t, nil
}

// propagateExact is the original exact search (one chain search per route reflector, per origin
// and first hop), kept as the reference the fast Propagate is checked against. It computes which blocks every node learns and how many paths it stores. down marks
// nodes that are gone (nil: none): their sessions are down and their blocks are not expected.
func (t *Topology) propagateExact(down []bool) (*Model, error) {
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

	ch := newExactChainer(hAdj, rrID, idCount)
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
	pQQ := make([][]float64, Q)
	m.aq, m.pQR = make([][]float64, Q), make([][]float64, Q)
	for q := range Q {
		aq := make([]float64, R)
		for _, r1 := range m.classes[q].rrs {
			for r := range R {
				aq[r] += A[r1][r]
			}
		}
		m.aq[q] = aq
		pQQ[q] = make([]float64, Q)
		for q2 := range Q {
			s := 0.0
			for _, r := range m.classes[q2].rrs {
				s += aq[r]
			}
			pQQ[q][q2] = s
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
	m.summarizeExact(idIdx, ch.states, pQQ)
	return m, nil
}

func (m *Model) summarizeExact(ids map[string]int32, states int, pQQ [][]float64) {
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
				p := pQQ[q][q2]
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
					if pQQ[m.classOf[j]][q2] == 0 {
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
			total += pQQ[q][q2] * float64(k)
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
			m.prefixExact(tot)
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
		m.prefixExact(total)
		origins++
	}
	if origins > 0 {
		s.MeanPathsPerPrefix /= float64(origins)
	}
	exact(s.TotalRoutes)
}

func (m *Model) prefixExact(total float64) {
	s := &m.Summary
	s.MeanPathsPerPrefix += total
	s.MaxPathsPerPrefix = math.Max(s.MaxPathsPerPrefix, total)
}

// exactChainer counts forwarder chains on the route reflector graph.
type exactChainer struct {
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

func newExactChainer(adj [][]int32, id []int32, idCount []int) *exactChainer {
	R := len(adj)
	c := &exactChainer{adj: adj, id: id, shared: make([]int32, len(idCount)), class: make([]int32, R)}
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

type exactState struct {
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
func (c *exactChainer) run(r1, o int32, sameID bool) (a, ap []float64) {
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
	key := func(s *exactState) string {
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
		s *exactState
		f float64
	}
	start := &exactState{r: r1, bits: make([]uint64, c.words), count: make([]uint16, c.nUniq), first: true}
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
				ns := &exactState{r: r2, bits: s.bits, count: s.count}
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
