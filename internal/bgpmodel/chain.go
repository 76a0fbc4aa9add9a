package bgpmodel

import (
	"math/bits"
	"slices"
)

// chainer counts forwarder chains on the route reflector graph (see the comment at the top of
// model.go). Route reflectors that are interchangeable — twins: the same peers (true twins also
// peer with each other) and the same cluster-ID role (one shared ID, or each its own) — form a
// class, and a chain state records the class it is at, not the member:
//
//	(class of the current route reflector, cluster IDs used, members used per class of own IDs)
//
// with one bit per cluster ID that several route reflectors share, one bit per twinless route
// reflector with an ID of its own, and a counter per twin class with IDs of their own (how many of
// the class the chain used, not which). A state's weight is its number of chains summed over the
// class's members; a step into a class multiplies by the members still free there; at the end each
// member gets its share (the members are interchangeable, so the share is even and exact).
//
// Twins are interchangeable as starting points too: the chains from one member are those from
// another with the two swapped, so one search per class is enough.
//
// Steps that always end a chain (into a class whose every peer carries its cluster ID or the
// current class's, both used on arrival: a rack route reflector reached from its spine member)
// are not taken one by one: a state adds its weight to all of them at once, less the classes whose
// ID it used already. That keeps a search from a rack at a handful of states however many racks
// there are.
type chainer struct {
	adj     [][]int32
	id      []int32
	class   []int32 // twin class of each route reflector
	members [][]int32
	rep     []int32   // twin class -> its first member
	size    []int32   // twin class -> members
	targets [][]int32 // twin class -> the classes its members peer with (but those in sd)
	// sd[t]: the classes a chain at class t may step to and always ends at (each of their peers
	// has their cluster ID or t's, both used on arrival): a state at t adds its weight to all of
	// them at once (bc[t]), but for those whose ID the state used already (exc).
	sd      [][]int32
	sdFrom  [][]int32 // class u -> the classes t with u in sd[t]
	ofBit   [][]int32 // bit -> the classes with that bit
	bc, exc []float64
	bsum    []float64
	anySD   bool
	bit     []int32 // twin class -> bit of its cluster ID (shared, or a twinless own ID), -1 for a counter
	cnt     []int32 // twin class -> its counter, -1 for a bit
	shared  []bool  // twin class -> its members share one cluster ID
	words   int     // key words: 1 (class) + bit words + counter words
	bitW    int
	states  int

	// scratch of one search
	cur, next   layer
	table       []int32
	key         []uint64
	free        []int32 // twin class -> members not excluded
	aCl, apCl   []float64
	excl        int32
	over        bool
	aBuf, apBuf []float64
}

type layer struct {
	keys []uint64
	vals []float64
}

func (l *layer) reset() { l.keys, l.vals = l.keys[:0], l.vals[:0] }

func newChainer(adj [][]int32, id []int32, idCount []int) *chainer {
	R := len(adj)
	c := &chainer{adj: adj, id: id, class: make([]int32, R)}
	// Twin classes: same closed neighbourhood (true twins) or same open one (false twins), and the
	// same cluster ID when it is shared, or each its own unshared ID.
	var kb []byte
	keyOf := func(r int, closed bool) string {
		kb = kb[:0]
		if idCount[id[r]] > 1 {
			kb = append(kb, 's')
			kb = appendU32(kb, uint32(id[r]))
		} else {
			kb = append(kb, 'u')
		}
		if closed {
			kb = append(kb, 'c')
			done := false
			for _, x := range adj[r] {
				if !done && x > int32(r) {
					kb = appendU32(kb, uint32(r))
					done = true
				}
				kb = appendU32(kb, uint32(x))
			}
			if !done {
				kb = appendU32(kb, uint32(r))
			}
		} else {
			kb = append(kb, 'o')
			for _, x := range adj[r] {
				kb = appendU32(kb, uint32(x))
			}
		}
		return string(kb)
	}
	closedG, openG := map[string][]int32{}, map[string][]int32{}
	closedK, openK := make([]string, R), make([]string, R)
	for r := range R {
		closedK[r], openK[r] = keyOf(r, true), keyOf(r, false)
		closedG[closedK[r]] = append(closedG[closedK[r]], int32(r))
		openG[openK[r]] = append(openG[openK[r]], int32(r))
	}
	for r := range c.class {
		c.class[r] = -1
	}
	var members [][]int32
	assign := func(g []int32) {
		cl := int32(len(members))
		for _, r := range g {
			c.class[r] = cl
		}
		members = append(members, g)
	}
	for r := range R {
		if c.class[r] >= 0 {
			continue
		}
		if g := closedG[closedK[r]]; len(g) > 1 {
			assign(g)
		} else if g := openG[openK[r]]; len(g) > 1 {
			assign(g)
		} else {
			assign([]int32{int32(r)})
		}
	}
	// Bits and counters; the classes each class peers with.
	sharedBit := make([]int32, len(idCount))
	nb := int32(0)
	for i, k := range idCount {
		sharedBit[i] = -1
		if k > 1 {
			sharedBit[i] = nb
			nb++
		}
	}
	nc := int32(0)
	C := len(members)
	c.members = members
	c.rep, c.size, c.targets = make([]int32, C), make([]int32, C), make([][]int32, C)
	c.bit, c.cnt, c.shared = make([]int32, C), make([]int32, C), make([]bool, C)
	for cl, g := range members {
		c.rep[cl], c.size[cl] = g[0], int32(len(g))
		c.bit[cl], c.cnt[cl] = -1, -1
		switch {
		case sharedBit[id[g[0]]] >= 0:
			c.bit[cl], c.shared[cl] = sharedBit[id[g[0]]], true
		case len(g) == 1:
			c.bit[cl] = nb
			nb++
		default:
			c.cnt[cl] = nc
			nc++
		}
		seen := map[int32]bool{}
		for _, x := range adj[g[0]] {
			if t := c.class[x]; !seen[t] {
				seen[t] = true
				c.targets[cl] = append(c.targets[cl], t)
			}
		}
	}
	c.sd, c.sdFrom, c.ofBit = make([][]int32, C), make([][]int32, C), make([][]int32, nb)
	for cl := range C {
		if b := c.bit[cl]; b >= 0 {
			c.ofBit[b] = append(c.ofBit[b], int32(cl))
		}
	}
	all := slices.Clone(c.targets)
	for t := range C {
		bt := c.bit[t]
		if bt < 0 {
			continue
		}
		var keep []int32
		for _, u := range all[t] {
			bu := c.bit[u]
			dead := bu >= 0 && bu != bt
			for _, v := range all[u] {
				if !dead {
					break
				}
				dead = c.bit[v] == bu || c.bit[v] == bt
			}
			if dead {
				c.anySD = true
				c.sd[t] = append(c.sd[t], u)
				c.sdFrom[u] = append(c.sdFrom[u], int32(t))
			} else {
				keep = append(keep, u)
			}
		}
		if len(c.sd[t]) > 0 {
			c.targets[t] = keep
		}
	}
	c.bitW = (int(nb) + 63) / 64
	c.words = 1 + c.bitW + (int(nc)+3)/4
	c.key = make([]uint64, c.words)
	c.free = make([]int32, C)
	c.aCl, c.apCl = make([]float64, C), make([]float64, C)
	c.bc, c.exc, c.bsum = make([]float64, C), make([]float64, C), make([]float64, C)
	c.aBuf, c.apBuf = make([]float64, R), make([]float64, R)
	return c
}

func appendU32(b []byte, v uint32) []byte {
	return append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
}

// fromRR counts the chains of a route learnt from a node without a cluster ID (a client) by route
// reflector r1: a[r] is the number of chains r1 -> ... -> r that reach r (each a path r stores).
// All of them arrive over client sessions. The result is valid until the next search.
func (c *chainer) fromRR(r1 int32) []float64 {
	c.begin(r1)
	cl := c.class[r1]
	// The start: r1 itself, excluded from its class's free members (position C + class).
	c.key[0] = uint64(len(c.size)) + uint64(cl)
	if b := c.bit[cl]; b >= 0 {
		c.setBit(b)
	}
	c.push(1)
	c.run(-1)
	a, _ := c.results(false)
	a[r1]++
	return a
}

// fromOrigin counts the chains of route reflector o's own block: a[r] is the number of chains
// o -> r1 -> ... -> r (r1 a peer of o) that reach r, ap[r] those among them r learnt over a client
// session (it may reflect them to same-cluster peers). Only the first hop can be a non-client
// session: when r1 shares o's cluster ID. The results are valid until the next search.
func (c *chainer) fromOrigin(o int32) (a, ap []float64) {
	c.begin(o)
	for _, list := range [2][]int32{c.targets[c.class[o]], c.sd[c.class[o]]} {
		for _, t := range list {
			n := c.free[t]
			if n == 0 {
				continue
			}
			clear(c.key)
			c.key[0] = uint64(t)
			if b := c.bit[t]; b >= 0 {
				c.setBit(b)
			} else {
				c.addCount(c.cnt[t])
			}
			c.push(float64(n))
		}
	}
	c.run(o)
	return c.results(true)
}

// begin starts a search without route reflector x (the origin, or the first hop of fromRR).
func (c *chainer) begin(x int32) {
	for cl := range c.free {
		c.free[cl] = c.size[cl]
	}
	c.free[c.class[x]]--
	c.excl = x
	clear(c.aCl)
	clear(c.apCl)
	c.cur.reset()
	clear(c.key)
}

func (c *chainer) setBit(b int32) { c.key[1+b/64] |= 1 << (b % 64) }

func (c *chainer) hasBit(key []uint64, b int32) bool { return key[1+b/64]&(1<<(b%64)) != 0 }

func (c *chainer) count(key []uint64, k int32) int32 {
	return int32(key[1+c.bitW+int(k)/4] >> (16 * (k % 4)) & 0xffff)
}

func (c *chainer) addCount(k int32) {
	c.key[1+c.bitW+int(k)/4] += 1 << (16 * (k % 4))
}

// push adds c.key with weight f to the first layer.
func (c *chainer) push(f float64) {
	c.cur.keys = append(c.cur.keys, c.key...)
	c.cur.vals = append(c.cur.vals, f)
}

// bulkLimit: the steps into sd are summed at once while those sums stay below it (2^53, so that
// taking the exceptions off is exact). Tests lower it to check the state-by-state way.
var bulkLimit = float64(1 << 53)

// run searches from the first layer in c.cur: with the steps into sd summed at once while the
// sums stay below bulkLimit, else again state by state.
func (c *chainer) run(o int32) {
	if !c.anySD {
		c.search(o, false)
		return
	}
	start := layer{keys: slices.Clone(c.cur.keys), vals: slices.Clone(c.cur.vals)}
	if c.search(o, true) {
		return
	}
	clear(c.aCl)
	clear(c.apCl)
	c.cur.keys, c.cur.vals = append(c.cur.keys[:0], start.keys...), append(c.cur.vals[:0], start.vals...)
	c.search(o, false)
}

// search runs the layers from c.cur, summing each class's chains into aCl (and apCl, for an
// origin o >= 0: the first layer's arrivals over a same-cluster session excepted). With bulk, the
// steps into sd are summed per class and added at the end; it reports false (and adds nothing of
// them) when those sums reach bulkLimit.
func (c *chainer) search(o int32, bulk bool) bool {
	W, C := c.words, uint64(len(c.size))
	first := true
	if bulk {
		clear(c.bc)
		clear(c.exc)
	}
	for len(c.cur.vals) > 0 {
		c.states += len(c.cur.vals)
		if c.states > MaxStates {
			c.over = true
			return true
		}
		c.next.reset()
		c.prepareTable(len(c.cur.vals))
		for s, f := range c.cur.vals {
			key := c.cur.keys[s*W : (s+1)*W]
			cl := int32(key[0])
			if key[0] >= C {
				cl = int32(key[0] - C) // fromRR's start
			} else {
				c.aCl[cl] += f
				if o >= 0 && !(first && c.shared[cl] && c.id[c.rep[cl]] == c.id[o]) {
					c.apCl[cl] += f
				}
			}
			lists := [2][]int32{c.targets[cl], nil}
			if len(c.sd[cl]) > 0 {
				if bulk {
					c.bc[cl] += f
					// The classes of sd whose ID the chain used already.
					for i, x := range key[1 : 1+c.bitW] {
						for x != 0 {
							b := int32(i*64 + bits.TrailingZeros64(x))
							x &= x - 1
							for _, u := range c.ofBit[b] {
								if slices.Contains(c.sdFrom[u], cl) {
									c.exc[u] += f
								}
							}
						}
					}
				} else {
					lists[1] = c.sd[cl]
				}
			}
			for _, list := range lists {
				for _, t := range list {
					copy(c.key, key)
					c.key[0] = uint64(t)
					var n int32
					if b := c.bit[t]; b >= 0 {
						if c.hasBit(key, b) {
							continue
						}
						n = c.free[t]
						c.setBit(b)
					} else {
						k := c.cnt[t]
						// The class's free members the chain has not used (the current one
						// counts as used when the step stays in the class).
						n = c.free[t] - c.count(key, k)
						c.addCount(k)
					}
					if n <= 0 {
						continue
					}
					if c.dead(t) {
						// A chain that can go no further ends here: count it, keep no state.
						c.states++
						c.aCl[t] += f * float64(n)
						if o >= 0 {
							c.apCl[t] += f * float64(n)
						}
						continue
					}
					c.insert(c.key, f*float64(n))
				}
			}
		}
		c.cur, c.next = c.next, c.cur
		first = false
	}
	if !bulk {
		return true
	}
	total := 0.0
	for _, f := range c.bc {
		total += f
	}
	if total >= bulkLimit {
		return false
	}
	clear(c.bsum)
	for t, f := range c.bc {
		if f != 0 {
			for _, u := range c.sd[t] {
				c.bsum[u] += f
			}
		}
	}
	for u, f := range c.bsum {
		if f == 0 {
			continue
		}
		// Exact: both below 2^53 (bulkLimit).
		g := (f - c.exc[u]) * float64(c.free[u])
		c.aCl[u] += g
		if o >= 0 {
			c.apCl[u] += g
		}
	}
	return true
}

// dead reports whether a chain in state c.key (at class t) can take no further step.
func (c *chainer) dead(t int32) bool {
	for _, list := range [2][]int32{c.targets[t], c.sd[t]} {
		for _, u := range list {
			if b := c.bit[u]; b >= 0 {
				if c.free[u] > 0 && !c.hasBit(c.key, b) {
					return false
				}
			} else if c.free[u]-c.count(c.key, c.cnt[u]) > 0 {
				return false
			}
		}
	}
	return true
}

// results spreads each class's chains evenly over its free members.
func (c *chainer) results(withAp bool) (a, ap []float64) {
	a, ap = c.aBuf, c.apBuf
	clear(a)
	clear(ap)
	for cl, g := range c.members {
		n := float64(c.free[cl])
		if c.aCl[cl] == 0 {
			continue
		}
		for _, r := range g {
			if r != c.excl {
				a[r] = c.aCl[cl] / n
				if withAp {
					ap[r] = c.apCl[cl] / n
				}
			}
		}
	}
	return a, ap
}

func (c *chainer) prepareTable(n int) {
	size := 64
	for size < 4*n {
		size <<= 1
	}
	if len(c.table) < size {
		c.table = make([]int32, size)
	} else {
		c.table = c.table[:size]
		clear(c.table)
	}
}

func hashKey(key []uint64) uint64 {
	h := uint64(0x9e3779b97f4a7c15)
	for _, w := range key {
		h ^= w
		h *= 0xbf58476d1ce4e5b9
		h ^= h >> 31
	}
	return h
}

// insert adds weight g to the state key of the next layer.
func (c *chainer) insert(key []uint64, g float64) {
	W := c.words
	mask := uint64(len(c.table) - 1)
	for i := hashKey(key) & mask; ; i = (i + 1) & mask {
		e := c.table[i]
		if e == 0 {
			c.next.keys = append(c.next.keys, key...)
			c.next.vals = append(c.next.vals, g)
			c.table[i] = int32(len(c.next.vals))
			if 2*len(c.next.vals) > len(c.table) {
				c.grow()
			}
			return
		}
		if slices.Equal(c.next.keys[int(e-1)*W:int(e)*W], key) {
			c.next.vals[e-1] += g
			return
		}
	}
}

func (c *chainer) grow() {
	W := c.words
	c.table = make([]int32, 2*len(c.table))
	mask := uint64(len(c.table) - 1)
	for s := range c.next.vals {
		i := hashKey(c.next.keys[s*W:(s+1)*W]) & mask
		for c.table[i] != 0 {
			i = (i + 1) & mask
		}
		c.table[i] = int32(s + 1)
	}
}

// swapped returns v with the entries of twins x and y swapped, into dst: the chains from (or of)
// y are those from x with the two exchanged.
func swapped(dst, v []float64, x, y int32) []float64 {
	dst = append(dst[:0], v...)
	dst[x], dst[y] = v[y], v[x]
	return dst
}
