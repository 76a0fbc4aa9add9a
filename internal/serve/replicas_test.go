package serve_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// serviceProxy plays the Service in front of the replicas: it sends each request round-robin to
// the replicas that report ready.
type serviceProxy struct {
	ports    []int
	replicas func() []*replica
	next     atomic.Uint64
	client   *http.Client
	srv      *http.Server
	served   []atomic.Int64
}

func startProxy(t *testing.T, w *world, ports []int, replicas func() []*replica) (*serviceProxy, int) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(w.caPEM)
	cert, err := tls.LoadX509KeyPair(filepath.Join(w.certDir, "tls.crt"), filepath.Join(w.certDir, "tls.key"))
	require.NoError(t, err)
	p := &serviceProxy{ports: ports, replicas: replicas, served: make([]atomic.Int64, len(ports)),
		client: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: 64}}}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	require.NoError(t, err)
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = p.srv.Serve(l) }()
	t.Cleanup(func() { _ = p.srv.Close() })
	return p, l.Addr().(*net.TCPAddr).Port
}

func (p *serviceProxy) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadGateway)
		return
	}
	reps := p.replicas()
	var ready []int
	for i, rep := range reps {
		if rep != nil && !rep.stopped.Load() && rep.srv.Synced() {
			ready = append(ready, i)
		}
	}
	if len(ready) == 0 {
		http.Error(rw, "no ready replica", http.StatusServiceUnavailable)
		return
	}
	i := ready[p.next.Add(1)%uint64(len(ready))]
	url := "https://127.0.0.1:" + strconv.Itoa(p.ports[i]) + r.URL.RequestURI()
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, url, bytes.NewReader(body))
	req.Header = r.Header.Clone()
	resp, err := p.client.Do(req)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	p.served[i].Add(1)
	for k, v := range resp.Header {
		rw.Header()[k] = v
	}
	rw.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(rw, resp.Body)
}

// TestTwoReplicasBurst: two replicas behind a round-robin Service, one leader; 200 nodes join
// with 20 requests in flight, Ready arriving through nodes/status. At every sampled moment no two
// route reflectors share a cluster ID (one per route reflector) and the active ones never exceed
// the plan's count; the leader is killed in the middle of the burst, the other takes over, and
// the cluster settles on the plan with no route reflector demoted on the way.
func TestTwoReplicasBurst(t *testing.T) {
	w := newEnv(t)
	ports := []int{testenv.FreePort(t), testenv.FreePort(t)}
	var mu sync.Mutex
	reps := make([]*replica, 2)
	proxy, port := startProxy(t, w, ports, func() []*replica { mu.Lock(); defer mu.Unlock(); return append([]*replica(nil), reps...) })
	w.port = port
	w.install(port)
	first, second := w.start(ports[0], true), w.start(ports[1], false)
	mu.Lock()
	reps[0], reps[1] = first, second
	mu.Unlock()
	w.awaitWebhooks()
	const policy = `apiVersion: routereflector.io/v1alpha1
kind: RouteReflectorPolicy
metadata: {name: default}
spec:
  scaling: {ratio: "0.03"}
  topology: {clusterIDs: PerRouteReflector}
  removalDelay: 2s
`
	_, stderr, err := w.env.KubectlStdin(t, testenv.UserAdmin, policy, "apply", "-f", "-")
	require.NoError(t, err, "apply policy %s", stderr)

	const nodes, inFlight = 200, 20
	var violations []string
	maxActive := 0
	stopSampling := testenv.Every(100*time.Millisecond, func() {
		s := w.snapshot()
		ids := map[string]string{}
		active := 0
		for name, id := range s.rrs {
			if o, dup := ids[id]; dup {
				violations = append(violations, fmt.Sprintf("%s: %s and %s share cluster ID %s", time.Now().Format("15:04:05.000"), o, name, id))
			}
			ids[id] = name
			if s.nodes[name].Annotations[extender.AnnotationDrainingSince] == "" {
				active++
			}
		}
		maxActive = max(maxActive, active)
	})

	jobs := make(chan int)
	var joiners sync.WaitGroup
	for range inFlight {
		joiners.Add(1)
		go func() {
			defer joiners.Done()
			for i := range jobs {
				w.join(fmt.Sprintf("node-%03d", i), fmt.Sprintf("zone-%c", 'a'+i%3), nil)
			}
		}()
	}
	start := time.Now()
	var killedAt time.Time
	for i := range nodes {
		if i == nodes/2 {
			// Kill the leader in the middle of the burst.
			mu.Lock()
			victim := reps[0]
			mu.Unlock()
			killedAt = time.Now()
			victim.stop()
			t.Logf("leader stopped after %d joins (%s)", i, time.Since(start).Round(time.Millisecond))
		}
		jobs <- i
	}
	close(jobs)
	joiners.Wait()
	t.Logf("%d nodes joined in %s", nodes, time.Since(start).Round(time.Millisecond))
	if !reps[1].srv.Ledger.Leader() {
		w.eventually("replica 2 takes over", 20*time.Second, func() error {
			if !reps[1].srv.Ledger.Leader() {
				return fmt.Errorf("not the leader yet")
			}
			return nil
		})
	}
	// ratio 0.03 of 200 healthy nodes: 6 route reflectors.
	w.eventually("settled on the plan", 60*time.Second, func() error {
		s := w.snapshot()
		out, err := w.policyPath("default", "{.status.desiredRouteReflectors}/{.status.routeReflectors}/{.status.conditions[?(@.type==\"Ready\")].status}")
		if err != nil || out != "6/6/True" {
			conds, _ := w.policyPath("default", "{.status.conditions}")
			return fmt.Errorf("status %q %v; conditions %s; nodes with a role: %s", out, err, conds, s.roles())
		}
		return s.settled(6)
	})
	stopSampling()
	// No role moves because of the order in which nodes turn Ready: a zone whose nodes are still
	// on their way keeps its share (awaited nodes), so no route reflector is promoted early in
	// one zone and demoted when the others fill up.
	drains, _, _ := w.kubectl(testenv.UserAdmin, "get", "events", "-A", "-o",
		`jsonpath={range .items[?(@.reason=="RouteReflectorDraining")]}{.involvedObject.name}: {.message}{"\n"}{end}`)
	if strings.TrimSpace(drains) != "" {
		require.Fail(t, fmt.Sprintf("route reflectors drained during the burst:\n%s\nleader stopped at %s; role events:\n%s\nwho set the route reflector label:\n%s",
			drains, killedAt.Format("15:04:05.000"), testenv.NodeEvents(t.Context(), w.admin, "RouteReflector"), labelWriters(t, w)))
	}
	if len(violations) > 0 {
		require.Fail(t, fmt.Sprintf("cluster ID collisions: %v\nleader stopped at %s; role events:\n%s\nwho set the route reflector label:\n%s",
			violations[:min(5, len(violations))], killedAt.Format("15:04:05.000"), testenv.NodeEvents(t.Context(), w.admin, "RouteReflector"), labelWriters(t, w)))
	}
	require.Falsef(t, maxActive > 6, "%d active route reflectors at one time, the plan wants 6", maxActive)
	t.Logf("admissions served: replica 1 %d, replica 2 %d; max active route reflectors %d", proxy.served[0].Load(), proxy.served[1].Load(), maxActive)
	require.NotZero(t, proxy.served[1].Load(), "the second replica served no admission")
	for _, n := range w.snapshot().nodes {
		require.NotEmptyf(t, n.Labels[corev1.LabelTopologyZone], "node %s lost its zone", n.Name)
	}
}

// labelWriters lists, per node carrying the route reflector label, the field manager that set it
// and when (managedFields): the joining client's manager for a webhook admission, the product's
// for a reconciler patch.
func labelWriters(t *testing.T, w *world) string {
	list, err := w.admin.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, n := range list.Items {
		if _, ok := n.Labels["calico-route-reflector"]; !ok {
			continue
		}
		for _, mf := range n.ManagedFields {
			if mf.FieldsV1 != nil && strings.Contains(string(mf.FieldsV1.Raw), `"f:calico-route-reflector"`) {
				out = append(out, fmt.Sprintf("%s: %s %s/%s at %s", n.Name, mf.Manager, mf.Operation, mf.Subresource, mf.Time.Format("15:04:05")))
			}
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}
