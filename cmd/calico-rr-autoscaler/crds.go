package main

import (
	"flag"
	"fmt"
	"io"
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
	return runAgainstCluster(flag.NewFlagSet("crds apply", flag.ContinueOnError), args[1:], stdout, crdsUsage,
		"Server-side-applies the RouteReflectorPolicy CRD built into this binary (field manager "+crds.FieldManager+", forced) and waits until it is Established. The chart's pre-upgrade hook runs it (crds.upgrade).",
		2*time.Minute, "how long to wait for the API server to apply and establish the CRD", crds.Apply)
}
