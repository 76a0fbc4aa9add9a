package bgpverify

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/nodesource"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// agreePlan is a plan the speakers must agree on, with the failures to try on it.
type agreePlan struct {
	name     string
	in       extender.Input
	res      *extender.Result
	failures []Options // each with FailZone or FailRR set
	bird     bool      // run BIRD too (where speakers include it): about a minute a run at 90 nodes
}

// dualPlanePlan plans n simulated nodes in 3 zones under the default layout with racks of at most
// rack nodes.
func dualPlanePlan(t *testing.T, n int, rack int32) (extender.Input, *extender.Result) {
	t.Helper()
	p := policy.Default("agree")
	p.Spec.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: &rack}
	resolved, errs := policy.Resolve(p)
	require.Empty(t, errs)
	nodes, err := nodesource.Simulate(n, 3)
	require.NoError(t, err)
	in := extender.Input{Policy: resolved, Nodes: extender.FromNodes(nodes), Now: nodesource.SimulationStart.Add(24 * 3600e9)}
	return in, extender.Plan(in)
}

// failures are the drills of the acceptance: each spine member (or, without a spine, the first
// route reflector), one rack route reflector, each zone.
func failures(res *extender.Result, zones ...string) []Options {
	var out []Options
	rack := ""
	for _, rr := range res.RouteReflectors {
		switch {
		case rr.Spine:
			out = append(out, Options{FailRR: []string{rr.Node}})
		case rack == "" && rr.Rack != "":
			rack = rr.Node
		}
	}
	if rack != "" {
		out = append(out, Options{FailRR: []string{rack}})
	}
	if len(out) == 0 && len(res.RouteReflectors) > 0 {
		out = append(out, Options{FailRR: []string{res.RouteReflectors[0].Node}})
	}
	for _, z := range zones {
		out = append(out, Options{FailZone: z})
	}
	return out
}

func failureName(o Options) string {
	if o.FailZone != "" {
		return "zone " + o.FailZone
	}
	return "rr " + o.FailRR[0]
}

// missingByNode is each surviving node's count of missing blocks after the failure.
func missingByNode(rep *Report) map[string]int {
	out := map[string]int{}
	for _, nr := range rep.AfterFailure.Nodes {
		if !nr.Down {
			out[nr.Name] = len(nr.Missing)
		}
	}
	return out
}

// speakersAgree runs every failure of every plan on GoBGP and, with bird, on BIRD, and requires
// from each speaker the model's missing blocks on every node (sameRoutes), the same per node from
// both, and 0 missing pairs where the plan's failure drills pass.
func speakersAgree(t *testing.T, plans []agreePlan, speakers ...string) {
	for _, pl := range plans {
		topo, err := bgpmodel.FromPlan(pl.in, pl.res, bgpmodel.Options{})
		require.NoError(t, err)
		drills, err := topo.Drills()
		require.NoError(t, err)
		failing := extender.FailedDrills(drills)
		for _, f := range pl.failures {
			name := fmt.Sprintf("%s/%s", pl.name, failureName(f))
			t.Run(name, func(t *testing.T) {
				var first map[string]int
				for _, sp := range speakers {
					if sp == SpeakerBIRD {
						if !pl.bird {
							continue
						}
						ensureBIRD(t)
					}
					f.MaxNodes = len(pl.res.Nodes)
					rep := run(t, sp, pl.in, pl.res, f)
					require.NotNil(t, rep.AfterFailure, "%s %s: no failure phase", sp, name)
					sameRoutes(t, sp+" "+name, pl.in, pl.res, rep, rep.AfterFailure)
					sameRoutes(t, sp+" "+name+" (all up)", pl.in, pl.res, rep, &Phase{Summary: rep.Summary, Nodes: rep.Nodes})
					got := missingByNode(rep)
					if first == nil {
						first = got
					} else {
						assert.Equalf(t, first, got, "%s: %s and %s miss different blocks", name, speakers[0], sp)
					}
					if len(failing) == 0 {
						assert.Zerof(t, rep.MissingPairs(), "%s %s: the drills pass, yet %d pairs miss", sp, name, rep.MissingPairs())
					}
					t.Logf("%s %s: %d missing pairs after the failure (model %d)", sp, name, rep.AfterFailure.Summary.MissingPairs, rep.AfterFailure.Summary.ModelMissingPairs)
				}
			})
		}
	}
}

// The plan where GoBGP used to disagree with BIRD: DualPlane in racks of 20 at 90 nodes (GoBGP lost
// 446 pairs after a spine member's loss, BIRD and the model none). GoBGP is checked against the
// model node by node here (BIRD agrees with the model on fresh plans in TestCalico/MatchesModel,
// on confd's configuration, and in TestBIRDMatchesModelLarge); TestSpeakersAgreeLarge runs BIRD beside it on every failure and adds
// Hierarchical, MultiCluster and DualPlane at 300 nodes.
func TestSpeakersAgree(t *testing.T) {
	t.Parallel()
	speakersAgree(t, agreePlans(t, false), SpeakerGoBGP)
}

// TestSpeakersAgreeLarge runs the 90-node default layout's failures on BIRD too (about a minute a
// run) and adds, on GoBGP against the model, every failure of Hierarchical, MultiCluster and the
// default layout at 300 nodes: what it proves beyond TestSpeakersAgree is that BIRD's blocks are
// GoBGP's, node by node, on the failures GoBGP used to get wrong, and GoBGP's the model's on more
// layouts (BIRD's are the model's on fresh plans in TestCalico/MatchesModel and
// TestCalicoFamilies/DualStack, every layout in TestCalicoLarge).
func TestSpeakersAgreeLarge(t *testing.T) {
	t.Parallel()
	testenv.SlowProof(t)
	speakersAgree(t, agreePlans(t, true), SpeakerGoBGP, SpeakerBIRD)
}

func agreePlans(t *testing.T, large bool) []agreePlan {
	zones := []string{"zone-a", "zone-b", "zone-c"}
	var plans []agreePlan
	in, res := dualPlanePlan(t, 90, 20)
	fs := failures(res, zones...)
	if !large {
		// A spine member, a rack route reflector and a zone: where GoBGP lost 446, 84 and 181.
		plans = append(plans, agreePlan{"DualPlane/90/racks-of-20", in, res, []Options{fs[0], fs[2], fs[3]}, false})
		return plans
	}
	// BIRD on the spine members, the rack route reflector and one zone (zones b and c are alike):
	// what GoBGP got wrong before its shadow speakers.
	plans = append(plans, agreePlan{"DualPlane/90/racks-of-20", in, res, fs[:4], true})
	for _, layout := range []string{"Hierarchical", "MultiCluster"} {
		in, res := samplePlan(t, layout, 60)
		plans = append(plans, agreePlan{layout + "/60", in, res, failures(res, zones...), false})
	}
	// One zone: the three are alike at 300 nodes.
	in, res = samplePlan(t, "DualPlane", 300)
	plans = append(plans, agreePlan{"DualPlane/300", in, res, failures(res, zones[0]), false})
	for _, pl := range plans {
		require.Falsef(t, slices.ContainsFunc(pl.failures, func(o Options) bool { return len(o.FailRR) == 0 && o.FailZone == "" }), "%s: empty failure", pl.name)
	}
	return plans
}
