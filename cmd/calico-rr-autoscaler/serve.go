package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/serve"
)

// runServe runs the webhooks, the reconciler, the probes and the metrics until SIGTERM or SIGINT.
func runServe(args []string, stdout io.Writer) error {
	serve.StreamInitialLists()
	serve.TuneGC()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o serve.Options
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
	fs.StringVar(&o.WebhookHost, "webhook-host", "", "address the webhook server listens on (default: all)")
	fs.IntVar(&o.WebhookPort, "webhook-port", 9443, "port of the webhook server (HTTPS, TLS 1.2 or later)")
	fs.StringVar(&o.CertDir, "cert-dir", "/tmp/k8s-webhook-server/serving-certs", "directory of tls.crt and tls.key (reloaded when they change)")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", ":8080", `address of the Prometheus metrics endpoint ("0" disables it)`)
	fs.BoolVar(&o.Profiling, "profiling", false, "serve Go's profiles (pprof) under /debug/pprof/ on the metrics endpoint")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", ":8081", `address of /healthz and /readyz ("0" disables them)`)
	fs.BoolVar(&o.LeaderElect, "leader-elect", false, "elect one replica (the lease holder) to run the reconciler and take allocating decisions")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election Lease (default: the pod's)")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", "calico-rr-autoscaler", "name of the leader election Lease")
	fs.StringVar(&o.ServiceAccount, "service-account", serve.DefaultServiceAccount, "the product's own identity, whose requests the webhooks never deny")
	fs.StringVar(&o.CalicoAPI, "calico-api", "auto", "API of Calico's BGPPeers: auto (discovery), crd (crd.projectcalico.org/v1) or v3 (projectcalico.org/v3)")
	fs.StringVar(&o.CalicoAPIServerUser, "calico-apiserver-user", "", "the Calico API server's identity, allowed to store the crd.projectcalico.org BGPPeers of reviewed projectcalico.org/v3 requests when v3 is aggregated (default: system:serviceaccount:<namespace of the v3.projectcalico.org APIService's Service>:calico-apiserver)")
	fs.Func("kube-api-qps", "requests per second to the API server [50]", func(v string) error {
		f, err := strconv.ParseFloat(v, 32)
		if err != nil || f <= 0 {
			return fmt.Errorf("%q is not a positive number", v)
		}
		o.KubeAPIQPS = float32(f)
		return nil
	})
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", 100, "burst of requests to the API server")
	var ds datastoreFlags
	ds.register(fs)
	o.Certs.BindFlags(fs)
	var logging loggingFlags
	logging.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintln(stdout, "Usage: calico-rr-autoscaler serve [flags]")
			fs.PrintDefaults()
			return errHelp
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))}
	}
	if o.WebhookPort < 1 || o.WebhookPort > 65535 {
		return usageError{fmt.Errorf("--webhook-port: %d is not a port", o.WebhookPort)}
	}
	if _, _, err := calico.ParseAPI(o.CalicoAPI); err != nil {
		return usageError{fmt.Errorf("--calico-api: %v", err)}
	}
	if strings.TrimSpace(o.ServiceAccount) == "" {
		return usageError{errors.New("--service-account: must not be empty")}
	}
	etcd, err := ds.check()
	if err != nil {
		return err
	}
	if etcd {
		o.Datastore, o.Etcd = ds.datastore, ds.etcd
	}
	log, err := logging.setup(os.Stderr)
	if err != nil {
		return err
	}
	ctrl.SetLogger(log)
	return serve.Run(ctrl.SetupSignalHandler(), o)
}
