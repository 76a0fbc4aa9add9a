package bgpmodel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/nodesource"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// The fast Build and Propagate against the original implementations (exact_test.go): the same
// sessions, the same paths for every pair of nodes, the same figures, on random topologies (with
// twins, shared and own cluster IDs, clients on random route reflectors, meshes, racks and spines)
// and random down masks, at sizes the original handles.

func sameFloat(a, b float64) bool {
	if a == b {
		return true
	}
	// Beyond 2^53 the two sum in different orders.
	return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) && math.Max(math.Abs(a), math.Abs(b)) >= 1<<53
}

func compareModels(t *testing.T, name string, topo *Topology, down []bool) {
	t.Helper()
	got, err := topo.Propagate(down)
	require.NoErrorf(t, err, "%s", name)
	want, err := topo.propagateExact(down)
	require.NoErrorf(t, err, "%s: exact", name)
	for n := range topo.Nodes {
		for o := range topo.Nodes {
			if g, w := got.Paths(n, o), want.Paths(n, o); !sameFloat(g, w) {
				require.Fail(t, fmt.Sprintf("%s: paths of %s at %s: fast %v, exact %v", name, topo.Nodes[o].Name, topo.Nodes[n].Name, g, w))
			}
		}
		g, w := got.Nodes[n], want.Nodes[n]
		if !sameFloat(g.Routes, w.Routes) {
			require.Fail(t, fmt.Sprintf("%s: node %s: fast %+v, exact %+v", name, topo.Nodes[n].Name, g, w))
		}
		g.Routes = w.Routes
		if g != w {
			require.Fail(t, fmt.Sprintf("%s: node %s: fast %+v, exact %+v", name, topo.Nodes[n].Name, g, w))
		}
	}
	gs, ws := got.Summary, want.Summary
	if !sameFloat(gs.MaxRoutesPerNode, ws.MaxRoutesPerNode) || !sameFloat(gs.TotalRoutes, ws.TotalRoutes) ||
		!sameFloat(gs.MaxPathsPerPrefix, ws.MaxPathsPerPrefix) || math.Abs(gs.MeanPathsPerPrefix-ws.MeanPathsPerPrefix) > 1e-9*ws.MeanPathsPerPrefix {
		require.Fail(t, fmt.Sprintf("%s: summary: fast %+v, exact %+v", name, gs, ws))
	}
	gs.States, gs.MaxRoutesPerNode, gs.TotalRoutes, gs.MaxPathsPerPrefix, gs.MeanPathsPerPrefix = ws.States, ws.MaxRoutesPerNode, ws.TotalRoutes, ws.MaxPathsPerPrefix, ws.MeanPathsPerPrefix
	if sameFloat(got.Summary.MaxRoutesPerNode, want.Summary.MaxRoutesPerNode) && got.Summary.MaxRoutesPerNode != want.Summary.MaxRoutesPerNode {
		gs.BusiestNode = ws.BusiestNode // a tie broken by rounding
	}
	require.Falsef(t, gs != ws, "%s: summary: fast %+v, exact %+v", name, got.Summary, want.Summary)
}

// rrGraph is a route reflector graph with clients, to turn into nodes and BGPPeers.
type rrGraph struct {
	ids     []string // cluster ID per route reflector
	edges   [][2]int
	clients [][]int // per client: its route reflectors
	direct  [][2]int
	mesh    bool
}

func (g *rrGraph) topology(t testing.TB) *Topology {
	t.Helper()
	var nodes []Node
	var peers []extender.BGPPeer
	R := len(g.ids)
	for i, id := range g.ids {
		nodes = append(nodes, Node{Name: fmt.Sprintf("rr%03d", i), ClusterID: id, Labels: map[string]string{"id": fmt.Sprint(i)}})
	}
	for c := range g.clients {
		nodes = append(nodes, Node{Name: fmt.Sprintf("c%03d", c), Labels: map[string]string{"id": fmt.Sprint(R + c)}})
	}
	for _, e := range g.edges {
		peers = append(peers, peer(fmt.Sprintf("h%d-%d", e[0], e[1]), fmt.Sprintf("id == '%d'", e[0]), fmt.Sprintf("id == '%d'", e[1])))
	}
	for c, rrs := range g.clients {
		if len(rrs) == 0 {
			continue
		}
		var q []string
		for _, r := range rrs {
			q = append(q, fmt.Sprintf("'%d'", r))
		}
		peers = append(peers, peer(fmt.Sprint("c", c), fmt.Sprintf("id == '%d'", R+c), "id in {"+strings.Join(q, ", ")+"}"))
	}
	for _, e := range g.direct {
		peers = append(peers, peer(fmt.Sprintf("d%d-%d", e[0], e[1]), fmt.Sprintf("id == '%d'", R+e[0]), fmt.Sprintf("id == '%d'", R+e[1])))
	}
	topo, err := Build(nodes, peers, Options{NodeToNodeMesh: g.mesh})
	require.NoError(t, err)
	return topo
}

// randomGraph: route reflector "types" (random neighbourhoods and cluster IDs), each copied into
// several twins (true twins when linked to each other, false ones otherwise), the twins' IDs all
// one, all distinct, or drawn from a small pool; then clients on random route reflectors.
func randomGraph(rng *rand.Rand, maxTypes, maxCopies, maxClients int) *rrGraph {
	g := &rrGraph{mesh: rng.IntN(6) == 0}
	types := 1 + rng.IntN(maxTypes)
	var of [][]int // type -> route reflectors
	pool := 1 + rng.IntN(4)
	nextID := 100
	for range types {
		k := 1 + rng.IntN(maxCopies)
		mode := rng.IntN(3)
		shared := fmt.Sprintf("10.0.0.%d", 1+rng.IntN(pool))
		var rs []int
		for range k {
			id := shared
			switch {
			case mode == 1:
				id = fmt.Sprintf("10.0.1.%d", nextID)
				nextID++
			case mode == 2 && rng.IntN(2) == 0:
				id = fmt.Sprintf("10.0.0.%d", 1+rng.IntN(pool))
			}
			rs = append(rs, len(g.ids))
			g.ids = append(g.ids, id)
		}
		of = append(of, rs)
	}
	for a := range types {
		if len(of[a]) > 1 && rng.IntN(2) == 0 { // true twins
			for i, x := range of[a] {
				for _, y := range of[a][i+1:] {
					g.edges = append(g.edges, [2]int{x, y})
				}
			}
		}
		for b := a + 1; b < types; b++ {
			if rng.IntN(3) == 0 {
				continue
			}
			for _, x := range of[a] {
				for _, y := range of[b] {
					g.edges = append(g.edges, [2]int{x, y})
				}
			}
		}
	}
	// Now and then break a twin class: drop one edge.
	if len(g.edges) > 0 && rng.IntN(4) == 0 {
		i := rng.IntN(len(g.edges))
		g.edges = slices.Delete(g.edges, i, i+1)
	}
	nc := rng.IntN(maxClients + 1)
	for c := range nc {
		var rrs []int
		for r := range g.ids {
			if rng.IntN(3) == 0 {
				rrs = append(rrs, r)
			}
		}
		g.clients = append(g.clients, rrs)
		if c > 0 && rng.IntN(6) == 0 {
			g.direct = append(g.direct, [2]int{c - 1, c})
		}
	}
	return g
}

// rackGraph: racks of `planes` route reflectors sharing the rack's ID (linked to each other, or
// not), a spine of one member per plane sharing an ID, rack member k linked with spine member k;
// now and then a rack with fewer members or the spine with its own IDs.
func rackGraph(rng *rand.Rand) *rrGraph {
	g := &rrGraph{}
	planes := 1 + rng.IntN(3)
	racks := 1 + rng.IntN(5)
	var spine []int
	ownSpine := rng.IntN(4) == 0
	for k := range planes {
		spine = append(spine, len(g.ids))
		id := "10.0.0.1"
		if ownSpine {
			id = fmt.Sprintf("10.0.0.%d", 200+k)
		}
		g.ids = append(g.ids, id)
	}
	for i, x := range spine {
		for _, y := range spine[i+1:] {
			g.edges = append(g.edges, [2]int{x, y})
		}
	}
	linked := rng.IntN(4) > 0
	for r := range racks {
		var members []int
		for k := range planes {
			if k > 0 && rng.IntN(6) == 0 {
				continue
			}
			members = append(members, len(g.ids))
			g.ids = append(g.ids, fmt.Sprintf("10.0.1.%d", r))
			g.edges = append(g.edges, [2]int{spine[k], len(g.ids) - 1})
		}
		if linked {
			for i, x := range members {
				for _, y := range members[i+1:] {
					g.edges = append(g.edges, [2]int{x, y})
				}
			}
		}
		for range 1 + rng.IntN(3) {
			g.clients = append(g.clients, members)
		}
	}
	return g
}

func randomDown(rng *rand.Rand, n int) []bool {
	if rng.IntN(3) == 0 {
		return nil
	}
	down := make([]bool, n)
	for range 1 + rng.IntN(3) {
		down[rng.IntN(n)] = true
	}
	return down
}

func TestPropagateMatchesExactSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	runs := 1500
	if testing.Short() {
		runs = 300
	}
	for i := range runs {
		var g *rrGraph
		switch i % 3 {
		case 0:
			g = randomGraph(rng, 4, 3, 6)
		case 1:
			g = randomGraph(rng, 3, 6, 8) // larger twin classes
		default:
			g = rackGraph(rng)
		}
		topo := g.topology(t)
		down := randomDown(rng, len(topo.Nodes))
		compareModels(t, fmt.Sprint("graph #", i), topo, down)
		if i%5 == 2 { // the steps that end a chain one by one, as past 2^53
			bulkLimit = 0
			compareModels(t, fmt.Sprint("graph #", i, " state by state"), topo, down)
			bulkLimit = 1 << 53
		}
	}
}

// Route reflector meshes with an ID each (one twin class, the counters), mixed with shared IDs.
func TestPropagateMatchesExactSearchMeshes(t *testing.T) {
	for _, nRR := range []int{2, 5, 9, 12} {
		for _, sharedEvery := range []int{0, 2, 3} {
			g := &rrGraph{}
			for i := range nRR {
				id := fmt.Sprintf("10.0.1.%d", i)
				if sharedEvery > 0 && i%sharedEvery == 0 {
					id = "10.0.0.1"
				}
				g.ids = append(g.ids, id)
				for j := range i {
					g.edges = append(g.edges, [2]int{j, i})
				}
			}
			for c := range 6 {
				g.clients = append(g.clients, []int{c % nRR, (c + 1) % nRR})
			}
			topo := g.topology(t)
			name := fmt.Sprintf("%d RRs, shared every %d", nRR, sharedEvery)
			compareModels(t, name, topo, nil)
			down := make([]bool, len(topo.Nodes))
			down[0] = true
			compareModels(t, name+", first down", topo, down)
		}
	}
}

// The planner's layouts at small sizes, intact and in every failure drill the tests run.
func TestPropagateMatchesExactSearchPlans(t *testing.T) {
	for _, layout := range Layouts {
		for _, n := range []int{12, 40, 150} {
			in, res, err := SamplePlan(layout, n, 3)
			require.NoError(t, err)
			topo, err := FromPlan(in, res, Options{})
			require.NoError(t, err)
			name := fmt.Sprintf("%s/%d", layout, n)
			compareModels(t, name, topo, nil)
			for _, z := range res.Zones {
				compareModels(t, name+" without "+z.Zone, topo, topo.ZoneDown(z.Zone))
			}
			for _, rr := range res.RouteReflectors {
				down, _ := topo.NamesDown(rr.Node)
				compareModels(t, name+" without "+rr.Node, topo, down)
			}
		}
	}
	// DualPlane with small racks: many racks, two or three planes.
	for _, c := range [][3]int{{60, 10, 2}, {90, 12, 3}, {200, 25, 2}} {
		in, res := dualPlanePlan(t, c[0], c[1], c[2])
		topo, err := FromPlan(in, res, Options{})
		require.NoError(t, err)
		name := fmt.Sprintf("DualPlane %d nodes, racks of %d, %d planes", c[0], c[1], c[2])
		compareModels(t, name, topo, nil)
		for _, rr := range res.RouteReflectors {
			down, _ := topo.NamesDown(rr.Node)
			compareModels(t, name+" without "+rr.Node, topo, down)
		}
		for _, z := range res.Zones {
			compareModels(t, name+" without "+z.Zone, topo, topo.ZoneDown(z.Zone))
		}
	}
}

// dualPlanePlan plans n simulated nodes in three zones as DualPlane with the given rack size and
// planes.
func dualPlanePlan(t testing.TB, n, rackSize, planes int) (extender.Input, *extender.Result) {
	t.Helper()
	p := policy.Default("dual")
	rs, red := int32(rackSize), int32(planes)
	p.Spec.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: &rs, Redundancy: &red}
	r, errs := policy.Resolve(p)
	require.NoError(t, errs.ToAggregate())
	nodes, err := nodesource.Simulate(n, 3)
	require.NoError(t, err)
	in := extender.Input{Policy: r, Nodes: extender.FromNodes(nodes), Now: nodesource.SimulationStart.Add(24 * 3600e9)}
	return in, extender.Plan(in)
}

// randomSelector: a Calico selector over the keys a..d and id, with every operator.
func randomSelector(rng *rand.Rand, n, depth int) string {
	vals := []string{"x", "y", "z", "", "xy"}
	key := func() string { return []string{"a", "b", "c", "d"}[rng.IntN(4)] }
	val := func() string { return vals[rng.IntN(len(vals))] }
	set := func() string {
		var s []string
		for range 1 + rng.IntN(3) {
			s = append(s, "'"+val()+"'")
		}
		return "{" + strings.Join(s, ", ") + "}"
	}
	if depth > 0 && rng.IntN(3) == 0 {
		op := " && "
		if rng.IntN(2) == 0 {
			op = " || "
		}
		return "(" + randomSelector(rng, n, depth-1) + op + randomSelector(rng, n, depth-1) + ")"
	}
	if depth > 0 && rng.IntN(8) == 0 {
		return "!(" + randomSelector(rng, n, depth-1) + ")"
	}
	switch rng.IntN(13) {
	case 0:
		return "has(" + key() + ")"
	case 1:
		return "!has(" + key() + ")"
	case 2, 3:
		return key() + " == '" + val() + "'"
	case 4:
		return key() + " != '" + val() + "'"
	case 5:
		return key() + " in " + set()
	case 6:
		return key() + " not in " + set()
	case 7:
		return "all()"
	case 8:
		return key() + " contains 'x'"
	case 9:
		return key() + " starts with 'x'"
	case 10:
		return key() + " ends with 'y'"
	case 11:
		return fmt.Sprintf("id == 'n%d'", rng.IntN(n+1))
	default:
		return fmt.Sprintf("id in {'n%d', 'n%d'}", rng.IntN(n+1), rng.IntN(n+1))
	}
}

func TestBuildMatchesExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for i := range 3000 {
		n := 1 + rng.IntN(25)
		var nodes []Node
		for j := range n {
			labels := map[string]string{}
			for _, k := range []string{"a", "b", "c", "d"} {
				if rng.IntN(3) > 0 {
					labels[k] = []string{"x", "y", "z", "", "xy", "w", "yx"}[rng.IntN(7)]
				}
			}
			if rng.IntN(4) > 0 {
				labels["id"] = fmt.Sprint("n", j)
			}
			nodes = append(nodes, Node{Name: fmt.Sprintf("node-%02d", j), Labels: labels})
		}
		if rng.IntN(3) == 0 { // not sorted by name: the index map
			rng.Shuffle(len(nodes), func(a, b int) { nodes[a], nodes[b] = nodes[b], nodes[a] })
		}
		var peers []extender.BGPPeer
		for k := range 1 + rng.IntN(6) {
			var spec apiv3.BGPPeerSpec
			switch rng.IntN(6) {
			case 0: // every node
			case 1:
				spec.Node = fmt.Sprintf("node-%02d", rng.IntN(n+1))
			default:
				spec.NodeSelector = randomSelector(rng, n, 2)
			}
			if rng.IntN(10) > 0 {
				spec.PeerSelector = randomSelector(rng, n, 2)
			}
			if rng.IntN(4) == 0 {
				m := apiv3.ReversePeeringManual
				spec.ReversePeering = &m
			}
			peers = append(peers, extender.BGPPeer{Name: fmt.Sprint("p", k), Spec: spec})
		}
		name := fmt.Sprint("build #", i)
		got, err := Build(nodes, peers, Options{})
		require.NoErrorf(t, err, "%s", name)
		want, err := buildExact(nodes, peers, Options{})
		require.NoErrorf(t, err, "%s: exact", name)
		if got.OneSided != want.OneSided || !slices.Equal(got.Sessions, want.Sessions) {
			require.Fail(t, fmt.Sprintf("%s: fast %d sessions %v, %d one-sided; exact %d sessions %v, %d one-sided; peers %+v",
				name, len(got.Sessions), got.Sessions, got.OneSided, len(want.Sessions), want.Sessions, want.OneSided, peers))
		}
		for j := range nodes {
			if !slices.Equal(got.adj[j], want.adj[j]) {
				require.Fail(t, fmt.Sprintf("%s: peers of %s: fast %v, exact %v", name, nodes[j].Name, got.adj[j], want.adj[j]))
			}
			if got.Index(nodes[j].Name) != j {
				require.Fail(t, fmt.Sprintf("%s: Index(%s) = %d, want %d", name, nodes[j].Name, got.Index(nodes[j].Name), j))
			}
		}
		require.Falsef(t, got.Index("nope") != -1, "%s: Index of an unknown node", name)
	}
}

func TestBuildErrorsAsBefore(t *testing.T) {
	nodes := []Node{{Name: "a", Labels: map[string]string{"x": "1"}}, {Name: "b", Labels: map[string]string{"x": "1"}}, {Name: "c"}}
	for _, c := range []struct {
		nodes []Node
		peers []extender.BGPPeer
		opts  Options
	}{
		{nodes, []extender.BGPPeer{peer("p", "has(", "all()")}, Options{}},
		{nodes, []extender.BGPPeer{peer("p", "all()", "x == ")}, Options{}},
		{nodes, []extender.BGPPeer{peer("p", strings.Repeat("a", 2000), "all()")}, Options{}},
		{nodes, []extender.BGPPeer{peer("p", "has(x)", "all()")}, Options{MaxPairs: 5}},
		{append(slices.Clone(nodes), Node{Name: "a"}), nil, Options{}},
		{[]Node{{Name: "b"}, {Name: "a"}, {Name: "b"}}, nil, Options{}},
		{[]Node{{Name: "a"}, {Name: "a"}, {Name: "b"}}, nil, Options{}},
	} {
		_, err := Build(c.nodes, c.peers, c.opts)
		_, want := buildExact(c.nodes, c.peers, c.opts)
		assert.Falsef(t, err == nil || want == nil || err.Error() != want.Error(), "error %v, the original's %v", err, want)
	}
}

// FromPlan reads the same labels, zone and cluster ID as the original overlay + NodeFromObject,
// with the calico labels annotation and owned keys on the input nodes, in any order.
func TestFromPlanMatchesOverlay(t *testing.T) {
	in, res, err := SamplePlan("Hierarchical", 200, 3)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 1))
	var nodes []*extender.Node
	for _, n := range in.Nodes {
		n = n.DeepCopy()
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		switch rng.IntN(4) {
		case 0:
			n.Annotations[extender.AnnotationCalicoLabels] = `{"extra":"1","routereflector.io/peering-set":"stale"}`
		case 1:
			n.Labels[extender.LabelPeeringSet] = "stale"
			n.Annotations[extender.AnnotationClusterID] = "224.0.0.9"
		case 2:
			n.Annotations[extender.AnnotationCalicoLabels] = `not json`
		}
		nodes = append(nodes, n)
	}
	for _, order := range []string{"as planned", "shuffled"} {
		if order == "shuffled" {
			rng.Shuffle(len(nodes), func(a, b int) { nodes[a], nodes[b] = nodes[b], nodes[a] })
		}
		in.Nodes = nodes
		topo, err := FromPlan(in, res, Options{})
		require.NoError(t, err)
		byName := map[string]*extender.Node{}
		for _, n := range nodes {
			byName[n.Name] = n
		}
		for i, st := range res.Nodes {
			n := byName[st.Name]
			labels := extender.ApplyOwned(n.Labels, extender.OwnedLabelKeys(in.Policy.RRLabelKey), st.Labels)
			ann := extender.ApplyOwned(n.Annotations, extender.OwnedAnnotationKeys(), st.Annotations)
			want := NodeFromObject(st.Name, labels, ann, in.Policy.ZoneLabel)
			got := topo.Nodes[i]
			require.Equal(t, want.Name, got.Name, "%s: node %d", order, i)
			require.Equal(t, want.Zone, got.Zone, "%s: node %d", order, i)
			require.Equal(t, want.ClusterID, got.ClusterID, "%s: node %d", order, i)
			require.Equal(t, fmt.Sprint(want.Labels), fmt.Sprint(got.Labels), "%s: node %d", order, i)
		}
		if ref, err := buildExact(topo.Nodes, res.BGPPeers, Options{}); err != nil || !slices.Equal(ref.Sessions, topo.Sessions) {
			require.Fail(t, fmt.Sprintf("%s: sessions differ from the original Build (%v)", order, err))
		}
	}
}
