package extender

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// BenchmarkPlan plans fresh clusters of 1,000, 5,000 and 65,000 nodes in three zones in each
// topology. Goal: 5,000 nodes under 10 ms and 65,000 under 200 ms on one core (make bench).
func BenchmarkPlan(b *testing.B) {
	for _, top := range []*v1alpha1.Topology{dual, nil, perRR, single, hier} {
		name := "MultiCluster-Grouped"
		if top != nil {
			name = string(top.Type) + map[v1alpha1.ClusterIDMode]string{"": "", v1alpha1.PerRouteReflector: "-PerRouteReflector"}[top.ClusterIDs]
		}
		for _, n := range []int{1000, 5000, 65000} {
			b.Run(fmt.Sprintf("%s/nodes=%d", name, n), func(b *testing.B) {
				spec := v1alpha1.RouteReflectorPolicySpec{Topology: top}
				if top == hier {
					spec.MaxRouteReflectors = i32(500) // 130 racks of 500 nodes at 65,000
				}
				p := resolve(b, spec)
				nodes := cluster(n, 3)
				in := Input{Policy: p, Nodes: nodes, Now: t0.Add(24 * time.Hour)}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					Plan(in)
				}
			})
		}
	}
}

// BenchmarkReplan plans a cluster whose nodes already carry the previous plan (the reconciler's
// steady state), in the default layout (DualPlane) and in MultiCluster.
func BenchmarkReplan(b *testing.B) {
	for _, top := range []*v1alpha1.Topology{dual, nil} {
		name := "MultiCluster"
		if top != nil {
			name = string(top.Type)
		}
		for _, n := range []int{5000, 65000} {
			b.Run(fmt.Sprintf("%s/nodes=%d", name, n), func(b *testing.B) {
				p := resolve(b, v1alpha1.RouteReflectorPolicySpec{Topology: top})
				nodes := cluster(n, 3)
				in := Input{Policy: p, Nodes: nodes, Now: t0.Add(24 * time.Hour)}
				apply(p, nodes, Plan(in))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					Plan(in)
				}
			})
		}
	}
}

// BenchmarkAdmitStateHeap builds the admission state of a settled plan of 5,000 and 65,000 nodes
// in three zones (the default layout, as the ledger's commit does) and reports the heap it holds
// (live bytes after a collection) per node: the leader keeps one per policy between plans.
func BenchmarkAdmitStateHeap(b *testing.B) {
	for _, n := range []int{5000, 65000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			p := resolve(b, v1alpha1.RouteReflectorPolicySpec{Topology: dual})
			nodes := cluster(n, 3)
			in := Input{Policy: p, Nodes: nodes, Now: t0.Add(24 * time.Hour)}
			apply(p, nodes, Plan(in))
			res := Plan(in)
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				st := NewAdmitState(in, res)
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "heap-B/node")
				runtime.KeepAlive(st)
			}
		})
	}
}

// TestAdmitStateRoomForAdmissions: a plan's admission state holds the nodes admitted after its
// plan read its input (replayed at the commit, or recorded until the next plan) in the room
// NewAdmitState left (a sixty-fourth of the plan's nodes, at least 64), without copying its node
// list.
func TestAdmitStateRoomForAdmissions(t *testing.T) {
	for _, n := range []int{300, 6400} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			p := resolve(t, v1alpha1.RouteReflectorPolicySpec{Topology: dual})
			nodes := cluster(n, 3)
			in := Input{Policy: p, Nodes: nodes, Now: t0.Add(24 * time.Hour)}
			st := NewAdmitState(in, Plan(in))
			first := &st.nodeList[0]
			room := max(64, n/64) // a sixty-fourth of the plan's nodes, at least 64
			for i := range room {
				st.setNode(fmt.Sprintf("joined-%d", i), admitNode{})
			}
			if &st.nodeList[0] != first {
				t.Fatalf("the node list was copied within the %d nodes of room", room)
			}
			if got := len(st.nodeList); got != n+room {
				t.Fatalf("%d nodes held, want %d", got, n+room)
			}
		})
	}
}
