package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoetcd"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/nodesource"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/tools/report"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

var errHelp = errors.New("help")

// planInputs are the flags plan and verify share.
type planInputs struct {
	nodes    string
	simulate int
	zones    int
	policy   string
	now      string
	ds       datastoreFlags
	// etcd is the Calico state read from etcd with --datastore etcdv3.
	etcd *calicoetcd.State
	// given are nodes read elsewhere (verify --from): the input instead of --nodes or --simulate.
	given []*corev1.Node
}

func (in *planInputs) register(fs *flag.FlagSet) {
	fs.StringVar(&in.nodes, "nodes", "", "file of Kubernetes Node objects (NodeList, List or a stream; YAML or JSON; - for stdin)")
	fs.IntVar(&in.simulate, "simulate", 0, "simulate N Ready nodes instead of reading --nodes")
	fs.IntVar(&in.zones, "zones", 3, "number of zones for --simulate")
	fs.StringVar(&in.policy, "policy", "", "RouteReflectorPolicy YAML file (default: the default policy)")
	fs.StringVar(&in.now, "now", "", "time of the decision, RFC 3339 (default: now)")
	in.ds.register(fs)
}

// load reads the nodes and the policy and returns the planner's input.
func (in *planInputs) load() (extender.Input, error) {
	var out extender.Input
	etcd, err := in.ds.check()
	if err != nil {
		return out, err
	}
	switch {
	case etcd && in.simulate != 0:
		return out, usageError{errors.New("--datastore etcdv3 reads the nodes from etcd: no --simulate with it")}
	case !etcd && in.given == nil && (in.nodes == "") == (in.simulate == 0):
		return out, usageError{errors.New("give exactly one of --nodes FILE and --simulate N")}
	}
	var nodes []*corev1.Node
	if in.given != nil {
		nodes = in.given
	} else if in.nodes != "" {
		nodes, err = nodesource.ReadNodesFile(in.nodes)
	} else if !etcd {
		nodes, err = nodesource.Simulate(in.simulate, in.zones)
	}
	if err != nil {
		return out, usageError{err}
	}
	resolved := policy.MustResolve(policy.Default("default"))
	if in.policy != "" {
		_, resolved, err = nodesource.ReadPolicyFile(in.policy)
		if err != nil {
			return out, usageError{err}
		}
	}
	if etcd {
		if in.etcd, err = readEtcd(in.ds.etcd); err != nil {
			return out, err
		}
	}
	planned := extender.FromNodes(nodes)
	if etcd {
		planned = etcdPlanNodes(in.etcd, nodes, resolved.RRLabelKey)
	}
	now := time.Now().UTC().Truncate(time.Second)
	if in.now != "" {
		if now, err = time.Parse(time.RFC3339, in.now); err != nil {
			return out, usageError{fmt.Errorf("--now: %q is not an RFC 3339 time", in.now)}
		}
	}
	// The plan is the one the reconciler would commit: it prefers a layout that survives its failure
	// drills (the graph model's).
	return extender.Input{Policy: resolved, Nodes: planned, Now: now, Drills: bgpmodel.PlanDrills}, nil
}

func runPlan(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	var in planInputs
	in.register(fs)
	output := fs.String("o", "table", "output format: table or json")
	routes := fs.Bool("routes", true, "report the graph model's route figures (routes on the busiest node, paths per prefix), beside the default layout's for the same nodes")
	alternatives := fs.Bool("alternatives", false, "with --routes, also plan the same nodes in every explicit topology and report each one's figures")
	routerID := fs.String("calico-router-id", "", "calico-node's CALICO_ROUTER_ID: empty (unset: each node's IPv4 address is its BGP router ID) or hash; checked when a node has an IPv6 address (routes.routerIDs)")
	bgpPeers := fs.String("bgppeers", "", "file of the cluster's Calico BGPPeers (kubectl get bgppeers -o yaml): with --routes, report the transition from the cluster as it is (these BGPPeers and the nodes' labels) to the plan (routes.transition)")
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintln(stdout, "Usage: calico-rr-autoscaler plan (--nodes FILE | --simulate N [--zones Z] | --datastore etcdv3 --etcd-endpoints URLS [--nodes FILE]) [--policy FILE] [-o table|json]")
			fs.PrintDefaults()
			return errHelp
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("plan: unexpected argument %q", fs.Arg(0))}
	}
	if *routerID != "" && *routerID != bgpmodel.RouterIDHash {
		return usageError{fmt.Errorf("--calico-router-id: %q is not hash (or empty)", *routerID)}
	}
	if *output != "table" && *output != "json" {
		return usageError{fmt.Errorf("-o: %q is not table or json", *output)}
	}
	input, err := in.load()
	if err != nil {
		return err
	}
	res := extender.Plan(input)
	var figures *routeFigures
	if *routes {
		if figures, err = evaluateRoutes(input, res, *alternatives, *routerID); err != nil {
			return err
		}
		if figures.RouterIDs != nil && !figures.RouterIDs.OK() {
			fmt.Fprintln(os.Stderr, "plan: warning: "+figures.RouterIDs.String())
		}
		if *bgpPeers != "" {
			peers, err := nodesource.ReadBGPPeersFile(*bgpPeers)
			if err != nil {
				return usageError{err}
			}
			if figures.Transition, err = transitionOf(input, res, peers); err != nil {
				return err
			}
		}
	} else if *bgpPeers != "" {
		return usageError{errors.New("--bgppeers reports the transition's route figures: not with --routes=false")}
	}
	var live *etcdFigures
	if in.etcd != nil {
		if live, err = etcdRouteFigures(in.etcd); err != nil {
			return err
		}
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			*extender.Result
			Routes *routeFigures `json:"routes,omitempty"`
			Etcd   *etcdFigures  `json:"etcd,omitempty"`
		}{res, figures, live})
	}
	if err := report.PlanTable(stdout, res); err != nil {
		return err
	}
	if figures != nil {
		fmt.Fprintln(stdout)
		if err := report.RouteFigures(stdout, figures.Summary, figures.Cost, figures.Drills); err != nil {
			return err
		}
		for _, k := range slices.Sorted(maps.Keys(figures.Families)) {
			name := "IPv" + strings.TrimPrefix(k, "ipv")
			fmt.Fprintf(stdout, "\n%s (the sessions both of whose ends have an %s address)\n", name, name)
			ff := figures.Families[k]
			if err := report.RouteFigures(stdout, ff.Summary, ff.Cost, ff.Drills); err != nil {
				return err
			}
		}
		if figures.Suggestion != "" {
			fmt.Fprintln(stdout, "\n"+figures.Suggestion)
		}
		if figures.Transition != nil {
			fmt.Fprintln(stdout, "\nTransition from the cluster as it is: "+figures.Transition.String())
		}
	}
	if live != nil {
		fmt.Fprintln(stdout)
		live.print(stdout)
	}
	return nil
}

// routeFigures is what the graph model says of a plan, of the default layout on the same nodes,
// and (with --alternatives) of the same nodes in the other layouts.
type routeFigures struct {
	Summary      bgpmodel.Summary       `json:"summary"`
	Cost         bgpmodel.Cost          `json:"cost"`
	Alternatives []bgpmodel.Alternative `json:"alternatives,omitempty"`
	Suggestion   string                 `json:"suggestion,omitempty"`
	// Drills are the plan's failure drills: each zone lost, each route reflector lost.
	Drills []extender.Drill `json:"drills"`
	// Families (when a node has an IPv6 address): the same figures per address family, "ipv4" and
	// "ipv6", each on the sessions both of whose ends have an address of the family (bird.cfg and
	// bird6.cfg). Summary, Cost and Drills above stay the family-blind figures.
	Families map[string]*bgpmodel.FamilyFigures `json:"families,omitempty"`
	// RouterIDs (when a node has an IPv6 address): the check of the nodes' BGP router IDs.
	RouterIDs *bgpmodel.RouterIDs `json:"routerIDs,omitempty"`
	// Transition (with --bgppeers): the sessions the plan adds, removes and restarts from the
	// cluster as it is, the pairs at risk while it is applied, and its make-before-break steps.
	Transition *bgpmodel.Transition `json:"transition,omitempty"`
}

// transitionOf is bgpmodel.ClusterTransition with plan's error wording.
func transitionOf(in extender.Input, res *extender.Result, peers []apiv3.BGPPeer) (*bgpmodel.Transition, error) {
	tr, err := bgpmodel.ClusterTransition(in, res, in.Nodes, peers)
	if err != nil {
		return nil, fmt.Errorf("transition: %w", err)
	}
	return tr, nil
}

// evaluateRoutes runs the graph model on the plan and on the default layout's plan for the same
// nodes, and says so when the plan stores more than twice the default's paths: with Calico's
// ADD-PATH the cost of a topology is part of its correctness.
func evaluateRoutes(in extender.Input, res *extender.Result, alternatives bool, calicoRouterID string) (*routeFigures, error) {
	topo, err := bgpmodel.FromPlan(in, res, bgpmodel.Options{})
	if err != nil {
		return nil, fmt.Errorf("route model: %w", err)
	}
	m, err := topo.Propagate(nil)
	if err != nil {
		return nil, fmt.Errorf("route model: %w", err)
	}
	cost, err := bgpmodel.CostOf(in, res, m)
	if err != nil {
		return nil, fmt.Errorf("route model: %w", err)
	}
	f := &routeFigures{Summary: m.Summary, Cost: cost, Drills: res.Drills}
	if res.DrillsErr != nil {
		return nil, fmt.Errorf("failure drills: %w", res.DrillsErr)
	}
	if in.Drills == nil {
		if f.Drills, err = bgpmodel.PlanDrills(in, res); err != nil {
			return nil, fmt.Errorf("failure drills: %w", err)
		}
	}
	if f.Families, err = bgpmodel.FamiliesOf(in, res, topo); err != nil {
		return nil, fmt.Errorf("route model: %w", err)
	}
	if f.Families != nil {
		// The plan's own drills (PlanDrills) are per family here; routes.drills stay the
		// family-blind ones, the families' are in routes.families.
		if f.Drills, err = topo.Drills(); err != nil {
			return nil, fmt.Errorf("failure drills: %w", err)
		}
		ids, err := bgpmodel.CheckRouterIDs(topo.Nodes, calicoRouterID)
		if err != nil {
			return nil, usageError{err}
		}
		f.RouterIDs = &ids
	}
	if cost.Expensive() {
		f.Suggestion = fmt.Sprintf("The default layout (%s) would store %.1f paths per prefix on the mean node instead of %.1f (%.1f instead of %.1f on the busiest) for the same nodes.",
			cost.DefaultLayout, cost.DefaultMean, cost.MeanPaths, cost.DefaultBusiest, cost.BusiestPaths)
	}
	if alternatives {
		if f.Alternatives, err = bgpmodel.Alternatives(in, bgpmodel.Options{}); err != nil {
			return nil, fmt.Errorf("route model: %w", err)
		}
	}
	return f, nil
}
