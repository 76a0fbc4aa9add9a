package bgpmodel

import (
	"fmt"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// Cost is what a plan costs BIRD, beside what the default layout would cost on the same nodes.
// Paths per prefix: the routes a node stores over the number of nodes (each originates one block).
type Cost struct {
	Layout         string  `json:"layout"`
	BusiestPaths   float64 `json:"busiestPathsPerPrefix"`
	MeanPaths      float64 `json:"meanPathsPerPrefix"`
	MissingPairs   int64   `json:"missingPairs"`
	DefaultLayout  string  `json:"defaultLayout"`
	DefaultBusiest float64 `json:"defaultBusiestPathsPerPrefix"`
	DefaultMean    float64 `json:"defaultMeanPathsPerPrefix"`
}

// CostOf runs the graph model on a plan (m: its model when the caller has it, else nil) and, unless
// the policy is the default layout already, on the default layout's plan for the same nodes.
func CostOf(in extender.Input, res *extender.Result, m *Model) (Cost, error) {
	if m == nil {
		var err error
		if m, err = Evaluate(in, res, Options{}); err != nil {
			return Cost{}, err
		}
	}
	c := Cost{Layout: layoutName(in.Policy), MissingPairs: m.Summary.MissingPairs}
	c.BusiestPaths, c.MeanPaths = perPrefix(m.Summary)
	def := policy.DefaultLayoutOf(in.Policy)
	c.DefaultLayout = layoutName(def)
	if in.Policy.IsDefaultLayout() {
		c.DefaultBusiest, c.DefaultMean = c.BusiestPaths, c.MeanPaths
		return c, nil
	}
	din := in
	din.Policy = def
	dm, err := Evaluate(din, extender.Plan(din), Options{})
	if err != nil {
		return Cost{}, fmt.Errorf("the default layout: %w", err)
	}
	c.DefaultBusiest, c.DefaultMean = perPrefix(dm.Summary)
	return c, nil
}

// Expensive reports whether the plan stores more than twice the paths the default layout would.
func (c Cost) Expensive() bool { return c.MeanPaths > 2*c.DefaultMean }

// String is the one-line summary warnings and Events use.
func (c Cost) String() string {
	return fmt.Sprintf("%s stores %.1f paths per prefix on the busiest node and %.1f on the mean node; the default layout (%s) %.1f and %.1f",
		c.Layout, c.BusiestPaths, c.MeanPaths, c.DefaultLayout, c.DefaultBusiest, c.DefaultMean)
}

func perPrefix(s Summary) (busiest, mean float64) {
	if s.Nodes == 0 {
		return 0, 0
	}
	n := float64(s.Nodes)
	return s.MaxRoutesPerNode / n, s.TotalRoutes / n / n
}

func layoutName(p *policy.Resolved) string {
	if p.Topology == "MultiCluster" {
		return "MultiCluster/" + string(p.ClusterIDMode)
	}
	return string(p.Topology)
}
