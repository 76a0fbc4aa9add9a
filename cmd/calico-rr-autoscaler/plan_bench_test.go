package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/nodesource"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// BenchmarkPlanRoutes is what `plan --simulate N --zones Z` does beyond reading its flags: the plan
// and the route figures (the graph model on the plan and on the default layout's plan for the same
// nodes), per topology the planner produces (each with its own defaults; Hierarchical with
// maxRouteReflectors 500, as the default of 25 leaves it Degraded). The goal is under 1 s at
// 65,000 nodes on one core. It reports the layout table of BENCHMARKS.md: route reflectors, most
// clients per route reflector, paths per prefix on the busiest and the mean node.
//
//	go test -run '^$' -bench PlanRoutes -benchtime 3x -cpu 1 ./cmd/calico-rr-autoscaler/
func BenchmarkPlanRoutes(b *testing.B) {
	layouts := []struct {
		name string
		topo *v1alpha1.Topology
		max  int32
	}{
		{"DualPlane", nil, 0},
		{"Hierarchical", &v1alpha1.Topology{Type: v1alpha1.Hierarchical}, 500},
		{"MultiCluster", &v1alpha1.Topology{Type: v1alpha1.MultiCluster}, 0},
		{"PerRouteReflector", &v1alpha1.Topology{Type: v1alpha1.MultiCluster, ClusterIDs: v1alpha1.PerRouteReflector}, 0},
		{"SingleCluster", &v1alpha1.Topology{Type: v1alpha1.SingleCluster}, 0},
	}
	sizes := []struct{ nodes, zones int }{{300, 3}, {1000, 3}, {5000, 1}, {5000, 3}, {5000, 10}, {20000, 3}, {65000, 3}}
	for _, size := range sizes {
		n := size.nodes
		nodes, err := nodesource.Simulate(n, size.zones)
		require.NoError(b, err)
		for _, l := range layouts {
			p := policy.Default("bench")
			p.Spec.Topology = l.topo
			if l.max > 0 {
				p.Spec.MaxRouteReflectors = &l.max
			}
			in := extender.Input{Policy: policy.MustResolve(p), Nodes: extender.FromNodes(nodes), Now: nodesource.SimulationStart.Add(time.Hour)}
			b.Run(fmt.Sprintf("%s/%d/zones=%d", l.name, n, size.zones), func(b *testing.B) {
				var f *routeFigures
				var res *extender.Result
				for b.Loop() {
					res = extender.Plan(in)
					f, err = evaluateRoutes(in, res, false, "")
					require.NoError(b, err)
				}
				b.ReportMetric(float64(res.Summary.RouteReflectors), "RRs")
				b.ReportMetric(float64(res.Summary.MaxClientsPerRouteReflector), "clients/RR")
				b.ReportMetric(f.Cost.BusiestPaths, "busiest-paths/prefix")
				b.ReportMetric(f.Cost.MeanPaths, "mean-paths/prefix")
				if res.Degraded() != nil {
					b.ReportMetric(1, "degraded")
				}
				require.Zerof(b, f.Summary.MissingPairs, "%d missing pairs", f.Summary.MissingPairs)
			})
		}
	}
}
