package policy

import (
	"fmt"
	"math/big"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// maxClusterIDs bounds how many cluster IDs counting up from the first one a policy may use.
const maxClusterIDs = 1 << 16

// Validate checks a policy's spec. It returns every invalid field, with its path.
func Validate(p *v1alpha1.RouteReflectorPolicy) field.ErrorList {
	spec := field.NewPath("spec")
	s := &p.Spec
	var errs field.ErrorList

	errs = append(errs, validateSelector(s.NodeSelector, spec.Child("nodeSelector"))...)
	errs = append(errs, validateSelector(s.PreferredNodeSelector, spec.Child("preferredNodeSelector"))...)
	errs = append(errs, validateSelector(s.ForbiddenNodeSelector, spec.Child("forbiddenNodeSelector"))...)

	minDef, maxDef, _, _ := countDefaults(s)
	minRR := deref(s.MinRouteReflectors, minDef)
	maxRR := deref(s.MaxRouteReflectors, maxDef)
	if minRR < 1 {
		errs = append(errs, field.Invalid(spec.Child("minRouteReflectors"), minRR, "must be at least 1"))
	}
	if maxRR < 1 {
		errs = append(errs, field.Invalid(spec.Child("maxRouteReflectors"), maxRR, "must be at least 1"))
	}
	if minRR > maxRR {
		errs = append(errs, field.Invalid(spec.Child("minRouteReflectors"), minRR,
			fmt.Sprintf("must not be greater than maxRouteReflectors (%d)", maxRR)))
	}
	errs = append(errs, validateScaling(s.Scaling, spec.Child("scaling"))...)
	errs = append(errs, validateTopology(s.Topology, maxRR, spec.Child("topology"))...)
	if need := minForTopology(s); maxRR >= 1 && maxRR < need {
		errs = append(errs, field.Invalid(spec.Child("maxRouteReflectors"), maxRR,
			fmt.Sprintf("must be at least %d: the DualPlane layout has one route reflector per plane (topology.redundancy) however small the cluster", need)))
	}

	if l := s.RouteReflectorLabel; l != nil {
		p := spec.Child("routeReflectorLabel")
		if l.Key != "" {
			errs = append(errs, validateLabelKey(l.Key, p.Child("key"))...)
		}
		for _, msg := range validation.IsValidLabelValue(l.Value) {
			errs = append(errs, field.Invalid(p.Child("value"), l.Value, msg))
		}
	}
	if s.ZoneLabel != "" {
		errs = append(errs, validateLabelKey(s.ZoneLabel, spec.Child("zoneLabel"))...)
	}
	for i, t := range s.Tolerations {
		p := spec.Child("tolerations").Index(i)
		if t.Operator != "" && t.Operator != corev1.TolerationOpExists && t.Operator != corev1.TolerationOpEqual {
			errs = append(errs, field.NotSupported(p.Child("operator"), t.Operator, []string{"Equal", "Exists"}))
		}
		if t.Operator == corev1.TolerationOpExists && t.Value != "" {
			errs = append(errs, field.Invalid(p.Child("value"), t.Value, "must be empty when operator is Exists"))
		}
		if t.Key != "" {
			errs = append(errs, validateLabelKey(t.Key, p.Child("key"))...)
		}
	}
	if s.NotReadyGracePeriod != nil && s.NotReadyGracePeriod.Duration < 0 {
		errs = append(errs, field.Invalid(spec.Child("notReadyGracePeriod"), s.NotReadyGracePeriod.Duration.String(), "must not be negative"))
	}
	if h := s.BGPHealth; h != nil && h.GracePeriod != nil && h.GracePeriod.Duration < 0 {
		errs = append(errs, field.Invalid(spec.Child("bgpHealth", "gracePeriod"), h.GracePeriod.Duration.String(), "must not be negative"))
	}
	if s.RemovalDelay != nil && s.RemovalDelay.Duration < 0 {
		errs = append(errs, field.Invalid(spec.Child("removalDelay"), s.RemovalDelay.Duration.String(), "must not be negative"))
	}
	switch s.Mode {
	case "", v1alpha1.Enforce, v1alpha1.Observe, v1alpha1.Paused:
	default:
		errs = append(errs, field.NotSupported(spec.Child("mode"), s.Mode, []string{"Enforce", "Observe", "Paused"}))
	}
	switch s.Handover {
	case "", v1alpha1.HandoverDelay, v1alpha1.HandoverBGPSessions:
	default:
		errs = append(errs, field.NotSupported(spec.Child("handover"), s.Handover, []string{"Delay", "BGPSessions"}))
	}
	errs = append(errs, validateBGPPeer(s.BGPPeer, spec.Child("bgpPeer"))...)
	errs = append(errs, validateRelease(s.Release, spec.Child("release"))...)
	errs = append(errs, validateGoingSignals(s.GoingSignals, spec.Child("goingSignals"))...)
	if b := s.Behavior; b != nil && b.ScaleDown != nil && b.ScaleDown.StabilizationWindowSeconds != nil {
		if w := *b.ScaleDown.StabilizationWindowSeconds; w < 0 || w > 3600 {
			errs = append(errs, field.Invalid(spec.Child("behavior", "scaleDown", "stabilizationWindowSeconds"), w, "must be between 0 and 3600"))
		}
	}
	return errs
}

func validateScaling(sc *v1alpha1.Scaling, p *field.Path) field.ErrorList {
	if sc == nil {
		return nil
	}
	var errs field.ErrorList
	set := 0
	if sc.Ratio != "" {
		set++
		r, ok := new(big.Rat).SetString(sc.Ratio)
		switch {
		case !ok || !isDecimal(sc.Ratio):
			errs = append(errs, field.Invalid(p.Child("ratio"), sc.Ratio, "must be a decimal number such as 0.005"))
		case r.Sign() <= 0 || r.Cmp(big.NewRat(1, 1)) > 0:
			errs = append(errs, field.Invalid(p.Child("ratio"), sc.Ratio, "must be greater than 0 and at most 1"))
		case !r.Num().IsInt64() || !r.Denom().IsInt64() || r.Denom().Int64() > 1e9:
			errs = append(errs, field.Invalid(p.Child("ratio"), sc.Ratio, "has too many decimal places (at most 9)"))
		}
	}
	if sc.Steps != nil {
		set++
		if len(sc.Steps) == 0 {
			errs = append(errs, field.Required(p.Child("steps"), "must hold at least one step"))
		}
		for i, st := range sc.Steps {
			sp := p.Child("steps").Index(i)
			if st.MaxNodes < 1 {
				errs = append(errs, field.Invalid(sp.Child("maxNodes"), st.MaxNodes, "must be at least 1"))
			}
			if st.RouteReflectors < 1 {
				errs = append(errs, field.Invalid(sp.Child("routeReflectors"), st.RouteReflectors, "must be at least 1"))
			}
			if i > 0 && st.MaxNodes <= sc.Steps[i-1].MaxNodes {
				errs = append(errs, field.Invalid(sp.Child("maxNodes"), st.MaxNodes,
					fmt.Sprintf("must be greater than the previous step's maxNodes (%d)", sc.Steps[i-1].MaxNodes)))
			}
		}
	}
	if sc.ClientsPerRouteReflector != nil {
		set++
		if *sc.ClientsPerRouteReflector < 1 {
			errs = append(errs, field.Invalid(p.Child("clientsPerRouteReflector"), *sc.ClientsPerRouteReflector, "must be at least 1"))
		}
	}
	if set > 1 {
		errs = append(errs, field.Forbidden(p, "set exactly one of ratio, steps and clientsPerRouteReflector"))
	}
	return errs
}

// minForTopology is the fewest route reflectors the spec's topology plans on any cluster of two
// nodes or more: DualPlane's planes (its redundancy); 1 for the others.
func minForTopology(s *v1alpha1.RouteReflectorPolicySpec) int32 {
	if topologyOf(s) != v1alpha1.DualPlane {
		return 1
	}
	_, _, red, _ := countDefaults(s)
	if s.Topology != nil && s.Topology.Redundancy != nil {
		red = *s.Topology.Redundancy
	}
	return max(red, 1)
}

func validateTopology(t *v1alpha1.Topology, maxRR int32, p *field.Path) field.ErrorList {
	if t == nil {
		return nil
	}
	var errs field.ErrorList
	switch t.Type {
	case "", v1alpha1.DualPlane, v1alpha1.SingleCluster, v1alpha1.MultiCluster, v1alpha1.Hierarchical:
	default:
		errs = append(errs, field.NotSupported(p.Child("type"), t.Type, []string{"DualPlane", "SingleCluster", "MultiCluster", "Hierarchical"}))
	}
	if t.ClusterID != "" {
		id, ok := ParseClusterID(t.ClusterID)
		switch {
		case !ok:
			errs = append(errs, field.Invalid(p.Child("clusterID"), t.ClusterID, "must be an IPv4 address"))
		case uint64(id)+maxClusterIDs > 1<<32:
			errs = append(errs, field.Invalid(p.Child("clusterID"), t.ClusterID,
				fmt.Sprintf("leaves no room for the cluster IDs that count up from it (at most %s)", ClusterIDString(1<<32-maxClusterIDs-1))))
		}
	}
	switch t.ClusterIDs {
	case "", v1alpha1.Grouped, v1alpha1.PerRouteReflector:
	default:
		errs = append(errs, field.NotSupported(p.Child("clusterIDs"), t.ClusterIDs, []string{"Grouped", "PerRouteReflector"}))
	}
	if t.ClusterIDGroups != nil && (*t.ClusterIDGroups < 1 || *t.ClusterIDGroups > 64) {
		errs = append(errs, field.Invalid(p.Child("clusterIDGroups"), *t.ClusterIDGroups, "must be between 1 and 64"))
	}
	if t.Redundancy != nil && (*t.Redundancy < 1 || *t.Redundancy > 16) {
		errs = append(errs, field.Invalid(p.Child("redundancy"), *t.Redundancy, "must be between 1 and 16"))
	}
	if t.RackLabel != "" {
		errs = append(errs, validateLabelKey(t.RackLabel, p.Child("rackLabel"))...)
	}
	if t.MaxRackSize != nil && *t.MaxRackSize < 2 {
		errs = append(errs, field.Invalid(p.Child("maxRackSize"), *t.MaxRackSize, "must be at least 2"))
	}
	return errs
}

// Warnings returns human-readable warnings for legal but risky values.
func Warnings(p *v1alpha1.RouteReflectorPolicy) []string {
	r, errs := Resolve(p)
	if len(errs) > 0 {
		return nil
	}
	var w []string
	if r.Min < 3 && r.Topology != v1alpha1.DualPlane {
		w = append(w, fmt.Sprintf("spec.minRouteReflectors: %d is below 3; losing one route reflector may leave clients without redundancy", r.Min))
	}
	if r.Redundancy < 2 && r.Topology != v1alpha1.SingleCluster {
		w = append(w, "spec.topology.redundancy: 1 leaves a client without routes whenever its only route reflector fails")
	}
	if r.Topology == v1alpha1.MultiCluster {
		if r.ClusterIDMode == v1alpha1.PerRouteReflector && r.Max > 4 {
			w = append(w, fmt.Sprintf("spec.topology.clusterIDs: PerRouteReflector with up to %d route reflectors meshes more than four distinct cluster IDs; with Calico's ADD-PATH every node stores every path along every chain of route reflectors (46,552 routes on the busiest of 100 nodes with 6 RRs); prefer Grouped", r.Max))
		}
		if r.ClusterIDMode == v1alpha1.Grouped && r.Groups == 1 {
			w = append(w, "spec.topology.clusterIDGroups: 1 gives every route reflector the same cluster ID; clients then peer with a quorum of them (projectcalico/calico#2735)")
		}
		if r.ClusterIDMode == v1alpha1.Grouped && r.Redundancy > r.Groups {
			w = append(w, fmt.Sprintf("spec.topology.redundancy: %d is more than clusterIDGroups (%d); a client's extra route reflectors share a cluster ID with another of its route reflectors", r.Redundancy, r.Groups))
		}
	}
	if sel := p.Spec.ForbiddenNodeSelector; sel != nil && len(sel.MatchLabels)+len(sel.MatchExpressions) == 0 {
		w = append(w, "spec.forbiddenNodeSelector: {} selects every node, so no node may be a route reflector; leave it out to forbid none")
	}
	if sel := p.Spec.PreferredNodeSelector; sel != nil && len(sel.MatchLabels)+len(sel.MatchExpressions) == 0 {
		w = append(w, "spec.preferredNodeSelector: {} selects every node, so it prefers none over another; leave it out")
	}
	if r.RemovalDelay < 30*time.Second {
		w = append(w, fmt.Sprintf("spec.removalDelay: %s may remove an old route reflector before its clients have established sessions with the new one", r.RemovalDelay))
	}
	return w
}

func validateSelector(s *metav1.LabelSelector, p *field.Path) field.ErrorList {
	if s == nil {
		return nil
	}
	return metavalidation.ValidateLabelSelector(s, metavalidation.LabelSelectorValidationOptions{}, p)
}

func validateLabelKey(k string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsQualifiedName(k) {
		errs = append(errs, field.Invalid(p, k, msg))
	}
	return errs
}

func isDecimal(s string) bool {
	dot := false
	digits := 0
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !dot:
			dot = true
		default:
			return false
		}
	}
	return digits > 0
}

// validateRelease checks spec.release: a known nodeToNodeMesh, and maxMeshNodes (at least 2) only
// with Auto, the one mode it applies to.
func validateRelease(r *v1alpha1.Release, p *field.Path) field.ErrorList {
	if r == nil {
		return nil
	}
	var errs field.ErrorList
	switch r.NodeToNodeMesh {
	case "", v1alpha1.ReleaseMeshAuto, v1alpha1.ReleaseMeshRestore, v1alpha1.ReleaseMeshKeep:
	default:
		errs = append(errs, field.NotSupported(p.Child("nodeToNodeMesh"), r.NodeToNodeMesh, []string{"Auto", "Restore", "Keep"}))
	}
	if m := r.MaxMeshNodes; m != nil {
		switch {
		case *m < 2:
			errs = append(errs, field.Invalid(p.Child("maxMeshNodes"), *m, "must be at least 2"))
		case r.NodeToNodeMesh != "" && r.NodeToNodeMesh != v1alpha1.ReleaseMeshAuto:
			errs = append(errs, field.Invalid(p.Child("maxMeshNodes"), *m, "applies only with nodeToNodeMesh Auto, not "+string(r.NodeToNodeMesh)))
		}
	}
	return errs
}
