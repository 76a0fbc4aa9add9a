package bgpverify

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/projectcalico/api/pkg/lib/numorstring"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/nodesource"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// The scratch API server the calico tests share (tests of a package run one at a time).
var shared struct {
	once    sync.Once
	scratch *Scratch
	err     error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.scratch != nil {
		shared.scratch.Close()
	}
	os.Exit(code)
}

// calicoScratch returns the shared scratch API server for the calico speaker. It skips the test
// where network namespaces cannot be created (needNetns); a missing confd, bird or kube-apiserver
// fails it, naming `make tools`.
func calicoScratch(t *testing.T, needNetns bool) *Scratch {
	t.Helper()
	if testing.Short() {
		t.Skip("confd on a kube-apiserver and BIRD in network namespaces run without -short")
	}
	if needNetns {
		if err := NetnsAvailable(); err != nil {
			if errors.Is(err, ErrNoNetns) {
				t.Skipf("the calico speaker needs network namespaces: %v", err)
			}
			require.Fail(t, fmt.Sprint(err))
		}
		_, err := FindBIRD("")
		require.NoError(t, err)
	}
	_, err := FindConfd("")
	require.NoError(t, err)
	shared.once.Do(func() {
		start := time.Now()
		shared.scratch, shared.err = StartScratch(context.Background())
		if shared.err == nil {
			t.Logf("kube-apiserver with Calico's CRDs ready in %v", time.Since(start).Round(time.Millisecond))
		}
	})
	require.False(t, shared.err != nil, shared.err)
	return shared.scratch
}

func runCalicoPlan(t *testing.T, s *Scratch, in extender.Input, res *extender.Result, o Options) *Report {
	t.Helper()
	o.Speaker, o.Scratch = SpeakerCalico, s
	if testing.Verbose() {
		o.Log = testLog{t}
	}
	// The run's own convergence waits decide; this bound only ends a run that hangs. Drills add
	// two waits per zone and route reflector (about a tenth of the nodes): a 100-node dual-stack
	// MultiCluster run with two labs at once on a machine loaded 40 to 90 took over 15 minutes
	// (drills of up to 3m44s).
	bound := 5 * time.Minute
	if o.Drills {
		bound += time.Duration(len(res.Nodes)) * 15 * time.Second
	}
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	rep, err := Run(ctx, in, res, o)
	require.NoError(t, err)
	return rep
}

// calicoMatchesModel checks a phase against the graph model: every node misses the blocks the
// model says and stores its routes within 10% of the model's count. After a failure drill the
// counts are not compared: with `graceful restart` the survivors keep paths through the stopped
// speakers as stale for the restart time (120 s), as calico-node's BIRD does.
func calicoMatchesModel(t *testing.T, name string, in extender.Input, res *extender.Result, rep *Report, ph *Phase) {
	t.Helper()
	sameRoutes(t, name, in, res, rep, ph)
	for _, nr := range ph.Nodes {
		assert.Falsef(t, ph.Down == nil && math.Abs(float64(nr.Routes)-nr.ModelRoutes) > 0.1*nr.ModelRoutes, "%s: %s stores %d routes, the model says %v", name, nr.Name, nr.Routes, nr.ModelRoutes)
	}
	assert.Falsef(t, int64(ph.Summary.MissingPairs) != ph.Summary.ModelMissingPairs, "%s: %d missing pairs, the model says %d", name, ph.Summary.MissingPairs, ph.Summary.ModelMissingPairs)
}

func noConfigDifferences(t *testing.T, name string, diffs []string) {
	t.Helper()
	for i, d := range diffs {
		if i == 10 {
			assert.Fail(t, fmt.Sprintf("%s: and %d more differences", name, len(diffs)-i))
			break
		}
		assert.Fail(t, fmt.Sprintf("%s: confd and the model differ: %s", name, d))
	}
}

// TestCalico runs the proofs on Calico's own confd one after another (they share one scratch API
// server), beside the other speakers' tests: it and they are parallel tests, so the package's wall
// time is the longer of the two chains rather than their sum (both mostly wait on BGP timers).
func TestCalico(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"MatchesModel", testCalicoMatchesModel},
		{"VerifyClusterReadsTheClusterState", testVerifyClusterReadsTheClusterState},
		{"ConfdSessionsMatchModelWithMesh", testConfdSessionsMatchModelWithMesh},
		{"BIRDConfigMatchesConfd", testBIRDConfigMatchesConfd},
		{"BGPPeerPasswordAndRestartTime", testCalicoBGPPeerSettings},
	} {
		t.Run(c.name, c.f)
	}
}

// The layouts on confd + BIRD: confd configures the sessions the model derives, and BIRD running
// confd's configurations learns what the model says, route counts within 10%. MultiCluster and
// Hierarchical at 30 nodes, which gives each several racks or zones; SingleCluster at 18 (its 9
// route reflectors, 3 per zone under one cluster ID each, all meshed, as at 30 and 100, for 700
// paths at the busiest node where 30 nodes give 1,000: 13 s of CPU instead of 29). Left to others:
// DualPlane at 30 nodes (racks of 10 under a spine) is TestCalicoFamilies/DualStack's layout and
// size, which holds the same (confd's sessions the model's, every node's routes within 10% of the
// model, its missing blocks the model's) in IPv4 and IPv6; PerRouteReflector at 30 nodes has one route reflector per zone, each
// its own cluster, which is MultiCluster's plan (checked below), about 15 s of CPU for the same
// sessions and figures. At 50 nodes the proof took 6 of make test's 10 minutes on two cores;
// TestCalicoLarge runs every layout at 100.
func testCalicoMatchesModel(t *testing.T) {
	// What leaving PerRouteReflector out rests on: at 30 nodes its plan is MultiCluster's.
	_, mc := samplePlan(t, "MultiCluster", 30)
	_, prr := samplePlan(t, "PerRouteReflector", 30)
	require.Equal(t, mc.RouteReflectors, prr.RouteReflectors, "PerRouteReflector's route reflectors at 30 nodes")
	for i, n := range mc.Nodes {
		require.Equal(t, n.Annotations[extender.AnnotationClusterID], prr.Nodes[i].Annotations[extender.AnnotationClusterID], "%s's cluster ID", n.Name)
	}
	calicoMatchesModelAt(t, []string{"SingleCluster"}, 18)
	calicoMatchesModelAt(t, []string{"MultiCluster", "Hierarchical"}, 30)
}

// TestCalicoLarge (make test-all) runs the larger confd proofs one after another, beside
// TestSpeakersAgreeLarge (both parallel tests, as in make test):
//   - MatchesModel: every layout at 100 nodes: more racks and chains of route reflectors, the same
//     failure modes as at 30;
//   - SharedClusterIDLosesRoutes: calico#2735's failure on confd's configuration at 60 nodes (make
//     test proves it on BIRD and GoBGP with the lab's own configuration, which TestCalico's
//     BIRDConfigMatchesConfd holds to confd's);
//   - FailureDrills: confd + BIRD after a zone and a route reflector are lost, against the model
//     (make test proves the same failures on GoBGP, which agrees with the model node by node in
//     TestSpeakersAgree, and on BIRD in TestBIRDFailZone).
func TestCalicoLarge(t *testing.T) {
	testenv.SlowProof(t)
	t.Parallel()
	t.Run("MatchesModel", func(t *testing.T) { calicoMatchesModelAt(t, bgpmodel.Layouts, 100) })
	t.Run("SharedClusterIDLosesRoutes", testCalicoSharedClusterIDLosesRoutes)
	t.Run("FailureDrills", testCalicoFailureDrills)
}

func calicoMatchesModelAt(t *testing.T, layouts []string, sizes ...int) {
	s := calicoScratch(t, true)
	for _, layout := range layouts {
		for _, n := range sizes {
			in, res := samplePlan(t, layout, n)
			rep := runCalicoPlan(t, s, in, res, Options{})
			name := fmt.Sprintf("calico %s/%d", layout, n)
			noConfigDifferences(t, name, rep.ConfigDifferences)
			calicoMatchesModel(t, name, in, res, rep, &Phase{Summary: rep.Summary, Nodes: rep.Nodes})
			assert.Zerof(t, rep.Summary.MissingPairs, "%s: %d missing pairs", name, rep.Summary.MissingPairs)
			t.Logf("%s: %d RRs, %d sessions, converged %v in %.1fs, busiest %d routes (model %.0f), %d missing",
				name, len(res.RouteReflectors), rep.Summary.Sessions, rep.Summary.Converged, rep.Summary.ConvergedSeconds,
				rep.Summary.MaxRoutesPerNode, rep.Summary.ModelMaxRoutesPerNode, rep.Summary.MissingPairs)
		}
	}
}

// projectcalico/calico#2735 on Calico's own configuration: one cluster ID shared by every route
// reflector while clients peer with their own zone's only. BIRD misses the pairs the model says.
func testCalicoSharedClusterIDLosesRoutes(t *testing.T) {
	s := calicoScratch(t, true)
	in, res := samplePlan(t, "SingleCluster", 60)
	for _, st := range res.Nodes {
		if _, ok := st.Annotations[extender.AnnotationClusterID]; ok {
			st.Annotations[extender.AnnotationClusterID] = "224.0.0.1"
		}
	}
	rep := runCalicoPlan(t, s, in, res, Options{})
	noConfigDifferences(t, "shared cluster ID", rep.ConfigDifferences)
	calicoMatchesModel(t, "calico shared cluster ID", in, res, rep, &Phase{Summary: rep.Summary, Nodes: rep.Nodes})
	// The shared measurements with BIRD: 1,734 of 3,540 node pairs.
	assert.Falsef(t, rep.Summary.MissingPairs != 1734, "%d missing pairs, BIRD measured 1,734 (model %d)", rep.Summary.MissingPairs, rep.Summary.ModelMissingPairs)
	t.Logf("shared cluster ID: %+v", rep.Summary)
}

func testCalicoFailureDrills(t *testing.T) {
	s := calicoScratch(t, true)
	in, res := samplePlan(t, "MultiCluster", 60)
	rep := runCalicoPlan(t, s, in, res, Options{FailZone: "zone-a"})
	require.NotNil(t, rep.AfterFailure, "no after-failure report")
	require.EqualValues(t, 40, rep.AfterFailure.Summary.Nodes, "after failure: %+v", rep.AfterFailure)
	calicoMatchesModel(t, "calico without zone-a", in, res, rep, rep.AfterFailure)
	assert.Zerof(t, rep.MissingPairs(), "missing pairs: %d / %d", rep.Summary.MissingPairs, rep.AfterFailure.Summary.MissingPairs)
	rep = runCalicoPlan(t, s, in, res, Options{FailRR: []string{"1"}})
	require.NotNil(t, rep.AfterFailure, "no after-failure report")
	require.Len(t, rep.AfterFailure.Down, 1, "after losing a route reflector: %+v", rep.AfterFailure)
	calicoMatchesModel(t, "calico without "+rep.AfterFailure.Down[0], in, res, rep, rep.AfterFailure)
	assert.Zerof(t, rep.MissingPairs(), "missing pairs: %d / %d", rep.Summary.MissingPairs, rep.AfterFailure.Summary.MissingPairs)
}

// VerifyCluster on a cluster's own state: a plan written to one API server (the "cluster") as the
// product writes it, with the node-to-node mesh left at Calico's default (on), read back and
// checked on a scratch API server of its own. MultiCluster at 18 nodes: its 3 route reflectors
// (one per zone, each its own cluster ID) and 2 BGPPeers are those of 30 nodes, with 153 sessions
// on BIRD instead of the mesh's 435.
func testVerifyClusterReadsTheClusterState(t *testing.T) {
	cluster := calicoScratch(t, true)
	_, big := samplePlan(t, "MultiCluster", 30)
	in, res := samplePlan(t, "MultiCluster", 18)
	require.Equal(t, rrShape(big), rrShape(res), "MultiCluster's route reflectors at 18 and 30 nodes")
	require.Equal(t, len(big.BGPPeers), len(res.BGPPeers), "MultiCluster's BGPPeers at 18 and 30 nodes")
	topo, err := bgpmodel.FromPlan(in, res, bgpmodel.Options{NodeToNodeMesh: true})
	require.NoError(t, err)
	st, err := planState(in, res, topo, Options{ASN: DefaultASN})
	require.NoError(t, err)
	st.configs = nil // no BGPConfiguration: the mesh is on
	require.NoError(t, cluster.write(t.Context(), st))
	o := Options{}
	if testing.Verbose() {
		o.Log = testLog{t}
	}
	rep, err := VerifyCluster(t.Context(), cluster.Config(), o)
	require.NoError(t, err)
	noConfigDifferences(t, "live", rep.ConfigDifferences)
	assert.EqualValues(t, 18, rep.Summary.Nodes, "live cluster: %+v", rep.Summary)
	assert.Zero(t, rep.MissingPairs(), "live cluster: %+v", rep.Summary)
	assert.True(t, rep.Summary.Converged, "live cluster: %+v", rep.Summary)
	assert.Equal(t, rep.Summary.Sessions, rep.Summary.EstablishedSessions, "live cluster: %+v", rep.Summary)
	// The mesh: every two clients peer, plus each client's route reflectors, plus the RR mesh.
	if want := topo.SessionCount(nil); rep.Summary.Sessions != want {
		assert.Fail(t, fmt.Sprintf("%d sessions, the model with the mesh has %d", rep.Summary.Sessions, want))
	}
	t.Logf("live: %+v", rep.Summary)
}

// renderOnly writes a state to the scratch API server and has confd render it, without BIRD.
func renderOnly(t *testing.T, s *Scratch, st *calicoState) []string {
	t.Helper()
	confd, err := FindConfd("")
	require.NoError(t, err)
	logv := func(f string, a ...any) {
		if testing.Verbose() {
			t.Logf(f, a...)
		}
	}
	dirs, err := s.renderState(t.Context(), st, confd, t.TempDir(), logv)
	require.NoError(t, err)
	return dirs
}

func planStateFor(t *testing.T, in extender.Input, res *extender.Result, mesh bool) *calicoState {
	t.Helper()
	topo, err := bgpmodel.FromPlan(in, res, bgpmodel.Options{NodeToNodeMesh: mesh})
	require.NoError(t, err)
	st, err := planState(in, res, topo, Options{ASN: DefaultASN, NodeToNodeMesh: mesh})
	require.NoError(t, err)
	return st
}

// meshSizes are the plan sizes of ConfdSessionsMatchModelWithMesh: 24 nodes, which give
// SingleCluster, MultiCluster, PerRouteReflector and Hierarchical the route reflectors, cluster IDs,
// racks, spine and BGPPeers they have at 40 (checked below: their plans at 24 and 40 differ only in
// clients); DualPlane at 40, its six racks (two per zone under the spine) where 24 gives three.
// Each node is one confd process and its reads of the scratch API server (about 0.3 s of CPU):
// 136 renders where every layout at 40 took 200.
var meshSizes = map[string]int{"SingleCluster": 24, "MultiCluster": 24, "PerRouteReflector": 24, "Hierarchical": 24, "DualPlane": 40}

// confd renders the sessions and options the model derives, with the node-to-node mesh on too
// (clients mesh, route reflectors leave the mesh); the bird backend's configuration of each node
// is confd's (birdConfigMatchesConfd, on the same renders).
func testConfdSessionsMatchModelWithMesh(t *testing.T) {
	s := calicoScratch(t, false)
	for _, layout := range bgpmodel.Layouts {
		n, ok := meshSizes[layout]
		require.True(t, ok, "no mesh size for %s", layout)
		if n != 40 {
			// What the smaller size rests on: the route reflectors, their cluster IDs, racks and
			// spine, and the BGPPeers are those of 40 nodes.
			_, small := samplePlan(t, layout, n)
			_, big := samplePlan(t, layout, 40)
			require.Equal(t, rrShape(big), rrShape(small), "%s: route reflectors at %d and 40 nodes", layout, n)
			require.Equal(t, len(big.BGPPeers), len(small.BGPPeers), "%s: BGPPeers at %d and 40 nodes", layout, n)
		}
		in, res := samplePlan(t, layout, n)
		st := planStateFor(t, in, res, true)
		dirs := renderOnly(t, s, st)
		_, _, diffs, err := confdTopology(st, dirs)
		require.NoError(t, err)
		noConfigDifferences(t, layout+" with the mesh", diffs)
		birdConfigMatchesConfd(t, fmt.Sprintf("%s/%d mesh=true", layout, n), st, dirs)
	}
}

// rrShape is a plan's route reflectors as their cluster IDs, racks and spine membership.
func rrShape(res *extender.Result) []string {
	var out []string
	for _, rr := range res.RouteReflectors {
		out = append(out, fmt.Sprintf("id=%s rack=%q spine=%v", rr.ClusterID, rr.Rack, rr.Spine))
	}
	slices.Sort(out)
	return out
}

// The bird backend writes BIRD's configuration itself (birdConfig); for the same plan its
// sessions and their options must be those confd renders: the same peers, `rr client` and `rr
// cluster id` where confd writes them, `passive on` only where confd writes it (node-specific
// peers have none in Calico's template; mesh peers toward a higher address), and the same
// bgp_template statements. With the mesh on, every layout (ConfdSessionsMatchModelWithMesh's
// renders); here without it, MultiCluster and Hierarchical.
func testBIRDConfigMatchesConfd(t *testing.T) {
	s := calicoScratch(t, false)
	for _, layout := range []string{"MultiCluster", "Hierarchical"} {
		in, res := samplePlan(t, layout, 24)
		st := planStateFor(t, in, res, false)
		birdConfigMatchesConfd(t, layout+"/24 mesh=false", st, renderOnly(t, s, st))
	}
}

// birdConfigMatchesConfd compares the bird backend's configuration of every node of st with the
// bird.cfg confd rendered for it in dirs.
func birdConfigMatchesConfd(t *testing.T, plan string, st *calicoState, dirs []string) {
	t.Helper()
	addrs := make([]netip.Addr, len(st.addrs))
	for i, a := range st.addrs {
		addrs[i] = a.Addr()
	}
	nodes := speakerNodesAt(st.model, addrs, st.blocks)
	require.Len(t, nodes, len(dirs), "%s: nodes", plan)
	for i, nd := range nodes {
		mine, err := parseBIRDConfig(birdConfig(nd, DefaultASN, 179, podPool))
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(dirs[i], "bird.cfg"))
		require.NoError(t, err)
		theirs, err := parseBIRDConfig(string(b))
		require.NoError(t, err)
		name := fmt.Sprintf("%s %s", plan, nd.name)
		if got, want := statements(mine.template), statements(theirs.template); !slices.Equal(got, want) {
			assert.Fail(t, fmt.Sprintf("%s: bgp_template %q, confd %q", name, got, want))
		}
		key := func(p birdProtocol) string {
			return fmt.Sprintf("%s rr=%v id=%s passive=%v as=%d", p.neighbor, p.rrClient, p.clusterID, p.passive, p.as)
		}
		var got, want []string
		for _, p := range mine.protocols {
			got = append(got, key(p))
		}
		for _, p := range theirs.protocols {
			want = append(want, key(p))
		}
		slices.Sort(got)
		slices.Sort(want)
		assert.Truef(t, slices.Equal(got, want), "%s: bird backend %v, confd %v", name, got, want)
	}
}

// statements are a block's statements without comments and debug settings, sorted.
func statements(body string) []string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		l, _, _ = strings.Cut(l, "#")
		l = strings.Join(strings.Fields(l), " ")
		if l == "" || strings.HasPrefix(l, "debug ") {
			continue
		}
		out = append(out, l)
	}
	slices.Sort(out)
	return out
}

func TestParseBIRDConfig(t *testing.T) {
	rc, err := parseBIRDConfig(`router id 100.64.0.1;
template bgp bgp_template {
  add paths on;
  graceful restart;  # comment
}
# For peer /bgp/v1/host/a/peer_v4/100.64.0.2
protocol bgp Node_100_64_0_2 from bgp_template {
  ttl security off;
  multihop;
  neighbor 100.64.0.2 as 64512;
  source address 100.64.0.1;  # The local address we use for the TCP connection
  import filter {
    accept;
  };
  rr client;
  rr cluster id 224.0.0.1;
}
protocol bgp Mesh_100_64_0_3 from bgp_template {
  neighbor 100.64.0.3 port 1790 as 64513;
  passive on; # Mesh is unidirectional, peer will connect to us.
}
`)
	require.NoError(t, err)
	want := []birdProtocol{
		{name: "Node_100_64_0_2", neighbor: mustAddr("100.64.0.2"), as: 64512, rrClient: true, clusterID: "224.0.0.1"},
		{name: "Mesh_100_64_0_3", neighbor: mustAddr("100.64.0.3"), as: 64513, passive: true},
	}
	assert.Equal(t, "100.64.0.1", rc.routerID, "parsed %+v", rc)
	assert.Equal(t, want, rc.protocols, "parsed %+v", rc)
	assert.Contains(t, rc.template, "add paths on;", "parsed %+v", rc)
}

func TestRewriteDest(t *testing.T) {
	out, n := rewriteDest("[template]\nsrc = \"bird.cfg.template\"\ndest = \"/etc/calico/confd/config/bird.cfg\"\nprefix = \"/calico/\"\n", "/tmp/x/n3")
	assert.EqualValues(t, 1, n, "%s", out)
	assert.Contains(t, out, "dest = \"/tmp/x/n3/bird.cfg\"\n")
	assert.Contains(t, out, "src = \"bird.cfg.template\"")
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// agree fails when confd and the model differ on any session or option.
func agree(t *testing.T, diffs []string) {
	t.Helper()
	if len(diffs) > 0 {
		require.Fail(t, fmt.Sprintf("confd and the model differ: %s", strings.Join(diffs, "; ")))
	}
}

// A BGPPeer with a peerIP that is a node's address (node-00010 peers with node-00011 by IP) is a
// session between two nodes in Calico: confd configures it on the local node and, with automatic
// reverse peering, on the node that owns the address. The model reads the node's BGP address
// (Node.IP) and agrees (it once ignored every BGPPeer with a peerIP).
func TestConfdModelPeerIPOfANode(t *testing.T) {
	s := calicoScratch(t, false)
	in, res := samplePlan(t, "MultiCluster", 12)
	res.BGPPeers = append(slices.Clone(res.BGPPeers), extender.BGPPeer{Name: "by-ip", Spec: apiv3.BGPPeerSpec{
		Node: "node-00010", PeerIP: "0.0.0.0", ASNumber: numorstring.ASNumber(DefaultASN)}})
	st := planStateFor(t, in, res, false)
	st.peers[len(st.peers)-1].Spec.PeerIP = st.addrs[st.model.Index("node-00011")].Addr().String()
	// The model of the state as written: the nodes carry their BGP addresses.
	var err error
	st.model, err = bgpmodel.FromCluster(extender.FromNodes(st.nodes), st.peers, corev1.LabelTopologyZone, bgpmodel.Options{})
	require.NoError(t, err)
	require.True(t, slices.Contains(st.model.Peers(st.model.Index("node-00010")), int32(st.model.Index("node-00011"))), "the model has no session node-00010-node-00011")
	_, _, diffs, err := confdTopology(st, renderOnly(t, s, st))
	require.NoError(t, err)
	agree(t, diffs)
}

// Calico accepts a strictly masked IPv4 network as a cluster ID (validator.ValidateIPv4Network:
// "224.0.0.9/32", even "224.0.0.0/8"), so the node is a route reflector to confd, which writes
// the value into `rr cluster id` (BIRD then refuses the configuration); bgpmodel.ParseClusterID
// takes it as confd does (it once took only an address and treated the node as a plain one).
func TestConfdModelClusterIDInCIDRForm(t *testing.T) {
	s := calicoScratch(t, false)
	in, res := samplePlan(t, "MultiCluster", 12)
	rr := res.RouteReflectors[0].Node
	for _, n := range res.Nodes {
		if n.Name == rr {
			n.Annotations[extender.AnnotationClusterID] = "224.0.0.9/32"
		}
	}
	st := planStateFor(t, in, res, false)
	dirs := renderOnly(t, s, st)
	_, _, diffs, err := confdTopology(st, dirs)
	require.NoError(t, err)
	if bird, err := FindBIRD(""); err == nil {
		out, err := exec.Command(bird, "-p", "-c", filepath.Join(dirs[st.model.Index(rr)], "bird.cfg")).CombinedOutput()
		t.Logf("bird -p on %s's configuration: %v %s", rr, err, strings.TrimSpace(string(out)))
	}
	agree(t, diffs)
}

// A policy with spec.bgpPeer (a password from a Secret's key, maxRestartTime 300s): confd reads
// the password from the Secret in its namespace and renders it, and the restart time, on every
// BGP protocol of every node; every session comes up Established on BIRD with the password (TCP
// MD5), and no pair misses a route.
func testCalicoBGPPeerSettings(t *testing.T) {
	s := calicoScratch(t, true)
	pol := policy.Default("bgp-settings")
	pol.Spec.Topology = &v1alpha1.Topology{Type: v1alpha1.MultiCluster}
	pol.Spec.BGPPeer = &v1alpha1.BGPPeerSettings{
		Password: &v1alpha1.BGPPassword{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "bgp-secrets"}, Key: "rr-password"}},
		MaxRestartTime: &metav1.Duration{Duration: 300 * time.Second},
	}
	nodes, err := nodesource.Simulate(12, 3)
	require.NoError(t, err)
	in := extender.Input{Policy: policy.MustResolve(pol), Nodes: extender.FromNodes(nodes), Now: nodesource.SimulationStart.Add(24 * time.Hour)}
	res := extender.Plan(in)

	// The rendered bird.cfg: the Secret's password and the restart time on every BGP protocol.
	st := planStateFor(t, in, res, false)
	dirs := renderOnly(t, s, st)
	sec, err := s.cs.CoreV1().Secrets(ConfdNamespace).Get(t.Context(), "bgp-secrets", metav1.GetOptions{})
	require.NoError(t, err)
	password := string(sec.Data["rr-password"])
	require.NotEmpty(t, password)
	protocols := 0
	for i, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "bird.cfg"))
		require.NoError(t, err)
		rc, err := parseBIRDConfig(string(b))
		require.NoError(t, err)
		for _, p := range rc.protocols {
			protocols++
			block := protocolBlock(string(b), p.name)
			assert.Containsf(t, block, `password "`+password+`";`, "%s: protocol %s without the Secret's password", st.nodes[i].Name, p.name)
			assert.Containsf(t, block, "graceful restart time 300;", "%s: protocol %s without the restart time", st.nodes[i].Name, p.name)
		}
	}
	require.Positive(t, protocols)

	// The same plan on BIRD: every session Established with the password.
	rep := runCalicoPlan(t, s, in, res, Options{})
	noConfigDifferences(t, "BGPPeer settings", rep.ConfigDifferences)
	require.NotNil(t, rep.Rendered)
	assert.Equal(t, protocols, rep.Rendered.Protocols, "rendered: %+v", rep.Rendered)
	assert.Equal(t, protocols, rep.Rendered.Password, "rendered: %+v", rep.Rendered)
	assert.Equal(t, map[string]int{"300": protocols}, rep.Rendered.RestartTime, "rendered: %+v", rep.Rendered)
	assert.Positive(t, rep.Summary.Sessions, "%+v", rep.Summary)
	assert.Equal(t, rep.Summary.Sessions, rep.Summary.EstablishedSessions, "sessions not Established: %+v", rep.Summary)
	assert.True(t, rep.Summary.Converged, "%+v", rep.Summary)
	assert.Zero(t, rep.MissingPairs(), "%+v", rep.Summary)
	t.Logf("BGPPeer settings: %d protocols, %d with the password, restart times %v; %d of %d sessions Established, %d missing pairs",
		rep.Rendered.Protocols, rep.Rendered.Password, rep.Rendered.RestartTime, rep.Summary.EstablishedSessions, rep.Summary.Sessions, rep.Summary.MissingPairs)
}

// protocolBlock is the text of `protocol bgp name` in a bird.cfg, up to its closing brace.
func protocolBlock(cfg, name string) string {
	_, rest, ok := strings.Cut(cfg, "protocol bgp "+name+" ")
	if !ok {
		return ""
	}
	block, _, _ := strings.Cut(rest, "\n}")
	return block
}
