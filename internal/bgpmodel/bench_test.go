package bgpmodel

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkModel, per layout at 5,000 nodes (and 65,000 without -short), in three zones:
//
//   - fromplan: the plan's nodes with their labels and annotations, then Build (what `plan` runs);
//   - build: Build alone (sessions from Calico's selectors);
//   - propagate: every block, every node up;
//   - zone-down, rr-down: the failure drills, the first zone or the first route reflector down.
func BenchmarkModel(b *testing.B) {
	sizes := []int{5000}
	if !testing.Short() {
		sizes = append(sizes, 65000)
	}
	for _, n := range sizes {
		for _, layout := range Layouts {
			in, res, err := SamplePlan(layout, n, 3)
			require.NoError(b, err)
			b.Run(fmt.Sprintf("%s/%d/fromplan", layout, n), func(b *testing.B) {
				for b.Loop() {
					_, err := FromPlan(in, res, Options{})
					require.NoError(b, err)
				}
			})
			topo, err := FromPlan(in, res, Options{})
			require.NoError(b, err)
			b.Run(fmt.Sprintf("%s/%d/build", layout, n), func(b *testing.B) {
				for b.Loop() {
					_, err := Build(topo.Nodes, res.BGPPeers, Options{})
					require.NoError(b, err)
				}
			})
			propagate := func(name string, down []bool) {
				b.Run(fmt.Sprintf("%s/%d/%s", layout, n, name), func(b *testing.B) {
					var m *Model
					for b.Loop() {
						m, err = topo.Propagate(down)
						require.NoError(b, err)
					}
					b.ReportMetric(m.Summary.MaxRoutesPerNode/float64(m.Summary.Nodes), "busiest-paths/prefix")
					b.ReportMetric(float64(m.Summary.MissingPairs), "missing-pairs")
				})
			}
			propagate("propagate", nil)
			propagate("zone-down", topo.ZoneDown(res.Zones[0].Zone))
			down, err := topo.NamesDown(res.RouteReflectors[0].Node)
			require.NoError(b, err)
			propagate("rr-down", down)
		}
	}
}
