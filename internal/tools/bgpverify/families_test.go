package bgpverify

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// familyPlan is the DualPlane sample plan (racks under a spine, 3 zones) of n nodes whose Calico
// address annotations fam(i) gives node i (extender.FamilyIPv4, FamilyIPv6 or both).
func familyPlan(t *testing.T, n int, fam func(i int) extender.Families) (extender.Input, *extender.Result) {
	t.Helper()
	return layoutFamilyPlan(t, "DualPlane", n, fam)
}

// layoutFamilyPlan is familyPlan for any layout of bgpmodel.Layouts: the sample plan (3 zones)
// planned again with the address annotations.
func layoutFamilyPlan(t *testing.T, layout string, n int, fam func(i int) extender.Families) (extender.Input, *extender.Result) {
	t.Helper()
	in, _ := samplePlan(t, layout, n)
	for i, node := range in.Nodes {
		node.Annotations = map[string]string{}
		f := fam(i)
		if f.Has(extender.FamilyIPv4) {
			node.Annotations[extender.AnnotationCalicoIPv4] = fmt.Sprintf("10.0.%d.%d/16", i/250, i%250+1)
		}
		if f.Has(extender.FamilyIPv6) {
			node.Annotations[extender.AnnotationCalicoIPv6] = fmt.Sprintf("fd00::%x/64", i+1)
		}
	}
	return in, extender.Plan(in)
}

func dualStack(int) extender.Families { return extender.FamilyIPv4 | extender.FamilyIPv6 }
func ipv6Only(int) extender.Families  { return extender.FamilyIPv6 }

// familiesMatchModel checks every phase of every family of want (fresh, the failure, each drill)
// against the graph model of that family node by node (the blocks each node misses), and that
// every session of the family is established.
func familiesMatchModel(t *testing.T, name string, in extender.Input, res *extender.Result, rep *Report, want ...extender.Families) {
	t.Helper()
	topo, err := bgpmodel.FromPlan(in, res, bgpmodel.Options{})
	require.NoError(t, err)
	require.Len(t, rep.Families, len(want), "%s: families %v", name, rep.Families)
	for _, fam := range want {
		fr := rep.Families[fam.Key()]
		require.NotNil(t, fr, "%s: no %s figures", name, fam)
		phases := append([]*Phase{{Summary: fr.Summary, Nodes: fr.Nodes}}, fr.Drills...)
		if fr.AfterFailure != nil {
			phases = append(phases, fr.AfterFailure)
		}
		for _, ph := range phases {
			pname := fmt.Sprintf("%s %s%s", name, fam, downSuffix(ph.Down))
			down, err := topo.NamesDown(ph.Down...)
			require.NoError(t, err)
			m, err := topo.PropagateFamily(fam, down)
			require.NoError(t, err)
			absent := topo.FamilyDown(fam, nil)
			for i, nr := range ph.Nodes {
				if absent[i] || down[i] {
					assert.Truef(t, nr.Down, "%s: %s shows up", pname, nr.Name)
					continue
				}
				if w := len(m.Missing(i)); w != len(nr.Missing) {
					assert.Fail(t, fmt.Sprintf("%s: %s misses %d blocks, the model says %d: %v vs %v", pname, nr.Name, len(nr.Missing), w, nr.Missing, m.Missing(i)))
				}
			}
			s := ph.Summary
			assert.Truef(t, s.Converged, "%s: not converged", pname)
			assert.Equalf(t, s.Sessions, s.EstablishedSessions, "%s: sessions established", pname)
			assert.EqualValuesf(t, m.Summary.MissingPairs, s.MissingPairs, "%s: missing pairs against the model", pname)
			assert.EqualValuesf(t, s.ModelMissingPairs, s.MissingPairs, "%s: missing pairs against the report's model figure", pname)
		}
		t.Logf("%s %s: %d nodes, %d sessions, %d missing pairs fresh (converged in %.1fs, busiest %d routes, model %.0f); %d drills, worst %d missing pairs",
			name, fam, fr.Summary.Nodes, fr.Summary.Sessions, fr.Summary.MissingPairs, fr.Summary.ConvergedSeconds,
			fr.Summary.MaxRoutesPerNode, fr.Summary.ModelMaxRoutesPerNode, len(fr.Drills), fr.MissingPairs())
	}
}

// calicoFamilies runs the plan on confd + BIRD + BIRD6 with every drill (each zone, each route
// reflector lost: runDrills) and checks each family against the model, and 0
// missing pairs in every phase (the plan's drills pass in each family: bgpmodel.FamiliesOf), each
// drill's missing pairs the model's drill figure of that family and failure.
func calicoFamilies(t *testing.T, in extender.Input, res *extender.Result, o Options, want ...extender.Families) {
	s := calicoScratch(t, true)
	_, err := FindBIRD("bird6")
	require.NoError(t, err)
	topo, err := bgpmodel.FromPlan(in, res, bgpmodel.Options{})
	require.NoError(t, err)
	figs, err := bgpmodel.FamiliesOf(in, res, topo)
	require.NoError(t, err)
	for _, fam := range want {
		require.Empty(t, extender.FailedDrills(figs[fam.Key()].Drills), "%s: the model's drills", fam)
	}
	o.Drills = true
	start := time.Now()
	rep := runCalicoPlan(t, s, in, res, o)
	noConfigDifferences(t, "calico", rep.ConfigDifferences)
	familiesMatchModel(t, "calico", in, res, rep, want...)
	masks, _ := drillMasks(topo, o.DrillRRs)
	for _, fam := range want {
		fr := rep.Families[fam.Key()]
		// Fresh, every node stores its routes (paths) within 10% of the family's model, as
		// TestCalico's MatchesModel holds IPv4 to it.
		for _, nr := range fr.Nodes {
			assert.Falsef(t, !nr.Down && math.Abs(float64(nr.Routes)-nr.ModelRoutes) > 0.1*nr.ModelRoutes, "%s: %s stores %d routes, the model says %v", fam, nr.Name, nr.Routes, nr.ModelRoutes)
		}
		assert.Lenf(t, fr.Drills, len(masks), "%s: drills", fam)
		for _, ph := range fr.Drills {
			fig := modelDrill(t, topo, figs[fam.Key()].Drills, ph.Down)
			assert.EqualValuesf(t, fig.MissingPairs, ph.Summary.MissingPairs, "%s%s: missing pairs against the model's drill %s", fam, downSuffix(ph.Down), fig)
			assert.Zerof(t, ph.Summary.StaleBlocks, "%s%s: stale blocks", fam, downSuffix(ph.Down))
		}
	}
	assert.Zero(t, rep.MissingPairs())
	t.Logf("%d nodes, %d route reflectors, %d drills in %v", len(res.Nodes), len(res.RouteReflectors), len(masks), time.Since(start).Round(time.Second))
}

// modelDrill is the model's drill (bgpmodel's, one family's) whose failure is the nodes down: a
// route reflector alone, else a whole zone.
func modelDrill(t *testing.T, topo *bgpmodel.Topology, drills []extender.Drill, down []string) extender.Drill {
	t.Helper()
	require.NotEmpty(t, down)
	mask, err := topo.NamesDown(down...)
	require.NoError(t, err)
	kind, name := extender.DrillZone, ""
	for i, d := range mask {
		if d {
			name = topo.Nodes[i].Zone
			if len(down) == 1 && topo.IsRR(i) {
				kind, name = extender.DrillRouteReflector, down[0]
			}
			break
		}
	}
	for _, d := range drills {
		if d.Kind == kind && d.Name == name {
			if kind == extender.DrillZone {
				require.Equal(t, topo.ZoneDown(name), mask, "drill %s: the zone's nodes", name)
			}
			return d
		}
	}
	require.Failf(t, "no model drill", "%s %s (down: %v)", kind, name, down)
	return extender.Drill{}
}

// TestCalicoFamilies: 30 nodes in 3 zones, DualPlane (racks under a spine), on confd + BIRD +
// BIRD6 (BIRD and BIRD6 side by side in every node's namespace, as calico-node runs them): a
// dual-stack cluster, 0 missing pairs in each family fresh and after each zone and a route
// reflector are lost (runDrills: the lost nodes' BIRDs stopped and started again, nothing rendered
// again), the model's missing blocks node by node and its drill figures; and the refusal of an
// IPv6-only plan without router IDs (calico-node's CALICO_ROUTER_ID=hash: confd renders the hash
// of the node name as the router ID; without it verify refuses the plan). make test drills the
// three zones and the first route reflector (DrillRRs: 1; the plan's 8 route reflectors lose the
// same share of the sessions and their drills give the same figures); make test-all drills every
// route reflector of the same cluster (TestCalicoFamiliesDualStackLarge) and runs the IPv6-only
// cluster's drills (TestCalicoFamiliesIPv6OnlyLarge).
func TestCalicoFamilies(t *testing.T) {
	t.Parallel() // beside TestCalico's confd proofs: both mostly wait on BGP timers
	t.Run("DualStack", func(t *testing.T) {
		t.Parallel()
		in, res := familyPlan(t, 30, dualStack)
		calicoFamilies(t, in, res, Options{DrillRRs: 1}, extender.FamilyIPv4, extender.FamilyIPv6)
	})
	t.Run("IPv6OnlyNeedsRouterIDs", func(t *testing.T) {
		t.Parallel()
		in, res := familyPlan(t, 30, ipv6Only)
		_, err := Run(t.Context(), in, res, Options{Speaker: SpeakerCalico, Scratch: calicoScratch(t, true)})
		var ie InputError
		require.ErrorAs(t, err, &ie, "an IPv6-only plan without router IDs")
	})
}

// TestCalicoFamiliesDualStackLarge (make test-all): TestCalicoFamilies's dual-stack cluster with
// every drill, each of the 8 route reflectors lost in turn besides the zones (11 drills per family;
// make test's 4 took about 40 s of CPU less).
func TestCalicoFamiliesDualStackLarge(t *testing.T) {
	testenv.SlowProof(t)
	t.Parallel()
	in, res := familyPlan(t, 30, dualStack)
	calicoFamilies(t, in, res, Options{}, extender.FamilyIPv4, extender.FamilyIPv6)
}

// TestDrillMasks: every zone, then every route reflector alone (in the model's node order);
// DrillRRs keeps the zones and the first route reflectors only.
func TestDrillMasks(t *testing.T) {
	in, res := familyPlan(t, 30, dualStack)
	topo, err := bgpmodel.FromPlan(in, res, bgpmodel.Options{})
	require.NoError(t, err)
	var rrs []string
	for i, nd := range topo.Nodes {
		if topo.IsRR(i) {
			rrs = append(rrs, nd.Name)
		}
	}
	require.Len(t, rrs, 8, "the plan's route reflectors")
	for _, c := range []struct{ opt, want int }{{0, 8}, {1, 1}, {3, 3}, {20, 8}} {
		_, names := drillMasks(topo, c.opt)
		require.Len(t, names, 3+c.want, "DrillRRs %d", c.opt)
		for k, zone := range []string{"zone-a", "zone-b", "zone-c"} {
			var want []string
			for _, nd := range topo.Nodes {
				if nd.Zone == zone {
					want = append(want, nd.Name)
				}
			}
			assert.Equal(t, want, names[k], "DrillRRs %d: drill %d, %s lost", c.opt, k, zone)
		}
		for k, rr := range rrs[:c.want] {
			assert.Equal(t, []string{rr}, names[3+k], "DrillRRs %d: drill %d", c.opt, 3+k)
		}
	}
}

// TestCalicoFamiliesIPv6OnlyLarge (make test-all): TestCalicoFamilies's IPv6-only cluster with
// every drill on confd + BIRD6 (calico-node's CALICO_ROUTER_ID=hash). make test keeps the refusal
// of an IPv6-only plan without router IDs and the dual-stack cluster, whose BIRD6 half runs the
// same IPv6 sessions and drills; this adds only that BIRD6 runs with no BIRD beside it, for 11
// drills more (80 s of make test's budget on two cores).
func TestCalicoFamiliesIPv6OnlyLarge(t *testing.T) {
	testenv.SlowProof(t)
	t.Parallel()
	in, res := familyPlan(t, 30, ipv6Only)
	calicoFamilies(t, in, res, Options{CalicoRouterID: bgpmodel.RouterIDHash}, extender.FamilyIPv6)
}

// TestCalicoFamiliesLarge (make test-all): TestCalicoFamilies's dual-stack proof for every layout
// of bgpmodel.Layouts at 100 nodes in 3 zones, one after another on the shared scratch API server:
// confd renders bird.cfg and bird6.cfg, BIRD and BIRD6 run side by side in every node's
// namespace, 0 missing pairs in each family fresh and after each zone and each single route
// reflector is lost (runDrills), every node's missing blocks the model's in every phase and each
// drill's figure the model's drill of its family (calicoFamilies). Every layout's drills pass in
// the model at this size, so every phase is held to 0, not only to the model: SingleCluster's
// clients peer with their own zone's three route reflectors (one cluster ID per zone, all route
// reflectors meshed), so a zone lost takes its clients with it and one route reflector lost
// leaves two; MultiCluster's and PerRouteReflector's clients peer with one route reflector per
// zone.
//
// Measured 2026-11-27 on 2 vCPUs shared with other sessions' tests (load average 18 to 164),
// `RRA_TEST_ALL=1 go test -count=1 -v -timeout 60m -run 'TestCalicoFamiliesLarge'
// ./internal/tools/bgpverify/` (sessions per family; fresh convergence IPv4 / IPv6; every phase
// measured had 0 missing pairs in each family, the model's 0):
//
//	layout             RRs  sessions  fresh (s)      drills  time    outcome
//	SingleCluster        9       309  76.7 / 80.4        12  6m40s   pass
//	MultiCluster         3       294  39.2 / 42.9    4 of 6  15m13s  cut by the run's 15-minute bound
//	PerRouteReflector    3       294  28.6 / 32.1    4 of 6  6m09s   a BIRD's control connection reset
//	Hierarchical        12       294  134.6 / 138.0      15  15m25s  stale blocks (phases cut short)
//	DualPlane           14       191  94.0 / 98.0        17  6m53s   stale blocks (phases cut short)
//	DualPlane again     14       191  72.9 / 83.8        17  7m49s   pass, with all of the code below
//
// (MultiCluster's 15m13s: a later run, beside a second lab; its fresh figures are the first
// run's. DualPlane again: -run 'TestCalicoFamiliesLarge/DualPlane', load average 7 to 116, its
// first zone drill 4m19s.) The failures are the lab's, under that load, and what each led to is in the code now
// (those runs had not all of it): a restarted route reflector's BIRD resetting the control
// connection its 97 holds went through (birdFleet.redial), phases ended by 3 s without change
// halfway through a zone's withdrawal (convergeTo waits for the lost nodes' blocks to go; Stable
// 10 s here), and the run's bound (runCalicoPlan). Only DualPlane has run again with all of it.
func TestCalicoFamiliesLarge(t *testing.T) {
	testenv.SlowProof(t)
	t.Parallel() // beside the other ...Large tests, as in make test-all
	for _, layout := range bgpmodel.Layouts {
		t.Run(layout, func(t *testing.T) {
			in, res := layoutFamilyPlan(t, layout, 100, dualStack)
			// A phase ends when the state the model says is reached (the drills) or nothing has
			// changed for Stable: 10 s, not 3. At a load average of 70, MultiCluster's first zone
			// drill once ended on 3 s without change with 583 paths at its busiest node, where
			// the model (and the other runs) have 257.
			calicoFamilies(t, in, res, Options{Stable: 10 * time.Second}, extender.FamilyIPv4, extender.FamilyIPv6)
		})
	}
}

// mixedFamilies: a third of the nodes IPv4-only, the others dual-stack (the route reflectors are
// among the dual-stack ones).
func mixedFamilies(i int) extender.Families {
	if i%3 == 2 {
		return extender.FamilyIPv4
	}
	return extender.FamilyIPv4 | extender.FamilyIPv6
}

// TestSpeakersDualStack: GoBGP (IPv4 and IPv6 unicast servers) on a dual-stack plan where a third
// of the nodes are IPv4-only: each family as the model says node by node, fresh and after zone-a
// and the first route reflector are lost.
func TestSpeakersDualStack(t *testing.T) {
	t.Parallel()
	in, res := familyPlan(t, 30, mixedFamilies)
	both := []extender.Families{extender.FamilyIPv4, extender.FamilyIPv6}
	for _, o := range []Options{{FailZone: "zone-a"}, {FailRR: []string{"1"}}} {
		rep := run(t, SpeakerGoBGP, in, res, o)
		familiesMatchModel(t, "gobgp", in, res, rep, both...)
	}
}

// TestSpeakersDualStackLarge (make test-all; 66 s on a loaded 2-core machine, 9 drills of 3 to
// 6 s each): the lab's own BIRD and BIRD6 on the same plan, every drill.
func TestSpeakersDualStackLarge(t *testing.T) {
	testenv.SlowProof(t)
	t.Parallel()
	ensureBIRD(t)
	in, res := familyPlan(t, 30, mixedFamilies)
	rep := run(t, SpeakerBIRD, in, res, Options{Drills: true})
	familiesMatchModel(t, "bird", in, res, rep, extender.FamilyIPv4, extender.FamilyIPv6)
}
