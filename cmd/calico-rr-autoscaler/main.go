// Command calico-rr-autoscaler picks, labels and re-picks Calico route reflectors.
package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// usageError is bad input: the command prints it on one line and exits with status 2.
type usageError struct{ error }

const usage = `calico-rr-autoscaler: automatic Calico route reflectors

Usage:
  calico-rr-autoscaler plan   [flags]   compute and print a plan without a cluster
  calico-rr-autoscaler verify [flags]   run a plan on real BGP speakers and check every node learns every route
  calico-rr-autoscaler serve  [flags]   run the admission webhooks and the reconciler in a cluster
  calico-rr-autoscaler status [flags]   what the product manages in a live cluster (also: kubectl rr)
  calico-rr-autoscaler uninstall [flags] delete every policy and wait until its route reflectors are released
  calico-rr-autoscaler crds apply [flags] apply the RouteReflectorPolicy CRD built into this binary (server-side)
  calico-rr-autoscaler policy apply|keep [flags] apply the chart's policy once its webhook answers; keep a policy an earlier chart created
  calico-rr-autoscaler help   [command]

Run "calico-rr-autoscaler <command> -h" for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if filepath.Base(os.Args[0]) == "kubectl-rr" {
		// Installed as the kubectl plugin `kubectl rr`: the status command.
		return exitCode(runStatus(args, os.Stdout))
	}
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "plan":
		err = runPlan(args[1:], os.Stdout)
	case "verify":
		err = runVerify(args[1:], os.Stdout, os.Stderr)
	case "serve":
		err = runServe(args[1:], os.Stdout)
		if err != nil && err != errHelp && jsonRequested(args[1:]) && logFatal(err, os.Stderr) {
			return exitStatus(err)
		}
	case "status":
		err = runStatus(args[1:], os.Stdout)
	case "uninstall":
		err = runUninstall(args[1:], os.Stdout)
	case "crds":
		err = runCRDs(args[1:], os.Stdout)
	case "policy":
		err = runPolicy(args[1:], os.Stdout)
	case "help", "-h", "--help":
		fmt.Fprint(os.Stdout, usage)
		return 0
	default:
		err = usageError{fmt.Errorf("unknown command %q (want plan)", args[0])}
	}
	return exitCode(err)
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if err == errHelp {
		return 0
	}
	fmt.Fprintln(os.Stderr, "calico-rr-autoscaler: "+err.Error())
	return exitStatus(err)
}

// exitStatus is 2 for bad input, 1 for any other error.
func exitStatus(err error) int {
	if _, ok := err.(usageError); ok {
		return 2
	}
	return 1
}
