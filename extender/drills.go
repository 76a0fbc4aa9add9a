package extender

import (
	"fmt"
	"maps"
	"slices"
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
	// Family is the address family the drill was run in ("IPv4", "IPv6": the sessions both of
	// whose ends have an address of it), "" for a family-blind drill (every node peering as the
	// BGPPeers say: an IPv4-only cluster's). A plan whose nodes have IPv6 addresses is drilled in
	// each family its nodes peer in (bgpmodel.PlanDrills).
	Family string `json:"family,omitempty"`
}

// String names the drill and its outcome in one line (conditions, warnings, the table).
func (d Drill) String() string {
	what := "zone " + d.Name
	if d.Kind == DrillRouteReflector {
		what = "route reflector " + d.Name
	}
	s := fmt.Sprintf("%s lost: %d node pairs missing", what, d.MissingPairs)
	if d.Family != "" {
		s += " in " + d.Family
	}
	return s
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

// DrillTally counts the drills of one kind that pass and all of them; a drill run for a class of
// route reflectors counts once per member.
type DrillTally struct{ Pass, All int }

// TallyDrills counts the drills by kind (DrillZone, DrillRouteReflector). Drills run in each
// address family (Drill.Family) count once per loss, in the worst family: All is the most drills
// of the kind a family has, and All less the most failing in a family pass (a zone lost that
// passes in IPv4 and fails in IPv6 does not pass).
func TallyDrills(drills []Drill) map[string]DrillTally {
	byFamily := map[string]map[string]DrillTally{}
	for _, d := range drills {
		n := max(1, d.Represents)
		m := byFamily[d.Family]
		if m == nil {
			m = map[string]DrillTally{}
			byFamily[d.Family] = m
		}
		t := m[d.Kind]
		t.All += n
		if d.MissingPairs == 0 {
			t.Pass += n
		}
		m[d.Kind] = t
	}
	out := map[string]DrillTally{}
	for _, f := range slices.Sorted(maps.Keys(byFamily)) {
		for kind, t := range byFamily[f] {
			o, seen := out[kind]
			if !seen {
				out[kind] = t
				continue
			}
			all := max(o.All, t.All)
			o.All, o.Pass = all, all-max(o.All-o.Pass, t.All-t.Pass)
			out[kind] = o
		}
	}
	return out
}

// safest is the planner's preference for a plan that survives its drills (Input.Drills set): the
// stable plan when it passes; else a handover toward the fresh plan of the same nodes (no current
// roles): the route reflectors the fresh plan keeps in their place stay, a rack route reflector it
// makes a spine member is planned as if it had no role, and the others go through the HandedOver
// filter (they drain as usual, so no route is lost on the way); that plan is taken when its drills
// lose fewer node pairs (it still carries the draining route reflectors; once they are gone, it
// passes where the fresh plan does); else the stable plan. Its drills go on the result either way
// (Result.Drills; DrillsErr when the model failed).
func safest(in Input, stable *Result) *Result {
	drills, err := in.Drills(in, stable)
	stable.Drills, stable.DrillsErr = drills, err
	if err != nil || len(FailedDrills(drills)) == 0 {
		return stable
	}
	fresh := planOnce(Input{Policy: in.Policy, Nodes: withoutRoles(in, nil), Now: in.Now, ForeignClusterIDs: in.ForeignClusterIDs,
		CrossPolicy: in.CrossPolicy, OutsideSelector: in.OutsideSelector, Filters: in.Filters, Scores: in.Scores})
	// Route reflectors the fresh plan keeps in their place stay; a rack route reflector it makes a
	// spine member is planned as if it had no role, so that the planner may give it the new one;
	// the others are handed over.
	kept := keptPlaces(stable, fresh)
	// A rack route reflector the fresh plan makes a spine member takes its new role in place; a
	// spine member it puts in a rack, and one it keeps in its tier but with other cluster-ID peers
	// (another group), are handed over like those it does not choose: a route reflector's cluster
	// ID stays for as long as it has the role (a changed ID restarts every BGP session it has), and
	// a step renumbers at most the one that joins the spine.
	freshSpine := map[string]bool{}
	for _, rr := range fresh.RouteReflectors {
		freshSpine[rr.Node] = rr.Spine
	}
	moved, replaced := map[string]bool{}, map[string]bool{}
	for _, rr := range stable.RouteReflectors {
		spine, inFresh := freshSpine[rr.Node]
		switch {
		case rr.Draining || kept[rr.Node]:
		case inFresh && spine && !rr.Spine:
			replaced[rr.Node] = true
		default:
			moved[rr.Node] = true
		}
	}
	handover := in
	handover.Nodes = withoutRoles(in, replaced)
	if handover.Filters == nil {
		handover.Filters = DefaultFilters()
	}
	handover.Filters = append(slices.Clone(handover.Filters), NewHandedOver(moved))
	safer := planOnce(handover)
	// The choice between the plans depends on the clock as each of them does (At).
	until := earliest(stable.stable, earliest(fresh.stable, safer.stable))
	stable.stable = until
	sd, err := in.Drills(handover, safer)
	if err != nil || missingPairs(sd) >= missingPairs(drills) {
		return stable
	}
	safer.stable = until
	safer.Drills, safer.HandedOver = sd, slices.Sorted(maps.Keys(moved))
	// Admission reads the nodes as they are, not as this plan's input pretended (roles stripped,
	// route reflectors filtered out).
	safer.facts = readFacts(in, safer)
	return safer
}

// missingPairs sums the node pairs the drills lose.
func missingPairs(drills []Drill) int64 {
	var n int64
	for _, d := range drills {
		n += d.MissingPairs
	}
	return n
}

// keptPlaces returns the route reflectors of stable that hold the same place in fresh: a route
// reflector of both, in the same tier (spine or not), sharing its cluster ID with the same others
// among them (cluster IDs are compared by who shares them, not by value: the fresh plan may number
// them differently).
func keptPlaces(stable, fresh *Result) map[string]bool {
	type place struct {
		spine bool
		id    string
	}
	was := map[string]place{}
	for _, rr := range stable.RouteReflectors {
		if !rr.Draining {
			was[rr.Node] = place{rr.Spine, rr.ClusterID}
		}
	}
	will := map[string]place{}
	var both []string
	for _, rr := range fresh.RouteReflectors {
		if w, ok := was[rr.Node]; ok && w.spine == rr.Spine {
			will[rr.Node] = place{rr.Spine, rr.ClusterID}
			both = append(both, rr.Node)
		}
	}
	keep := map[string]bool{}
	for _, x := range both {
		same := true
		for _, y := range both {
			if (was[x].id == was[y].id) != (will[x].id == will[y].id) {
				same = false
				break
			}
		}
		keep[x] = same
	}
	return keep
}

// withoutRoles copies the input's nodes (only those in names, unless names is nil) without the
// route reflector role, its plane and its handover marks (racks stay: they are where a node is,
// not what it does): with nil, the nodes a fresh plan would see.
func withoutRoles(in Input, names map[string]bool) []*Node {
	out := make([]*Node, len(in.Nodes))
	for i, n := range in.Nodes {
		out[i] = n
		if n == nil || names != nil && !names[n.Name] {
			continue
		}
		c := n.DeepCopy()
		delete(c.Labels, in.Policy.RRLabelKey)
		for _, k := range []string{AnnotationClusterID, AnnotationPlane, AnnotationStandbyFor, AnnotationDrainingSince, AnnotationDrainingReason} {
			delete(c.Annotations, k)
		}
		out[i] = c
	}
	return out
}
