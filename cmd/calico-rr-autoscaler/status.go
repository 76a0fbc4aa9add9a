package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/clientcmd"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/clusterstatus"
)

func runStatus(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
	output := fs.String("o", "table", "output format: table or json")
	watch := fs.Bool("watch", false, "redraw when the state changes (every 2 s), until interrupted")
	calicoAPI := fs.String("calico-api", "auto", "Calico API of the BGPPeers: auto, crd or v3")
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintln(stdout, "Usage: calico-rr-autoscaler status [--kubeconfig FILE] [-o table|json] [--watch]   (also: kubectl rr)")
			fmt.Fprintln(stdout, "Per policy: mode, route reflectors per zone with their clients, handovers in flight, what Observe or Paused would change; the foreign BGPPeers; the graph model's figures for the cluster as it is.")
			fs.PrintDefaults()
			return errHelp
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("status: unexpected argument %q", fs.Arg(0))}
	}
	if *output != "table" && *output != "json" {
		return usageError{fmt.Errorf("-o: %q is not table or json", *output)}
	}
	gv, auto, err := calico.ParseAPI(*calicoAPI)
	if err != nil {
		return usageError{fmt.Errorf("--calico-api: %v", err)}
	}
	cfg, err := ctrlconfig.GetConfig()
	if *kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", *kubeconfig)
	}
	if err != nil {
		return usageError{fmt.Errorf("--kubeconfig: %v", err)}
	}
	if auto {
		d, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			return err
		}
		if gv, err = calico.Detect(d); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var last []byte
	for {
		rep, err := clusterstatus.Read(ctx, cfg, gv, time.Now())
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		if *output == "json" {
			err = clusterstatus.JSON(&buf, rep)
		} else {
			err = clusterstatus.Table(&buf, rep)
		}
		if err != nil {
			return err
		}
		if !*watch {
			_, err = stdout.Write(buf.Bytes())
			return err
		}
		if !bytes.Equal(buf.Bytes(), last) {
			fmt.Fprintf(stdout, "\033[H\033[2J%s  (%s)\n", buf.Bytes(), time.Now().Format(time.TimeOnly))
			last = buf.Bytes()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
	}
}
