package bgpmodel

import (
	"fmt"
	"testing"
)

// BenchmarkModel: deriving sessions from a plan's labels and BGPPeers (Calico's selector parser)
// and propagating every block, per layout, at 5,000 nodes (65,000 without -short).
func BenchmarkModel(b *testing.B) {
	sizes := []int{5000}
	if !testing.Short() {
		sizes = append(sizes, 65000)
	}
	for _, n := range sizes {
		for _, layout := range Layouts {
			in, res, err := SamplePlan(layout, n, 3)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%s/%d/sessions", layout, n), func(b *testing.B) {
				for b.Loop() {
					if _, err := FromPlan(in, res, Options{}); err != nil {
						b.Fatal(err)
					}
				}
			})
			topo, err := FromPlan(in, res, Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%s/%d/propagate", layout, n), func(b *testing.B) {
				var m *Model
				for b.Loop() {
					if m, err = topo.Propagate(nil); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(m.Summary.MaxRoutesPerNode, "busiest-routes")
				b.ReportMetric(float64(m.Summary.MissingPairs), "missing-pairs")
			})
		}
	}
}
