package reconciler

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// ConditionExpensiveTopology is True when the policy's layout stores more than twice the paths the
// default layout would store on the same nodes (by the graph model).
const (
	ConditionExpensiveTopology = "ExpensiveTopology"
	ReasonMoreThanTwiceDefault = "MoreThanTwiceTheDefault"
	ReasonWithinTwiceDefault   = "WithinTwiceTheDefault"
	ReasonModelFailed          = "ModelFailed"
)

// ConditionResilient is True when the plan survives every failure drill (each zone lost, each
// route reflector lost, by the graph model; in each address family when the policy's nodes have
// IPv6 addresses), False naming the drills that lose routes.
const (
	ConditionResilient = "Resilient"
	ReasonDrillsPass   = "EveryDrillPasses"
	ReasonDrillsFail   = "DrillsLoseRoutes"
)

// costMemo is the graph model's cost of the last plan shape, per policy: the model runs again only
// when the plan's route reflectors, peering or node count change.
type costMemo struct {
	key      uint64
	cost     bgpmodel.Cost
	families []bgpmodel.FamilyCost // per address family when a node has an IPv6 address
	err      error
}

// planShape hashes what the route figures depend on: the policy generation, the node count, the
// nodes' address families, each route reflector with its cluster ID and role, and the BGPPeers.
func (st *State) planShape() uint64 {
	if st.facts != nil && st.facts.shapeRead {
		return st.facts.shape
	}
	h := fnv.New64a()
	w := func(s string) { h.Write([]byte(s)); h.Write([]byte{0}) }
	w(strconv.FormatInt(st.Policy.Generation, 10))
	w(strconv.Itoa(st.Result.Summary.Nodes))
	for _, n := range st.Input.Nodes {
		if n == nil {
			continue
		}
		if f := extender.NodeFamilies(n); f != extender.FamilyIPv4 {
			w(n.Name)
			w(f.Key())
		}
	}
	for _, rr := range st.Result.RouteReflectors {
		w(rr.Node)
		w(rr.ClusterID)
		w(strconv.FormatBool(rr.Draining))
	}
	for _, p := range st.Result.BGPPeers {
		w(p.Name)
		w(p.Spec.PeerSelector)
	}
	if st.facts != nil {
		st.facts.shapeRead, st.facts.shape = true, h.Sum64()
	}
	return h.Sum64()
}

// setCost fills the status's route figures and the ExpensiveTopology condition.
func (r *Reconciler) setCost(st *State, s *v1alpha1.RouteReflectorPolicyStatus, gen int64) {
	key := st.planShape()
	r.mu.Lock()
	m := r.costs[st.Name]
	r.mu.Unlock()
	if m == nil || m.key != key {
		m = routeCost(st.Input, st.Result)
		m.key = key
		r.mu.Lock()
		if r.costs == nil {
			r.costs = map[string]*costMemo{}
		}
		r.costs[st.Name] = m
		r.mu.Unlock()
	}
	cond := metav1.Condition{Type: ConditionExpensiveTopology, ObservedGeneration: gen}
	switch {
	case m.err != nil:
		s.Routes = nil
		cond.Status, cond.Reason, cond.Message = metav1.ConditionUnknown, ReasonModelFailed, "graph model: "+m.err.Error()
	default:
		c := m.cost
		s.Routes = &v1alpha1.RouteCost{
			BusiestPathsPerPrefix:        fmt.Sprintf("%.1f", c.BusiestPaths),
			MeanPathsPerPrefix:           fmt.Sprintf("%.1f", c.MeanPaths),
			DefaultBusiestPathsPerPrefix: fmt.Sprintf("%.1f", c.DefaultBusiest),
			DefaultMeanPathsPerPrefix:    fmt.Sprintf("%.1f", c.DefaultMean),
			MissingPairs:                 c.MissingPairs,
		}
		for _, f := range m.families {
			s.Routes.Families = append(s.Routes.Families, v1alpha1.FamilyRouteCost{Family: f.Family.String(), Nodes: f.Nodes,
				BusiestPathsPerPrefix: fmt.Sprintf("%.1f", f.BusiestPaths), MeanPathsPerPrefix: fmt.Sprintf("%.1f", f.MeanPaths), MissingPairs: f.MissingPairs})
		}
		setDrills(s.Routes, st.Result)
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonWithinTwiceDefault, c.String()
		if c.Expensive() {
			cond.Status, cond.Reason = metav1.ConditionTrue, ReasonMoreThanTwiceDefault
		}
	}
	meta.SetStatusCondition(&s.Conditions, cond)
	if c := resilience(st.Result, gen); c != nil {
		meta.SetStatusCondition(&s.Conditions, *c)
	}
}

// routeCost runs the graph model on a plan: its cost beside the default layout's, and its figures
// per address family when a node has an IPv6 address.
func routeCost(in extender.Input, res *extender.Result) *costMemo {
	m := &costMemo{}
	topo, err := bgpmodel.FromPlan(in, res, bgpmodel.Options{})
	if err != nil {
		m.err = err
		return m
	}
	model, err := topo.Propagate(nil)
	if err != nil {
		m.err = err
		return m
	}
	if m.cost, m.err = bgpmodel.CostOf(in, res, model); m.err != nil {
		return m
	}
	m.families, m.err = topo.FamilyCosts()
	return m
}

// setDrills records the plan's failure drills in the route figures.
func setDrills(rc *v1alpha1.RouteCost, res *extender.Result) {
	for _, t := range extender.TallyDrills(res.Drills) {
		rc.DrillsRun += t.All
	}
	for _, d := range extender.FailedDrills(res.Drills) {
		rc.FailedDrills = append(rc.FailedDrills, v1alpha1.FailedDrill{Kind: d.Kind, Name: d.Name, MissingPairs: d.MissingPairs, Family: d.Family})
	}
}

// resilience is the Resilient condition of a plan (nil when its drills did not run).
func resilience(res *extender.Result, gen int64) *metav1.Condition {
	c := &metav1.Condition{Type: ConditionResilient, ObservedGeneration: gen}
	failed := extender.FailedDrills(res.Drills)
	switch {
	case res.DrillsErr != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, ReasonModelFailed, "failure drills: "+res.DrillsErr.Error()
	case res.Drills == nil:
		return nil
	case len(failed) == 0:
		t := extender.TallyDrills(res.Drills)
		c.Status, c.Reason = metav1.ConditionTrue, ReasonDrillsPass
		c.Message = fmt.Sprintf("every node keeps every route after the loss of any of %d zones and of any of %d route reflectors",
			t[extender.DrillZone].All, t[extender.DrillRouteReflector].All)
		if fams := drillFamilies(res.Drills); fams != "" {
			c.Message += ", in " + fams
		}
	default:
		c.Status, c.Reason = metav1.ConditionFalse, ReasonDrillsFail
		c.Message = failed[0].String()
		if len(failed) > 1 {
			c.Message += fmt.Sprintf(" (and %d more failing drills)", len(failed)-1)
		}
	}
	return c
}

// drillFamilies names the address families the drills ran in ("IPv4 and IPv6"), "" for
// family-blind drills.
func drillFamilies(drills []extender.Drill) string {
	var out []string
	for _, d := range drills {
		if d.Family != "" && !slices.Contains(out, d.Family) {
			out = append(out, d.Family)
		}
	}
	return strings.Join(out, " and ")
}
