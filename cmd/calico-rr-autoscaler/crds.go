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

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/crds"
)

const crdsUsage = "Usage: calico-rr-autoscaler crds apply [--kubeconfig FILE] [--timeout D]"

// runCRDs is `crds apply`: the chart's pre-upgrade hook runs it; so do users who install the chart
// with --skip-crds or through a GitOps tool.
func runCRDs(args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "apply" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprintln(stdout, crdsUsage)
			return errHelp
		}
		return usageError{fmt.Errorf("crds: want the subcommand apply (%s)", crdsUsage)}
	}
	fs := flag.NewFlagSet("crds apply", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait for the API server to apply and establish the CRD")
	if err := parseFlags(fs, args[1:], stdout, crdsUsage,
		"Server-side-applies the RouteReflectorPolicy CRD built into this binary (field manager "+crds.FieldManager+", forced) and waits until it is Established. The chart's pre-upgrade hook runs it (crds.upgrade)."); err != nil {
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
	return crds.Apply(ctx, cfg, *timeout, stdout)
}
