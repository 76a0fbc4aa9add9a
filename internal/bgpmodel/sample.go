package bgpmodel

import (
	"fmt"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/nodesource"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// Layouts names the plans SamplePlan makes: the four topologies, MultiCluster in both cluster-ID
// modes.
var Layouts = []string{"SingleCluster", "MultiCluster", "PerRouteReflector", "Hierarchical", "DualPlane"}

// SamplePlan plans n simulated nodes over zones under the default policy with the named layout
// (one of Layouts). Tests and benchmarks use it.
func SamplePlan(layout string, n, zones int) (extender.Input, *extender.Result, error) {
	p := policy.Default("sample")
	topo := &v1alpha1.Topology{}
	switch layout {
	case "SingleCluster":
		topo.Type = v1alpha1.SingleCluster
	case "MultiCluster":
		topo.Type = v1alpha1.MultiCluster
	case "PerRouteReflector":
		topo.Type, topo.ClusterIDs = v1alpha1.MultiCluster, v1alpha1.PerRouteReflector
	case "Hierarchical":
		topo.Type = v1alpha1.Hierarchical
	case "DualPlane":
		topo.Type = v1alpha1.DualPlane
	default:
		return extender.Input{}, nil, fmt.Errorf("unknown layout %q", layout)
	}
	p.Spec.Topology = topo
	resolved, errs := policy.Resolve(p)
	if len(errs) > 0 {
		return extender.Input{}, nil, errs.ToAggregate()
	}
	nodes, err := nodesource.Simulate(n, zones)
	if err != nil {
		return extender.Input{}, nil, err
	}
	in := extender.Input{Policy: resolved, Nodes: nodes, Now: nodesource.SimulationStart.Add(24 * 3600e9)}
	return in, extender.Plan(in), nil
}
