package serve

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico/crds"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// The API servers of the integration tests are reused, one test after another: starting one
// (etcd, kube-apiserver, the CRDs) costs about 11 s of CPU, and make test ran some 25 of them in
// this package. A test of serve_test that asks newEnv for no option (and a test of serve through
// SharedEnv) takes an idle one from the pool, or starts one, and hands it back when it ends: its
// replicas stopped first (their cleanups run before the pool's), then everything a test and the
// product write is deleted and the API server checked back to what a new one holds (no Node,
// policy, BGPPeer, BGPConfiguration, CalicoNodeStatus, Event, webhook configuration or Lease of
// the chart's namespace; the same CRDs and namespaces). One test at a time uses an API server:
// what each test proves about the product on a real API server is unchanged, only the API
// server's own start is not paid again. An API server whose test failed, whose replica did not
// stop, or whose test left what the reset does not take back (another CRD, a namespace:
// namespaces never finalize here) is stopped instead. A test that needs its own (an option, or
// Calico's etcd datastore in the API server's etcd) asks for one (serve_test's ownAPIServer).
var envPool struct {
	mu   sync.Mutex
	idle []*pooledEnv
	all  []*pooledEnv
}

type pooledEnv struct {
	env        *testenv.Env
	crds       []string // the CRDs a new one holds
	namespaces []string
	uses       int
}

// TestMain stops the pool's API servers once every test has run. Unless GOGC is set, the test
// process collects at testGOGC: it holds the tests' clients, graph models and the in-process
// replicas, with memory to spare (the test API servers already run at 400, testenv's infraGOGC).
// The product's own target is serve.TuneGC's, which TestTuneGC proves; no test here reads the
// process's memory. Three of the live tests took 73.6 CPU-s at Go's default, 67.3 at 400.
func TestMain(m *testing.M) {
	if _, set := os.LookupEnv(EnvGOGC); !set {
		debug.SetGCPercent(testGOGC)
	}
	code := m.Run()
	envPool.mu.Lock()
	for _, p := range envPool.all {
		p.env.Stop()
	}
	envPool.mu.Unlock()
	os.Exit(code)
}

const testGOGC = 400

var (
	policiesGVR   = v1alpha1.GroupVersion.WithResource("routereflectorpolicies")
	bgpPeersGVR   = schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: "bgppeers"}
	bgpConfigGVR  = schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: "bgpconfigurations"}
	nodeStatusGVR = schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: "caliconodestatuses"}
	// resetGVRs are the cluster-scoped objects the tests and the product create, deleted between
	// two tests (the policies first: their finalizer is taken off, the product is stopped).
	// The webhook configurations first: the stopped replica's webhooks would refuse the rest (the
	// API server takes a moment to see them gone, so the deletions are retried).
	resetGVRs = []schema.GroupVersionResource{
		{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"},
		{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"},
		policiesGVR, bgpPeersGVR, bgpConfigGVR, nodeStatusGVR,
		{Version: "v1", Resource: "nodes"},
	}
	eventsGVR = schema.GroupVersionResource{Version: "v1", Resource: "events"}
	// leasesGVR: the replicas' leader election, in the chart's namespace (kube-system holds the
	// API server's own).
	leasesGVR = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
)

// SharedEnv returns an idle API server of the pool, or starts one with the CRDs and the chart's
// namespace, and hands it back to the pool (reset) or stops it when t ends.
func SharedEnv(t *testing.T) *testenv.Env {
	t.Helper()
	envPool.mu.Lock()
	var p *pooledEnv
	if n := len(envPool.idle); n > 0 {
		p, envPool.idle = envPool.idle[n-1], envPool.idle[:n-1]
	}
	envPool.mu.Unlock()
	if p == nil {
		p = startPooled(t)
	}
	p.uses++
	t.Logf("testenv: shared kube-apiserver at %s, use %d", p.env.URL, p.uses)
	t.Cleanup(func() { releasePooled(t, p) })
	return p.env
}

func startPooled(t *testing.T) *pooledEnv {
	t.Helper()
	testenv.RequireBinary(t, testenv.ToolEtcd)
	testenv.RequireBinary(t, testenv.ToolKubeAPIServer)
	var o testenv.Options
	testenv.WithChartRBAC()(&o)
	start := time.Now()
	env, err := testenv.StartEnv(context.Background(), o)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Logf("testenv: kube-apiserver %s ready at %s in %s (shared)", testenv.KubernetesVersion, env.URL, time.Since(start).Round(time.Millisecond))
	p := &pooledEnv{env: env}
	envPool.mu.Lock()
	envPool.all = append(envPool.all, p)
	envPool.mu.Unlock()
	InstallTestCRDs(t, env)
	p.crds, p.namespaces, err = clusterShape(t.Context(), env)
	require.NoError(t, err)
	return p
}

// clusterShape lists the CRDs and the namespaces.
func clusterShape(ctx context.Context, env *testenv.Env) (crdNames, namespaces []string, err error) {
	ax, err := apiextensionsclient.NewForConfig(env.Config)
	if err != nil {
		return nil, nil, err
	}
	cl, err := ax.ApiextensionsV1().CustomResourceDefinitions().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	for _, c := range cl.Items {
		crdNames = append(crdNames, c.Name+"/"+c.ResourceVersion)
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return nil, nil, err
	}
	nl, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	for _, n := range nl.Items {
		namespaces = append(namespaces, n.Name)
	}
	slices.Sort(crdNames)
	slices.Sort(namespaces)
	return crdNames, namespaces, nil
}

// releasePooled resets p and hands it back to the pool, or stops it (see envPool).
func releasePooled(t *testing.T, p *pooledEnv) {
	discard := func(why string) {
		t.Logf("testenv: stopping the shared kube-apiserver at %s: %s", p.env.URL, why)
		if t.Failed() {
			t.Logf("testenv: kube-apiserver log tail:\n%s", testenv.Tail(filepath.Join(p.env.Dir, "kube-apiserver.log"), 40))
		}
		p.env.Stop()
	}
	switch {
	case t.Failed():
		discard("the test failed")
		return
	case leakedReplicas(p.env):
		discard("a replica did not stop")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	if err := resetEnv(ctx, p); err != nil {
		discard(fmt.Sprintf("reset: %v", err))
		return
	}
	t.Logf("testenv: shared kube-apiserver at %s reset in %s", p.env.URL, time.Since(start).Round(time.Millisecond))
	envPool.mu.Lock()
	envPool.idle = append(envPool.idle, p)
	envPool.mu.Unlock()
}

// resetEnv deletes what the tests and the product write and checks the API server is back to what
// a new one holds.
func resetEnv(ctx context.Context, p *pooledEnv) error {
	crdNames, namespaces, err := clusterShape(ctx, p.env)
	if err != nil {
		return err
	}
	if !slices.Equal(crdNames, p.crds) {
		return fmt.Errorf("the CRDs changed: %v, new %v", crdNames, p.crds)
	}
	if !slices.Equal(namespaces, p.namespaces) {
		return fmt.Errorf("namespaces were added: %v, new %v", namespaces, p.namespaces)
	}
	dyn, err := dynamic.NewForConfig(p.env.Config)
	if err != nil {
		return err
	}
	type target struct {
		gvr schema.GroupVersionResource
		ns  string
	}
	var targets []target
	for _, g := range resetGVRs {
		targets = append(targets, target{g, ""})
	}
	for _, ns := range namespaces {
		targets = append(targets, target{eventsGVR, ns})
	}
	targets = append(targets, target{leasesGVR, testenv.ChartNamespace})
	left := map[string]int{}
	return testenv.Poll(ctx, 30*time.Second, 200*time.Millisecond, func() error {
		clear(left)
		for _, tg := range targets {
			r := dyn.Resource(tg.gvr).Namespace(tg.ns)
			list, err := r.List(ctx, metav1.ListOptions{})
			if err != nil {
				return fmt.Errorf("listing %s: %w", tg.gvr.Resource, err)
			}
			if len(list.Items) == 0 {
				continue
			}
			left[tg.ns+"/"+tg.gvr.Resource] += len(list.Items)
			for _, o := range list.Items {
				if len(o.GetFinalizers()) == 0 {
					continue
				}
				if _, err := r.Patch(ctx, o.GetName(), types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
					return fmt.Errorf("dropping the finalizers of %s %s: %w", tg.gvr.Resource, o.GetName(), err)
				}
			}
			if err := r.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
				return fmt.Errorf("deleting %s: %w", tg.gvr.Resource, err)
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("were left: %v", left) // deleted now: the next pass checks they are gone
		}
		return nil
	})
}

// leaked holds the API servers of the replicas whose stop timed out (their managers may still
// write): MarkLeaked.
var leaked sync.Map // *testenv.Env -> bool

// MarkLeaked keeps env from being reused: a replica on it did not stop.
func MarkLeaked(env *testenv.Env) { leaked.Store(env, true) }

func leakedReplicas(env *testenv.Env) bool {
	_, ok := leaked.Load(env)
	return ok
}

// InstallTestCRDs gives a new API server what the product's tests here need of a cluster: the
// chart's namespace, Calico's BGPPeer, BGPConfiguration and CalicoNodeStatus CRDs and the
// policy's.
func InstallTestCRDs(t *testing.T, env *testenv.Env) {
	t.Helper()
	env.CreateNamespace(t, testenv.ChartNamespace)
	calicoCRDs, err := crds.Dir()
	require.NoError(t, err)
	testenv.InstallCRDs(t, env.Config, filepath.Join(calicoCRDs, "crd.projectcalico.org_bgppeers.yaml"),
		filepath.Join(calicoCRDs, "crd.projectcalico.org_bgpconfigurations.yaml"),
		filepath.Join(calicoCRDs, "crd.projectcalico.org_caliconodestatuses.yaml"), testenv.RepoPath(t, "policy/crd"))
}
