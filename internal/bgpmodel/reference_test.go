package bgpmodel

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/nodesource"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

func multiPlan(t testing.TB, n, rrs int, mode v1alpha1.ClusterIDMode) (extender.Input, *extender.Result) {
	t.Helper()
	p := policy.Default("ref")
	min := int32(rrs)
	p.Spec.MinRouteReflectors = &min
	p.Spec.Topology = &v1alpha1.Topology{Type: v1alpha1.MultiCluster, ClusterIDs: mode}
	r, errs := policy.Resolve(p)
	require.NoError(t, errs.ToAggregate())
	nodes, err := nodesource.Simulate(n, 3)
	require.NoError(t, err)
	in := extender.Input{Policy: r, Nodes: extender.FromNodes(nodes), Now: nodesource.SimulationStart}
	return in, extender.Plan(in)
}

func model(t testing.TB, in extender.Input, res *extender.Result, down func(*Topology) []bool) *Model {
	t.Helper()
	topo, err := FromPlan(in, res, Options{})
	require.NoError(t, err)
	var d []bool
	if down != nil {
		d = down(topo)
	}
	m, err := topo.Propagate(d)
	require.NoError(t, err)
	return m
}

// The routes on the busiest node that real BIRD 1.6.8 stored for the same layouts (shared
// reference measurements, one BIRD per node configured as Calico configures it).
func TestModelMatchesMeasuredBIRD(t *testing.T) {
	for _, c := range []struct {
		n, rrs int
		mode   v1alpha1.ClusterIDMode
		bird   float64
	}{
		{40, 3, v1alpha1.PerRouteReflector, 556},
		{40, 4, v1alpha1.PerRouteReflector, 1312},
		{40, 5, v1alpha1.PerRouteReflector, 4192},
		{100, 6, v1alpha1.PerRouteReflector, 46552},
		{100, 6, v1alpha1.Grouped, 1951},
		{100, 9, v1alpha1.Grouped, 2728},
	} {
		in, res := multiPlan(t, c.n, c.rrs, c.mode)
		m := model(t, in, res, nil)
		s := m.Summary
		assert.Zerof(t, s.MissingPairs, "%d nodes, %d RRs %s: %d missing pairs", c.n, c.rrs, c.mode, s.MissingPairs)
		assert.Falsef(t, math.Abs(s.MaxRoutesPerNode-c.bird) > 0.1*c.bird, "%d nodes, %d RRs %s: busiest node %v routes, BIRD measured %v", c.n, c.rrs, c.mode, s.MaxRoutesPerNode, c.bird)
		t.Logf("%d nodes, %d RRs %s: busiest %v routes (BIRD %v)", c.n, c.rrs, c.mode, s.MaxRoutesPerNode, c.bird)
	}
}

// sharedClusterID rewrites a plan as projectcalico/calico#2735 has it: every route reflector
// carries the same cluster ID while clients peer with only their own zone's route reflectors.
func sharedClusterID(res *extender.Result) {
	for _, st := range res.Nodes {
		if _, ok := st.Annotations[extender.AnnotationClusterID]; ok {
			st.Annotations[extender.AnnotationClusterID] = "224.0.0.1"
		}
	}
}

func TestModelSharedClusterIDLosesRoutes(t *testing.T) {
	in, res, err := SamplePlan("SingleCluster", 60, 3)
	require.NoError(t, err)
	if got := res.Summary.RouteReflectors; got != 9 {
		require.Fail(t, fmt.Sprintf("plan has %d route reflectors, want 9", got))
	}
	good := model(t, in, res, nil).Summary
	assert.Zero(t, good.MissingPairs, "one cluster ID per zone: missing pairs; BIRD measured 0")
	assert.EqualValues(t, 1750, good.MaxRoutesPerNode, "one cluster ID per zone: busiest node's routes; BIRD measured 1,750")
	sharedClusterID(res)
	m := model(t, in, res, nil)
	bad := m.Summary
	// Measured with BIRD: 1,734 of 3,540 node pairs missing, 162 routes on the busiest node.
	assert.EqualValues(t, 1734, bad.MissingPairs, "shared cluster ID: missing pairs; BIRD measured 1,734")
	assert.EqualValues(t, 162, bad.MaxRoutesPerNode, "shared cluster ID: busiest node's routes; BIRD measured 162")
	pairs := m.MissingPairs(3)
	require.Lenf(t, pairs, 3, "MissingPairs(3) = %v", pairs)
	n, o := m.Topology().Index(pairs[0][0]), m.Topology().Index(pairs[0][1])
	if m.Has(n, o) || m.Topology().Nodes[n].Zone == m.Topology().Nodes[o].Zone {
		assert.Fail(t, fmt.Sprintf("missing pair %v: has=%v, zones %q %q", pairs[0], m.Has(n, o), m.Topology().Nodes[n].Zone, m.Topology().Nodes[o].Zone))
	}
}

func TestModelEveryLayoutReachesAllAndSurvivesAZone(t *testing.T) {
	for _, layout := range Layouts {
		for _, n := range []int{50, 100, 200} {
			in, res, err := SamplePlan(layout, n, 3)
			require.NoError(t, err)
			name := fmt.Sprintf("%s/%d", layout, n)
			m := model(t, in, res, nil)
			assert.Zero(t, m.Summary.MissingPairs, "%s: missing pairs", name)
			assert.Zero(t, m.Summary.OneSided, "%s: one-sided peerings", name)
			for _, z := range res.Zones {
				d := model(t, in, res, func(t *Topology) []bool { return t.ZoneDown(z.Zone) })
				if d.Summary.MissingPairs != 0 {
					assert.Fail(t, fmt.Sprintf("%s without %s: %d missing pairs, e.g. %v", name, z.Zone, d.Summary.MissingPairs, d.MissingPairs(3)))
				}
			}
			for _, rr := range res.RouteReflectors {
				d := model(t, in, res, func(t *Topology) []bool { down, _ := t.NamesDown(rr.Node); return down })
				if d.Summary.MissingPairs != 0 {
					assert.Fail(t, fmt.Sprintf("%s without route reflector %s: %d missing pairs, e.g. %v", name, rr.Node, d.Summary.MissingPairs, d.MissingPairs(3)))
				}
			}
			t.Logf("%s: %d RRs, %d sessions, busiest %v routes, max %v paths per prefix", name, m.Summary.RouteReflectors, m.Summary.Sessions, m.Summary.MaxRoutesPerNode, m.Summary.MaxPathsPerPrefix)
		}
	}
}

// Every layout at 5,000 nodes and (without -short) 65,000, in three zones: the model runs
// within its state budget (never ErrTooLarge) intact and in the failure drills (the first zone
// down, the first route reflector down), finds no missing pair, and takes well under a second.
func TestModelScale(t *testing.T) {
	sizes := []int{5000}
	if !testing.Short() {
		sizes = append(sizes, 65000)
	}
	for _, n := range sizes {
		for _, layout := range Layouts {
			start := time.Now()
			in, res, err := SamplePlan(layout, n, 3)
			require.NoError(t, err)
			planned := time.Since(start)
			start = time.Now()
			topo, err := FromPlan(in, res, Options{})
			require.NoError(t, err)
			built := time.Since(start)
			rrDown, err := topo.NamesDown(res.RouteReflectors[0].Node)
			require.NoError(t, err)
			for _, drill := range []struct {
				name string
				down []bool
			}{{"intact", nil}, {"without " + res.Zones[0].Zone, topo.ZoneDown(res.Zones[0].Zone)}, {"without " + res.RouteReflectors[0].Node, rrDown}} {
				name := fmt.Sprintf("%s/%d %s", layout, n, drill.name)
				start = time.Now()
				m, err := topo.Propagate(drill.down)
				took := time.Since(start)
				if errors.Is(err, ErrTooLarge) {
					assert.Fail(t, fmt.Sprintf("%s: %v", name, err))
					continue
				} else if err != nil {
					require.Fail(t, fmt.Sprintf("%s: %v", name, err))
				}
				s := m.Summary
				t.Logf("%s: plan %v, sessions %v, propagate %v: %d RRs, %d sessions, %d missing, busiest %.4g routes (%.3g per prefix), exact %v, %d states",
					name, planned.Round(time.Millisecond), built.Round(time.Millisecond), took.Round(time.Millisecond), s.RouteReflectors, s.Sessions, s.MissingPairs, s.MaxRoutesPerNode, s.MaxRoutesPerNode/float64(s.Nodes), s.Exact, s.States)
				assert.Zerof(t, s.MissingPairs, "%s: %d missing pairs", name, s.MissingPairs)
				// The goal is a small fraction of this; the bound leaves room for a loaded machine.
				assert.Falsef(t, took > 5*time.Second, "%s: propagate took %v", name, took)
			}
		}
	}
}

// A missing BGPPeer or a wrong selector shows up as missing routes, not as a silent success.
func TestModelCatchesMissingOrWrongBGPPeer(t *testing.T) {
	in, res, err := SamplePlan("MultiCluster", 60, 3)
	require.NoError(t, err)
	dropped := *res
	dropped.BGPPeers = res.BGPPeers[1:]
	if m := model(t, in, &dropped, nil); m.Summary.MissingPairs == 0 {
		assert.Fail(t, "a missing BGPPeer went unnoticed")
	}
	wrong := *res
	wrong.BGPPeers = slices.Clone(res.BGPPeers)
	wrong.BGPPeers[len(wrong.BGPPeers)-1].Spec.PeerSelector = "routereflector.io/rr-id in {'no-such-node'}"
	if m := model(t, in, &wrong, nil); m.Summary.MissingPairs == 0 {
		assert.Fail(t, "a wrong peerSelector went unnoticed")
	}
	manual := *res
	manual.BGPPeers = slices.Clone(res.BGPPeers)
	rp := apiv3.ReversePeeringManual
	manual.BGPPeers[len(manual.BGPPeers)-1].Spec.ReversePeering = &rp
	if m := model(t, in, &manual, nil); m.Summary.MissingPairs == 0 || m.Summary.OneSided == 0 {
		assert.Fail(t, fmt.Sprintf("reversePeering Manual without the reverse BGPPeer: %+v", m.Summary))
	}
}

func TestAlternatives(t *testing.T) {
	in, _, err := SamplePlan("MultiCluster", 300, 3)
	require.NoError(t, err)
	alts, err := Alternatives(in, Options{})
	require.NoError(t, err)
	require.Lenf(t, alts, len(Layouts), "%d alternatives", len(alts))
	for _, a := range alts {
		assert.Zero(t, a.Summary.MissingPairs, "%s: %+v", a.Layout, a.Summary)
		assert.EqualValues(t, 300, a.Summary.Nodes, "%s: %+v", a.Layout, a.Summary)
		t.Logf("%s: busiest %v routes, max %v paths per prefix", a.Layout, a.Summary.MaxRoutesPerNode, a.Summary.MaxPathsPerPrefix)
	}
}
