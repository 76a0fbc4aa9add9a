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

// LayoutTopology returns the topology and, for MultiCluster, the cluster-ID mode a layout of
// Layouts names.
func LayoutTopology(layout string) (v1alpha1.TopologyType, v1alpha1.ClusterIDMode, error) {
	switch layout {
	case "SingleCluster":
		return v1alpha1.SingleCluster, "", nil
	case "MultiCluster":
		return v1alpha1.MultiCluster, v1alpha1.Grouped, nil
	case "PerRouteReflector":
		return v1alpha1.MultiCluster, v1alpha1.PerRouteReflector, nil
	case "Hierarchical":
		return v1alpha1.Hierarchical, "", nil
	case "DualPlane":
		return v1alpha1.DualPlane, "", nil
	}
	return "", "", fmt.Errorf("unknown layout %q", layout)
}

// SamplePlan plans n simulated nodes over zones under the default policy with the named layout
// (one of Layouts). Tests and benchmarks use it. A DualPlane sample of at most 2,000 nodes has
// racks of at most n/(2*zones) nodes (10 at least), so that it has racks and a spine, which the
// default's one rack for a small cluster would not show.
func SamplePlan(layout string, n, zones int) (extender.Input, *extender.Result, error) {
	p := policy.Default("sample")
	t, mode, err := LayoutTopology(layout)
	if err != nil {
		return extender.Input{}, nil, err
	}
	topo := &v1alpha1.Topology{Type: t, ClusterIDs: mode}
	if t == v1alpha1.DualPlane && n <= 2000 && zones > 0 {
		// Racks and a spine at every sample size: the default would plan a small sample as one rack.
		rs := int32(max(10, (n+2*zones-1)/(2*zones)))
		topo.MaxRackSize = &rs
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
	in := extender.Input{Policy: resolved, Nodes: extender.FromNodes(nodes), Now: nodesource.SimulationStart.Add(24 * 3600e9)}
	return in, extender.Plan(in), nil
}
