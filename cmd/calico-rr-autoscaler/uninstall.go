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

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/uninstall"
)

func runUninstall(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("uninstall", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
	timeout := fs.Duration("timeout", 15*time.Minute, "how long to wait for the controller to release every policy")
	if err := parseFlags(fs, args, stdout,
		"Usage: calico-rr-autoscaler uninstall [--kubeconfig FILE] [--timeout D]",
		"Deletes every RouteReflectorPolicy and waits until the running controller has released each (node mesh back on where a policy turned it off, then route reflectors, clients and BGPPeers). The chart's pre-delete hook runs it."); err != nil {
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
	return uninstall.Run(ctx, cfg, *timeout, stdout)
}
