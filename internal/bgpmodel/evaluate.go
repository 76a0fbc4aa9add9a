package bgpmodel

import (
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// Evaluate derives a plan's sessions and propagates every block.
func Evaluate(in extender.Input, res *extender.Result, opts Options) (*Model, error) {
	topo, err := FromPlan(in, res, opts)
	if err != nil {
		return nil, err
	}
	return topo.Propagate(nil)
}

// Alternative is the graph model's figures for the same nodes planned under another layout.
type Alternative struct {
	Layout  string  `json:"layout"`
	Summary Summary `json:"summary"`
}

// Alternatives plans the same nodes under each of Layouts (the policy otherwise unchanged, but for
// the counts when going to or from DualPlane, whose defaults differ: those take the target
// topology's defaults) and returns each one's figures, for comparing the cost of topologies.
func Alternatives(in extender.Input, opts Options) ([]Alternative, error) {
	var out []Alternative
	for _, layout := range Layouts {
		p := *in.Policy
		if (layout == "DualPlane") != (p.Topology == v1alpha1.DualPlane) {
			spec := policy.Default(p.Name)
			spec.Spec.Topology = &v1alpha1.Topology{Type: v1alpha1.MultiCluster}
			if layout == "DualPlane" {
				spec.Spec.Topology.Type = v1alpha1.DualPlane
			}
			d := policy.MustResolve(spec)
			p.Min, p.Max, p.MaxClientsPerRR, p.Redundancy, p.MaxRackSize = d.Min, d.Max, d.MaxClientsPerRR, d.Redundancy, d.MaxRackSize
		}
		t, mode, err := LayoutTopology(layout)
		if err != nil {
			return nil, err
		}
		p.Topology = t
		if mode != "" {
			p.ClusterIDMode = mode
		}
		alt := in
		alt.Policy = &p
		m, err := Evaluate(alt, extender.Plan(alt), opts)
		if err != nil {
			return nil, err
		}
		out = append(out, Alternative{Layout: layout, Summary: m.Summary})
	}
	return out, nil
}
