package bgpmodel_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
)

// TestDrillsFindLostRoutes: a fresh default plan passes every drill, one per zone and one per route
// reflector; the same plan without its uplink BGPPeers (racks cut from the spine) fails them.
func TestDrillsFindLostRoutes(t *testing.T) {
	in, res, err := bgpmodel.SamplePlan("DualPlane", 1500, 3)
	require.NoError(t, err)
	drills, err := bgpmodel.PlanDrills(in, res)
	require.NoError(t, err)
	zones, rrs := 0, 0
	for _, d := range drills {
		switch d.Kind {
		case extender.DrillZone:
			zones++
		case extender.DrillRouteReflector:
			rrs++
		}
	}
	require.Equal(t, 3, zones)
	require.Len(t, res.RouteReflectors, rrs)
	require.Empty(t, extender.FailedDrills(drills))

	cut := *res
	cut.BGPPeers = nil
	for _, p := range res.BGPPeers {
		if len(p.Name) < len(extender.UplinkBGPPeerPrefix) || p.Name[:len(extender.UplinkBGPPeerPrefix)] != extender.UplinkBGPPeerPrefix {
			cut.BGPPeers = append(cut.BGPPeers, p)
		}
	}
	require.Less(t, len(cut.BGPPeers), len(res.BGPPeers))
	drills, err = bgpmodel.PlanDrills(in, &cut)
	require.NoError(t, err)
	require.NotEmpty(t, extender.FailedDrills(drills))
}

// TestDrillClassesAgreeWithExact: above ExactDrillNodes one drill runs per class of route reflectors;
// every member of a class loses exactly the pairs its representative does (checked against one
// drill per route reflector), on a healthy plan and on one with its uplinks cut.
func TestDrillClassesAgreeWithExact(t *testing.T) {
	for _, zones := range []int{1, 3, 10} {
		t.Run(fmt.Sprintf("%d zones", zones), func(t *testing.T) {
			in, res, err := bgpmodel.SamplePlan("DualPlane", 6000, zones)
			require.NoError(t, err)
			for _, cutUplinks := range []bool{false, true} {
				r := *res
				if cutUplinks {
					r.BGPPeers = r.BGPPeers[:len(r.BGPPeers)/2]
				}
				byClass, err := bgpmodel.PlanDrills(in, &r)
				require.NoError(t, err)
				oldN, oldR := bgpmodel.ExactDrillNodes, bgpmodel.ExactDrillRRs
				bgpmodel.ExactDrillNodes, bgpmodel.ExactDrillRRs = 1<<30, 1<<30
				exact, err := bgpmodel.PlanDrills(in, &r)
				bgpmodel.ExactDrillNodes, bgpmodel.ExactDrillRRs = oldN, oldR
				require.NoError(t, err)
				got := map[string]int64{}
				for _, d := range exact {
					got[d.Kind+"/"+d.Name] = d.MissingPairs
				}
				covered := 0
				for _, d := range byClass {
					require.Equal(t, got[d.Kind+"/"+d.Name], d.MissingPairs, "%s %s", d.Kind, d.Name)
					covered += max(1, d.Represents)
				}
				require.Equal(t, len(exact), covered, "the classes cover every drill")
				require.Less(t, len(byClass), len(exact), "fewer drills run by class")
			}
		})
	}
}

// BenchmarkPlanWithDrills is what the leader does on a changed layout: the default layout's plan
// with its failure drills (each zone, each route reflector; by class above 5,000 nodes). Goal
// (layout-life issue): under 2 s at 65,000 nodes on one core.
//
//	go test -run '^$' -bench PlanWithDrills -benchtime 3x -cpu 1 ./internal/bgpmodel/
func BenchmarkPlanWithDrills(b *testing.B) {
	for _, size := range []struct{ nodes, zones int }{{5000, 1}, {5000, 3}, {5000, 10}, {65000, 1}, {65000, 3}, {65000, 10}} {
		b.Run(fmt.Sprintf("%d/zones=%d", size.nodes, size.zones), func(b *testing.B) {
			in, _, err := bgpmodel.SamplePlan("DualPlane", size.nodes, size.zones)
			require.NoError(b, err)
			in.Drills = bgpmodel.PlanDrills
			var res *extender.Result
			for b.Loop() {
				res = extender.Plan(in)
			}
			require.NoError(b, res.DrillsErr)
			require.Empty(b, extender.FailedDrills(res.Drills))
			b.ReportMetric(float64(len(res.Drills)), "drills")
			b.ReportMetric(float64(len(res.RouteReflectors)), "RRs")
		})
	}
}
