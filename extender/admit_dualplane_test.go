package extender_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// TestAdmitDualPlaneRoles: in the default layout every joining node gets its role at admission,
// the first nodes of a new cluster, of a new zone and of a new rack included (they become the rack's
// route reflectors, one per plane, with the rack's cluster ID); the full plan afterwards keeps every
// admitted route reflector with its cluster ID and plane, and gives every admitted node the rack
// admission gave it.
func TestAdmitDualPlaneRoles(t *testing.T) {
	tests := []struct {
		name         string
		base, joiner int // nodes planned before, nodes joining one at a time
		zones        int
		rack         int32
		wantRRs      int // admitted route reflectors
	}{
		{"a new cluster", 0, 6, 3, 500, 2},
		{"a new cluster, one zone", 0, 6, 1, 500, 2},
		{"a new zone in a racked cluster", 60, 5, 4, 20, 2}, // zone-d opens its first rack
		{"full racks open a new one", 60, 15, 3, 20, 6},     // each zone's racks fill, a new rack each
		{"joiners fill the racks that have room", 50, 9, 3, 20, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := admitPolicy(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
				s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: &tt.rack}
			})
			var base, joining []*extender.Node
			for i := range tt.base {
				base = append(base, admitNode(i, fmt.Sprintf("zone-%c", 'a'+i%min(tt.zones, 3)), true))
			}
			if tt.base > 0 {
				res := extender.Plan(extender.Input{Policy: p, Nodes: base, Now: admitT0.Add(time.Hour)})
				for i, st := range res.Nodes {
					applyState(p, base[i], st)
				}
			}
			for i := tt.base; i < tt.base+tt.joiner; i++ {
				zone := fmt.Sprintf("zone-%c", 'a'+i%tt.zones)
				if tt.base > 0 && tt.zones == 4 {
					zone = "zone-d"
				}
				joining = append(joining, admitNode(i, zone, true))
			}
			_, all := joinAll(t, p, base, joining)
			admitted := 0
			for _, n := range joining {
				require.NotEmpty(t, n.Annotations[extender.AnnotationRack], "%s has a rack", n.Name)
				if _, ok := rrOf(p, n); ok {
					admitted++
					require.NotEmpty(t, n.Annotations[extender.AnnotationPlane], "%s has a plane", n.Name)
				} else {
					require.NotEmpty(t, n.Labels[extender.LabelPeeringSet], "%s: a role at admission", n.Name)
				}
			}
			require.Equal(t, tt.wantRRs, admitted, "route reflectors admitted")
			res := extender.Plan(extender.Input{Policy: p, Nodes: all, Now: admitT0.Add(time.Hour)})
			assertNoOvershoot(t, p, all, res)
			planned := map[string]extender.NodeState{}
			for _, st := range res.Nodes {
				planned[st.Name] = st
			}
			for _, n := range joining {
				want := planned[n.Name]
				require.Equal(t, want.Annotations[extender.AnnotationRack], n.Annotations[extender.AnnotationRack], "%s: the plan's rack", n.Name)
				require.Equal(t, want.Annotations[extender.AnnotationPlane], n.Annotations[extender.AnnotationPlane], "%s: the plan's plane", n.Name)
				require.Equal(t, want.Annotations[extender.AnnotationClusterID], n.Annotations[extender.AnnotationClusterID], "%s: the plan's cluster ID", n.Name)
			}
		})
	}
}

// TestAdmitDualPlaneKnownNodeKeepsItsRack: a node the plan placed in a full rack while it was
// NotReady turns Ready before the plan's writes reach its Node (no rack annotation on it yet): its
// admission reads it in the rack the plan gave it, where its own place is counted, and does not
// open a new rack with a new cluster ID beside the rack's route reflectors (seen live on
// 2026-12-02: a ninth route reflector at admission, drained by the next plan for removalDelay).
func TestAdmitDualPlaneKnownNodeKeepsItsRack(t *testing.T) {
	size := int32(5)
	p := admitPolicy(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: &size}
	})
	const late = 13
	var nodes []*extender.Node
	for i := range 15 {
		nodes = append(nodes, admitNode(i, fmt.Sprintf("zone-%c", 'a'+i%3), i != late))
	}
	in := extender.Input{Policy: p, Nodes: nodes, Now: admitT0.Add(time.Hour)}
	res := extender.Plan(in)
	var rack string
	for i, st := range res.Nodes {
		if i == late {
			rack = st.Annotations[extender.AnnotationRack]
			continue
		}
		applyState(p, nodes[i], st)
	}
	require.NotEmpty(t, rack, "the plan places the NotReady node in a rack")
	st := extender.NewAdmitState(in, res)
	st.Now = in.Now
	ready := admitNode(late, "zone-b", true)
	a := st.Admit(ready)
	require.NotEqual(t, extender.AdmitRouteReflector, a.Role, "promoted %s into rack %s with cluster ID %s (%s)", a.Node, a.Rack, a.ClusterID, a.Reason)
	require.Equal(t, extender.AdmitClient, a.Role, "%s: a client of its rack (%s)", a.Node, a.Reason)
	require.Equal(t, rack, a.Rack, "the plan's rack")

	// Ready in another zone: the plan's rack of its old zone is not its rack.
	moved := admitNode(late, "zone-a", true)
	a = st.Admit(moved)
	require.NotEqual(t, rack, a.Rack, "%s moved to zone-a: %s", a.Node, a.Reason)
}
