package serve_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/textlogger"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico/crds"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/serve"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

var bgpPeersGVR = schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: "bgppeers"}

// replica is one serve process (a manager in this test process).
type replica struct {
	srv     *serve.Server
	cancel  context.CancelFunc
	done    chan error
	stopped atomic.Bool
}

// world is a real kube-apiserver with the product's webhooks registered against a replica
// listening on loopback with a certificate of a CA made by the test.
type world struct {
	t       *testing.T
	env     *testenv.Env
	admin   kubernetes.Interface
	kubelet kubernetes.Interface
	dyn     dynamic.Interface
	port    int
	certDir string
	caPEM   []byte
	rep     *replica
}

func newWorld(t *testing.T) *world {
	w := newEnv(t)
	w.port = testenv.FreePort(t)
	w.install(w.port)
	w.rep = w.start(w.port, true)
	w.awaitWebhooks()
	return w
}

// newEnv starts the API server (with opts) with Calico's and the policy's CRDs and writes the
// webhook's serving certificate.
func newEnv(t *testing.T, opts ...testenv.Option) *world {
	if testing.Short() {
		t.Skip("integration test: needs kube-apiserver and etcd (hack/tools.sh)")
	}
	t.Helper()
	if os.Getenv("RRA_TEST_VERBOSE") != "" {
		ctrl.SetLogger(textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(1))))
	} else {
		ctrl.SetLogger(logr.Discard())
	}
	env := testenv.Start(t, append([]testenv.Option{testenv.WithChartRBAC()}, opts...)...)
	env.CreateNamespace(t, testenv.ChartNamespace)
	w := &world{t: t, env: env}
	var err error
	w.admin, err = kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	w.kubelet, err = kubernetes.NewForConfig(env.ConfigFor(testenv.UserKubelet))
	require.NoError(t, err)
	w.dyn, err = dynamic.NewForConfig(env.Config)
	require.NoError(t, err)
	calicoCRDs, err := crds.Dir()
	require.NoError(t, err)
	testenv.InstallCRDs(t, env.Config, filepath.Join(calicoCRDs, "crd.projectcalico.org_bgppeers.yaml"),
		filepath.Join(calicoCRDs, "crd.projectcalico.org_bgpconfigurations.yaml"),
		filepath.Join(calicoCRDs, "crd.projectcalico.org_caliconodestatuses.yaml"), testenv.RepoPath(t, "policy/crd"))
	w.certDir = t.TempDir()
	w.caPEM, err = testenv.WriteWebhookCert(w.certDir)
	require.NoError(t, err)
	return w
}

// start runs a serve replica on port as the product's service account and waits until it is
// ready (and the leader, when leader is set); opts change the options first.
func (w *world) start(port int, leader bool, opts ...func(*serve.Options)) *replica {
	w.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	o := serve.Options{
		RestConfig:              w.env.ConfigFor(testenv.UserServiceAccount),
		WebhookHost:             "127.0.0.1",
		WebhookPort:             port,
		CertDir:                 w.certDir,
		MetricsBindAddress:      "0",
		HealthProbeBindAddress:  "0",
		LeaderElect:             true,
		LeaderElectionNamespace: testenv.ChartNamespace,
		// The product's lease and renew deadline (15 s, 10 s): with 4 s and 3 s a lease renewal
		// that make test's load kept past 3 s (the API server's log: the lease PUT's context
		// canceled, "Handler timeout") lost the lease, and the replica stopped mid-test
		// (TestAdoptHandBuiltClusterOnRealAPIServer: "connection refused" from its webhooks). A
		// stopped replica releases its lease, so takeovers still come within RetryPeriod.
		LeaseDuration: 15 * time.Second,
		RenewDeadline: 10 * time.Second,
		RetryPeriod:   500 * time.Millisecond,
		Coalesce:      100 * time.Millisecond,
	}
	for _, f := range opts {
		f(&o)
	}
	srv, err := serve.New(ctx, o)
	if err != nil {
		cancel()
		require.Fail(w.t, fmt.Sprint(err))
	}
	r := &replica{srv: srv, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- srv.Manager.Start(ctx) }()
	w.t.Cleanup(func() { r.stop() })
	w.eventually("replica ready", 60*time.Second, func() error {
		if !srv.Synced() || leader && !srv.Ledger.Leader() {
			return fmt.Errorf("synced %v, leader %v", srv.Synced(), srv.Ledger.Leader())
		}
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
	return r
}

func (r *replica) stop() {
	if r.stopped.Swap(true) {
		return
	}
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(70 * time.Second):
	}
}

// install installs the product from its rendered chart with the webhooks pointed at port: the
// chart is the only source of the webhook configurations and of the service account's RBAC, so
// it comes before any replica starts.
func (w *world) install(port int) {
	w.t.Helper()
	w.env.InstallChart(w.t, fmt.Sprintf("https://127.0.0.1:%d", port), w.caPEM, "")
}

// awaitWebhooks waits until the API server calls the webhooks.
func (w *world) awaitWebhooks() {
	w.t.Helper()
	w.env.AwaitWebhooks(w.t, 30*time.Second)
}

func (w *world) eventually(what string, timeout time.Duration, f func() error) {
	w.t.Helper()
	testenv.Eventually(w.t, what, timeout, 100*time.Millisecond, f)
}

func (w *world) kubectl(user string, args ...string) (string, string, error) {
	w.t.Helper()
	return w.env.Kubectl(w.t, user, args...)
}

// join registers a node as a kubelet does: created NotReady, then Ready through nodes/status.
func (w *world) join(name, zone string, labels map[string]string) {
	w.t.Helper()
	ctx := w.t.Context()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelTopologyZone: zone, corev1.LabelHostname: name}}}
	for k, v := range labels {
		n.Labels[k] = v
	}
	created, err := w.kubelet.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	require.NoErrorf(w.t, err, "creating %s", name)
	w.ready(created.Name, true)
}

// updateStatus changes a node's status through nodes/status as a kubelet does, retrying on
// conflicts.
func (w *world) updateStatus(name string, change func(*corev1.Node)) {
	w.t.Helper()
	ctx := w.t.Context()
	for {
		n, err := w.kubelet.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		require.NoError(w.t, err)
		change(n)
		_, err = w.kubelet.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		require.NoError(w.t, err)
		return
	}
}

// ready sets the Ready condition (and only it) through nodes/status, as a kubelet.
func (w *world) ready(name string, ready bool) {
	w.t.Helper()
	st := corev1.ConditionTrue
	if !ready {
		st = corev1.ConditionFalse
	}
	w.updateStatus(name, func(n *corev1.Node) {
		now := metav1.Now()
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
	})
}

// heartbeat updates only the conditions' heartbeat times, as a kubelet does every 10s.
func (w *world) heartbeat(name string) {
	w.t.Helper()
	w.updateStatus(name, func(n *corev1.Node) {
		for i := range n.Status.Conditions {
			n.Status.Conditions[i].LastHeartbeatTime = metav1.NewTime(time.Now().Add(time.Duration(i) * time.Second))
		}
	})
}

// requireProtected checks that node carries the product's protection annotations (want), or none.
func requireProtected(t *testing.T, s *snapshot, node string, want bool) {
	t.Helper()
	n := s.nodes[node]
	require.NotNil(t, n, node)
	for _, k := range policy.ProtectionAnnotations() {
		if want {
			require.Equal(t, "true", n.Annotations[k], "%s: %s", node, k)
		} else {
			require.NotContains(t, n.Annotations, k, node)
		}
	}
	require.Equal(t, want, n.Annotations[extender.AnnotationProtection] != "", "%s: %s", node, extender.AnnotationProtection)
}

type snapshot struct {
	nodes   map[string]*corev1.Node
	rrs     map[string]string // name -> cluster ID
	peers   map[string]bool
	clients map[string][]string
}

func (w *world) snapshot() *snapshot {
	w.t.Helper()
	ctx := w.t.Context()
	list, err := w.admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(w.t, err)
	s := &snapshot{nodes: map[string]*corev1.Node{}, rrs: map[string]string{}, peers: map[string]bool{}, clients: map[string][]string{}}
	for i := range list.Items {
		n := &list.Items[i]
		s.nodes[n.Name] = n
		_, label := n.Labels["calico-route-reflector"]
		if id := n.Annotations[extender.AnnotationClusterID]; label && id != "" {
			s.rrs[n.Name] = id
		} else if rr := n.Annotations[extender.AnnotationRouteReflectors]; rr != "" {
			s.clients[n.Name] = strings.Split(rr, ",")
		}
	}
	peers, err := w.dyn.Resource(bgpPeersGVR).List(ctx, metav1.ListOptions{})
	require.NoError(w.t, err)
	for _, p := range peers.Items {
		s.peers[p.GetName()] = true
	}
	return s
}

// roles lists the nodes that carry a route reflector label, cluster ID or draining mark, for
// failure messages.
func (s *snapshot) roles() string {
	var out []string
	for name, n := range s.nodes {
		_, label := n.Labels["calico-route-reflector"]
		id, dr := n.Annotations[extender.AnnotationClusterID], n.Annotations[extender.AnnotationDrainingSince]
		if label || id != "" || dr != "" {
			out = append(out, fmt.Sprintf("%s(label=%v id=%s draining=%s ready=%v)", name, label, id, dr, extender.IsReady(extender.FromNode(n))))
		}
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// racks lists every node's rack and plane annotations, for failure messages.
func (s *snapshot) racks() string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(s.nodes)) {
		n := s.nodes[name]
		out = append(out, fmt.Sprintf("%s:%s/%s", name, n.Annotations[extender.AnnotationRack], n.Annotations[extender.AnnotationPlane]))
	}
	return strings.Join(out, " ")
}

// orphans returns the clients without a current route reflector.
func (s *snapshot) orphans() []string {
	var out []string
	for c, rrs := range s.clients {
		if !slices.ContainsFunc(rrs, func(r string) bool { _, ok := s.rrs[r]; return ok }) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// settled: want RRs, one per zone, every other node a client of current RRs through a peering
// set whose BGPPeer exists, nothing draining.
func (s *snapshot) settled(want int) error {
	if len(s.rrs) != want {
		return fmt.Errorf("%d route reflectors %v, want %d", len(s.rrs), s.rrs, want)
	}
	for name, n := range s.nodes {
		if n.Annotations[extender.AnnotationDrainingSince] != "" {
			return fmt.Errorf("%s still draining", name)
		}
		if _, rr := s.rrs[name]; rr {
			continue
		}
		set := n.Labels[extender.LabelPeeringSet]
		if set == "" || !s.peers[extender.BGPPeerPrefix+set] {
			return fmt.Errorf("client %s: peering set %q, BGPPeer exists %v", name, set, s.peers[extender.BGPPeerPrefix+set])
		}
	}
	if o := s.orphans(); len(o) > 0 {
		return fmt.Errorf("clients without a route reflector: %v", o)
	}
	return nil
}

// webhookCalls is how many admission webhook calls this test's own API server has made (its
// apiserver_admission_webhook_admission_duration_seconds count, every webhook): unlike the
// product's own request counter, which every in-process product of the package adds to, no other
// test's calls count.
func (w *world) webhookCalls() float64 {
	w.t.Helper()
	out, stderr, err := w.kubectl(testenv.UserAdmin, "get", "--raw", "/metrics")
	require.NoError(w.t, err, stderr)
	total := 0.0
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "apiserver_admission_webhook_admission_duration_seconds_count{") {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		require.NoError(w.t, err, l)
		total += v
	}
	return total
}

func counter(name string, labels map[string]string) float64 {
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		return -1
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metric
				}
			}
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// policyYAML pins MultiCluster, the default before DualPlane: these tests follow its admission
// promotions and denials (DualPlane has its own end-to-end test).
const policyYAML = `apiVersion: routereflector.io/v1alpha1
kind: RouteReflectorPolicy
metadata:
  name: default
spec:
  topology: {type: MultiCluster}
  removalDelay: 2s
  forbiddenNodeSelector: {matchLabels: {role: db}}
  behavior: {scaleDown: {stabilizationWindowSeconds: 0}}
`

func TestServeOnRealAPIServer(t *testing.T) { serveOnRealAPIServer(t, false) }

// TestServeOnRealAPIServerLarge is TestServeOnRealAPIServer with the cluster checked on confd +
// BIRD after the cordon's handover (31 nodes on Calico's node-to-node mesh beside the route
// reflectors: about 80 s and 60 s of CPU on two cores, the largest single item of internal/serve
// in make test until 2026-12-01). make test checks that state with the graph model, and proves a
// cordon's handover on confd + BIRD, routes sampled through it, in TestTransitionsOnRealBIRD's
// event (i).
func TestServeOnRealAPIServerLarge(t *testing.T) {
	testenv.SlowProof(t)
	serveOnRealAPIServer(t, true)
}

// serveOnRealAPIServer runs the product's life on a real API server: joins, admission denials, a
// cordon, an autoscaler's taint, a deletion and a registration without the webhook server. confd:
// the cordon's end state is also checked on confd + BIRD (checkRouting).
func serveOnRealAPIServer(t *testing.T, confd bool) {
	t.Parallel() // its own API server and product: beside the other live tests, mostly waiting
	w := newWorld(t)
	ctx := t.Context()

	if out, stderr, err := w.env.KubectlStdin(t, testenv.UserAdmin, policyYAML, "apply", "-f", "-"); err != nil {
		require.Fail(t, fmt.Sprintf("apply policy: %v\n%s%s", err, out, stderr))
	}

	t.Run("30 nodes across 3 zones get roles, cluster IDs and BGPPeers", func(t *testing.T) {
		var wg sync.WaitGroup
		for i := range 30 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.join(fmt.Sprintf("node-%02d", i), fmt.Sprintf("zone-%c", 'a'+i%3), nil)
			}()
		}
		wg.Wait()
		// Nodes turn Ready in any order: the first Ready ones may all be in one zone, and the plan
		// rebalances once the other zones have eligible nodes.
		var s *snapshot
		zones := map[string]string{}
		w.eventually("settled on 3 route reflectors, one per zone", 30*time.Second, func() error {
			s = w.snapshot()
			if err := s.settled(3); err != nil {
				return err
			}
			clear(zones)
			for name, id := range s.rrs {
				z := s.nodes[name].Labels[corev1.LabelTopologyZone]
				if _, dup := zones[z]; dup {
					return fmt.Errorf("zone %s has two route reflectors: %v", z, s.rrs)
				}
				zones[z] = id
			}
			return nil
		})
		ids := []string{zones["zone-a"], zones["zone-b"], zones["zone-c"]}
		slices.Sort(ids)
		require.EqualValuesf(t, "[224.0.0.1 224.0.0.2 224.0.0.3]", fmt.Sprint(ids), "cluster IDs by zone %v", zones)
		require.Truef(t, s.peers["rr-autoscaler-mesh-default"], "BGPPeers %v", s.peers)
		// The roles can settle at admission before the reconcile that writes the status ends.
		w.eventually("policy status 3/3/True", 10*time.Second, func() error {
			out, err := w.policyPath("default", "{.status.routeReflectors}/{.status.desiredRouteReflectors}/{.status.conditions[?(@.type==\"Ready\")].status}")
			if err != nil || out != "3/3/True" {
				return fmt.Errorf("policy status %q (%v)", out, err)
			}
			return nil
		})
		// The graph model here; confd + BIRD check the state after the cordon's handover below
		// (one 30-node confd + BIRD run is 25 s of CPU of make test's budget on two cores).
		missing, _, _, err := w.routingState()
		require.NoError(t, err)
		require.Zero(t, missing, "the graph model's missing pairs after the 30-node join")
	})

	t.Run("kubelet heartbeats never reach the webhooks", func(t *testing.T) {
		time.Sleep(time.Second) // let the reconciler's last writes pass
		before := w.webhookCalls()
		for i := range 20 {
			w.heartbeat(fmt.Sprintf("node-%02d", i))
		}
		time.Sleep(200 * time.Millisecond)
		after := w.webhookCalls()
		if after != before {
			require.Fail(t, fmt.Sprintf("%v webhook calls for 20 heartbeats", after-before))
		}
		// The count does see a call: a label change goes through the webhooks.
		_, stderr, err := w.kubectl(testenv.UserAdmin, "label", "node", "node-00", "heartbeat-check=1")
		require.NoError(t, err, stderr)
		require.Greater(t, w.webhookCalls(), after, "a label change made no webhook call the API server counts")
	})

	t.Run("removing the RR label below the minimum is rejected with the rule", func(t *testing.T) {
		s := w.snapshot()
		rr := slices.Sorted(func(yield func(string) bool) {
			for n := range s.rrs {
				if !yield(n) {
					return
				}
			}
		})[0]
		_, stderr, err := w.kubectl(testenv.UserAlice, "label", "node", rr, "calico-route-reflector-")
		want := fmt.Sprintf(`[min-route-reflectors] removing the route reflector label from %s would leave 2 route reflectors; policy "default" requires at least 3`, rr)
		require.Error(t, err, "kubectl label was not refused")
		require.Contains(t, stderr, want, "kubectl label")
		t.Logf("kubectl: %s", strings.TrimSpace(stderr))
	})

	t.Run("labelling a forbidden node is rejected", func(t *testing.T) {
		w.join("db-1", "zone-a", map[string]string{"role": "db"})
		_, stderr, err := w.kubectl(testenv.UserAlice, "label", "node", "db-1", "calico-route-reflector=")
		want := `[forbidden-node] db-1 may not be a route reflector of policy "default": node matches the policy's forbiddenNodeSelector`
		require.Error(t, err, "kubectl label was not refused")
		require.Contains(t, stderr, want, "kubectl label")
	})

	t.Run("a hand edit of a managed BGPPeer is rejected", func(t *testing.T) {
		for _, args := range [][]string{
			{"label", "bgppeers.crd.projectcalico.org", "rr-autoscaler-mesh-default", "mine=yes"},
			{"delete", "bgppeers.crd.projectcalico.org", "rr-autoscaler-mesh-default"},
		} {
			_, stderr, err := w.kubectl(testenv.UserAlice, args...)
			require.Error(t, err, "kubectl %v was not refused", args)
			require.Contains(t, stderr, "[managed-bgppeer] BGPPeer rr-autoscaler-mesh-default is managed by calico-rr-autoscaler", "kubectl %v", args)
		}
	})

	t.Run("an invalid policy is rejected with field paths", func(t *testing.T) {
		bad := `apiVersion: routereflector.io/v1alpha1
kind: RouteReflectorPolicy
metadata: {name: bad}
spec:
  nodeSelector: {matchLabels: {pool: bad}}
  minRouteReflectors: 5
  maxRouteReflectors: 2
  topology: {clusterID: 300.1.2.3}
`
		_, stderr, err := w.env.KubectlStdin(t, testenv.UserAlice, bad, "apply", "-f", "-")
		for _, want := range []string{"spec.minRouteReflectors", "must not be greater than maxRouteReflectors (2)", "spec.topology.clusterID", "must be an IPv4 address"} {
			require.Error(t, err, "kubectl apply was not refused")
			require.Contains(t, stderr, want, "kubectl apply")
		}
		overlap := strings.ReplaceAll(strings.ReplaceAll(policyYAML, "name: default", "name: second"), "removalDelay: 2s", "nodeSelector: {matchLabels: {topology.kubernetes.io/zone: zone-a}}")
		_, stderr, err = w.env.KubectlStdin(t, testenv.UserAlice, overlap, "apply", "-f", "-")
		require.Error(t, err, "the overlapping policy was not refused")
		require.Contains(t, stderr, "[policy-overlap]", "overlapping policy")
		require.Contains(t, stderr, "spec.nodeSelector", "overlapping policy")
	})

	t.Run("kubectl cordon of an RR: replacement first, demotion after removalDelay, no client ever orphaned", func(t *testing.T) {
		s := w.snapshot()
		var victim string
		for name := range s.rrs {
			if s.nodes[name].Labels[corev1.LabelTopologyZone] == "zone-b" {
				victim = name
			}
		}
		var orphaned []string
		stopSampling := testenv.Every(50*time.Millisecond, func() {
			if o := w.snapshot().orphans(); len(o) > 0 {
				orphaned = append(orphaned, o...)
			}
		})
		requireProtected(t, s, victim, true)
		start := time.Now()
		if _, stderr, err := w.kubectl(testenv.UserAdmin, "cordon", victim); err != nil {
			require.Fail(t, fmt.Sprintf("cordon: %v %s", err, stderr))
		}
		var replacedAt time.Time
		w.eventually("replacement promoted", 15*time.Second, func() error {
			s := w.snapshot()
			for name := range s.rrs {
				if name != victim && s.nodes[name].Labels[corev1.LabelTopologyZone] == "zone-b" {
					if s.nodes[victim].Annotations[extender.AnnotationDrainingSince] == "" {
						return fmt.Errorf("%s not marked draining", victim)
					}
					replacedAt = time.Now()
					return nil
				}
			}
			return fmt.Errorf("no replacement in zone-b yet: %v", s.rrs)
		})
		w.eventually("old RR demoted", 20*time.Second, func() error {
			if _, still := w.snapshot().rrs[victim]; still {
				return fmt.Errorf("%s is still a route reflector", victim)
			}
			return nil
		})
		demotedAt := time.Now()
		stopSampling()
		require.Emptyf(t, orphaned, "clients without a route reflector during the handover: %v", orphaned)
		if d := demotedAt.Sub(start); d < 2*time.Second {
			require.Fail(t, fmt.Sprintf("demoted %s after the cordon, before removalDelay (2s)", d))
		}
		t.Logf("replacement after %s, demotion after %s", replacedAt.Sub(start).Round(10*time.Millisecond), demotedAt.Sub(start).Round(10*time.Millisecond))
		w.eventually("settled", 20*time.Second, func() error { return w.snapshot().settled(3) })
		after := w.snapshot()
		requireProtected(t, after, victim, false)
		for rr := range after.rrs {
			requireProtected(t, after, rr, true) // the replacement too
		}
		out, _, _ := w.kubectl(testenv.UserAdmin, "get", "events", "-n", "default", "--field-selector", "involvedObject.name="+victim, "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
		if !strings.Contains(out, "Demoted: cordoned; clients moved to ") || !strings.Contains(out, "Draining: cordoned") {
			all, _, _ := w.kubectl(testenv.UserAdmin, "get", "events", "-A", "-o", "wide")
			require.Fail(t, fmt.Sprintf("events of %s: %q; all: %q", victim, out, all))
		}
		if confd {
			w.checkRouting(t, "after the cordon handover")
			return
		}
		missing, _, _, err := w.routingState()
		require.NoError(t, err)
		require.Zero(t, missing, "the graph model's missing pairs after the cordon handover")
	})

	t.Run("cluster-autoscaler's ToBeDeletedByClusterAutoscaler taint on an RR: drained at admission, replaced, demoted", func(t *testing.T) {
		s := w.snapshot()
		var victim string
		for name := range s.rrs {
			if s.nodes[name].Labels[corev1.LabelTopologyZone] == "zone-a" {
				victim = name
			}
		}
		requireProtected(t, s, victim, true)
		start := time.Now()
		_, stderr, err := w.kubectl(testenv.UserAdmin, "taint", "node", victim, "ToBeDeletedByClusterAutoscaler=1700000000:NoSchedule")
		require.NoError(t, err, stderr)
		// The mutating webhook marks it in the taint's own write: no reconcile needed.
		n, err := w.admin.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
		require.NoError(t, err)
		require.NotEmpty(t, n.Annotations[extender.AnnotationDrainingSince], "%s not draining after the taint's write: %v", victim, n.Annotations)
		w.eventually("replacement in zone-a, old RR demoted", 20*time.Second, func() error {
			s := w.snapshot()
			if _, still := s.rrs[victim]; still {
				return fmt.Errorf("%s is still a route reflector", victim)
			}
			return s.settled(3)
		})
		t.Logf("demoted %s after %s", victim, time.Since(start).Round(10*time.Millisecond))
		requireProtected(t, w.snapshot(), victim, false)
		out, _, _ := w.kubectl(testenv.UserAdmin, "get", "events", "-n", "default", "--field-selector", "involvedObject.name="+victim, "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
		require.Contains(t, out, "node is going: taint ToBeDeletedByClusterAutoscaler (cluster-autoscaler deletes the node)", "events of %s", victim)
		// No routing check here (40 s on confd + BIRD): the handover is the cordon's, checked above.
	})

	t.Run("kubectl delete node of an RR succeeds with a warning and is replaced", func(t *testing.T) {
		s := w.snapshot()
		var victim string
		for name := range s.rrs {
			if s.nodes[name].Labels[corev1.LabelTopologyZone] == "zone-c" {
				victim = name
			}
		}
		_, stderr, err := w.kubectl(testenv.UserAlice, "delete", "node", victim)
		require.NoError(t, err, "kubectl delete")
		require.Contains(t, stderr, "Warning: node "+victim+" is a route reflector of policy \"default\"", "kubectl delete")
		w.eventually("replaced", 20*time.Second, func() error {
			s := w.snapshot()
			if err := s.settled(3); err != nil {
				return err
			}
			for name := range s.rrs {
				if s.nodes[name].Labels[corev1.LabelTopologyZone] == "zone-c" {
					return nil
				}
			}
			return fmt.Errorf("no route reflector in zone-c: %v", s.rrs)
		})
	})

	t.Run("a node registering while the webhook server is down gets its role from the reconciler", func(t *testing.T) {
		w.rep.stop()
		w.join("late-1", "zone-a", nil)
		n, err := w.admin.CoreV1().Nodes().Get(ctx, "late-1", metav1.GetOptions{})
		require.NoError(t, err)
		require.Emptyf(t, n.Labels[extender.LabelPeeringSet], "late-1 got a role with the webhook server down: %v", n.Labels)
		w.rep = w.start(w.port, true)
		w.eventually("late-1 has its role", 30*time.Second, func() error {
			s := w.snapshot()
			if len(s.clients["late-1"]) == 0 {
				return fmt.Errorf("late-1: %v %v", s.nodes["late-1"].Labels, s.nodes["late-1"].Annotations)
			}
			return s.settled(3)
		})
	})
}
