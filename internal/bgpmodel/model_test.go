package bgpmodel

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// brute propagates every block by following BIRD's rules literally, path by path, with explicit
// cluster lists and originator IDs. It returns paths[n][o].
func brute(t *Topology, down []bool) [][]float64 {
	n := len(t.Nodes)
	paths := make([][]float64, n)
	for i := range paths {
		paths[i] = make([]float64, n)
	}
	peers := func(i int) []int {
		var out []int
		for _, j := range t.adj[i] {
			if !isDown(down, int(j)) {
				out = append(out, int(j))
			}
		}
		if t.Mesh && !t.IsRR(i) {
			for j := range t.Nodes {
				if j != i && !isDown(down, j) && !t.IsRR(j) && !slices.Contains(out, j) {
					out = append(out, j)
				}
			}
		}
		return out
	}
	for o := range t.Nodes {
		if isDown(down, o) {
			continue
		}
		paths[o][o] = 1
		var receive func(at, from int, cl []string, orig int)
		receive = func(at, from int, cl []string, orig int) {
			if orig == at {
				return // ORIGINATOR_ID is ours
			}
			if t.RRClient(at, from) && slices.Contains(cl, t.Nodes[at].ClusterID) {
				return // cluster list loop, checked on rr-client sessions
			}
			paths[at][o]++
			for _, x := range peers(at) {
				if x == from {
					continue
				}
				src, dst := t.RRClient(at, from), t.RRClient(at, x)
				if !src && !dst {
					continue // iBGP to iBGP without reflection
				}
				if dst && slices.Contains(cl, t.Nodes[at].ClusterID) {
					continue
				}
				no := orig
				if no < 0 {
					no = from
				}
				receive(x, at, append([]string{t.Nodes[at].ClusterID}, cl...), no)
			}
		}
		for _, p := range peers(o) {
			receive(p, o, nil, -1)
		}
	}
	return paths
}

func checkAgainstBrute(t *testing.T, name string, topo *Topology, down []bool) *Model {
	t.Helper()
	m, err := topo.Propagate(down)
	require.NoErrorf(t, err, "%s", name)
	want := brute(topo, down)
	var missing int64
	for n := range topo.Nodes {
		routes := 0.0
		for o := range topo.Nodes {
			if got := m.Paths(n, o); got != want[n][o] {
				require.Fail(t, fmt.Sprintf("%s: paths of %s at %s: model %v, brute force %v", name, topo.Nodes[o].Name, topo.Nodes[n].Name, got, want[n][o]))
			}
			routes += want[n][o]
			if !isDown(down, n) && !isDown(down, o) && want[n][o] == 0 {
				missing++
			}
		}
		if !isDown(down, n) && m.Nodes[n].Routes != routes {
			require.Fail(t, fmt.Sprintf("%s: routes at %s: model %v, brute force %v", name, topo.Nodes[n].Name, m.Nodes[n].Routes, routes))
		}
	}
	require.Falsef(t, m.Summary.MissingPairs != missing, "%s: missing pairs: model %d, brute force %d", name, m.Summary.MissingPairs, missing)
	return m
}

func peer(name, nodeSel, peerSel string) extender.BGPPeer {
	return extender.BGPPeer{Name: name, Spec: apiv3.BGPPeerSpec{NodeSelector: nodeSel, PeerSelector: peerSel}}
}

// randomTopology: a few route reflectors with cluster IDs from a small pool, clients on random
// subsets of them, random route reflector sessions; sometimes twins on purpose.
func randomTopology(rng *rand.Rand) (*Topology, error) {
	nRR := 1 + rng.IntN(6)
	nPlain := 1 + rng.IntN(6)
	ids := 1 + rng.IntN(nRR)
	var nodes []Node
	for i := range nRR {
		nodes = append(nodes, Node{Name: fmt.Sprintf("rr%d", i), ClusterID: fmt.Sprintf("224.0.0.%d", 1+rng.IntN(ids)),
			Labels: map[string]string{"rr": "", "id": fmt.Sprint(i)}})
	}
	for i := range nPlain {
		nodes = append(nodes, Node{Name: fmt.Sprintf("c%d", i), Labels: map[string]string{"id": fmt.Sprint(nRR + i)}})
	}
	var peers []extender.BGPPeer
	dense := rng.IntN(3) == 0
	for i := range nRR {
		for j := i + 1; j < nRR; j++ {
			if dense || rng.IntN(3) > 0 {
				peers = append(peers, peer(fmt.Sprintf("h%d-%d", i, j), fmt.Sprintf("id == '%d'", i), fmt.Sprintf("id == '%d'", j)))
			}
		}
	}
	for c := range nPlain {
		for r := range nRR {
			if rng.IntN(2) == 0 {
				peers = append(peers, peer(fmt.Sprintf("c%d-%d", c, r), fmt.Sprintf("id == '%d'", nRR+c), fmt.Sprintf("id == '%d'", r)))
			}
		}
		if c > 0 && rng.IntN(5) == 0 {
			peers = append(peers, peer(fmt.Sprintf("cc%d", c), fmt.Sprintf("id == '%d'", nRR+c), fmt.Sprintf("id == '%d'", nRR+c-1)))
		}
	}
	return Build(nodes, peers, Options{NodeToNodeMesh: rng.IntN(4) == 0})
}

func TestModelMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		topo, err := randomTopology(rng)
		require.NoError(t, err)
		var down []bool
		if rng.IntN(4) == 0 {
			down = make([]bool, len(topo.Nodes))
			down[rng.IntN(len(down))] = true
		}
		checkAgainstBrute(t, fmt.Sprint("random #", i), topo, down)
	}
}

// A full mesh of route reflectors, each with its own cluster ID: one twin class, where the bulk
// counting matters most.
func TestModelPerRouteReflectorMesh(t *testing.T) {
	for _, nRR := range []int{2, 3, 4, 5, 6} {
		var nodes []Node
		var peers []extender.BGPPeer
		for i := range nRR {
			nodes = append(nodes, Node{Name: fmt.Sprintf("rr%d", i), ClusterID: fmt.Sprintf("224.0.0.%d", i+1), Labels: map[string]string{"rr": "", "set": fmt.Sprint(i % 3)}})
		}
		for c := range 6 {
			nodes = append(nodes, Node{Name: fmt.Sprintf("c%d", c), Labels: map[string]string{"set": fmt.Sprint(c % 3)}})
		}
		peers = append(peers, peer("mesh", "has(rr)", "has(rr)"))
		for s := range 3 {
			peers = append(peers, peer(fmt.Sprint("s", s), fmt.Sprintf("set == '%d' && !has(rr)", s), fmt.Sprintf("has(rr) && set != '%d'", (s+1)%3)))
		}
		topo, err := Build(nodes, peers, Options{})
		require.NoError(t, err)
		m := checkAgainstBrute(t, fmt.Sprint(nRR, " RRs"), topo, nil)
		t.Logf("%d route reflectors, one cluster ID each: busiest node %v routes, max %v paths per prefix", nRR, m.Summary.MaxRoutesPerNode, m.Summary.MaxPathsPerPrefix)
	}
}

func TestModelSmallPlansMatchBruteForce(t *testing.T) {
	for _, layout := range Layouts {
		for _, n := range []int{12, 30, 50} {
			in, res, err := SamplePlan(layout, n, 3)
			require.NoError(t, err)
			topo, err := FromPlan(in, res, Options{})
			require.NoError(t, err)
			name := fmt.Sprintf("%s/%d", layout, n)
			if layout == "PerRouteReflector" && n > 30 {
				continue // brute force is too slow there
			}
			m := checkAgainstBrute(t, name, topo, nil)
			assert.Zerof(t, m.Summary.MissingPairs, "%s: %d missing pairs", name, m.Summary.MissingPairs)
		}
	}
}
