package extender_test

import (
	"fmt"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
)

func init() {
	extender.ModelDrills = modelDrills
	extender.PlanDrills = bgpmodel.PlanDrills
	extender.ModelTransition = modelTransition
}

// modelTransition: applied make-before-break (bgpmodel's steps: sessions added first, removed
// last), the transition from the cluster as prev left it to r misses no pair between two nodes that
// keep their role while its cluster IDs change (nodes not Ready are down in every state).
func modelTransition(in extender.Input, prev, r *extender.Result) []string {
	before, err := bgpmodel.FromPlan(in, prev, bgpmodel.Options{})
	if err != nil {
		return []string{"graph model, before: " + err.Error()}
	}
	after, err := bgpmodel.FromPlan(in, r, bgpmodel.Options{})
	if err != nil {
		return []string{"graph model, after: " + err.Error()}
	}
	down := map[string]bool{}
	for _, n := range in.Nodes {
		if !extender.IsReady(n) {
			down[n.Name] = true
		}
	}
	tr, err := bgpmodel.NewTransition(before, after, down)
	if err != nil {
		return []string{"graph model, transition: " + err.Error()}
	}
	for _, st := range tr.Steps {
		if st.KeptRoles > 0 {
			return []string{fmt.Sprintf("graph model, transition: its %s step misses %d pairs between nodes that keep their role: %s; e.g. %v", st.Kind, st.KeptRoles, tr, tr.AtRisk)}
		}
	}
	return nil
}

// modelDrills checks a plan on the graph model with every node up and, with drills, runs its
// failure drills (bgpmodel's, as the planner and the plan command run them).
func modelDrills(in extender.Input, res *extender.Result, drills bool) []string {
	topo, err := bgpmodel.FromPlan(in, res, bgpmodel.Options{})
	if err != nil {
		return []string{"graph model: " + err.Error()}
	}
	m, err := topo.Propagate(nil)
	if err != nil {
		return []string{"graph model, every node up: " + err.Error()}
	}
	if m.Summary.MissingPairs > 0 {
		return []string{fmt.Sprintf("graph model, every node up: %d node pairs missing, e.g. %v", m.Summary.MissingPairs, m.MissingPairs(3))}
	}
	if !drills {
		return nil
	}
	ds, err := topo.Drills()
	if err != nil {
		return []string{"graph model drills: " + err.Error()}
	}
	var bad []string
	for _, d := range extender.FailedDrills(ds) {
		bad = append(bad, "graph model, "+d.String())
	}
	return bad
}
