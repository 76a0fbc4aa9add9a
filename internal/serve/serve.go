// Package serve wires calico-rr-autoscaler serve: one controller-runtime manager with one shared,
// stripped informer cache, the webhook server (every replica serves), the leader-elected
// reconciler, health and readiness probes and Prometheus metrics.
//
// Running product: the serve command calls it.
package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"strconv"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	apiregv1 "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/typed/apiregistration/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrlruntimeconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/certs"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoetcd"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/reconciler"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/webhook"
)

// Webhook paths (the chart and the tests register these).
const (
	PathMutateNode     = "/mutate-v1-node"
	PathValidateNode   = "/validate-v1-node"
	PathValidatePolicy = "/validate-routereflectorpolicy"
	PathValidatePeer   = "/validate-bgppeer"
)

// DefaultServiceAccount is the product's identity in the chart.
const DefaultServiceAccount = "system:serviceaccount:calico-rr-autoscaler:calico-rr-autoscaler"

// Options configure serve. The zero value of a field means its default.
type Options struct {
	// Kubeconfig is a kubeconfig file; empty: $KUBECONFIG, in-cluster, ~/.kube/config.
	Kubeconfig string
	// RestConfig, when set, is used instead of Kubeconfig (tests).
	RestConfig *rest.Config

	WebhookHost string
	WebhookPort int    // [9443]
	CertDir     string // holds tls.crt and tls.key, reloaded when they change

	MetricsBindAddress     string // "0" disables [":8080"]
	HealthProbeBindAddress string // "0" disables [":8081"]
	// Profiling serves Go's profiles (net/http/pprof) under /debug/pprof/ on the metrics
	// endpoint [off].
	Profiling bool

	LeaderElect             bool
	LeaderElectionNamespace string
	LeaderElectionID        string // [calico-rr-autoscaler]
	// LeaseDuration, RenewDeadline and RetryPeriod default to 15s, 10s, 2s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration

	// KubeAPIQPS and KubeAPIBurst limit the client's requests to the API server [50, 100]. A
	// handover patches every client of the old route reflector, so client-go's default of 5 per
	// second would stretch it over a minute at a few hundred nodes.
	KubeAPIQPS   float32
	KubeAPIBurst int

	// ServiceAccount is the identity whose requests the webhooks never deny.
	ServiceAccount string
	// CalicoAPI is auto, crd or v3.
	CalicoAPI string
	// CalicoAPIServerUser is the Calico API server's identity, allowed to store the
	// crd.projectcalico.org BGPPeers of the v3 requests the BGPPeer guard reviewed, when
	// projectcalico.org/v3 is aggregated [system:serviceaccount:<its Service's
	// namespace>:calico-apiserver].
	CalicoAPIServerUser string
	// Coalesce is the reconciler's delay after a node event [250ms].
	Coalesce time.Duration
	// TakeoverDelay is how long a new leader waits before its first allocating decision, so that
	// admissions the previous leader answered have been written (or failed) [2s, the node
	// webhooks' timeout]: from its election, or without LeaderElect from the process's start.
	TakeoverDelay time.Duration
	// Datastore is Calico's datastore: kubernetes [default] or etcdv3 (calicoetcd.EtcdV3).
	Datastore string
	// Etcd reaches Calico's etcd with Datastore etcdv3.
	Etcd calicoetcd.Config
	// EtcdResync is how often, with Datastore etcdv3, every policy is reconciled even without a
	// change seen in etcd (a watch reports them; this catches what a broken watch missed) [30s].
	EtcdResync time.Duration
	// Certs are the self-managed certificates (--self-managed-certs and the --cert-* flags);
	// without them tls.crt and tls.key come from CertDir (cert-manager).
	Certs certs.Options
}

// Server is a built, not yet started, serve process.
type Server struct {
	Manager    manager.Manager
	Ledger     *state.Ledger
	Reconciler *reconciler.Reconciler
	Nodes      *state.NodeStore
	Policies   *state.Policies
	// PeerAPI is the BGPPeer API in use.
	PeerAPI schema.GroupVersion
	// V3Server says whether the Calico API server serves projectcalico.org/v3 (read at start).
	V3Server calico.V3Server
	// Etcd is Calico's etcd with the etcdv3 datastore, else nil.
	Etcd *calicoetcd.Store
	// LabelKeys are the node label keys the cache keeps.
	LabelKeys *state.LabelKeys
	synced    atomic.Bool
}

// Synced reports whether the informer cache has synced (the readiness check).
func (s *Server) Synced() bool { return s.synced.Load() }

// Run builds and runs serve until ctx ends.
func Run(ctx context.Context, o Options) error {
	s, err := New(ctx, o)
	if err != nil {
		return err
	}
	return s.Manager.Start(ctx)
}

// New builds the manager, the cache, the webhooks and the reconciler.
func New(ctx context.Context, o Options) (*Server, error) {
	setDefaults(&o)
	cfg := o.RestConfig
	if cfg == nil {
		var err error
		if o.Kubeconfig != "" {
			cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
		} else {
			cfg, err = ctrlconfig.GetConfig()
		}
		if err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = o.KubeAPIQPS, o.KubeAPIBurst
	if cfg.QPS <= 0 {
		cfg.QPS = 50
	}
	if cfg.Burst <= 0 {
		cfg.Burst = 100
	}
	gv, auto, err := calico.ParseAPI(o.CalicoAPI)
	if err != nil {
		return nil, err
	}
	datastore, err := calicoetcd.ParseDatastore(o.Datastore)
	if err != nil {
		return nil, err
	}
	var etcd *calicoetcd.Store
	if datastore == calicoetcd.EtcdV3 {
		if etcd, err = calicoetcd.New(o.Etcd); err != nil {
			return nil, err
		}
		// The BGPPeers are in etcd: the Go types are registered under the CRD group only for
		// the scheme's sake, and nothing watches them in the Kubernetes API.
		gv, auto = calico.CRD, false
	}
	if auto {
		d, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			return nil, err
		}
		if gv, err = calico.Detect(d); err != nil {
			return nil, err
		}
	}
	var v3 calico.V3Server
	if etcd == nil {
		c, err := apiregv1.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		if v3, err = calico.DetectV3Server(ctx, c, o.CalicoAPIServerUser); err != nil {
			return nil, err
		}
		ctrl.Log.WithName("serve").Info("Calico API", "bgppeers", gv.String(), "v3", v3.String())
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	if err := calico.AddToScheme(scheme, gv); err != nil {
		return nil, err
	}

	// The node cache keeps the label keys the product reads (state.LabelKeys): the policies' and
	// the BGPPeers' of the cluster as it starts, read here before the cache lists the nodes, and
	// any key a policy or a BGPPeer names later (the cache then lists the nodes again).
	keys := state.NewLabelKeys()
	seedLabelKeys(ctx, cfg, scheme, etcd, keys)
	nodes, err := nodeClient(cfg, keys)
	if err != nil {
		return nil, err
	}
	relist := newRelister(nodeListWatch(nodes))
	leaseDuration, renewDeadline, retryPeriod := o.LeaseDuration, o.RenewDeadline, o.RetryPeriod
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Scheme: scheme,
		Cache: cache.Options{
			DefaultTransform: keys.Transform,
			NewInformer:      relist.newInformer,
		},
		Metrics:                metricsserver.Options{BindAddress: o.MetricsBindAddress, ExtraHandlers: profiling(o.Profiling)},
		HealthProbeBindAddress: o.HealthProbeBindAddress,
		WebhookServer: ctrlwebhook.NewServer(ctrlwebhook.Options{
			Host:     o.WebhookHost,
			Port:     o.WebhookPort,
			CertDir:  o.CertDir,
			CertName: "tls.crt",
			KeyName:  "tls.key",
			TLSOpts: []func(*tls.Config){certs.TLSOpts, func(c *tls.Config) {
				c.NextProtos = []string{"http/1.1"} // no HTTP/2 (CVE-2023-44487)
			}},
		}),
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &leaseDuration,
		RenewDeadline:                 &renewDeadline,
		RetryPeriod:                   &retryPeriod,
		// The controller's name is fixed; several managers in one test process must not clash.
		Controller: ctrlruntimeconfig.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, err
	}

	if o.Certs.Enabled {
		o.Certs.CertDir = o.CertDir
		ready, err := certs.Setup(mgr, o.Certs)
		if err != nil {
			return nil, err
		}
		if err := mgr.AddReadyzCheck("certs", certs.Checker(ready)); err != nil {
			return nil, err
		}
	}
	s := &Server{Manager: mgr, PeerAPI: gv, V3Server: v3, Etcd: etcd, Ledger: state.NewLedger(0, nil), LabelKeys: keys}
	s.Ledger.Drills = new(bgpmodel.DrillMemo).Drills
	s.Ledger.BGPHealth = func() map[string]extender.BGPHealth { return s.Reconciler.BGPHealthRecords() }
	nodeIdx, err := indexer(ctx, mgr.GetCache(), &corev1.Node{}, state.NodeIndexers())
	if err != nil {
		return nil, err
	}
	polIdx, err := indexer(ctx, mgr.GetCache(), &v1alpha1.RouteReflectorPolicy{}, nil)
	if err != nil {
		return nil, err
	}
	s.Nodes, s.Policies = state.NewNodeStore(nodeIdx), state.NewPolicies(polIdx)
	s.Ledger.Cached = func(name string) bool { return s.Nodes.Get(name) != nil }
	keys.SetRelist(nodeIdx, relist.Relist)
	relist.progress.setCache(s.Nodes.Get)
	if err := wantLabelKeys(ctx, mgr.GetCache(), s.Policies, keys, etcd == nil); err != nil {
		return nil, err
	}

	srv := mgr.GetWebhookServer()
	gate := func(h webhook.Handler) webhook.Handler { return webhook.Gate(h, s.Synced) }
	srv.Register(PathMutateNode, webhook.Serve("mutate-v1-node", gate(&webhook.NodeMutator{Policies: s.Policies, Ledger: s.Ledger, DeferRoles: etcd != nil})))
	srv.Register(PathValidateNode, webhook.Serve("validate-v1-node", gate(&webhook.NodeValidator{Policies: s.Policies, Nodes: s.Nodes, ServiceAccount: o.ServiceAccount})))
	srv.Register(PathValidatePolicy, webhook.Serve("validate-routereflectorpolicy", gate(&webhook.PolicyValidator{Policies: s.Policies, Nodes: s.Nodes, LabelKeys: keys, APIReader: mgr.GetAPIReader()})))
	srv.Register(PathValidatePeer, webhook.Serve("validate-bgppeer", &webhook.BGPPeerValidator{ServiceAccount: o.ServiceAccount, CalicoAPIServer: v3.User, Policies: s.Policies, Synced: s.Synced}))

	s.Reconciler = &reconciler.Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Nodes:     s.Nodes,
		Policies:  s.Policies,
		Ledger:    s.Ledger,
		LabelKeys: keys,
		Recorder:  reconciler.NewLoggingRecorder(mgr.GetEventRecorderFor("calico-rr-autoscaler"), ctrl.Log.WithName("events")),
		PeerAPI:   gv,
		Coalesce:  o.Coalesce,
		Log:       ctrl.Log.WithName("reconciler"),
	}
	if gv == calico.V3 && v3.Aggregated {
		// The Calico API server runs no admission for a v3 DELETE: the guard refuses its deletes,
		// and the product deletes its BGPPeers where that server stores them.
		del, err := client.New(cfg, client.Options{Scheme: calico.NewScheme(calico.CRD)})
		if err != nil {
			return nil, err
		}
		s.Reconciler.CRDPeerDeletes = del
	}
	if etcd != nil {
		s.Reconciler.Peers, s.Reconciler.CalicoNodes = etcd.Peers(), etcd
		s.Reconciler.Configs, s.Reconciler.NodeStatuses = etcd.Configs(), etcd.NodeStatuses()
		s.Reconciler.Changes = etcd
		s.Ledger.Registered, s.Ledger.CalicoAddresses = etcd.Registered, etcd.Addresses
		s.Reconciler.Resync = o.EtcdResync
		if err := addEtcdChecks(mgr, etcd); err != nil {
			return nil, err
		}
	}
	if err := s.Reconciler.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	// The lease holder is the single writer of allocating decisions, once its cache holds every
	// write of the previous leader. Without leader election this process leads from its start
	// (one replica: a previous process, if any, had stopped before it started), so the takeover
	// delay counts from then and has mostly passed while the cache listed the nodes; with it,
	// from the election.
	takeover, started := o.TakeoverDelay, time.Now()
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		leads := time.Now()
		if !o.LeaderElect {
			leads = started
		}
		if err := s.catchUp(ctx, nodeMetadataPages(nodes), relist.progress, time.Until(leads.Add(takeover))); err != nil {
			return nil // stopping
		}
		s.setLeader(true)
		<-ctx.Done()
		s.setLeader(false)
		return nil
	})); err != nil {
		return nil, err
	}
	if err := mgr.Add(&syncWaiter{cache: mgr.GetCache(), done: &s.synced}); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("webhook", srv.StartedChecker()); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("cache", func(*http.Request) error {
		if !s.Synced() {
			return errors.New("informer cache not synced")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// profiling is net/http/pprof's handlers when on, nil when off.
func profiling(on bool) map[string]http.Handler {
	if !on {
		return nil
	}
	return map[string]http.Handler{
		"/debug/pprof/":        http.HandlerFunc(pprof.Index),
		"/debug/pprof/cmdline": http.HandlerFunc(pprof.Cmdline),
		"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
		"/debug/pprof/symbol":  http.HandlerFunc(pprof.Symbol),
		"/debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
	}
}

func setDefaults(o *Options) {
	if o.WebhookPort == 0 {
		o.WebhookPort = 9443
	}
	if o.MetricsBindAddress == "" {
		o.MetricsBindAddress = ":8080"
	}
	if o.HealthProbeBindAddress == "" {
		o.HealthProbeBindAddress = ":8081"
	}
	if o.LeaderElectionID == "" {
		o.LeaderElectionID = "calico-rr-autoscaler"
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = 15 * time.Second
	}
	if o.RenewDeadline == 0 {
		o.RenewDeadline = 10 * time.Second
	}
	if o.RetryPeriod == 0 {
		o.RetryPeriod = 2 * time.Second
	}
	if o.ServiceAccount == "" {
		o.ServiceAccount = DefaultServiceAccount
	}
	if o.EtcdResync == 0 {
		o.EtcdResync = 30 * time.Second
	}
	if o.TakeoverDelay == 0 {
		o.TakeoverDelay = 2 * time.Second
	}
}

// catchUp waits, on becoming the leader, until allocating decisions are safe: delay for the
// previous leader's last admissions to be written or fail, then until the cache holds every node
// at least at the version a consistent read returns. Two ways prove it, and the first to end
// wins: the node informer's watch reaches the resourceVersion of a consistent read of one node,
// with every event up to it applied to the cache (progress: on a cluster whose nodes change, a
// matter of milliseconds, where reading 65,000 kubelet-like nodes' versions takes the API server
// about 4 s); or a read of every node's version finds the cache holding each (waitVersions: what a
// cluster whose nodes do not change needs, the watch moving only with the API server's bookmarks;
// bounded, after 30s it goes ahead and the reconciler repairs a duplicate).
func (s *Server) catchUp(ctx context.Context, pages metadataPages, progress *watchProgress, delay time.Duration) error {
	defer progress.stop()
	if delay > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
	log := ctrl.Log.WithName("serve")
	start := time.Now()
	readCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	versions := make(chan versionWait, 1)
	go func() {
		v, err := s.waitVersions(readCtx, pages)
		if err == nil {
			versions <- v
		}
	}()
	rv, rvErr := clusterVersion(ctx, pages)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if rvErr == nil && progress.caughtUp(rv) {
			log.Info("the cache holds every node's version: taking the lead", "by", "watch", "resourceVersion", rv,
				"waited", time.Since(start).Round(time.Millisecond))
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case v := <-versions:
			switch {
			case v.readErr != nil:
				log.Info("taking the lead without reading the nodes' versions", "err", v.readErr.Error())
			case v.behind > 0:
				log.Info("the cache is still behind the nodes' versions after 30s: taking the lead", "nodes", v.nodes, "behind", v.behind,
					"read", v.read.Round(time.Millisecond))
			default:
				log.Info("the cache holds every node's version: taking the lead", "by", "read", "nodes", v.nodes,
					"read", v.read.Round(time.Millisecond), "waited", (time.Since(start) - v.read).Round(time.Millisecond))
			}
			return nil
		case <-tick.C:
		}
	}
}

// clusterVersion is the resourceVersion of a consistent read (one node's metadata): every write
// before the read is at or below it.
func clusterVersion(ctx context.Context, pages metadataPages) (uint64, error) {
	l, err := pages(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(l.ResourceVersion, 10, 64)
}

// versionWait is what waitVersions found.
type versionWait struct {
	nodes, behind int           // the nodes read, and those the cache holds at an older version
	read          time.Duration // how long the read took
	readErr       error         // the read failed: the cache is as good as it gets
}

// waitVersions reads every node's version and waits until the cache holds each at least at it,
// for 30s at most. err is ctx's.
func (s *Server) waitVersions(ctx context.Context, pages metadataPages) (versionWait, error) {
	start := time.Now()
	want, err := nodeVersions(ctx, pages)
	if err != nil {
		if ctx.Err() != nil {
			return versionWait{}, ctx.Err()
		}
		return versionWait{readErr: err}, nil
	}
	v := versionWait{nodes: len(want), read: time.Since(start)}
	deadline := time.Now().Add(30 * time.Second)
	for {
		v.behind = 0
		for name, rv := range want {
			if !applied(s.Nodes.Get(name), nodeEvent{rv: rv}) {
				v.behind++
			}
		}
		if v.behind == 0 || !time.Now().Before(deadline) {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// catchUpPage is how many nodes' metadata one request of nodeVersions reads: about 43 MB of
// kubelet-like nodes' metadata (their managed fields) in one response. On a real API server with
// 10,000 kubelet-like nodes the read took 0.38 to 0.52 s in pages of 5,000, 0.47 to 0.49 s in
// pages of 2,000 and 0.56 to 0.70 s in pages of 500 (three runs each, 2026-11-27, BENCHMARKS.md).
const catchUpPage = 5000

// nodeVersions reads every node's resourceVersion by a consistent list of their metadata, in
// pages of catchUpPage (one snapshot: the continue token keeps the first page's revision), and
// keeps only the name and the version (0 when it is not a number: never behind). One request for
// all of them read the whole response, and decoded every node's metadata (managed fields,
// annotations) at once: at 65,000 kubelet-like nodes about 1.1 GB live for a second, which was
// the restarted product's whole peak (1,740 MiB RSS against 250 MiB settled; `make load
// NODES=65000 LOAD_ARGS=-load-profiles=DIR`, heap-restarted.pprof and the log's gctrace, 2026-11-27).
// The pages decode short (nodedecode: no managed fields), which was most of the read's CPU.
func nodeVersions(ctx context.Context, pages metadataPages) (map[string]uint64, error) {
	out := map[string]uint64{}
	opts := metav1.ListOptions{Limit: catchUpPage}
	for {
		page, err := pages(ctx, opts)
		if err != nil {
			return nil, err
		}
		for i := range page.Items {
			rv, _ := strconv.ParseUint(page.Items[i].ResourceVersion, 10, 64)
			out[page.Items[i].Name] = rv
		}
		if page.Continue == "" {
			return out, nil
		}
		opts.Continue = page.Continue
	}
}

// indexer gets the informer of obj (before the cache starts), adds indexers and returns its store.
func indexer(ctx context.Context, c cache.Cache, obj client.Object, idx toolscache.Indexers) (toolscache.Indexer, error) {
	inf, err := c.GetInformer(ctx, obj)
	if err != nil {
		return nil, err
	}
	if len(idx) > 0 {
		if err := inf.AddIndexers(idx); err != nil {
			return nil, err
		}
	}
	si, ok := inf.(interface{ GetIndexer() toolscache.Indexer })
	if !ok {
		return nil, fmt.Errorf("informer of %T has no indexer", obj)
	}
	return si.GetIndexer(), nil
}

// syncWaiter flips done once the cache has synced; it runs on every replica.
type syncWaiter struct {
	cache cache.Cache
	done  *atomic.Bool
}

func (w *syncWaiter) Start(ctx context.Context) error {
	if w.cache.WaitForCacheSync(ctx) {
		w.done.Store(true)
	}
	<-ctx.Done()
	return nil
}

func (w *syncWaiter) NeedLeaderElection() bool { return false }
