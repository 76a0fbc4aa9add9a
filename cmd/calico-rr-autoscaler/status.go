package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/discovery"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/tools/clusterstatus"
)

func runStatus(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
	output := fs.String("o", "table", "output format: table or json")
	watch := fs.Bool("watch", false, "redraw when the state changes (every 2 s), until interrupted")
	calicoAPI := fs.String("calico-api", "auto", "Calico API of the BGPPeers: auto, crd or v3")
	var ds datastoreFlags
	ds.register(fs)
	if err := parseFlags(fs, args, stdout,
		"Usage: calico-rr-autoscaler status [--kubeconfig FILE] [-o table|json] [--watch] [--datastore etcdv3 --etcd-endpoints URLS]   (also: kubectl rr)",
		"Per policy: mode, route reflectors per zone with their clients, handovers in flight, what Observe or Paused would change; the foreign BGPPeers; the graph model's figures for the cluster as it is."); err != nil {
		return err
	}
	if err := checkOutput(*output); err != nil {
		return err
	}
	etcd, err := ds.check()
	if err != nil {
		return err
	}
	gv, auto, err := calico.ParseAPI(*calicoAPI)
	if err != nil {
		return usageError{fmt.Errorf("--calico-api: %v", err)}
	}
	cfg, err := kubeConfig(*kubeconfig)
	if err != nil {
		return err
	}
	switch {
	case auto && etcd:
		gv = calico.CRD // not read: the BGPPeers and the BGPConfiguration come from etcd
	case auto:
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
		var fromEtcd *clusterstatus.Calico
		if etcd {
			st, err := readEtcd(ds.etcd)
			if err != nil {
				return err
			}
			fromEtcd = &clusterstatus.Calico{Peers: st.Peers, Configs: st.Configs, Addresses: st.Addresses()}
		}
		rep, err := clusterstatus.Read(ctx, cfg, gv, time.Now(), fromEtcd)
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
