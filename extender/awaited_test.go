package extender

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// joining returns a node created at created that has not reported Ready yet.
func joining(name, zone string, created time.Time) *Node {
	n := node(name, zone, 0, notReady)
	n.CreationTimestamp = metav1.NewTime(created)
	return n
}

func zoneRRs(r *Result) map[string]int {
	m := map[string]int{}
	for _, rr := range r.RouteReflectors {
		if !rr.Draining {
			m[rr.Zone]++
		}
	}
	return m
}

func TestAwaitedZoneKeepsItsShare(t *testing.T) {
	p := resolve(t, v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{ClusterIDs: v1alpha1.PerRouteReflector}})
	now := t0.Add(time.Hour)
	created := now.Add(-10 * time.Second)
	nodes := []*Node{
		node("c-1", "zone-c", 0), node("c-2", "zone-c", 0), node("c-3", "zone-c", 0),
		joining("a-1", "zone-a", created), joining("b-1", "zone-b", created),
	}
	r := Plan(Input{Policy: p, Nodes: nodes, Now: now})
	if got := zoneRRs(r); fmt.Sprint(got) != "map[zone-c:1]" {
		require.Fail(t, fmt.Sprintf("zones a and b have nodes on their way: zone-c must keep to its share, got %v", got))
	}
	require.Len(t, r.Conditions, 1, "conditions %+v", r.Conditions)
	require.Equal(t, ReasonWaitingForNodes, r.Conditions[0].Reason)
	if want := created.Add(p.NotReadyGrace); !r.RecheckAt.Equal(want) {
		require.Fail(t, fmt.Sprintf("RecheckAt %s, want %s (the end of the wait)", r.RecheckAt, want))
	}

	// Past notReadyGracePeriod the share spills: zone-c takes the route reflectors it has room for.
	late := Plan(Input{Policy: p, Nodes: nodes, Now: created.Add(p.NotReadyGrace)})
	if got := zoneRRs(late); fmt.Sprint(got) != "map[zone-c:3]" {
		require.Fail(t, fmt.Sprintf("after the grace period: %v, want the share spilled into zone-c", got))
	}

	// A node being created (no creation time yet, as in a CREATE admission) is awaited from now.
	fresh := joining("a-2", "zone-a", time.Time{})
	ni := NewNodeInfo(fresh, p)
	ni.Now = now
	RunFilters(DefaultFilters(), p, ni)
	require.True(t, ni.Awaited, "a node being created is awaited")
	require.False(t, ni.Eligible, "a node being created is not eligible yet")
	// Awaited only when NotReady is the only reason: a cordoned joiner is not.
	cordonedJoiner := joining("a-3", "zone-a", created)
	cordonedJoiner.Spec.Unschedulable = true
	ni = NewNodeInfo(cordonedJoiner, p)
	ni.Now = now
	RunFilters(DefaultFilters(), p, ni)
	require.False(t, ni.Awaited, "a cordoned joiner is not awaited")
	require.Equal(t, ReasonNotReady, ni.Reason, "a cordoned joiner")
}

// TestJoinOrderMovesNoRole: nine nodes join three zones at once and turn Ready in a random order;
// the admission path decides each as the webhook does and the planner re-plans between them as
// the reconciler does. No route reflector is ever demoted, and the end is one per zone.
func TestJoinOrderMovesNoRole(t *testing.T) {
	p := resolve(t, v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{ClusterIDs: v1alpha1.PerRouteReflector}})
	for seed := range uint64(50) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			now := t0.Add(time.Hour)
			var nodes []*Node
			for i := range 9 {
				nodes = append(nodes, joining(fmt.Sprintf("node-%d", i), fmt.Sprintf("zone-%c", 'a'+i%3), now))
			}
			order := rng.Perm(len(nodes))
			in := Input{Policy: p, Nodes: nodes, Now: now}
			res := Plan(in)
			apply(p, nodes, res)
			st := NewAdmitState(in, res)
			everRR := map[string]bool{}
			for step, i := range order {
				now = now.Add(time.Second)
				n := nodes[i]
				n.Status.Conditions[0].Status = corev1.ConditionTrue
				st.Now = now
				a := st.Admit(n)
				st.Record(&a)
				if a.Role == AdmitRouteReflector {
					s := a.State(p)
					maps.Copy(n.Labels, s.Labels)
					maps.Copy(n.Annotations, s.Annotations)
				}
				if step%2 == 1 || step == len(order)-1 {
					in = Input{Policy: p, Nodes: nodes, Now: now}
					res = Plan(in)
					apply(p, nodes, res)
					st = NewAdmitState(in, res)
				}
				for _, m := range nodes {
					ni := NewNodeInfo(m, p)
					if ni.CurrentRR && !ni.Draining() {
						everRR[m.Name] = true
					} else if everRR[m.Name] {
						require.Fail(t, fmt.Sprintf("order %v, step %d: %s lost its role (%+v)", order, step, m.Name, res.Conditions))
					}
				}
			}
			if got := zoneRRs(res); fmt.Sprint(got) != "map[zone-a:1 zone-b:1 zone-c:1]" {
				require.Fail(t, fmt.Sprintf("order %v: route reflectors per zone %v", order, got))
			}
			if names := slices.Sorted(maps.Keys(everRR)); len(names) != 3 {
				require.Fail(t, fmt.Sprintf("order %v: %d nodes held the role (%v), want 3", order, len(names), names))
			}
		})
	}
}
