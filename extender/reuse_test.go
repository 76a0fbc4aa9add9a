package extender

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv/nodetest"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// TestAtIsPlan: a plan moved to a later time (Result.At) is the plan Plan computes for the same
// input at that time, whenever At accepts the time; and At refuses the times at which the plan
// changes by the clock alone. Each topology's cluster holds every clock the planner reads: a
// route reflector NotReady within its grace, clients NotReady since different times, a node
// created NotReady, a draining route reflector, a route reflector whose BGP sessions are down, and
// a stabilization history holding a higher count than the nodes ask for. The clock walks 10
// minutes in 10-second steps, past every one of them; at a time At refuses, the plan is computed
// whole and written to the nodes, as the reconciler does.
func TestAtIsPlan(t *testing.T) {
	for _, tc := range []struct {
		name   string
		topo   *v1alpha1.Topology
		drills bool
	}{
		{"MultiCluster", nil, false},
		{"MultiCluster per route reflector", perRR, false},
		{"SingleCluster", single, false},
		{"Hierarchical", hier, false},
		{"DualPlane", dual, false},
		{"DualPlane with drills", dual, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.drills && PlanDrills == nil {
				t.Skip("no graph model hook")
			}
			p := resolve(t, v1alpha1.RouteReflectorPolicySpec{Topology: tc.topo})
			start := t0.Add(24 * time.Hour)
			nodes := cluster(900, 3)
			settled := Plan(Input{Policy: p, Nodes: nodes, Now: start})
			apply(p, nodes, settled)
			// The history of a larger cluster a minute before: the window holds a higher count.
			history := Plan(Input{Policy: p, Nodes: cluster(1500, 3), Now: start.Add(-time.Minute)}).Recommendations
			now := start.Add(time.Minute)
			var rrs, clients []*Node
			for _, n := range nodes {
				if _, rr := n.Labels[p.RRLabelKey]; rr {
					rrs = append(rrs, n)
				} else {
					clients = append(clients, n)
				}
			}
			require.GreaterOrEqual(t, len(rrs), 3)
			with(rrs[0], nodetest.NotReadySince(now.Add(-30*time.Second)))
			rrs[1].Annotations[AnnotationDrainingSince] = now.Add(-3 * time.Minute).Format(time.RFC3339)
			for i, c := range clients[:5] {
				with(c, nodetest.NotReadySince(now.Add(-time.Duration(20*i)*time.Second)))
			}
			joining := node("joining", "zone-a", 0, notReady)
			joining.CreationTimestamp.Time = now.Add(-10 * time.Second)
			nodes = append(nodes, joining)
			health := map[string]BGPHealth{rrs[2].Name: {DownSince: now.Add(-time.Minute), Sessions: []string{"x"}}}
			in := Input{Policy: p, Nodes: nodes, Now: now, Recommendations: history, BGPHealth: health}
			if tc.drills {
				in.Drills = PlanDrills
			}
			last := Plan(in)
			steps := 60
			if tc.drills {
				steps = 20
			}
			accepted, refused := 0, 0
			for k := 0; k <= steps; k++ {
				at := now.Add(time.Duration(k) * 10 * time.Second)
				if tc.drills {
					at = now.Add(time.Duration(k) * 30 * time.Second)
				}
				next := in
				next.Now, next.Recommendations = at, last.Recommendations
				fresh := Plan(next)
				got, ok := last.At(p, at, last.Recommendations)
				if !ok {
					// Planned whole, written to the nodes, as the reconciler does.
					refused++
					apply(p, nodes, fresh)
					next.Recommendations = fresh.Recommendations
					last = Plan(next)
					continue
				}
				accepted++
				if !reflect.DeepEqual(fresh, got) {
					require.Equal(t, fresh, got, fmt.Sprintf("plan moved from %s to %s", last.now.Sub(now), at.Sub(now)))
				}
				last = got
			}
			t.Logf("%d times accepted, %d refused", accepted, refused)
			require.Positive(t, accepted)
			require.Positive(t, refused)
		})
	}
}

// TestAtRefuses: At refuses a history that is not the plan's, a time before the plan's, and any
// later time for a plan that took a time from its clock (a node awaited from now).
func TestAtRefuses(t *testing.T) {
	p := resolve(t, v1alpha1.RouteReflectorPolicySpec{})
	now := t0.Add(24 * time.Hour)
	nodes := cluster(300, 3)
	res := Plan(Input{Policy: p, Nodes: nodes, Now: now})
	_, ok := res.At(p, now.Add(time.Second), res.Recommendations)
	require.True(t, ok)
	_, ok = res.At(p, now.Add(-time.Second), res.Recommendations)
	require.False(t, ok, "an earlier time")
	_, ok = res.At(p, now.Add(time.Second), nil)
	require.False(t, ok, "another history")
	// A node with neither a NotReady time nor a creation time is awaited from the plan's time.
	never := node("never-ready", "zone-a", 0, notReady)
	never.CreationTimestamp.Time = time.Time{}
	res = Plan(Input{Policy: p, Nodes: append(nodes, never), Now: now})
	_, ok = res.At(p, now, res.Recommendations)
	require.True(t, ok, "the plan's own time")
	_, ok = res.At(p, now.Add(time.Second), res.Recommendations)
	require.False(t, ok, "a later time of a plan awaiting a node from now")
}
