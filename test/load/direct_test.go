package load

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/serve"
)

// directResult is what the direct admission phase measured.
type directResult struct {
	sent, dropped, failed int
	elapsed               time.Duration
	product               hist // the product's own webhook histogram, node webhooks
	// gcCycles and reconciles ran in the product during the phase (its tail is the collector's
	// at 65,000 nodes: BENCHMARKS.md).
	gcCycles, reconciles float64
	rtt, sched           []time.Duration // client round trips from the send, from the scheduled send
}

func (d directResult) pct(q float64) time.Duration      { return quantile(d.rtt, q) }
func (d directResult) pctSched(q float64) time.Duration { return quantile(d.sched, q) }

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))].Round(10 * time.Microsecond)
}

// directAdmissions plays the API server: on these two cores the real one tops out well below
// 1,000 admissions per second once it also stores every change, so this sends the AdmissionReviews
// it would send for the preferred-label toggle (the mutating node webhook, then the validating
// one, with the node from the cluster as the old object) straight to the product over HTTPS,
// open-loop at rate per second for dur: request i is due at start+i/rate whether or not earlier
// ones have been answered, and a request that finds every sender busy is dropped and counted.
// measuring is called as the measured sends begin (after the warm-up).
func directAdmissions(ctx context.Context, t *testing.T, p *product, admin kubernetes.Interface, rate float64, dur time.Duration, measuring func()) directResult {
	t.Helper()
	// The first 5,000 nodes (a page from etcd): the answer's cost depends on the node object and
	// the product's cache, not on which node; 65,000 kubelet nodes encoded twice would take
	// gigabytes in this process.
	list, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 5000})
	require.NoError(t, err)
	// Old and new objects, encoded once: the generator must stay cheap next to the product.
	type pair struct {
		name     string
		old, cur []byte
	}
	pairs := make([]pair, len(list.Items))
	for i := range list.Items {
		n := &list.Items[i]
		cur := n.DeepCopy()
		if cur.Labels == nil {
			cur.Labels = map[string]string{}
		}
		cur.Labels[preferredKey] = fmt.Sprint(n.Labels[preferredKey] != "true")
		pairs[i] = pair{name: n.Name, old: mustJSON(t, n), cur: mustJSON(t, cur)}
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.CAPEM)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true, // as the API server's webhook client
		MaxIdleConnsPerHost: 64,
	}}
	defer hc.CloseIdleConnections()
	base := fmt.Sprintf("https://127.0.0.1:%d", p.WebhookPort)
	send := func(i int) error {
		pr := pairs[(i/2)%len(pairs)]
		path := serve.PathMutateNode
		if i%2 == 1 {
			path = serve.PathValidateNode
		}
		uid := types.UID(fmt.Sprintf("load-%08d", i))
		review := admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{
				UID:       uid,
				Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Node"},
				Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "nodes"},
				Name:      pr.name,
				Operation: admissionv1.Update,
				UserInfo:  authenticationv1.UserInfo{Username: "kubernetes-admin", Groups: []string{"system:masters", "system:authenticated"}},
				Object:    runtime.RawExtension{Raw: pr.cur},
				OldObject: runtime.RawExtension{Raw: pr.old},
			},
		}
		body, err := json.Marshal(&review)
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(raw, &out); err != nil || out.Response == nil {
			return fmt.Errorf("%s: HTTP %d, not an AdmissionReview: %.200s", path, resp.StatusCode, raw)
		}
		if out.Response.UID != uid || !out.Response.Allowed {
			return fmt.Errorf("%s: uid %q allowed %v: %v", path, out.Response.UID, out.Response.Allowed, out.Response.Result)
		}
		return nil
	}
	// Warm the connections and the product's code paths, outside the measurement.
	for i := range 200 {
		require.NoErrorf(t, send(i), "direct admission warm-up")
	}

	before := p.scrape(t)
	measuring()
	type job struct {
		i   int
		due time.Time
	}
	jobs := make(chan job, 64)
	var mu sync.Mutex
	var d directResult
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var rtt, sched []time.Duration
			failed := 0
			var firstErr error
			for j := range jobs {
				t0 := time.Now()
				if err := send(j.i); err != nil {
					failed++
					if firstErr == nil {
						firstErr = err
					}
				}
				end := time.Now()
				rtt, sched = append(rtt, end.Sub(t0)), append(sched, end.Sub(j.due))
			}
			mu.Lock()
			d.rtt, d.sched, d.failed = append(d.rtt, rtt...), append(d.sched, sched...), d.failed+failed
			mu.Unlock()
			if firstErr != nil {
				t.Logf("direct admission: %v", firstErr)
			}
		}()
	}
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	total := int(dur / interval)
	for i := range total {
		due := start.Add(time.Duration(i) * interval)
		if w := time.Until(due); w > 0 {
			time.Sleep(w)
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case jobs <- job{i: 200 + i, due: due}:
			d.sent++
		default:
			d.dropped++
		}
	}
	close(jobs)
	wg.Wait()
	d.elapsed = time.Since(start)
	after := p.scrape(t)
	nodeHooks := func(l map[string]string) bool { return strings.HasSuffix(l["webhook"], "-v1-node") }
	d.product = after.histogram("calico_rr_autoscaler_webhook_duration_seconds", nodeHooks).minus(before.histogram("calico_rr_autoscaler_webhook_duration_seconds", nodeHooks))
	d.gcCycles = after.sum("go_gc_duration_seconds_count", nil) - before.sum("go_gc_duration_seconds_count", nil)
	d.reconciles = after.histogram("calico_rr_autoscaler_reconcile_duration_seconds", nil).minus(before.histogram("calico_rr_autoscaler_reconcile_duration_seconds", nil)).count
	slices.Sort(d.rtt)
	slices.Sort(d.sched)
	return d
}

func mustJSON(t *testing.T, n *corev1.Node) []byte {
	t.Helper()
	b, err := json.Marshal(n)
	require.NoError(t, err)
	return b
}
