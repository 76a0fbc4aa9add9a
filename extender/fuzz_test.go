package extender

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// FuzzPlan plans random clusters under random policies, applies the plan, changes a few nodes and
// plans again, checking the invariants after every plan and that planning is deterministic.
func FuzzPlan(f *testing.F) {
	for i, seed := range []uint64{1, 2, 3, 4, 5, 6, 7, 8} {
		f.Add(seed, uint16(20+i*40), uint8(i%5+1), uint8(i), uint8(3), uint8(3), uint8(3), uint8(25), uint8(i*37))
	}
	for i, seed := range []uint64{11, 12, 13, 14, 15, 16} { // DualPlane, several racks per zone
		f.Add(seed, uint16(30+i*45), uint8(i%4+1), uint8(4), uint8(0), uint8(i), uint8(1), uint8(29), uint8(i*11))
	}
	f.Fuzz(func(t *testing.T, seed uint64, n uint16, zones, topo, groups, redundancy, minRR, maxRR, flags uint8) {
		rng := rand.New(rand.NewPCG(seed, uint64(n)))
		p := fuzzPolicy(topo, groups, redundancy, minRR, maxRR, flags)
		resolved, errs := policy.Resolve(p)
		if len(errs) > 0 {
			t.Skip("invalid policy") // validation is tested elsewhere
		}
		nodes := fuzzNodes(rng, int(n%300)+1, int(zones%6)+1)
		now := t0.Add(240 * time.Hour)
		var recs []Recommendation
		for step := 0; step < 4; step++ {
			r := Plan(Input{Policy: resolved, Nodes: nodes, Now: now, Recommendations: recs, Drills: PlanDrills})
			if bad := checkInvariants(resolved, nodes, r); len(bad) > 0 {
				require.Fail(t, fmt.Sprintf("step %d, policy %s: %s", step, describe(p), strings.Join(bad[:min(len(bad), 5)], "\n")))
			}
			// The admission state from the facts Plan recorded equals the one read from the nodes.
			in := Input{Policy: resolved, Nodes: nodes, Now: now, Recommendations: recs}
			bare := *r
			bare.facts = nil
			if fast, slow := NewAdmitState(in, r), NewAdmitState(in, &bare); !reflect.DeepEqual(fast, slow) {
				require.Fail(t, fmt.Sprintf("step %d, policy %s: the admission state from the plan's facts differs from the one read from the nodes", step, describe(p)))
			}
			again := Plan(Input{Policy: resolved, Nodes: nodes, Now: now, Recommendations: recs, Drills: PlanDrills})
			a, _ := json.Marshal(r)
			b, _ := json.Marshal(again)
			require.Falsef(t, string(a) != string(b), "step %d: the same input gave two plans", step)
			apply(resolved, nodes, r)
			recs = r.Recommendations
			churn(rng, nodes, now)
			now = now.Add(time.Duration(rng.IntN(600)) * time.Second)
		}
	})
}

func fuzzPolicy(topo, groups, redundancy, minRR, maxRR, flags uint8) *v1alpha1.RouteReflectorPolicy {
	p := policy.Default("fuzz")
	s := &p.Spec
	lo := int32(minRR%8) + 1
	hi := lo + int32(maxRR%30)
	s.MinRouteReflectors, s.MaxRouteReflectors = &lo, &hi
	t := &v1alpha1.Topology{Redundancy: i32(int32(redundancy%5) + 1), ClusterIDGroups: i32(int32(groups%5) + 1)}
	switch topo % 5 {
	case 0:
		t.Type = v1alpha1.SingleCluster
	case 1:
		t.Type, t.ClusterIDs = v1alpha1.MultiCluster, v1alpha1.Grouped
	case 2:
		t.Type, t.ClusterIDs = v1alpha1.MultiCluster, v1alpha1.PerRouteReflector
	case 3:
		t.Type, t.MaxRackSize = v1alpha1.Hierarchical, i32(int32(flags%40)+5)
	case 4:
		t.Type, t.MaxRackSize, t.ClusterIDGroups = v1alpha1.DualPlane, i32(int32(flags%40)+5), nil
		if redundancy%2 == 0 {
			t.Redundancy = nil // the default's two planes
		}
		if flags%5 == 0 {
			s.MinRouteReflectors, s.MaxRouteReflectors = nil, nil // the default's bounds: none
		}
	}
	s.Topology = t
	switch flags % 3 {
	case 0:
		s.Scaling = &v1alpha1.Scaling{Ratio: fmt.Sprintf("0.0%d", flags%90+10)}
	case 1:
		s.Scaling = &v1alpha1.Scaling{Steps: []v1alpha1.Step{{MaxNodes: 20, RouteReflectors: 2}, {MaxNodes: 100, RouteReflectors: 5}, {MaxNodes: 1000, RouteReflectors: 9}}}
	case 2:
		s.Scaling = &v1alpha1.Scaling{ClientsPerRouteReflector: i32(int32(flags%50) + 5)}
	}
	s.ForbiddenNodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"no-rr": "true"}}
	s.PreferredNodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"rr": "preferred"}}
	s.RemovalDelay = &metav1.Duration{Duration: time.Duration(flags%4) * 100 * time.Second}
	return p
}

func fuzzNodes(rng *rand.Rand, n, zones int) []*Node {
	out := make([]*Node, n)
	for i := range out {
		zone := fmt.Sprintf("zone-%c", 'a'+rng.IntN(zones))
		if rng.IntN(20) == 0 {
			zone = ""
		}
		out[i] = node(fmt.Sprintf("n-%04d", i), zone, rng.IntN(10000))
		mutate(rng, out[i])
	}
	return out
}

// mutate gives a node a random condition: mostly healthy, sometimes NotReady, cordoned,
// forbidden, preferred, tainted or in a rack.
func mutate(rng *rand.Rand, n *Node) {
	switch rng.IntN(14) {
	case 0:
		with(n, notReady)
	case 1:
		with(n, cordoned)
	case 2:
		n.Labels["no-rr"] = "true"
	case 3:
		n.Labels["rr"] = "preferred"
	case 4:
		with(n, deleting)
	case 5:
		n.Labels["rack"] = fmt.Sprintf("r%d", rng.IntN(4))
	}
}

// churn changes a few nodes: conditions flip, labels change, nodes leave and join.
func churn(rng *rand.Rand, nodes []*Node, now time.Time) {
	// Now and then a whole zone goes NotReady, comes back, or a node moves to another zone.
	z := fmt.Sprintf("zone-%c", 'a'+rng.IntN(3))
	switch rng.IntN(8) {
	case 0:
		for _, n := range zoneNodes(nodes, z) {
			setReady(n, false, now)
		}
	case 1:
		for _, n := range zoneNodes(nodes, z) {
			setReady(n, true, now)
		}
	case 2:
		if len(nodes) > 0 {
			nodes[rng.IntN(len(nodes))].Labels[corev1.LabelTopologyZone] = z
		}
	}
	for k := rng.IntN(4); k >= 0 && len(nodes) > 0; k-- {
		n := nodes[rng.IntN(len(nodes))]
		n.Status.Conditions[0].Status = corev1.ConditionTrue
		n.Spec.Unschedulable = false
		delete(n.Labels, "no-rr")
		n.DeletionTimestamp = nil
		mutate(rng, n)
	}
}

func describe(p *v1alpha1.RouteReflectorPolicy) string {
	b, _ := json.Marshal(p.Spec)
	return string(b)
}
