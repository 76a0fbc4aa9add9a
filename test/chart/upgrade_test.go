package chart

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	calicocrds "github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico/crds"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

var (
	bgpPeersGVR = schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: "bgppeers"}
	policiesGVR = schema.GroupVersionResource{Group: "routereflector.io", Version: "v1alpha1", Resource: "routereflectorpolicies"}
)

// TestChartUpgradeMovesNothing is issue 39's upgrade proof, live, from the real previous release
// (issue 51): the chart and the binary of testenv.PreviousRelease (chart 0.2.0, commit 103ce18;
// the binary built there by testenv.BuildRelease and cached by commit) are installed with the real
// helm on a real kube-apiserver; two replicas of that binary run with leader election and the
// args of the installed Deployment, behind a Service played by the test (a TLS proxy that sends
// each admission round-robin to the replicas in its endpoints, as the chart's webhooks reach them
// through the chart's Service). The previous chart's default policy is its release resource, as
// on a cluster installed with 0.2.0: the install leaves it out (policy.create=false; its webhook
// would race the replicas' start, issue 51) and a `helm upgrade` of the same chart then renders it
// once the replicas answer. 30 nodes join in 3 zones through the webhooks and the roles settle (8
// route reflectors: a rack of 2 per zone and a spine of 2). The baseline is every node's owned
// labels and annotations and every BGPPeer's resourceVersion.
//
// Then `helm upgrade` to the current chart with the same values: its pre-upgrade hooks (`crds
// apply`, `policy keep`) and its post-upgrade hook (`policy apply`) are played as
// TestCRDUpgradeWithHelm plays them (the current binary, as each hook's service account), and the
// two replicas roll as the chart's strategy rolls them (maxSurge 1, maxUnavailable 0) from the
// previous binary to the current one: a new replica with the upgraded Deployment's args starts
// and, once ready, joins the endpoints; then an old one leaves the endpoints and gets SIGTERM; the
// same again for the second. The lease holder goes first (the Deployment controller would delete
// the newer pod, the follower, first: one handover; this order makes two when the old follower
// takes the lease), and the next step waits until a live replica holds the lease (a pod takes
// seconds to start in a cluster, by which time the lease has moved). Admissions go on all the
// while: a label change on a client node every 150 ms (both node webhooks) and a node joining
// every 600 ms (9 at most). Throughout, a sampler reads the layout and the policy every 200 ms.
//
// Required: 0 role changes and 0 cluster-ID changes on the baseline nodes (the owned labels and
// annotations; at any sample, not only at the end), every baseline BGPPeer with its
// resourceVersion (none rewritten, none deleted, none added), every late node given a role, every
// route reflector and no client carrying the autoscalers' protection annotations at the end (which
// 0.2.0 did not write; its routereflector.io/protection marker is not counted as a role change), the
// policy never deleted (the chart's upgrade takes it out of the release: Helm deletes it unless
// `policy keep` marked it; same UID at every sample, never a deletionTimestamp, no finalizer
// release), the CRD the current one (status.routes.families, which 0.2.0's lacks), and 0
// admissions failed open: the API server's own counter (apiserver_admission_webhook_fail_open_count,
// read from its /metrics, whose increase the test checks at the end by taking every endpoint away
// for one label change) did not move, and the Service never found its endpoints empty (the rolling
// order leaves none of that window). Joins answered without a role (by the replica without the
// lease, or while the lease changes hands) are not failed open: the leader's reconciler gives
// those nodes their role; they are counted and reported.
//
// The replicas get --leader-election-namespace (outside a pod there is no namespace file) and
// the test's ports and certificate instead of the Deployment's (--webhook-port, --cert-dir, the
// probes' and metrics' addresses, the self-managed certificate flags); everything else is the
// Deployment's args and env.
//
// It takes about 40 s (6 s of them the API server's start), plus the previous release's build the
// first time on a machine (about 30 s with Go's build cache warm).
// The test's checks were checked: with an RR cordoned as the upgrade starts, it fails with 9
// role changes, 2 cluster-ID changes and 2 BGPPeers rewritten.
func TestChartUpgradeMovesNothing(t *testing.T) {
	u := startUpgrade(t, upgradeValues, 8) // a rack of 2 per zone and a spine of 2
	base := u.base
	opensBefore, requestsBefore := apiserverAdmissions(t, u.admin)
	sampled := u.sample()
	traffic := u.startTraffic(base, 9)
	t.Cleanup(func() { traffic.stop() })

	u.upgradeToCurrent()
	handovers := u.rollout(true, nil)
	time.Sleep(2 * time.Second) // admissions against the new leader too
	late := traffic.stop()
	u.eventually("late nodes settled", time.Minute, u.settled)
	final := u.quiet(3 * time.Second)
	sampled.stop()

	t.Logf("%d samples: lease holders in turn %d (longest sampled time with the lease released %s); role changes %d, cluster-ID changes %d, BGPPeers rewritten %d, added %d",
		sampled.n, len(sampled.holders), sampled.longestNoLeader.Round(time.Millisecond), len(sampled.roleChanged), len(sampled.idChanged),
		len(sampled.peersRewritten), len(sampled.peersAdded))
	require.NotEmpty(t, handovers)
	roles, ids := base.diff(final)
	require.Empty(t, roles, "role changes at the end")
	require.Empty(t, ids, "cluster-ID changes at the end")
	require.Empty(t, sampled.roleChanged, "role changes seen while upgrading")
	require.Empty(t, sampled.idChanged, "cluster-ID changes seen while upgrading")
	rewritten, added := base.peerDiff(final)
	require.Empty(t, rewritten, "BGPPeers rewritten or deleted")
	require.Empty(t, added, "BGPPeers added")
	require.Empty(t, sampled.peersRewritten, "BGPPeers rewritten while upgrading")
	for n, s := range final.nodes {
		require.Equal(t, s.rr, s.protected, "%s: a route reflector (and only one) carries the protection annotations after the upgrade", n)
	}
	drains, _, _ := u.env.Kubectl(t, testenv.UserAdmin, "get", "events", "-A", "-o",
		`jsonpath={range .items[?(@.reason=="RouteReflectorDraining")]}{.involvedObject.name}: {.message}{"\n"}{end}`)
	require.Empty(t, strings.TrimSpace(drains), "route reflectors drained")
	u.checkUpgraded(sampled, late, final, opensBefore, requestsBefore)
	t.Logf("TestChartUpgradeMovesNothing took %s", time.Since(u.begin).Round(time.Millisecond))
}

// upgradeValues are the chart values of the upgrade tests, but the webhook's (the test's Service).
const upgradeValues = "policy: {spec: {topology: {type: DualPlane, maxRackSize: 15}, removalDelay: 3s, bgpHealth: {enabled: false}}}\n"

// startUpgrade installs the previous release with these chart values and settles 30 nodes under
// two replicas of its binary, with rrs route reflectors (see TestChartUpgradeMovesNothing); the
// baseline is u.base.
func startUpgrade(t *testing.T, values string, rrs int) *upgradeWorld {
	if testing.Short() {
		t.Skip("needs kube-apiserver, etcd and helm")
	}
	u := &upgradeWorld{t: t, begin: time.Now()}
	type built struct {
		bin string
		err error
	}
	binc := make(chan built, 1)
	go func() {
		bin, err := testenv.BuildProduct(context.Background(), t.TempDir())
		binc <- built{bin, err}
	}()
	prevc := make(chan error, 1)
	go func() {
		var err error
		u.prev, err = testenv.BuildRelease(context.Background(), testenv.PreviousRelease)
		prevc <- err
	}()
	env := testenv.Start(t, testenv.WithChartRBAC())
	u.env = env
	env.CreateNamespace(t, testenv.ChartNamespace)
	calicoDir, err := calicocrds.Dir()
	require.NoError(t, err)
	testenv.InstallCRDs(t, env.Config, filepath.Join(calicoDir, "crd.projectcalico.org_bgppeers.yaml"),
		filepath.Join(calicoDir, "crd.projectcalico.org_bgpconfigurations.yaml"),
		filepath.Join(calicoDir, "crd.projectcalico.org_caliconodestatuses.yaml"))
	u.admin, err = kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	u.kubelet, err = kubernetes.NewForConfig(env.ConfigFor(testenv.UserKubelet))
	require.NoError(t, err)
	u.dyn, err = dynamic.NewForConfig(env.Config)
	require.NoError(t, err)
	u.ext, err = apiextensionsclient.NewForConfig(env.Config)
	require.NoError(t, err)
	ctx := t.Context()

	var svcCA []byte
	u.svc, svcCA = startService(t)
	u.valuesFile = filepath.Join(t.TempDir(), "values.yaml")
	u.webhookValues = fmt.Sprintf("certManager: {enabled: false}\nwebhook: {url: %q, caBundle: %s}\n",
		u.svc.url, base64.StdEncoding.EncodeToString(svcCA))
	u.setValues(values)
	require.NoError(t, <-prevc, "building the previous release")
	t.Logf("the previous release %s: %s", u.prev.Commit[:7], u.prev.Bin)
	start := time.Now()
	out, stderr, err := env.Helm(t, testenv.UserAdmin, "install", testenv.ChartRelease, u.prev.Chart, "--set", "policy.create=false",
		"--namespace", testenv.ChartNamespace, "-f", u.valuesFile)
	require.NoError(t, err, "helm install:\n%s\n%s", out, stderr)
	t.Logf("helm install of the previous chart in %s", time.Since(start).Round(time.Millisecond))
	crd, err := u.ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crdName, metav1.GetOptions{})
	require.NoError(t, err)
	require.False(t, hasFamilies(crd), "the previous chart's CRD has no status.routes.families")
	oldDep := u.deployment()
	require.Equal(t, "ghcr.io/calico-rr-autoscaler/calico-rr-autoscaler:0.2.0", oldDep.Spec.Template.Spec.Containers[0].Image, "the previous chart")

	u.bin = u.prev.Bin
	u.old, u.live = map[string]*testenv.Product{}, map[string]*testenv.Product{}
	for _, name := range []string{"a", "b"} {
		p := u.startReplica(name, oldDep)
		u.svc.add(name, p)
		u.old[name], u.live[name] = p, p
		if name == "a" {
			u.eventually("replica a leads", 30*time.Second, func() error { return leads(p) })
		}
	}
	env.AwaitWebhooks(t, 30*time.Second)
	// The previous chart renders its policy, a release resource, now that its webhook answers.
	u.upgradeChart(u.prev.Chart, u.prev.Bin, false)
	pol, err := u.dyn.Resource(policiesGVR).Get(ctx, "default", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, testenv.ChartRelease, pol.GetAnnotations()["meta.helm.sh/release-name"], "the policy is the previous release's resource")
	require.Empty(t, pol.GetAnnotations()["helm.sh/resource-policy"])
	u.policyUID = pol.GetUID()
	bc := <-binc
	require.NoError(t, bc.err)
	u.current = bc.bin

	start = time.Now()
	for i := range 30 {
		_, err := u.join(fmt.Sprintf("node-%02d", i), zones[i%3])
		require.NoError(t, err)
	}
	u.eventually("roles settled", time.Minute, u.settled)
	u.base = u.quiet(3 * time.Second)
	have, clients := u.base.counts()
	t.Logf("30 nodes joined and settled in %s: %d route reflectors, %d clients, %d BGPPeers", time.Since(start).Round(time.Millisecond),
		have, clients, len(u.base.peers))
	require.Equal(t, rrs, have, "route reflectors settled")
	return u
}

// setValues writes the chart values file: the webhook's values and these.
func (u *upgradeWorld) setValues(values string) {
	require.NoError(u.t, os.WriteFile(u.valuesFile, []byte(u.webhookValues+values), 0o644))
}

// upgradeChart runs `helm upgrade` to chart with the values file, its hook Jobs played with bin:
// the CRD hook, and with policyHooks the current chart's `policy keep` and `policy apply`.
func (u *upgradeWorld) upgradeChart(chart, bin string, policyHooks bool) {
	t := u.t
	t.Helper()
	start := time.Now()
	upgraded := make(chan error, 1)
	go func() {
		out, stderr, err := u.env.Helm(t, testenv.UserAdmin, "upgrade", testenv.ChartRelease, chart, "--namespace", testenv.ChartNamespace,
			"-f", u.valuesFile, "--timeout", "2m")
		if err != nil {
			err = fmt.Errorf("%w\n%s\n%s", err, out, stderr)
		}
		upgraded <- err
	}()
	playCRDHook(t, u.env, testenv.ChartNamespace, testenv.ChartRelease+"-crds", bin, upgraded)
	if policyHooks {
		kept := playPolicyHook(t, u.env, testenv.ChartNamespace, testenv.ChartRelease+"-policy-keep", bin, upgraded)
		require.Contains(t, kept, "RouteReflectorPolicy default marked helm.sh/resource-policy: keep")
		playPolicyHook(t, u.env, testenv.ChartNamespace, testenv.ChartRelease+"-policy", bin, upgraded)
	}
	select {
	case err := <-upgraded:
		require.NoError(t, err, "helm upgrade to %s", chart)
	case <-time.After(2 * time.Minute):
		t.Fatalf("helm upgrade to %s did not end after its hook Jobs completed", chart)
	}
	t.Logf("helm upgrade to %s (with its hooks) in %s", chart, time.Since(start).Round(time.Millisecond))
}

// upgradeToCurrent is `helm upgrade` to this chart with its hooks (this tree's binary); the new
// replicas will run this tree's binary.
func (u *upgradeWorld) upgradeToCurrent() {
	u.upgradeChart(chartDir(u.t), u.current, true)
	u.newDep = u.deployment()
	require.Equal(u.t, "ghcr.io/calico-rr-autoscaler/calico-rr-autoscaler:0.3.0", u.newDep.Spec.Template.Spec.Containers[0].Image, "the current chart")
	u.bin = u.current
}

// handover is a lease handover of the rollout: the holder stopped, and when a live replica was
// seen holding the lease.
type handover struct {
	from, to      string
	stopped, seen time.Time
}

func (h handover) String() string {
	return fmt.Sprintf("%s -> %s in %s", h.from, h.to, h.seen.Sub(h.stopped).Round(100*time.Millisecond))
}

// rollout rolls the two old replicas to two new ones (c, d) as the chart's strategy does
// (maxSurge 1, maxUnavailable 0): a new replica starts and joins the Service's endpoints, then an
// old one leaves them and gets SIGTERM, and the next step waits until a live replica holds the
// lease. leaderFirst: the old lease holder goes first (two handovers when the old follower takes
// the lease); otherwise the old follower goes first, as the Deployment controller (which deletes
// the newer pod first) would pick it when the older pod leads: one handover, to a new replica.
// beforeLeaderStops, if not nil, is called just before the old lease holder gets SIGTERM.
func (u *upgradeWorld) rollout(leaderFirst bool, beforeLeaderStops func()) []handover {
	t := u.t
	t.Helper()
	rollStart := time.Now()
	var handovers []handover
	for _, name := range []string{"c", "d"} {
		p := u.startReplica(name, u.newDep)
		u.svc.add(name, p)
		u.live[name] = p
		victim := ""
		for _, n := range []string{"a", "b"} {
			if o, ok := u.old[n]; ok && (victim == "" || (leads(o) == nil) == leaderFirst) {
				victim = n
			}
		}
		wasLeader := leads(u.old[victim]) == nil
		if wasLeader && beforeLeaderStops != nil {
			beforeLeaderStops()
		}
		t.Logf("rollout: %s ready after %s; stopping %s (leader: %v)", name, time.Since(rollStart).Round(time.Millisecond), victim, wasLeader)
		u.svc.remove(victim)
		stopped := time.Now()
		u.old[victim].Stop()
		delete(u.old, victim)
		delete(u.live, victim)
		// A pod takes seconds to start in a cluster: the lease has moved before the next step.
		holder := ""
		u.eventually("a live replica holds the lease", time.Minute, func() error {
			for n, p := range u.live {
				if leads(p) == nil {
					holder = n
					return nil
				}
			}
			return fmt.Errorf("no live replica holds the lease")
		})
		if wasLeader {
			handovers = append(handovers, handover{from: victim, to: holder, stopped: stopped, seen: time.Now()})
		}
	}
	require.Empty(t, u.old, "the old replicas are gone")
	t.Logf("rollout done in %s; lease handovers: %v", time.Since(rollStart).Round(time.Millisecond), handovers)
	return handovers
}

// samples is what the sampler of the upgrade tests saw: any deviation from the baseline at any
// sample, the policy's identity and the lease's holders.
type samples struct {
	n                          int
	roleChanged, idChanged     map[string]string
	peersRewritten, peersAdded map[string]bool
	policy                     []string // the policy's UID, deletion and finalizers, each change
	holders                    []string
	longestNoLeader            time.Duration
	lastHolderSeen             time.Time
	stop                       func()
}

// sample reads the layout, the policy and the lease every 200 ms until stop.
func (u *upgradeWorld) sample() *samples {
	t, base := u.t, u.base
	s := &samples{roleChanged: map[string]string{}, idChanged: map[string]string{},
		peersRewritten: map[string]bool{}, peersAdded: map[string]bool{}, lastHolderSeen: time.Now()}
	s.stop = testenv.Every(200*time.Millisecond, func() {
		l, err := u.snapshot()
		if err != nil {
			return
		}
		s.n++
		roles, ids := base.diff(l)
		maps.Copy(s.roleChanged, roles)
		maps.Copy(s.idChanged, ids)
		rewritten, added := base.peerDiff(l)
		for _, p := range rewritten {
			s.peersRewritten[p] = true
		}
		for _, p := range added {
			s.peersAdded[p] = true
		}
		pol := "absent"
		if p, err := u.dyn.Resource(policiesGVR).Get(t.Context(), "default", metav1.GetOptions{}); err == nil {
			pol = fmt.Sprintf("uid %s deletion %v finalizers %v", p.GetUID(), p.GetDeletionTimestamp() != nil, p.GetFinalizers())
		} else if !apierrors.IsNotFound(err) {
			pol = ""
		}
		if pol != "" && (len(s.policy) == 0 || s.policy[len(s.policy)-1] != pol) {
			s.policy = append(s.policy, pol)
		}
		lease, err := u.admin.CoordinationV1().Leases(testenv.ChartNamespace).Get(t.Context(), "calico-rr-autoscaler", metav1.GetOptions{})
		if err != nil {
			return
		}
		h := ""
		if lease.Spec.HolderIdentity != nil {
			h = *lease.Spec.HolderIdentity
		}
		if h == "" {
			s.longestNoLeader = max(s.longestNoLeader, time.Since(s.lastHolderSeen))
			return
		}
		s.lastHolderSeen = time.Now()
		if len(s.holders) == 0 || s.holders[len(s.holders)-1] != h {
			s.holders = append(s.holders, h)
		}
	})
	t.Cleanup(s.stop)
	return s
}

// checkUpgraded is what both upgrade tests require once the rollout is over, sampled stopped and
// the cluster settled (final): the admissions during the rollout answered (none failed open, the
// Service never without endpoints, every late node with a role), the lease changed hands, the
// policy the same object throughout and marked keep by the post-upgrade hook, the CRD the
// current one; then it checks that the API server's fail-open counter counts (a label change
// with no endpoint behind the Service fails open in both node webhooks).
func (u *upgradeWorld) checkUpgraded(sampled *samples, late *traffic, final *layout, opensBefore, requestsBefore map[string]float64) {
	t, ctx := u.t, u.t.Context()
	t.Helper()
	opensAfter, requestsAfter := apiserverAdmissions(t, u.admin)
	requests := map[string]float64{}
	for k, v := range requestsAfter {
		if d := v - requestsBefore[k]; d > 0 {
			requests[k] = d
		}
	}
	opens := sum(opensAfter) - sum(opensBefore)
	t.Logf("during the upgrade and rollout: %d label changes, %d joins (%d with their role at admission, %d left to the leader's reconciler); "+
		"admission webhook calls by the API server %v; failed open %v (API server counter), Service without endpoints %d, Service upstream errors %d; "+
		"served by replica %v", late.labels, len(late.joined), late.withRole, len(late.joined)-late.withRole, requests, opens,
		u.svc.noEndpoints.Load(), u.svc.upstreamErrors.Load(), u.svc.servedCounts())
	require.Empty(t, late.errs, "the admissions during the rollout")
	require.Positive(t, sampled.n)
	require.GreaterOrEqual(t, len(sampled.holders), 2, "the lease changed hands")
	for _, n := range late.joined {
		require.NotEmpty(t, final.nodes[n].role, "late node %s has a role", n)
	}
	t.Logf("the policy at the samples: %v", sampled.policy)
	require.Len(t, sampled.policy, 1, "the policy never deleted nor recreated: %v", sampled.policy)
	pol, err := u.dyn.Resource(policiesGVR).Get(ctx, "default", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, u.policyUID, pol.GetUID(), "the same policy")
	require.Equal(t, "keep", pol.GetAnnotations()["helm.sh/resource-policy"])
	var managers []string
	for _, m := range pol.GetManagedFields() {
		managers = append(managers, m.Manager+"/"+string(m.Operation))
	}
	require.Contains(t, managers, "calico-rr-autoscaler-policy/Apply", "the post-upgrade hook applied the chart's policy")
	require.Zero(t, u.svc.noEndpoints.Load(), "admissions while the Service had no endpoint")
	require.Zero(t, opens, "admissions failed open (apiserver_admission_webhook_fail_open_count): %v", opensAfter)
	require.Positive(t, requests["node.mutate.routereflector.io"], "the API server called the node mutator during the rollout")

	// The new schema.
	crd, err := u.ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crdName, metav1.GetOptions{})
	require.NoError(t, err)
	require.True(t, hasFamilies(crd), "the hook applied the current CRD")

	// The fail-open counter counts.
	probe := ""
	for n, s := range final.nodes {
		if !s.rr && (probe == "" || n < probe) {
			probe = n
		}
	}
	u.svc.down.Store(true)
	_, err = u.admin.CoreV1().Nodes().Patch(ctx, probe, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"upgrade-test.example/probe":"down"}}}`), metav1.PatchOptions{})
	require.NoError(t, err, "failurePolicy Ignore lets the change through")
	u.svc.down.Store(false)
	opensProbe, _ := apiserverAdmissions(t, u.admin)
	require.GreaterOrEqual(t, sum(opensProbe)-sum(opensAfter), 2.0, "the fail-open counter counts the probe's two admissions: %v", opensProbe)
	t.Logf("the measurement's check: a label change with no endpoint failed open %v times (%v)", sum(opensProbe)-sum(opensAfter), opensProbe)
}

var zones = []string{"zone-a", "zone-b", "zone-c"}

// upgradeWorld is the cluster of the upgrade tests (startUpgrade).
type upgradeWorld struct {
	t              *testing.T
	begin          time.Time
	env            *testenv.Env
	admin, kubelet *kubernetes.Clientset
	dyn            *dynamic.DynamicClient
	ext            *apiextensionsclient.Clientset
	svc            *service
	// valuesFile is the chart values (webhookValues and the test's own, setValues).
	valuesFile, webhookValues string
	prev                      testenv.Release
	current                   string // this tree's binary
	bin                       string // the binary startReplica runs
	newDep                    *appsv1.Deployment
	// old are the previous release's replicas still running, live every running replica.
	old, live map[string]*testenv.Product
	base      *layout // the 30 nodes settled under the previous release
	policyUID types.UID
}

func (u *upgradeWorld) eventually(what string, timeout time.Duration, f func() error) {
	u.t.Helper()
	testenv.Eventually(u.t, what, timeout, 100*time.Millisecond, f)
}

func (u *upgradeWorld) deployment() *appsv1.Deployment {
	u.t.Helper()
	d, err := u.admin.AppsV1().Deployments(testenv.ChartNamespace).Get(u.t.Context(), testenv.ChartRelease, metav1.GetOptions{})
	require.NoError(u.t, err)
	require.Len(u.t, d.Spec.Template.Spec.Containers, 1)
	return d
}

// startReplica runs the product as the Deployment's container would run it (its args and env)
// and waits until it is ready; the test's ports and certificate replace the Deployment's (see
// TestChartUpgradeMovesNothing).
func (u *upgradeWorld) startReplica(name string, dep *appsv1.Deployment) *testenv.Product {
	u.t.Helper()
	c := dep.Spec.Template.Spec.Containers[0]
	require.Equal(u.t, "serve", c.Args[0])
	var args []string
	for _, a := range c.Args[1:] {
		flag, _, _ := strings.Cut(a, "=")
		switch {
		case flag == "--webhook-port", flag == "--health-probe-bind-address", flag == "--metrics-bind-address",
			flag == "--self-managed-certs", strings.HasPrefix(flag, "--cert-"):
		default:
			args = append(args, a)
		}
	}
	require.Contains(u.t, args, "--leader-elect")
	args = append(args, "--leader-election-namespace="+testenv.ChartNamespace)
	p, err := testenv.NewProduct(testenv.ProductOptions{Dir: u.t.TempDir(), Bin: u.bin, Args: args})
	require.NoError(u.t, err)
	p.Cmd.Env = os.Environ()
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			p.Cmd.Env = append(p.Cmd.Env, e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			p.Cmd.Env = append(p.Cmd.Env, e.Name+"="+testenv.ChartNamespace)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			p.Cmd.Env = append(p.Cmd.Env, e.Name+"="+testenv.ChartRelease+"-"+name)
		case e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory":
			lim, ok := c.Resources.Limits[corev1.ResourceMemory]
			require.True(u.t, ok, "env %s without a memory limit", e.Name)
			p.Cmd.Env = append(p.Cmd.Env, fmt.Sprintf("%s=%d", e.Name, lim.Value()))
		default:
			u.t.Fatalf("env %s: a source the test does not provide", e.Name)
		}
	}
	start := time.Now()
	require.NoError(u.t, p.Start(u.t.Context(), u.env.KubeconfigPath(testenv.UserServiceAccount), time.Minute), "replica %s", name)
	u.t.Logf("replica %s ready in %s: serve %s", name, time.Since(start).Round(time.Millisecond), strings.Join(args, " "))
	u.t.Cleanup(func() {
		p.Stop()
		if u.t.Failed() {
			u.t.Logf("replica %s log (tail):\n%s", name, testenv.Tail(p.Log, 30))
		}
	})
	return p
}

// leads is nil once the replica took the lease (controller-runtime exits when it loses it, so a
// live replica that acquired it still holds it).
func leads(p *testenv.Product) error {
	if p == nil {
		return fmt.Errorf("no replica")
	}
	b, _ := os.ReadFile(p.Log)
	if !bytes.Contains(b, []byte("successfully acquired lease")) {
		return fmt.Errorf("%s: no lease acquired", p.Log)
	}
	return nil
}

// join registers a node as a kubelet does (created, then Ready through nodes/status) and says
// whether the node mutator gave it its role at admission (in the create's or the status
// update's answer).
func (u *upgradeWorld) join(name, zone string) (bool, error) {
	ctx := u.t.Context()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{corev1.LabelTopologyZone: zone, corev1.LabelHostname: name}}}
	hasRole := func(n *corev1.Node) bool {
		_, rr := n.Labels[policy.DefaultRouteReflectorLabelKey]
		return rr || n.Labels[extender.LabelPeeringSet] != ""
	}
	created, err := u.kubelet.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("creating %s: %w", name, err)
	}
	for {
		n, err := u.kubelet.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		now := metav1.Now()
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: now, LastTransitionTime: now}}
		ready, err := u.kubelet.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return false, err
		}
		return hasRole(created) || hasRole(ready), nil
	}
}

// hasFamilies says whether the CRD has status.routes.families (since 0.2.0's chart).
func hasFamilies(crd *apiextensionsv1.CustomResourceDefinition) bool {
	_, ok := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"].Properties["routes"].Properties["families"]
	return ok
}

// nodeState is what the product owns of a node: its role (the owned labels and annotations but
// the cluster ID) and its cluster ID.
type nodeState struct {
	role, clusterID, set string
	rr, draining         bool
	// transitional: the node is in a transitional peering or uplink set.
	transitional bool
	// protected: the node carries every policy.ProtectionAnnotations as "true".
	protected bool
}

type layout struct {
	nodes map[string]nodeState
	peers map[string]string // BGPPeer name: resourceVersion
}

func (u *upgradeWorld) snapshot() (*layout, error) {
	ctx := u.t.Context()
	list, err := u.admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	rrKey := policy.DefaultRouteReflectorLabelKey
	l := &layout{nodes: map[string]nodeState{}, peers: map[string]string{}}
	for _, n := range list.Items {
		var role []string
		for _, k := range extender.OwnedLabelKeys(rrKey) {
			if v, ok := n.Labels[k]; ok {
				role = append(role, k+"="+v)
			}
		}
		for _, k := range extender.OwnedAnnotationKeys() {
			// The protection marker is not a role: it is what protectRouteReflectors (new in
			// this release, on by default) adds to every route reflector, checked on its own.
			if v, ok := n.Annotations[k]; ok && k != extender.AnnotationClusterID && k != extender.AnnotationProtection {
				role = append(role, k+"="+v)
			}
		}
		slices.Sort(role)
		_, rr := n.Labels[rrKey]
		protected := true
		for _, k := range policy.ProtectionAnnotations() {
			protected = protected && n.Annotations[k] == "true"
		}
		l.nodes[n.Name] = nodeState{role: strings.Join(role, ","), clusterID: n.Annotations[extender.AnnotationClusterID],
			set: n.Labels[extender.LabelPeeringSet], rr: rr, draining: extender.IsDraining(extender.FromNode(&n)), protected: protected,
			transitional: extender.IsTransitionalSet(n.Labels[extender.LabelPeeringSet]) || extender.IsTransitionalSet(n.Labels[extender.LabelUplinkSet])}
	}
	peers, err := u.dyn.Resource(bgpPeersGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, p := range peers.Items {
		l.peers[p.GetName()] = p.GetResourceVersion()
	}
	return l, nil
}

func (l *layout) counts() (rrs, clients int) {
	for _, n := range l.nodes {
		switch {
		case n.rr:
			rrs++
		case n.set != "":
			clients++
		}
	}
	return rrs, clients
}

// diff lists the nodes of l whose role or cluster ID differs in o.
func (l *layout) diff(o *layout) (roles, ids map[string]string) {
	roles, ids = map[string]string{}, map[string]string{}
	for n, a := range l.nodes {
		b, ok := o.nodes[n]
		if !ok {
			roles[n] = "gone"
			continue
		}
		if a.role != b.role {
			roles[n] = a.role + " -> " + b.role
		}
		if a.clusterID != b.clusterID {
			ids[n] = a.clusterID + " -> " + b.clusterID
		}
	}
	return roles, ids
}

// peerDiff lists l's BGPPeers rewritten or gone in o, and those o added.
func (l *layout) peerDiff(o *layout) (rewritten, added []string) {
	for p, rv := range l.peers {
		if o.peers[p] != rv {
			rewritten = append(rewritten, fmt.Sprintf("%s %s -> %q", p, rv, o.peers[p]))
		}
	}
	for p := range o.peers {
		if _, ok := l.peers[p]; !ok {
			added = append(added, p)
		}
	}
	slices.Sort(rewritten)
	slices.Sort(added)
	return rewritten, added
}

func (l *layout) fingerprint() string {
	return fmt.Sprint(l.nodes, l.peers) // fmt prints maps sorted by key
}

// settled: every node has a role, none drains, every client's BGPPeer exists, and the default
// policy's status says it reconciled its generation with the route reflectors it wants.
func (u *upgradeWorld) settled() error {
	l, err := u.snapshot()
	if err != nil {
		return err
	}
	for name, n := range l.nodes {
		switch {
		case n.draining:
			return fmt.Errorf("%s draining", name)
		case n.rr && n.clusterID == "":
			return fmt.Errorf("route reflector %s without a cluster ID", name)
		case !n.rr && n.set == "":
			return fmt.Errorf("%s has no role", name)
		case !n.rr:
			if _, ok := l.peers[extender.BGPPeerPrefix+n.set]; !ok {
				return fmt.Errorf("client %s: no BGPPeer of its peering set %s", name, n.set)
			}
		}
	}
	p, err := u.dyn.Resource(policiesGVR).Get(u.t.Context(), "default", metav1.GetOptions{})
	if err != nil {
		return err
	}
	g, _, _ := unstructured.NestedInt64(p.Object, "status", "observedGeneration")
	want, _, _ := unstructured.NestedInt64(p.Object, "status", "desiredRouteReflectors")
	have, _, _ := unstructured.NestedInt64(p.Object, "status", "routeReflectors")
	if g < p.GetGeneration() || want == 0 || want != have {
		return fmt.Errorf("policy status: generation %d observed %d, route reflectors %d of %d", p.GetGeneration(), g, have, want)
	}
	return nil
}

// quiet waits until the layout stays the same for d and returns it.
func (u *upgradeWorld) quiet(d time.Duration) *layout {
	u.t.Helper()
	var last *layout
	var since time.Time
	u.eventually("layout unchanged for "+d.String(), time.Minute, func() error {
		l, err := u.snapshot()
		if err != nil {
			return err
		}
		if last == nil || l.fingerprint() != last.fingerprint() {
			last, since = l, time.Now()
		}
		if time.Since(since) < d {
			return fmt.Errorf("changed %s ago", time.Since(since).Round(time.Millisecond))
		}
		return nil
	})
	return last
}

// traffic is the admissions during the upgrade: a label change on a client node every 150 ms
// (the mutating and validating node webhooks), a new node every 4th tick (joins at most, in turn
// in each zone).
type traffic struct {
	once     sync.Once
	done     chan struct{}
	finished chan struct{}
	labels   int
	joined   []string
	withRole int
	errs     []string
}

func (u *upgradeWorld) startTraffic(base *layout, joins int) *traffic {
	var clients []string
	for n, s := range base.nodes {
		if !s.rr {
			clients = append(clients, n)
		}
	}
	slices.Sort(clients)
	tr := &traffic{done: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(tr.finished)
		ctx := u.t.Context()
		for tick := 0; ; tick++ {
			select {
			case <-tr.done:
				return
			case <-time.After(150 * time.Millisecond):
			}
			patch := fmt.Sprintf(`{"metadata":{"labels":{"upgrade-test.example/tick":"%d"}}}`, tick)
			if _, err := u.admin.CoreV1().Nodes().Patch(ctx, clients[tick%len(clients)], types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				tr.errs = append(tr.errs, err.Error())
			}
			tr.labels++
			if tick%4 != 3 || len(tr.joined) >= joins {
				continue
			}
			name := fmt.Sprintf("late-%02d", len(tr.joined))
			withRole, err := u.join(name, zones[len(tr.joined)%3])
			if err != nil {
				tr.errs = append(tr.errs, err.Error())
				continue
			}
			tr.joined = append(tr.joined, name)
			if withRole {
				tr.withRole++
			}
		}
	}()
	return tr
}

func (tr *traffic) stop() *traffic {
	tr.once.Do(func() { close(tr.done) })
	<-tr.finished
	return tr
}

// apiserverAdmissions reads the API server's admission webhook counters: failed open by webhook
// (apiserver_admission_webhook_fail_open_count) and calls by webhook
// (apiserver_admission_webhook_request_total).
func apiserverAdmissions(t *testing.T, kube *kubernetes.Clientset) (failOpen, requests map[string]float64) {
	t.Helper()
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	require.NoError(t, err)
	failOpen, requests = map[string]float64{}, map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		var into map[string]float64
		switch {
		case strings.HasPrefix(line, "apiserver_admission_webhook_fail_open_count{"):
			into = failOpen
		case strings.HasPrefix(line, "apiserver_admission_webhook_request_total{"):
			into = requests
		default:
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, line)
		name := "?"
		if _, rest, ok := strings.Cut(line, `name="`); ok {
			name, _, _ = strings.Cut(rest, `"`)
		}
		into[name] += v
	}
	return failOpen, requests
}

func sum(m map[string]float64) float64 {
	s := 0.0
	for _, v := range m {
		s += v
	}
	return s
}

// service plays the chart's Service in front of the replicas: the API server calls it (the
// chart's webhook.url), and it sends each request round-robin to the replicas in its endpoints,
// as kube-proxy sends it to the ready pods.
type service struct {
	url            string
	mu             sync.Mutex
	eps            []*svcEndpoint
	next           int
	down           atomic.Bool // answer as a Service without endpoints
	noEndpoints    atomic.Int64
	upstreamErrors atomic.Int64
	served         sync.Map // replica name: *atomic.Int64
	reviewsMu      sync.Mutex
	reviews        []svcReview // what the replicas answered
}

// svcReview is one admission a replica answered.
type svcReview struct {
	path, operation, kind, name, user string
	allowed                           bool
}

// answered is every admission of a RouteReflectorPolicy the replicas answered.
func (s *service) answered(kind string) []svcReview {
	s.reviewsMu.Lock()
	defer s.reviewsMu.Unlock()
	var out []svcReview
	for _, r := range s.reviews {
		if r.kind == kind {
			out = append(out, r)
		}
	}
	return out
}

type svcEndpoint struct {
	name   string
	p      *testenv.Product
	client *http.Client
}

func startService(t *testing.T) (*service, []byte) {
	t.Helper()
	dir := t.TempDir()
	caPEM, err := testenv.WriteWebhookCert(dir)
	require.NoError(t, err)
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	require.NoError(t, err)
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	require.NoError(t, err)
	s := &service{url: "https://127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s, caPEM
}

// add puts a ready replica in the endpoints.
func (s *service) add(name string, p *testenv.Product) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.CAPEM)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eps = append(s.eps, &svcEndpoint{name: name, p: p, client: c})
	s.served.LoadOrStore(name, new(atomic.Int64))
}

// remove takes a replica out of the endpoints (a terminating pod's).
func (s *service) remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eps = slices.DeleteFunc(s.eps, func(e *svcEndpoint) bool { return e.name == name })
}

func (s *service) get(name string) *testenv.Product {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.eps {
		if e.name == name {
			return e.p
		}
	}
	return nil
}

func (s *service) servedCounts() map[string]int64 {
	out := map[string]int64{}
	s.served.Range(func(k, v any) bool { out[k.(string)] = v.(*atomic.Int64).Load(); return true })
	return out
}

func (s *service) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadGateway)
		return
	}
	s.mu.Lock()
	var ep *svcEndpoint
	if len(s.eps) > 0 && !s.down.Load() {
		s.next++
		ep = s.eps[s.next%len(s.eps)]
	}
	s.mu.Unlock()
	if ep == nil {
		if !s.down.Load() {
			s.noEndpoints.Add(1)
		}
		http.Error(rw, "no endpoints", http.StatusServiceUnavailable)
		return
	}
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, ep.p.WebhookURL()+r.URL.RequestURI(), bytes.NewReader(body))
	req.Header = r.Header.Clone()
	resp, err := ep.client.Do(req)
	if err != nil {
		s.upstreamErrors.Add(1)
		http.Error(rw, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	if v, ok := s.served.Load(ep.name); ok {
		v.(*atomic.Int64).Add(1)
	}
	answer, _ := io.ReadAll(resp.Body)
	var in, outReview admissionv1.AdmissionReview
	if json.Unmarshal(body, &in) == nil && in.Request != nil && json.Unmarshal(answer, &outReview) == nil && outReview.Response != nil {
		s.reviewsMu.Lock()
		s.reviews = append(s.reviews, svcReview{path: r.URL.Path, operation: string(in.Request.Operation), kind: in.Request.Kind.Kind,
			name: in.Request.Name, user: in.Request.UserInfo.Username, allowed: outReview.Response.Allowed})
		s.reviewsMu.Unlock()
	}
	for k, v := range resp.Header {
		rw.Header()[k] = v
	}
	rw.WriteHeader(resp.StatusCode)
	_, _ = rw.Write(answer)
}
