package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

func i32(v int32) *int32 { return &v }

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		spec v1alpha1.RouteReflectorPolicySpec
		want []string // "field: substring" of each expected error; none when valid
	}{
		{"empty spec is valid", v1alpha1.RouteReflectorPolicySpec{}, nil},
		{"release Keep", v1alpha1.RouteReflectorPolicySpec{Release: &v1alpha1.Release{NodeToNodeMesh: v1alpha1.ReleaseMeshKeep}}, nil},
		{"release Auto at 500 nodes", v1alpha1.RouteReflectorPolicySpec{Release: &v1alpha1.Release{NodeToNodeMesh: v1alpha1.ReleaseMeshAuto, MaxMeshNodes: i32(500)}}, nil},
		{"release maxMeshNodes alone", v1alpha1.RouteReflectorPolicySpec{Release: &v1alpha1.Release{MaxMeshNodes: i32(50)}}, nil},
		{"release unknown mode", v1alpha1.RouteReflectorPolicySpec{Release: &v1alpha1.Release{NodeToNodeMesh: "Sometimes"}},
			[]string{"spec.release.nodeToNodeMesh: Unsupported value: \"Sometimes\": supported values: \"Auto\", \"Restore\", \"Keep\""}},
		{"release maxMeshNodes one", v1alpha1.RouteReflectorPolicySpec{Release: &v1alpha1.Release{MaxMeshNodes: i32(1)}}, []string{"spec.release.maxMeshNodes: Invalid value: 1: must be at least 2"}},
		{"release maxMeshNodes with Restore", v1alpha1.RouteReflectorPolicySpec{Release: &v1alpha1.Release{NodeToNodeMesh: v1alpha1.ReleaseMeshRestore, MaxMeshNodes: i32(50)}},
			[]string{"spec.release.maxMeshNodes: Invalid value: 50: applies only with nodeToNodeMesh Auto, not Restore"}},
		{"min greater than max", v1alpha1.RouteReflectorPolicySpec{MinRouteReflectors: i32(5), MaxRouteReflectors: i32(2)},
			[]string{"spec.minRouteReflectors: must not be greater than maxRouteReflectors (2)"}},
		{"min zero", v1alpha1.RouteReflectorPolicySpec{MinRouteReflectors: i32(0)}, []string{"spec.minRouteReflectors: must be at least 1"}},
		{"max zero", v1alpha1.RouteReflectorPolicySpec{MaxRouteReflectors: i32(0)}, []string{"spec.maxRouteReflectors: must be at least 1", "spec.minRouteReflectors: must not be greater than maxRouteReflectors (0)"}},
		{"DualPlane max below its planes", v1alpha1.RouteReflectorPolicySpec{MinRouteReflectors: i32(1), MaxRouteReflectors: i32(1)},
			[]string{"spec.maxRouteReflectors: Invalid value: 1: must be at least 2: the DualPlane layout has one route reflector per plane"}},
		{"DualPlane max of three planes", v1alpha1.RouteReflectorPolicySpec{MinRouteReflectors: i32(1), MaxRouteReflectors: i32(2), Topology: &v1alpha1.Topology{Redundancy: i32(3)}},
			[]string{"spec.maxRouteReflectors: Invalid value: 2: must be at least 3"}},
		{"max 1 outside DualPlane", v1alpha1.RouteReflectorPolicySpec{MinRouteReflectors: i32(1), MaxRouteReflectors: i32(1), Topology: &v1alpha1.Topology{Type: v1alpha1.SingleCluster}}, nil},
		{"ratio zero", v1alpha1.RouteReflectorPolicySpec{Scaling: &v1alpha1.Scaling{Ratio: "0"}}, []string{"spec.scaling.ratio: must be greater than 0"}},
		{"ratio above one", v1alpha1.RouteReflectorPolicySpec{Scaling: &v1alpha1.Scaling{Ratio: "1.5"}}, []string{"spec.scaling.ratio: must be greater than 0 and at most 1"}},
		{"ratio one", v1alpha1.RouteReflectorPolicySpec{Scaling: &v1alpha1.Scaling{Ratio: "1"}}, nil},
		{"ratio not a decimal", v1alpha1.RouteReflectorPolicySpec{Scaling: &v1alpha1.Scaling{Ratio: "1/200"}}, []string{"spec.scaling.ratio: must be a decimal"}},
		{"ratio exponent", v1alpha1.RouteReflectorPolicySpec{Scaling: &v1alpha1.Scaling{Ratio: "5e-3"}}, []string{"spec.scaling.ratio: must be a decimal"}},
		{"two scalings", v1alpha1.RouteReflectorPolicySpec{Scaling: &v1alpha1.Scaling{Ratio: "0.01", ClientsPerRouteReflector: i32(100)}}, []string{"spec.scaling: Forbidden: set exactly one"}},
		{"steps not increasing", v1alpha1.RouteReflectorPolicySpec{Scaling: &v1alpha1.Scaling{Steps: []v1alpha1.Step{{MaxNodes: 200, RouteReflectors: 3}, {MaxNodes: 200, RouteReflectors: 5}}}},
			[]string{"spec.scaling.steps[1].maxNodes: must be greater than the previous step's maxNodes (200)"}},
		{"empty steps", v1alpha1.RouteReflectorPolicySpec{Scaling: &v1alpha1.Scaling{Steps: []v1alpha1.Step{}}}, []string{"spec.scaling.steps: Required"}},
		{"step with zero RRs", v1alpha1.RouteReflectorPolicySpec{Scaling: &v1alpha1.Scaling{Steps: []v1alpha1.Step{{MaxNodes: 10, RouteReflectors: 0}}}}, []string{"spec.scaling.steps[0].routeReflectors: must be at least 1"}},
		{"clients per RR zero", v1alpha1.RouteReflectorPolicySpec{Scaling: &v1alpha1.Scaling{ClientsPerRouteReflector: i32(0)}}, []string{"spec.scaling.clientsPerRouteReflector: must be at least 1"}},
		{"cluster ID not IPv4", v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{ClusterID: "fd00::1"}}, []string{"spec.topology.clusterID: must be an IPv4 address"}},
		{"cluster ID garbage", v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{ClusterID: "rr-1"}}, []string{"spec.topology.clusterID: Invalid value: \"rr-1\": must be an IPv4 address"}},
		{"cluster ID at the top", v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{ClusterID: "255.255.255.250"}}, []string{"spec.topology.clusterID: leaves no room"}},
		{"unknown topology", v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{Type: "Ring"}}, []string{"spec.topology.type: Unsupported value: \"Ring\""}},
		{"unknown cluster ID mode", v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{ClusterIDs: "PerZone"}}, []string{"spec.topology.clusterIDs: Unsupported value"}},
		{"redundancy zero", v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{Redundancy: i32(0)}}, []string{"spec.topology.redundancy: must be between 1 and 16"}},
		{"groups zero", v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{ClusterIDGroups: i32(0)}}, []string{"spec.topology.clusterIDGroups: must be between 1 and 64"}},
		{"rack size one", v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{MaxRackSize: i32(1)}}, []string{"spec.topology.maxRackSize: must be at least 2"}},
		{"bad rack label", v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{RackLabel: "a b"}}, []string{"spec.topology.rackLabel: Invalid value: \"a b\": name part must consist of alphanumeric characters"}},
		{"bad RR label key", v1alpha1.RouteReflectorPolicySpec{RouteReflectorLabel: &v1alpha1.Label{Key: "-bad-"}}, []string{"spec.routeReflectorLabel.key: Invalid value: \"-bad-\": name part must consist of alphanumeric characters"}},
		{"bad RR label value", v1alpha1.RouteReflectorPolicySpec{RouteReflectorLabel: &v1alpha1.Label{Value: "a b"}}, []string{"spec.routeReflectorLabel.value: Invalid value: \"a b\": a valid label must be an empty string"}},
		{"bad zone label", v1alpha1.RouteReflectorPolicySpec{ZoneLabel: "zone//x"}, []string{"spec.zoneLabel: Invalid value: \"zone//x\": a qualified name must consist of alphanumeric characters"}},
		{"bad selector operator", v1alpha1.RouteReflectorPolicySpec{NodeSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}},
			[]string{"spec.nodeSelector.matchExpressions[0].operator: Invalid value: \"Near\": not a valid selector operator"}},
		{"bad forbidden selector", v1alpha1.RouteReflectorPolicySpec{ForbiddenNodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b c"}}}, []string{"spec.forbiddenNodeSelector.matchLabels: Invalid value: \"b c\": a valid label must be an empty string"}},
		{"bad toleration operator", v1alpha1.RouteReflectorPolicySpec{Tolerations: []corev1.Toleration{{Operator: "Maybe"}}}, []string{"spec.tolerations[0].operator: Unsupported value: \"Maybe\": supported values: \"Equal\", \"Exists\""}},
		{"negative removal delay", v1alpha1.RouteReflectorPolicySpec{RemovalDelay: &metav1.Duration{Duration: -time.Second}}, []string{"spec.removalDelay: Invalid value: \"-1s\": must not be negative"}},
		{"unknown handover", v1alpha1.RouteReflectorPolicySpec{Handover: "Never"}, []string{"spec.handover: Unsupported value"}},
		{"window too long", v1alpha1.RouteReflectorPolicySpec{Behavior: &v1alpha1.Behavior{ScaleDown: &v1alpha1.ScaleDown{StabilizationWindowSeconds: i32(7200)}}}, []string{"spec.behavior.scaleDown.stabilizationWindowSeconds: must be between 0 and 3600"}},
		{"several errors at once", v1alpha1.RouteReflectorPolicySpec{MinRouteReflectors: i32(9), MaxRouteReflectors: i32(3), Topology: &v1alpha1.Topology{ClusterID: "x"}},
			[]string{"spec.minRouteReflectors: must not be greater than maxRouteReflectors (3)", "spec.topology.clusterID: Invalid value: \"x\": must be an IPv4 address"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Default("test")
			p.Spec = tt.spec
			errs := Validate(p)
			require.Len(t, errs, len(tt.want), "errors: %v", errs)
			for i, want := range tt.want {
				field, msg, _ := strings.Cut(want, ": ")
				require.NotEmpty(t, msg, "case %q: say which message the error %d must carry (field: message)", tt.name, i)
				assert.Equal(t, field, errs[i].Field, "error %d: %v", i, errs[i])
				assert.Contains(t, errs[i].Error(), msg)
			}
			_, rerrs := Resolve(p)
			assert.Equal(t, len(errs), len(rerrs), "Resolve reports what Validate does")
		})
	}
}

func TestResolveDefaults(t *testing.T) {
	r := MustResolve(Default("default"))
	assert.Equal(t, v1alpha1.DualPlane, r.Topology)
	assert.Equal(t, 2, r.Min)
	assert.Equal(t, NoMaxRouteReflectors, r.Max, "no cap: the count follows from the racks")
	assert.Equal(t, 500, r.MaxClientsPerRR)
	assert.Equal(t, 2, r.Redundancy)
	assert.Equal(t, ScaleByRatio, r.Scaling)
	assert.Equal(t, []int64{5, 1000}, []int64{r.RatioNum, r.RatioDen})
	assert.Equal(t, "224.0.0.1", ClusterIDString(r.BaseClusterID))
	assert.Equal(t, v1alpha1.Grouped, r.ClusterIDMode)
	assert.Equal(t, 3, r.Groups)
	assert.Equal(t, "topology.kubernetes.io/zone", r.ZoneLabel)
	assert.Equal(t, r.ZoneLabel, r.RackLabel)
	assert.Equal(t, 500, r.MaxRackSize)
	assert.Equal(t, "calico-route-reflector", r.RRLabelKey)
	assert.Equal(t, "", r.RRLabelValue)
	assert.Equal(t, 5*time.Minute, r.RemovalDelay)
	assert.Equal(t, 300*time.Second, r.ScaleDownWindow)
	assert.True(t, r.NodeSelector.Empty(), "all nodes")
	assert.False(t, r.Forbidden.Matches(nil), "forbids nothing")
	assert.True(t, r.IsRouteReflectorLabel(map[string]string{"calico-route-reflector": ""}))
	assert.False(t, r.IsRouteReflectorLabel(map[string]string{"calico-route-reflector": "true"}))
}

func TestResolveExplicitTopologyDefaults(t *testing.T) {
	tests := []struct {
		name string
		topo *v1alpha1.Topology
		want v1alpha1.TopologyType
	}{
		{"MultiCluster", &v1alpha1.Topology{Type: v1alpha1.MultiCluster}, v1alpha1.MultiCluster},
		{"SingleCluster", &v1alpha1.Topology{Type: v1alpha1.SingleCluster}, v1alpha1.SingleCluster},
		{"Hierarchical", &v1alpha1.Topology{Type: v1alpha1.Hierarchical}, v1alpha1.Hierarchical},
		{"clusterIDs without a type means MultiCluster", &v1alpha1.Topology{ClusterIDs: v1alpha1.PerRouteReflector}, v1alpha1.MultiCluster},
		{"clusterIDGroups without a type means MultiCluster", &v1alpha1.Topology{ClusterIDGroups: i32(2)}, v1alpha1.MultiCluster},
		{"rackLabel without a type means Hierarchical", &v1alpha1.Topology{RackLabel: "rack"}, v1alpha1.Hierarchical},
		{"redundancy alone keeps the default", &v1alpha1.Topology{Redundancy: i32(3)}, v1alpha1.DualPlane},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Default("p")
			p.Spec.Topology = tt.topo
			r := MustResolve(p)
			assert.Equal(t, tt.want, r.Topology)
			if tt.want == v1alpha1.DualPlane {
				return
			}
			assert.Equal(t, 3, r.Min)
			assert.Equal(t, 25, r.Max)
			assert.Equal(t, 0, r.MaxClientsPerRR, "no bound unless set")
			assert.Equal(t, 500, r.MaxRackSize)
			if tt.topo.Redundancy == nil {
				assert.Equal(t, 3, r.Redundancy)
			}
		})
	}
	// A client bound set on an explicit topology: honoured, and it bounds Hierarchical's racks.
	p := Default("p")
	p.Spec.Topology = &v1alpha1.Topology{Type: v1alpha1.Hierarchical}
	p.Spec.MaxClientsPerRouteReflector = i32(100)
	r := MustResolve(p)
	assert.Equal(t, 100, r.MaxClientsPerRR)
	assert.Equal(t, 103, r.MaxRackSize, "100 clients and the rack's 3 route reflectors")
	// DualPlane with no cap accepts any minimum.
	p = Default("p")
	p.Spec.MinRouteReflectors = i32(40)
	assert.Empty(t, Validate(p))
}

func TestWarnings(t *testing.T) {
	tests := []struct {
		name string
		spec v1alpha1.RouteReflectorPolicySpec
		want string
	}{
		{"defaults", v1alpha1.RouteReflectorPolicySpec{}, ""},
		{"min below three", v1alpha1.RouteReflectorPolicySpec{MinRouteReflectors: i32(2), Topology: &v1alpha1.Topology{Type: v1alpha1.MultiCluster}}, "spec.minRouteReflectors: 2 is below 3"},
		{"DualPlane's min of two is no risk", v1alpha1.RouteReflectorPolicySpec{MinRouteReflectors: i32(2)}, ""},
		{"per RR beyond four", v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{ClusterIDs: v1alpha1.PerRouteReflector}}, "meshes more than four"},
		{"per RR within four", v1alpha1.RouteReflectorPolicySpec{MaxRouteReflectors: i32(4), Topology: &v1alpha1.Topology{ClusterIDs: v1alpha1.PerRouteReflector}}, ""},
		{"one group", v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{ClusterIDGroups: i32(1)}}, "calico#2735"},
		{"redundancy one", v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{Redundancy: i32(1)}}, "redundancy: 1"},
		{"empty forbidden selector forbids every node", v1alpha1.RouteReflectorPolicySpec{ForbiddenNodeSelector: &metav1.LabelSelector{}}, "spec.forbiddenNodeSelector: {} selects every node"},
		{"empty preferred selector prefers none", v1alpha1.RouteReflectorPolicySpec{PreferredNodeSelector: &metav1.LabelSelector{}}, "spec.preferredNodeSelector: {} selects every node"},
		{"short removal delay", v1alpha1.RouteReflectorPolicySpec{RemovalDelay: &metav1.Duration{Duration: time.Second}}, "spec.removalDelay: 1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Default("test")
			p.Spec = tt.spec
			w := strings.Join(Warnings(p), "\n")
			if tt.want == "" {
				assert.Empty(t, w)
			} else {
				assert.Contains(t, w, tt.want)
			}
		})
	}
}
