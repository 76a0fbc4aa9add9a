package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/uninstall"
)

func runUninstall(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("uninstall", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
	timeout := fs.Duration("timeout", 15*time.Minute, "how long to wait for the controller to release every policy")
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintln(stdout, "Usage: calico-rr-autoscaler uninstall [--kubeconfig FILE] [--timeout D]")
			fmt.Fprintln(stdout, "Deletes every RouteReflectorPolicy and waits until the running controller has released each (node mesh back on where a policy turned it off, then route reflectors, clients and BGPPeers). The chart's pre-delete hook runs it.")
			fs.PrintDefaults()
			return errHelp
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("uninstall: unexpected argument %q", fs.Arg(0))}
	}
	if *timeout <= 0 {
		return usageError{fmt.Errorf("--timeout: %v is not positive", *timeout)}
	}
	cfg, err := ctrlconfig.GetConfig()
	if *kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", *kubeconfig)
	}
	if err != nil {
		return usageError{fmt.Errorf("--kubeconfig: %v", err)}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return uninstall.Run(ctx, cfg, *timeout, stdout)
}
