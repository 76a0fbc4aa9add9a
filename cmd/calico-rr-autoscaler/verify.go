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

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpverify"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/report"
)

func runVerify(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	var in planInputs
	in.register(fs)
	output := fs.String("o", "table", "output format: table or json")
	speaker := fs.String("speaker", bgpverify.SpeakerGoBGP, "BGP speakers: gobgp (in-process GoBGP servers) or bird (one BIRD 1.6 process per node)")
	failZone := fs.String("fail-zone", "", "after convergence, stop every speaker of this zone and check the survivors again")
	failRR := fs.String("fail-rr", "", "after convergence, stop these route reflectors (comma-separated node names, or N for the plan's first N) and check the survivors again")
	maxNodes := fs.Int("max-nodes", 0, fmt.Sprintf("refuse plans with more nodes (default %d for gobgp, %d for bird)", bgpverify.DefaultMaxNodes[bgpverify.SpeakerGoBGP], bgpverify.DefaultMaxNodes[bgpverify.SpeakerBIRD]))
	timeout := fs.Duration("timeout", 0, "bound on each convergence wait (default 60s + 0.3s per node)")
	mesh := fs.Bool("node-to-node-mesh", false, "Calico's node-to-node mesh is on: nodes without a cluster ID also peer with each other")
	bird := fs.String("bird", "", "the bird binary (default: bird from PATH)")
	verbose := fs.Bool("v", false, "print progress to standard error")
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintln(stdout, "Usage: calico-rr-autoscaler verify (--nodes FILE | --simulate N [--zones Z]) [--policy FILE] [--speaker gobgp|bird] [--fail-zone Z] [--fail-rr N|NAMES] [-o table|json]")
			fmt.Fprintln(stdout, "Runs the plan on real BGP speakers (iBGP, AS 64512, one /24 per node on 127.x loopback addresses) and reports which nodes learn which blocks. Exit status 1 when a block is missing.")
			fs.PrintDefaults()
			return errHelp
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("verify: unexpected argument %q", fs.Arg(0))}
	}
	if *output != "table" && *output != "json" {
		return usageError{fmt.Errorf("-o: %q is not table or json", *output)}
	}
	if *speaker != bgpverify.SpeakerGoBGP && *speaker != bgpverify.SpeakerBIRD {
		return usageError{fmt.Errorf("--speaker: %q is not gobgp or bird", *speaker)}
	}
	if *maxNodes < 0 {
		return usageError{fmt.Errorf("--max-nodes: %d is negative", *maxNodes)}
	}
	if *timeout < 0 {
		return usageError{fmt.Errorf("--timeout: %v is negative", *timeout)}
	}
	input, err := in.load()
	if err != nil {
		return err
	}
	opts := bgpverify.Options{Speaker: *speaker, MaxNodes: *maxNodes, Timeout: *timeout, FailZone: *failZone,
		NodeToNodeMesh: *mesh, BIRD: *bird}
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
	if *speaker == bgpverify.SpeakerBIRD {
		if _, err := bgpverify.FindBIRD(*bird); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res := extender.Plan(input)
	start := time.Now()
	rep, err := bgpverify.Run(ctx, input, res, opts)
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
	} else if err := report.VerifyTable(stdout, rep); err != nil {
		return err
	}
	if n := rep.MissingPairs(); n > 0 {
		return fmt.Errorf("verify: %d node pairs miss each other's routes", n)
	}
	if !rep.Summary.Converged || rep.AfterFailure != nil && !rep.AfterFailure.Summary.Converged {
		return errors.New("verify: the speakers did not converge within the timeout")
	}
	return nil
}
