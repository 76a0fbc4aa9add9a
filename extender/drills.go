package extender

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Drill kinds.
const (
	DrillZone           = "zone"
	DrillRouteReflector = "routeReflector"
)

// Drill is one failure drill's outcome on a plan: the node pairs among the surviving nodes that no
// longer learn each other's routes once the zone or the route reflector is gone.
type Drill struct {
	Kind         string `json:"kind"`
	Name         string `json:"name"`
	MissingPairs int64  `json:"missingPairs"`
	// Represents: a route reflector drill run once for a class of route reflectors that stand in
	// the same place of the layout (large clusters, see bgpmodel) stands for this many; 0 when it
	// was run for this route reflector alone.
	Represents int `json:"represents,omitempty"`
}

// String names the drill and its outcome in one line (conditions, warnings, the table).
func (d Drill) String() string {
	what := "zone " + d.Name
	if d.Kind == DrillRouteReflector {
		what = "route reflector " + d.Name
	}
	return fmt.Sprintf("%s lost: %d node pairs missing", what, d.MissingPairs)
}

// DrillFunc runs the failure drills on a plan: each zone lost, each route reflector lost. The graph
// model implements it (bgpmodel.PlanDrills); the planner cannot import it, so callers hand it in.
type DrillFunc func(in Input, res *Result) ([]Drill, error)

// FailedDrills returns the drills that lose routes.
func FailedDrills(drills []Drill) []Drill {
	var out []Drill
	for _, d := range drills {
		if d.MissingPairs > 0 {
			out = append(out, d)
		}
	}
	return out
}

// safest is the planner's preference for a plan that survives its drills (Input.Drills set): the
// stable plan when it passes; else the plan that hands the current route reflectors the fresh
// plan of the same nodes would not choose (or would put in another tier: spine or rack) over to the
// ones it would (they drain as usual, so no
// route is lost on the way), when that plan passes; else the stable plan. Its drills go on the
// result either way (Result.Drills; DrillsErr when the model failed).
func safest(in Input, stable *Result) *Result {
	drills, err := in.Drills(in, stable)
	stable.Drills, stable.DrillsErr = drills, err
	if err != nil || len(FailedDrills(drills)) == 0 {
		return stable
	}
	fresh := planOnce(Input{Policy: in.Policy, Nodes: withoutRoles(in), Now: in.Now, ForeignClusterIDs: in.ForeignClusterIDs,
		CrossPolicy: in.CrossPolicy, OutsideSelector: in.OutsideSelector, Filters: in.Filters, Scores: in.Scores})
	// The route reflectors that keep their place: the fresh plan has them in the same tier.
	spine := map[string]bool{}
	for _, rr := range stable.RouteReflectors {
		spine[rr.Node] = rr.Spine
	}
	keep := map[string]bool{}
	for _, rr := range fresh.RouteReflectors {
		if s, ok := spine[rr.Node]; ok && s == rr.Spine {
			keep[rr.Node] = true
		}
	}
	handover := in
	handover.Nodes = retiring(in, keep)
	safer := planOnce(handover)
	sd, err := in.Drills(handover, safer)
	if err != nil || len(FailedDrills(sd)) > 0 {
		return stable
	}
	safer.Drills = sd
	return safer
}

// withoutRoles copies the input's nodes without the route reflector role, its plane and its
// handover marks (racks stay: they are where a node is, not what it does): the nodes a fresh plan
// would see.
func withoutRoles(in Input) []*corev1.Node {
	out := make([]*corev1.Node, len(in.Nodes))
	for i, n := range in.Nodes {
		if n == nil {
			continue
		}
		c := n.DeepCopy()
		delete(c.Labels, in.Policy.RRLabelKey)
		for _, k := range []string{AnnotationClusterID, AnnotationPlane, AnnotationDrainingSince, AnnotationDrainingReason} {
			delete(c.Annotations, k)
		}
		out[i] = c
	}
	return out
}

// retiring copies the input's nodes, marking every active route reflector not in keep as
// draining since the input's Now: the planner then picks their successors and hands them over.
func retiring(in Input, keep map[string]bool) []*corev1.Node {
	out := make([]*corev1.Node, len(in.Nodes))
	for i, n := range in.Nodes {
		out[i] = n
		if n == nil || keep[n.Name] || !IsActiveRouteReflector(n, in.Policy) {
			continue
		}
		c := n.DeepCopy()
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[AnnotationDrainingSince] = in.Now.UTC().Format(time.RFC3339)
		out[i] = c
	}
	return out
}
