package extender_test

import (
	"fmt"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
)

func init() {
	extender.ModelDrills = modelDrills
	extender.PlanDrills = bgpmodel.PlanDrills
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
