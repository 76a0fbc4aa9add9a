package extender_test

import (
	"fmt"
	"slices"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
)

func init() { extender.ModelDrills = modelDrills }

// rrDrillSample bounds the route reflector drills beyond 5,000 nodes.
const rrDrillSample = 12

func modelDrills(in extender.Input, res *extender.Result, drills bool) []string {
	topo, err := bgpmodel.FromPlan(in, res, bgpmodel.Options{})
	if err != nil {
		return []string{"graph model: " + err.Error()}
	}
	var bad []string
	check := func(what string, down []bool) {
		m, err := topo.Propagate(down)
		if err != nil {
			bad = append(bad, fmt.Sprintf("graph model, %s: %v", what, err))
			return
		}
		if m.Summary.MissingPairs > 0 {
			bad = append(bad, fmt.Sprintf("graph model, %s: %d node pairs missing, e.g. %v", what, m.Summary.MissingPairs, m.MissingPairs(3)))
		}
	}
	check("every node up", nil)
	if !drills {
		return bad
	}
	var zones []string
	for _, n := range topo.Nodes {
		if !slices.Contains(zones, n.Zone) {
			zones = append(zones, n.Zone)
		}
	}
	slices.Sort(zones)
	if len(zones) > 1 {
		for _, z := range zones {
			check("zone "+z+" lost", topo.ZoneDown(z))
		}
	}
	var rrs []string
	for _, rr := range res.RouteReflectors {
		if !rr.Draining {
			rrs = append(rrs, rr.Node)
		}
	}
	step := 1
	if len(topo.Nodes) > 5000 && len(rrs) > rrDrillSample {
		step = (len(rrs) + rrDrillSample - 1) / rrDrillSample
	}
	for i := 0; i < len(rrs); i += step {
		down, _ := topo.NamesDown(rrs[i])
		check("route reflector "+rrs[i]+" lost", down)
	}
	return bad
}
