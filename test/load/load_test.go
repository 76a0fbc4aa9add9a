// Package load is the 5,000-node load test of issue 8: the real kube-apiserver, the product's
// built binary as a separate process (so that its RSS is its own), the product installed from its
// rendered chart (webhook configurations by URL and RBAC), kubelet heartbeats that must never reach a
// webhook, and relevant node changes at about 1,000 admissions per second over HTTPS.
//
// It is too slow for every CI run and only runs with -load: make load.
package load

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico/crds"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

var (
	runLoad    = flag.Bool("load", false, "run the 5,000-node load test (slow; make load)")
	nodeCount  = flag.Int("load-nodes", 5000, "nodes to create")
	admissions = flag.Int("load-admissions", 1000, "target webhook admissions per second in the relevant-change phase")
	loadFor    = flag.Duration("load-duration", 20*time.Second, "length of the relevant-change phase")
)

const (
	zones = 3
	// The policy prefers nodes labelled preferredKey, so toggling that label on a client is a
	// change every plan reads (it costs a plan, and no role change: current RRs rank first).
	preferredKey = "load.example.com/preferred"
	policyYAML   = "apiVersion: routereflector.io/v1alpha1\nkind: RouteReflectorPolicy\nmetadata: {name: default}\n" +
		"spec: {removalDelay: 30s, preferredNodeSelector: {matchLabels: {" + preferredKey + ": \"true\"}}}\n"
)

func TestLoad(t *testing.T) {
	if !*runLoad {
		t.Skip("load test: 5,000 nodes on a real kube-apiserver, too slow for every run; `make load` runs it (go test ./test/load/ -args -load)")
	}
	// Bounded: every phase below has its own deadline inside this one.
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()

	env := testenv.Start(t, testenv.WithChartRBAC(), testenv.WithAPIServerFlags("--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000"))
	env.CreateNamespace(t, testenv.ChartNamespace)
	admin := clientset(t, env.Config)
	kubeletCfg := env.ConfigFor(testenv.UserKubelet)
	kubeletCfg.UserAgent = loadFieldManager
	kubelet := clientset(t, kubeletCfg)
	calicoCRDs, err := crds.Dir()
	require.NoError(t, err)
	testenv.InstallCRDs(t, env.Config, filepath.Join(calicoCRDs, "crd.projectcalico.org_bgppeers.yaml"),
		filepath.Join(calicoCRDs, "crd.projectcalico.org_bgpconfigurations.yaml"), testenv.RepoPath(t, "policy/crd"))

	// The product as a separate process of the built binary.
	p := &product{env.StartProduct(t, true, "")}
	env.AwaitWebhooks(t, 30*time.Second)
	out, stderr, err := env.KubectlStdin(t, testenv.UserAdmin, policyYAML, "apply", "-f", "-")
	require.NoError(t, err, "apply policy\n%s%s", out, stderr)
	// The nodes join a cluster whose policy is in force, as after an install: the admission path
	// decides on the policy's first committed plan (before it, a joining node gets no role and
	// waits for the reconciler; the first run without this wait left the first 1,000 joiners so).
	applied := time.Now()
	testenv.Eventually(t, "the policy's first reconcile", time.Minute, 50*time.Millisecond, func() error {
		out, _, err := env.Kubectl(t, testenv.UserAdmin, "get", "rrp", "default", "-o", "jsonpath={.status.observedGeneration}")
		if err != nil || strings.TrimSpace(out) == "" {
			return fmt.Errorf("no status yet (%v)", err)
		}
		return nil
	})
	policyReady := time.Since(applied)
	rssIdle := p.rss(t)
	apiStart := scrapeAPIServer(ctx, t, admin)

	// 1. 5,000 nodes join: created, then Ready through nodes/status, from many goroutines.
	start := time.Now()
	names := make([]string, *nodeCount)
	for i := range names {
		names[i] = fmt.Sprintf("node-%05d", i)
	}
	parallel(ctx, t, 64, names, func(ctx context.Context, name string) error {
		i, _ := strconv.Atoi(strings.TrimPrefix(name, "node-"))
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			corev1.LabelTopologyZone: fmt.Sprintf("zone-%c", 'a'+i%zones), corev1.LabelHostname: name}}}
		if _, err := kubelet.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return err
		}
		now := metav1.Now().UTC().Format(time.RFC3339)
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`, now, now)
		_, err := kubelet.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		return err
	})
	joined := time.Since(start)

	// 2. Settled: route reflectors labelled, every other node in a peering set.
	var rrs int
	testenv.Eventually(t, "settled", 5*time.Minute, time.Second, func() error {
		list, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return err
		}
		rrs = 0
		missing, draining := 0, 0
		for i := range list.Items {
			n := &list.Items[i]
			if _, rr := n.Labels["calico-route-reflector"]; rr && n.Annotations[extender.AnnotationClusterID] != "" {
				rrs++
				if n.Annotations[extender.AnnotationDrainingSince] != "" {
					draining++
				}
			} else if n.Labels[extender.LabelPeeringSet] == "" {
				missing++
			}
		}
		desired := desiredRRs(ctx, admin)
		if len(list.Items) != *nodeCount || rrs < zones || missing > 0 || draining > 0 || rrs != desired {
			return fmt.Errorf("%d nodes, %d route reflectors (%d draining, %d desired), %d clients without a peering set",
				len(list.Items), rrs, draining, desired, missing)
		}
		return nil
	})
	settled := time.Since(start)
	// Quiet: no admission for two seconds (the reconciler's last writes pass the node webhooks).
	testenv.Eventually(t, "quiet", 2*time.Minute, 100*time.Millisecond, func() error {
		a := p.scrape(t).sum("calico_rr_autoscaler_webhook_requests_total", nil)
		time.Sleep(2 * time.Second)
		if b := p.scrape(t).sum("calico_rr_autoscaler_webhook_requests_total", nil); b != a {
			return fmt.Errorf("%v admissions in 2 s", b-a)
		}
		return nil
	})
	rssSettled := p.rss(t)
	admitted, roles, owners := roleOwners(ctx, t, admin)
	// Admissions the API server gave up on (timeout or error; failurePolicy Ignore lets the node
	// through without the product's patch): a cause of a role the reconciler must then give.
	apiJoined := scrapeAPIServer(ctx, t, admin)
	ours := func(l map[string]string) bool {
		return strings.HasSuffix(l["name"], ".routereflector.io")
	}
	failOpen := apiJoined.sum("apiserver_admission_webhook_fail_open_count", ours) - apiStart.sum("apiserver_admission_webhook_fail_open_count", ours)
	// Role changes of the join: every one should be a promotion. A drain is logged with the Events:
	// a zone whose nodes turned Ready first takes the others' share and gives it back when they
	// fill up (a rebalance), or, if the count ever exceeded the plan's, an overshoot.
	joinMetrics := p.scrape(t)
	change := func(kind string) func(map[string]string) bool {
		return func(l map[string]string) bool { return l["change"] == kind }
	}
	promoted := joinMetrics.sum("calico_rr_autoscaler_role_changes_total", change("Promoted"))
	drained := joinMetrics.sum("calico_rr_autoscaler_role_changes_total", change("Draining")) +
		joinMetrics.sum("calico_rr_autoscaler_role_changes_total", change("Demoted"))
	if drained > 0 {
		t.Logf("the join burst drained or demoted %v route reflectors (%v promoted, %d in the plan, %v admissions failed open); events:\n%s",
			drained, promoted, rrs, failOpen, testenv.NodeEvents(ctx, admin, "RouteReflector"))
	}

	// 3. Heartbeats: two rounds of kubelet status patches that change only lastHeartbeatTime.
	before := p.scrape(t)
	hbStart := time.Now()
	for round := range 2 {
		parallel(ctx, t, 64, names, func(ctx context.Context, name string) error {
			now := time.Now().Add(time.Duration(round+1) * time.Second).UTC().Format(time.RFC3339)
			patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","lastHeartbeatTime":%q}]}}`, now)
			_, err := kubelet.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
			return err
		})
	}
	hbTime := time.Since(hbStart)
	time.Sleep(time.Second)
	after := p.scrape(t)
	hbCalls := after.sum("calico_rr_autoscaler_webhook_requests_total", nil) - before.sum("calico_rr_autoscaler_webhook_requests_total", nil)
	if hbCalls != 0 {
		assert.Fail(t, fmt.Sprintf("%v webhook calls during %d heartbeats, want 0: %s", hbCalls, 2**nodeCount,
			after.diff(before, "calico_rr_autoscaler_webhook_requests_total")))
	}

	// 4. Relevant changes through the API server: the policy's preferred label toggled on nodes
	// (matched by both node webhooks' matchConditions, so two admissions per request), paced to the
	// target admission rate.
	apiBefore := scrapeAPIServer(ctx, t, admin)
	before = p.scrape(t)
	rate := float64(*admissions) / 2 // requests per second
	var sent, failed atomic.Int64
	var latMu sync.Mutex
	var lat []time.Duration
	loadCtx, loadCancel := context.WithTimeout(ctx, *loadFor)
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	work := make(chan int) // at most one request per worker in flight: no unbounded queue
	var wg sync.WaitGroup
	for range 128 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for i := range work {
				name := names[i%len(names)]
				patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"%t"}}}`, preferredKey, i/len(names)%2 == 0)
				t0 := time.Now()
				_, err := admin.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
				mine = append(mine, time.Since(t0))
				if err != nil {
					failed.Add(1)
				}
			}
			latMu.Lock()
			lat = append(lat, mine...)
			latMu.Unlock()
		}()
	}
	loadStart := time.Now()
	dropped := 0
feed:
	for i := 0; ; i++ {
		select {
		case <-loadCtx.Done():
			break feed
		case <-tick.C:
			select {
			case work <- i:
				sent.Add(1)
			default:
				dropped++ // the API server is behind: do not queue without bound
			}
		}
	}
	tick.Stop()
	close(work)
	wg.Wait()
	loadTime := time.Since(loadStart)
	loadCancel()
	time.Sleep(2 * time.Second) // coalesced reconciles of the last events
	after = p.scrape(t)
	apiAfter := scrapeAPIServer(ctx, t, admin)
	rssLoaded := p.rss(t)
	if f := failed.Load(); f > 0 {
		assert.Fail(t, fmt.Sprintf("%d of %d label patches failed", f, sent.Load()))
	}

	nodeHooks := func(l map[string]string) bool { return strings.HasSuffix(l["webhook"], "-v1-node") }
	calls := after.sum("calico_rr_autoscaler_webhook_requests_total", nodeHooks) - before.sum("calico_rr_autoscaler_webhook_requests_total", nodeHooks)
	h := after.histogram("calico_rr_autoscaler_webhook_duration_seconds", nodeHooks).minus(before.histogram("calico_rr_autoscaler_webhook_duration_seconds", nodeHooks))
	rec := after.histogram("calico_rr_autoscaler_reconcile_duration_seconds", nil).minus(before.histogram("calico_rr_autoscaler_reconcile_duration_seconds", nil))
	plan := after.histogram("calico_rr_autoscaler_plan_duration_seconds", nil).minus(before.histogram("calico_rr_autoscaler_plan_duration_seconds", nil))
	ourHooks := func(l map[string]string) bool {
		return strings.HasPrefix(l["name"], "mutate-node.") || strings.HasPrefix(l["name"], "validate-node.")
	}
	apiH := apiAfter.histogram("apiserver_admission_webhook_admission_duration_seconds", ourHooks).minus(apiBefore.histogram("apiserver_admission_webhook_admission_duration_seconds", ourHooks))
	slices.Sort(lat)
	pct := func(q float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(q*float64(len(lat))))]
	}
	p99 := h.quantile(0.99)

	// 4b. Labels no policy reads: admitted by the webhooks, but no plan.
	before = p.scrape(t)
	unrelated := names[:min(len(names), 2000)]
	parallel(ctx, t, 64, unrelated, func(ctx context.Context, name string) error {
		_, err := admin.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"load.example.com/unrelated":"1"}}}`), metav1.PatchOptions{})
		return err
	})
	time.Sleep(2 * time.Second) // a reconcile would have run by now (coalescing is 250 ms)
	after = p.scrape(t)
	unrelatedRec := after.histogram("calico_rr_autoscaler_reconcile_duration_seconds", nil).minus(before.histogram("calico_rr_autoscaler_reconcile_duration_seconds", nil))
	unrelatedCalls := after.sum("calico_rr_autoscaler_webhook_requests_total", nodeHooks) - before.sum("calico_rr_autoscaler_webhook_requests_total", nodeHooks)
	assert.Zerof(t, unrelatedRec.count, "%v reconciles after %d changes of a label no policy reads, want 0", unrelatedRec.count, len(unrelated))

	// 5. The admission path alone at the target rate, over HTTPS.
	d := directAdmissions(ctx, t, p, admin, float64(*admissions), *loadFor)
	assert.Falsef(t, d.failed > 0, "%d of %d direct admissions failed", d.failed, d.sent)
	if got := float64(d.sent) / d.elapsed.Seconds(); got < 0.95*float64(*admissions) {
		assert.Fail(t, fmt.Sprintf("direct admissions: %.0f/s offered, want %d/s", got, *admissions))
	}
	if p99 := d.product.quantile(0.99); p99 > 0.005 {
		assert.Fail(t, fmt.Sprintf("webhook latency p99 at %d admissions/s %.2f ms, goal under 5 ms", *admissions, p99*1e3))
	}
	if float64(admitted) < 0.95*float64(roles) {
		// Issue 24: the joining nodes get their roles from the admission response; the
		// reconciler repairs and rebalances.
		assert.Fail(t, fmt.Sprintf("%d of %d role labels set by admission (field managers %v), goal 95%%", admitted, roles, owners))
	}

	if rssSettled > 150<<20 {
		assert.Fail(t, fmt.Sprintf("RSS at %d nodes %d MiB, goal under 150 MiB", *nodeCount, rssSettled>>20))
	}
	load, _ := os.ReadFile("/proc/loadavg")

	var b strings.Builder
	row := func(k, v string, a ...any) { fmt.Fprintf(&b, "  %-52s %s\n", k, fmt.Sprintf(v, a...)) }
	b.WriteString("\nload test summary\n")
	row("nodes / zones / route reflectors", "%d / %d / %d", *nodeCount, zones, rrs)
	row("join (create + Ready), settled after", "%s, %s", joined.Round(time.Millisecond), settled.Round(time.Millisecond))
	row("role changes during the join: promoted / drained or demoted", "%v / %v", promoted, drained)
	row("policy applied to its first status (before the join)", "%v", policyReady.Round(time.Millisecond))
	row("role labels set by the admission of the join", "%.1f%% (%d of %d; field managers %v)", 100*float64(admitted)/float64(max(1, roles)), admitted, roles, owners)
	row("admissions failed open by the API server during the join", "%v", failOpen)
	row("heartbeat status patches / time", "%d / %s", 2**nodeCount, hbTime.Round(time.Millisecond))
	row("webhook calls caused by heartbeats", "%v", hbCalls)
	row("label patches sent / dropped (API server behind) / failed", "%d / %d / %d in %s", sent.Load(), dropped, failed.Load(), loadTime.Round(time.Millisecond))
	row("node webhook admissions (product counter), rate", "%v, %.0f/s", calls, calls/loadTime.Seconds())
	row("webhook latency (product histogram) p50 / p99", "%.3f ms / %.3f ms (n=%v)", h.quantile(0.5)*1e3, p99*1e3, h.count)
	row("webhook latency (API server, incl. TLS) <=5ms / p99", "%.1f%% / %.1f ms (coarse buckets)", 100*apiH.fractionLE(0.005), apiH.quantile(0.99)*1e3)
	row("label patch round trip (client) p50 / p99", "%s / %s", pct(0.5).Round(10*time.Microsecond), pct(0.99).Round(10*time.Microsecond))
	row("reconciles / node events, mean reconcile", "%v / %d, %.2f ms", rec.count, sent.Load(), rec.mean()*1e3)
	row("reconcile time per event", "%.3f ms", rec.sum*1e3/math.Max(1, float64(sent.Load())))
	row("plans, mean plan", "%v, %.2f ms", plan.count, plan.mean()*1e3)
	row("changes of a label no policy reads: admissions / reconciles", "%v / %v", unrelatedCalls, unrelatedRec.count)
	row("direct HTTPS admissions sent / dropped / failed", "%d / %d / %d in %s (%.0f/s)", d.sent, d.dropped, d.failed, d.elapsed.Round(time.Millisecond), float64(d.sent)/d.elapsed.Seconds())
	row("direct: webhook latency (product histogram) p50 / p99", "%.3f ms / %.3f ms (n=%v)", d.product.quantile(0.5)*1e3, d.product.quantile(0.99)*1e3, d.product.count)
	row("direct: HTTPS round trip (client) p50 / p99 / max", "%s / %s / %s", d.pct(0.5), d.pct(0.99), d.pct(1))
	row("direct: from scheduled send (client) p99", "%s", d.pctSched(0.99))
	row("product RSS idle / settled / after load / peak", "%d / %d / %d / %d MiB", rssIdle>>20, rssSettled>>20, rssLoaded>>20, p.hwm(t)>>20)
	row("go heap in use after load", "%.1f MiB", after.sum("go_memstats_heap_inuse_bytes", nil)/(1<<20))
	row("load average (1/5/15 min)", "%s", strings.Join(strings.Fields(string(load))[:3], " "))
	t.Log(b.String())
}

func clientset(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0 // no client-side limit
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return cs
}

// parallel runs f for every item with n workers and fails the test on the first error.
func parallel(ctx context.Context, t *testing.T, n int, items []string, f func(context.Context, string) error) {
	t.Helper()
	ch := make(chan string)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range ch {
				if err := f(ctx, it); err != nil {
					firstErr.CompareAndSwap(nil, fmt.Errorf("%s: %w", it, err))
				}
			}
		}()
	}
	for _, it := range items {
		if firstErr.Load() != nil || ctx.Err() != nil {
			break
		}
		ch <- it
	}
	close(ch)
	wg.Wait()
	err, _ := firstErr.Load().(error)
	require.NoError(t, err)
	require.NoError(t, ctx.Err())
}

// product is the serve process (testenv.Product), as the chart's Deployment runs it.
type product struct{ *testenv.Product }

// rss is the product's resident set (VmRSS), hwm its peak (VmHWM), in bytes.
func (p *product) rss(t *testing.T) int64 { return procStatus(t, p.Cmd.Process.Pid, "VmRSS:") }
func (p *product) hwm(t *testing.T) int64 { return procStatus(t, p.Cmd.Process.Pid, "VmHWM:") }

func procStatus(t *testing.T, pid int, key string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoErrorf(t, err, "reading the product's memory (%s)", key)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == key {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			require.NoErrorf(t, err, "reading the product's memory: %q", line)
			return kb << 10
		}
	}
	require.Fail(t, fmt.Sprintf("reading the product's memory: no %s in /proc/%d/status", key, pid))
	return 0
}

func (p *product) scrape(t *testing.T) metricSet {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", p.MetricsPort))
	require.NoError(t, err)
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(resp.Body)
	require.NoError(t, err)
	return parseMetrics(buf.Bytes())
}

func scrapeAPIServer(ctx context.Context, t *testing.T, admin kubernetes.Interface) metricSet {
	t.Helper()
	raw, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	require.NoError(t, err)
	return parseMetrics(raw)
}

// desiredRRs is the policy's status.desiredRouteReflectors, -1 when it cannot be read.
func desiredRRs(ctx context.Context, admin kubernetes.Interface) int {
	raw, err := admin.CoreV1().RESTClient().Get().AbsPath("/apis/routereflector.io/v1alpha1/routereflectorpolicies/default").DoRaw(ctx)
	if err != nil {
		return -1
	}
	var pol struct {
		Status struct {
			DesiredRouteReflectors int `json:"desiredRouteReflectors"`
		} `json:"status"`
	}
	if json.Unmarshal(raw, &pol) != nil {
		return -1
	}
	return pol.Status.DesiredRouteReflectors
}

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

type metricSet []sample

func parseMetrics(b []byte) metricSet {
	var out metricSet
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		s := sample{labels: map[string]string{}}
		valStr := line
		if i := strings.IndexByte(line, '{'); i >= 0 {
			s.name = line[:i]
			j := strings.LastIndexByte(line, '}')
			for _, kv := range splitLabels(line[i+1 : j]) {
				if k, v, ok := strings.Cut(kv, "="); ok {
					s.labels[k] = strings.Trim(v, `"`)
				}
			}
			valStr = strings.TrimSpace(line[j+1:])
		} else {
			f := strings.Fields(line)
			s.name, valStr = f[0], strings.Join(f[1:], " ")
		}
		fs := strings.Fields(valStr)
		if len(fs) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fs[0], 64)
		if err != nil {
			continue
		}
		s.value = v
		out = append(out, s)
	}
	return out
}

// splitLabels splits a="x",b="y" on the commas outside quotes.
func splitLabels(s string) []string {
	var out []string
	in, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			in = !in
		case ',':
			if !in {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

func (m metricSet) sum(name string, keep func(map[string]string) bool) float64 {
	total := 0.0
	for _, s := range m {
		if s.name == name && (keep == nil || keep(s.labels)) {
			total += s.value
		}
	}
	return total
}

// diff lists the samples of name that changed from o to m, with their labels.
func (m metricSet) diff(o metricSet, name string) string {
	var out []string
	for _, s := range m {
		if s.name != name {
			continue
		}
		was := 0.0
		for _, x := range o {
			if x.name == name && maps.Equal(x.labels, s.labels) {
				was = x.value
			}
		}
		if s.value != was {
			out = append(out, fmt.Sprintf("%v +%v", s.labels, s.value-was))
		}
	}
	return strings.Join(out, ", ")
}

// hist is a histogram summed over label sets: cumulative counts by upper bound.
type hist struct {
	le         map[float64]float64
	count, sum float64
}

func (m metricSet) histogram(name string, keep func(map[string]string) bool) hist {
	h := hist{le: map[float64]float64{}}
	for _, s := range m {
		if keep != nil && !keep(s.labels) {
			continue
		}
		switch s.name {
		case name + "_bucket":
			le, err := strconv.ParseFloat(s.labels["le"], 64)
			if err == nil {
				h.le[le] += s.value
			}
		case name + "_count":
			h.count += s.value
		case name + "_sum":
			h.sum += s.value
		}
	}
	return h
}

func (h hist) minus(o hist) hist {
	d := hist{le: map[float64]float64{}, count: h.count - o.count, sum: h.sum - o.sum}
	for k, v := range h.le {
		d.le[k] = v - o.le[k]
	}
	return d
}

func (h hist) mean() float64 {
	if h.count == 0 {
		return 0
	}
	return h.sum / h.count
}

func (h hist) fractionLE(bound float64) float64 {
	if h.count == 0 {
		return 0
	}
	return h.le[bound] / h.count
}

// quantile interpolates linearly inside the bucket, as Prometheus' histogram_quantile.
func (h hist) quantile(q float64) float64 {
	if h.count == 0 {
		return 0
	}
	bounds := make([]float64, 0, len(h.le))
	for b := range h.le {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	rank := q * h.count
	prevBound, prevCount := 0.0, 0.0
	for _, b := range bounds {
		c := h.le[b]
		if c >= rank {
			if math.IsInf(b, 1) {
				return prevBound
			}
			if c == prevCount {
				return b
			}
			return prevBound + (b-prevBound)*(rank-prevCount)/(c-prevCount)
		}
		prevBound, prevCount = b, c
	}
	return prevBound
}

// loadFieldManager is the field manager (user agent) of the requests that create and ready the nodes.
const loadFieldManager = "load-kubelet"

// roleOwners counts the nodes whose role label (the route-reflector label of a route reflector, the
// peering set of a client) was set by the admission of the request that created or readied the
// node. The API server records the request's managed fields before mutating admission runs, so a
// field the webhook's patch set has no manager at all (or the request's, "load-kubelet", had the
// request itself set it); the product's own patches (the reconciler) are recorded under its
// manager. owners counts the role labels per manager ("" for none), by role.
func roleOwners(ctx context.Context, t *testing.T, admin kubernetes.Interface) (admitted, roles int, owners map[string]int) {
	t.Helper()
	byRack := map[string]int{} // the role labels the product's own patches set, by rack
	var sample []string
	defer func() {
		if len(byRack) > 0 {
			t.Logf("role labels the reconciler set, by rack: %v; some: %v", byRack, sample)
		}
	}()
	list, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	owners = map[string]int{}
	for i := range list.Items {
		n := &list.Items[i]
		key := extender.LabelPeeringSet
		if _, rr := n.Labels["calico-route-reflector"]; rr {
			key = "calico-route-reflector"
		}
		if _, ok := n.Labels[key]; !ok {
			continue
		}
		roles++
		owner := ""
		for _, mf := range n.ManagedFields {
			if mf.FieldsV1 != nil && strings.Contains(string(mf.FieldsV1.Raw), fmt.Sprintf("%q", "f:"+key)) {
				owner = mf.Manager
			}
		}
		role := "client"
		if key != extender.LabelPeeringSet {
			role = "rr"
		}
		owners[role+":"+owner]++
		if owner == loadFieldManager || owner == "" {
			admitted++
		} else {
			byRack[n.Annotations[extender.AnnotationRack]]++
			if len(sample) < 40 {
				sample = append(sample, n.Name+"="+n.Labels[extender.LabelPeeringSet])
			}
		}
	}
	return admitted, roles, owners
}
