//go:build !slim

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"k8s.io/client-go/rest"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoetcd"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/nodesource"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/tools/bgpverify"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/tools/report"
)

func runVerify(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	var in planInputs
	in.register(fs)
	output := fs.String("o", "table", "output format: table or json")
	speaker := fs.String("speaker", "", "BGP speakers: bird (one BIRD 1.6 process per node: Calico's daemon, the reference), gobgp (in-process GoBGP servers; see docs/topologies.md for where they differ from BIRD) or calico (Calico's confd renders each node's BIRD configuration from a kube-apiserver; one BIRD per node in its own network namespace; root) (default: bird when it is installed, else gobgp)")
	kubeconfig := fs.String("kubeconfig", "", "verify a live cluster's own state (Nodes, BGPPeers, BGPConfigurations; read only) instead of a plan")
	failZone := fs.String("fail-zone", "", "after convergence, stop every speaker of this zone and check the survivors again")
	failRR := fs.String("fail-rr", "", "after convergence, stop these route reflectors (comma-separated node names, or N for the plan's first N) and check the survivors again")
	maxNodes := fs.Int("max-nodes", 0, fmt.Sprintf("refuse plans with more nodes (default %d for gobgp, %d for bird and calico)", bgpverify.DefaultMaxNodes[bgpverify.SpeakerGoBGP], bgpverify.DefaultMaxNodes[bgpverify.SpeakerBIRD]))
	timeout := fs.Duration("timeout", 0, "bound on each convergence wait (default 60s + 0.3s per node for gobgp, 2m + 0.6s per node for bird and calico)")
	mesh := fs.Bool("node-to-node-mesh", false, "Calico's node-to-node mesh is on: nodes without a cluster ID also peer with each other")
	bird := fs.String("bird", "", "the bird binary (default: $BIRD, else bird from PATH)")
	confd := fs.String("confd", "", "Calico's confd binary for --speaker calico (default: $CONFD, else the one `make tools` builds)")
	from := fs.String("from", "", "replay the transition from a cluster's state to its plan: FILE holds the state as it is, its Nodes and Calico BGPPeers in one stream (kubectl get nodes,bgppeers.crd.projectcalico.org -o yaml); the plan is computed from those nodes (--policy, --now) and written over the running state as the product writes it, while every node's routes are sampled every 0.2 s. Nodes NotReady in FILE are dead in both states. Needs --speaker calico (the default with --from)")
	drills := fs.Bool("drills", false, "after convergence, stop each zone and then each route reflector in turn, check the survivors, and start them again (bird and calico speakers); the outcomes are per address family in -o json's families")
	routerID := fs.String("calico-router-id", "", "calico-node's CALICO_ROUTER_ID for confd (--speaker calico): empty (each node's IPv4 address) or hash (what IPv6-only nodes need)")
	verbose := fs.Bool("v", false, "print progress to standard error")
	if err := parseFlags(fs, args, stdout,
		"Usage: calico-rr-autoscaler verify (--nodes FILE | --simulate N [--zones Z] | --kubeconfig FILE | --datastore etcdv3 --etcd-endpoints URLS | --from FILE) [--policy FILE] [--speaker gobgp|bird|calico] [--fail-zone Z] [--fail-rr N|NAMES] [-o table|json]",
		"Runs the plan (or a live cluster's state) on real BGP speakers (iBGP, AS 64512, one /24 per node) and reports which nodes learn which blocks; with --from, the transition from the state given to the plan. Exit status 1 when a block is missing (with --from: also when a pair of nodes that keep their role missed a route while the plan was applied)."); err != nil {
		return err
	}
	if err := checkOutput(*output); err != nil {
		return err
	}
	if *from != "" {
		switch {
		case *speaker != "" && *speaker != bgpverify.SpeakerCalico:
			return usageError{fmt.Errorf("--from needs --speaker calico (a transition is replayed by confd re-rendering one running BIRD per node), not %q", *speaker)}
		case in.nodes != "" || in.simulate != 0 || *kubeconfig != "" || in.ds.datastore != calicoetcd.Kubernetes:
			return usageError{errors.New("--from FILE holds the nodes: no --nodes, --simulate, --kubeconfig or --datastore etcdv3 with it")}
		case *failZone != "" || *failRR != "":
			return usageError{errors.New("--from replays a transition: its failures are the nodes NotReady in FILE, not --fail-zone or --fail-rr")}
		}
		*speaker = bgpverify.SpeakerCalico
	}
	if *speaker == "" {
		*speaker = bgpverify.SpeakerBIRD
		if _, err := bgpverify.FindBIRD(*bird); err != nil {
			*speaker = bgpverify.SpeakerGoBGP
			fmt.Fprintln(stderr, "verify: bird is not installed; using GoBGP, which loses a route reflector's own routes where BIRD does not after some failures (see docs/topologies.md)")
		}
	}
	if *speaker != bgpverify.SpeakerGoBGP && *speaker != bgpverify.SpeakerBIRD && *speaker != bgpverify.SpeakerCalico {
		return usageError{fmt.Errorf("--speaker: %q is not gobgp, bird or calico", *speaker)}
	}
	if *maxNodes < 0 {
		return usageError{fmt.Errorf("--max-nodes: %d is negative", *maxNodes)}
	}
	if *timeout < 0 {
		return usageError{fmt.Errorf("--timeout: %v is negative", *timeout)}
	}
	var input extender.Input
	var restConfig *rest.Config
	etcd, err := in.ds.check()
	if err != nil {
		return err
	}
	var etcdState *calicoetcd.State
	var fromPeers []apiv3.BGPPeer
	if etcd {
		if in.nodes != "" || in.simulate != 0 || in.policy != "" || *kubeconfig != "" {
			return usageError{errors.New("--datastore etcdv3 verifies the state in etcd: no --nodes, --simulate, --policy or --kubeconfig with it")}
		}
		if etcdState, err = readEtcd(in.ds.etcd); err != nil {
			return err
		}
	} else if *kubeconfig != "" {
		if in.nodes != "" || in.simulate != 0 || in.policy != "" {
			return usageError{errors.New("--kubeconfig verifies a live cluster's state: no --nodes, --simulate or --policy with it")}
		}
		var err error
		if restConfig, err = kubeConfig(*kubeconfig); err != nil {
			return err
		}
	} else {
		var err error
		if *from != "" {
			if in.given, fromPeers, err = nodesource.ReadStateFile(*from); err != nil {
				return usageError{fmt.Errorf("--from: %w", err)}
			}
		}
		if input, err = in.load(); err != nil {
			return err
		}
	}
	opts := bgpverify.Options{Speaker: *speaker, MaxNodes: *maxNodes, Timeout: *timeout, FailZone: *failZone,
		NodeToNodeMesh: *mesh, BIRD: *bird, Confd: *confd, Drills: *drills, CalicoRouterID: *routerID}
	if *routerID != "" && *routerID != "hash" {
		return usageError{fmt.Errorf("--calico-router-id: %q is not hash (or empty)", *routerID)}
	}
	if *failRR != "" {
		for _, s := range strings.Split(*failRR, ",") {
			if s = strings.TrimSpace(s); s != "" {
				opts.FailRR = append(opts.FailRR, s)
			}
		}
	}
	if *verbose {
		opts.Log = stderr
	}
	if *speaker == bgpverify.SpeakerBIRD || *speaker == bgpverify.SpeakerCalico {
		if _, err := bgpverify.FindBIRD(*bird); err != nil {
			return err
		}
	}
	if *speaker == bgpverify.SpeakerCalico {
		if _, err := bgpverify.FindConfd(*confd); err != nil {
			return err
		}
		if err := bgpverify.NetnsAvailable(); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	var rep *bgpverify.Report
	switch {
	case etcdState != nil:
		rep, err = bgpverify.VerifyObjects(ctx, etcdState.Nodes, etcdState.Peers, etcdState.Configs, opts)
	case restConfig != nil:
		rep, err = bgpverify.VerifyCluster(ctx, restConfig, opts)
	case *from != "":
		rep, err = bgpverify.ReplayTransition(ctx, input, extender.Plan(input), fromPeers, opts)
	default:
		rep, err = bgpverify.Run(ctx, input, extender.Plan(input), opts)
	}
	if err != nil {
		var ie bgpverify.InputError
		if errors.As(err, &ie) {
			return usageError{err}
		}
		return err
	}
	if *verbose {
		fmt.Fprintf(stderr, "verify took %v\n", time.Since(start).Round(time.Millisecond))
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		if err := report.VerifyTable(stdout, rep); err != nil {
			return err
		}
		if rep.Transition != nil {
			fmt.Fprintln(stdout)
			if err := report.TransitionTable(stdout, rep.Transition); err != nil {
				return err
			}
		}
		if len(rep.ConfigDifferences) > 0 {
			fmt.Fprintf(stdout, "\nWhere confd's configurations differ from the graph model's sessions (%d):\n", len(rep.ConfigDifferences))
			for _, d := range rep.ConfigDifferences {
				fmt.Fprintln(stdout, "  "+d)
			}
		}
	}
	if n := rep.MissingPairs(); n > 0 {
		return fmt.Errorf("verify: %d node pairs miss each other's routes", n)
	}
	if tr := rep.Transition; tr != nil && tr.Measured.MissingPairSamplesKeepingRole > 0 {
		return fmt.Errorf("verify: %d missing pair-samples between nodes that keep their role while the plan was applied", tr.Measured.MissingPairSamplesKeepingRole)
	}
	if !rep.Summary.Converged || rep.AfterFailure != nil && !rep.AfterFailure.Summary.Converged {
		return errors.New("verify: the speakers did not converge within the timeout")
	}
	if n := len(rep.ConfigDifferences); n > 0 {
		return fmt.Errorf("verify: confd's configurations differ from the graph model's sessions in %d places", n)
	}
	return nil
}
