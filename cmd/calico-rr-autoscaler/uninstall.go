package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/rest"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/uninstall"
)

func runUninstall(args []string, stdout io.Writer) error {
	return runAgainstCluster(flag.NewFlagSet("uninstall", flag.ContinueOnError), args, stdout,
		"Usage: calico-rr-autoscaler uninstall [--kubeconfig FILE] [--timeout D]",
		"Deletes every RouteReflectorPolicy and waits until the running controller has released each (node mesh back on where a policy turned it off, then route reflectors, clients and BGPPeers). The chart's pre-delete hook runs it.",
		15*time.Minute, "how long to wait for the controller to release every policy", uninstall.Run)
}

// runAgainstCluster parses --kubeconfig and --timeout for a command that acts on the cluster once
// and waits (crds apply, uninstall), then runs it until done, the timeout or SIGTERM.
func runAgainstCluster(fs *flag.FlagSet, args []string, stdout io.Writer, usage, help string, timeoutDefault time.Duration, timeoutHelp string,
	run func(context.Context, *rest.Config, time.Duration, io.Writer) error) error {
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
	timeout := fs.Duration("timeout", timeoutDefault, timeoutHelp)
	if err := parseFlags(fs, args, stdout, usage, help); err != nil {
		return err
	}
	if *timeout <= 0 {
		return usageError{fmt.Errorf("--timeout: %v is not positive", *timeout)}
	}
	cfg, err := kubeConfig(*kubeconfig)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, cfg, *timeout, stdout)
}
