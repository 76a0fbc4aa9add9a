package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv/nodetest"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

func TestServeRejectsMalformedReviews(t *testing.T) {
	f := newFixture(t, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, threeZones())
	h := Serve("validate-v1-node", f.nodeVal)
	valid := nodeReq(t, alice, mkNode("node-a2", "zone-a"), mkNode("node-a2", "zone-a"))
	badObject := nodeReq(t, alice, mkNode("node-a2", "zone-a"), mkNode("node-a2", "zone-a"))
	badObject.Object = runtime.RawExtension{Raw: []byte(`"not a node"`)}
	noUID := nodeReq(t, alice, mkNode("node-a2", "zone-a"), mkNode("node-a2", "zone-a"))
	noUID.UID = ""
	tests := []struct {
		name        string
		method, ct  string
		body        []byte
		code        int
		wantMessage string
	}{
		{"valid", http.MethodPost, "application/json", reviewBody(t, valid), 200, ""},
		{"GET", http.MethodGet, "", nil, 405, "method GET not allowed: an AdmissionReview is POSTed"},
		{"content type", http.MethodPost, "text/plain", []byte("{}"), 415, `content type "text/plain" is not application/json`},
		{"empty", http.MethodPost, "application/json", nil, 400, "malformed AdmissionReview: empty body"},
		{"truncated", http.MethodPost, "application/json", []byte(`{"apiVersion":`), 400, "malformed AdmissionReview: unexpected end of JSON input"},
		{"not an object", http.MethodPost, "application/json", []byte(`[1,2]`), 400, "malformed AdmissionReview: json: cannot unmarshal array"},
		{"wrong kind", http.MethodPost, "application/json", []byte(`{"apiVersion":"v1","kind":"Pod"}`), 400,
			`malformed AdmissionReview: apiVersion "v1" kind "Pod", want admission.k8s.io/v1 AdmissionReview`},
		{"v1beta1", http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}`), 400,
			`malformed AdmissionReview: apiVersion "admission.k8s.io/v1beta1" kind "AdmissionReview", want admission.k8s.io/v1 AdmissionReview`},
		{"no request", http.MethodPost, "application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), 400, "malformed AdmissionReview: no request"},
		{"no uid", http.MethodPost, "application/json", reviewBody(t, noUID), 400, "malformed AdmissionReview: request.uid is empty"},
		{"object is not a node", http.MethodPost, "application/json", reviewBody(t, badObject), 400,
			"malformed AdmissionReview: request.object is not a Node: json: cannot unmarshal string into Go value of type Node"},
		{"too large", http.MethodPost, "application/json", bytes.Repeat([]byte(" "), MaxBodyBytes+1), 413, "AdmissionReview larger than 7340032 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, "/validate-v1-node", bytes.NewReader(tc.body))
			if tc.ct != "" {
				r.Header.Set("Content-Type", tc.ct)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			require.Equal(t, tc.code, w.Code, "HTTP status (body %s)", w.Body)
			if tc.code != 200 {
				got := strings.TrimSpace(w.Body.String())
				require.Truef(t, strings.HasPrefix(got, tc.wantMessage), "message %q, want prefix %q", got, tc.wantMessage)
				return
			}
			out := &admissionv1.AdmissionReview{}
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), out), "response %s", w.Body)
			require.NotNil(t, out.Response, "response %s", w.Body)
			assert.Equal(t, valid.UID, out.Response.UID, "response %s", w.Body)
			assert.Equal(t, "AdmissionReview", out.Kind, "response %s", w.Body)
		})
	}
}

func TestServeRecoversPanics(t *testing.T) {
	h := Serve("x", HandlerFunc(func(context.Context, *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
		panic("boom")
	}))
	code, _, msg := serveReview(t, h, reviewBody(t, nodeReq(t, alice, mkNode("n", "z"), nil)))
	assert.Equal(t, 500, code, "HTTP status (message %q)", msg)
	assert.Contains(t, msg, "internal error: boom")
}

func TestServeAnswersWithTheRequestUID(t *testing.T) {
	f := newFixture(t, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, threeZones())
	old := mkNode("node-a1", "zone-a", rr("224.0.0.1"))
	n := old.DeepCopy()
	delete(n.Labels, "calico-route-reflector")
	req := nodeReq(t, alice, n, old)
	req.UID = "abc-123"
	code, out, body := serveReview(t, Serve("validate-v1-node", f.nodeVal), reviewBody(t, req))
	require.Equal(t, 200, code, "HTTP status (body %s)", body)
	require.NotNil(t, out.Response)
	assert.Equal(t, "abc-123", string(out.Response.UID), "%+v", out.Response)
	assert.False(t, out.Response.Allowed, "%+v", out.Response)
	require.NotNil(t, out.Response.Result, "%+v", out.Response)
	assert.Equal(t, int32(422), out.Response.Result.Code, "%+v", out.Response)
}

// TestServeReusesBuffersSafely: reviews of different sizes served at once each see their own
// object and old object (Serve reuses the buffers of a finished review for the next; a buffer
// handed on while its request is still read would mix two nodes).
func TestServeReusesBuffersSafely(t *testing.T) {
	h := Serve("echo", HandlerFunc(func(_ context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
		n, err := decodeNode(req.Object.Raw, "request.object")
		if err != nil {
			return nil, err
		}
		old, err := decodeNode(req.OldObject.Raw, "request.oldObject")
		if err != nil {
			return nil, err
		}
		goruntime.Gosched() // let another review take the pool's buffers meanwhile, if it could
		return &admissionv1.AdmissionResponse{Allowed: true, Warnings: []string{n.Name, old.Name, string(req.Object.Raw), string(req.OldObject.Raw)}}, nil
	}))
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				n := mkNode(fmt.Sprintf("node-%d-%d", w, i), "zone-a")
				for range (w*7 + i) % 23 { // sizes differ, so a reused buffer is sometimes longer
					n.Labels[fmt.Sprintf("pad-%d", len(n.Labels))] = strings.Repeat("x", 40)
				}
				old := n.DeepCopy()
				old.Name += "-old"
				req := nodeReq(t, alice, n, old)
				code, out, msg := serveReview(t, h, reviewBody(t, req))
				if !assert.Equal(t, 200, code, msg) {
					return
				}
				assert.Equal(t, []string{n.Name, old.Name, string(req.Object.Raw), string(req.OldObject.Raw)}, out.Response.Warnings)
			}
		}()
	}
	wg.Wait()
}

// FuzzServe: whatever the body, every webhook answers 200 with an AdmissionReview for the same UID,
// or 400/413 with a message; never a panic, never a 500.
func FuzzServe(f *testing.F) {
	fx := newFixture(f, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, threeZones())
	fx.ledger.SetLeader(true)
	fx.commit(f)
	handlers := []http.Handler{
		Serve("mutate-v1-node", fx.mutator),
		Serve("validate-v1-node", fx.nodeVal),
		Serve("validate-routereflectorpolicy", fx.polVal),
		Serve("validate-bgppeer", fx.peerVal),
	}
	old := mkNode("node-a1", "zone-a", rr("224.0.0.1"))
	n := old.DeepCopy()
	delete(n.Labels, "calico-route-reflector")
	f.Add(reviewBody(f, nodeReq(f, alice, n, old)))
	f.Add(reviewBody(f, nodeReq(f, kubelet, mkNode("node-z", "zone-c"), nil)))
	f.Add(reviewBody(f, nodeReq(f, alice, nil, old)))
	f.Add(reviewBody(f, request(f, admissionv1.Create, policyKind, "", alice, mkPolicy("p", nil), nil)))
	f.Add(reviewBody(f, request(f, admissionv1.Update, peerKind, "", alice, peer("x", true), peer("x", true))))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"UPDATE","object":{"metadata":{"labels":null}},"oldObject":{}}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"DELETE","oldObject":7}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte("\x00\xff"))
	f.Fuzz(func(t *testing.T, body []byte) {
		var in struct {
			Request *struct {
				UID string `json:"uid"`
			} `json:"request"`
		}
		_ = json.Unmarshal(body, &in)
		for _, h := range handlers {
			r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			switch w.Code {
			case 200:
				out := &admissionv1.AdmissionReview{}
				require.NoError(t, json.Unmarshal(w.Body.Bytes(), out), "200 with %q", w.Body)
				require.NotNil(t, out.Response, "200 with %q", w.Body)
				require.NotNil(t, in.Request, "response UID %q for request %s", out.Response.UID, body)
				require.Equal(t, in.Request.UID, string(out.Response.UID), "response UID for request %s", body)
			case 400, 413:
				require.Contains(t, w.Body.String(), "AdmissionReview", "HTTP %d without a clear message", w.Code)
			default:
				require.Failf(t, "unexpected HTTP status", "HTTP %d: %s", w.Code, w.Body)
			}
		}
	})
}

func TestGate(t *testing.T) {
	ready := false
	h := Serve("x", Gate(HandlerFunc(func(context.Context, *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
		return Allowed(), nil
	}), func() bool { return ready }))
	body := reviewBody(t, nodeReq(t, alice, mkNode("n", "z"), nil))
	code, _, msg := serveReview(t, h, body)
	require.Equal(t, 503, code, "HTTP status (message %q)", msg)
	require.Contains(t, msg, "not synced")
	ready = true
	code, out, msg := serveReview(t, h, body)
	require.Equal(t, 200, code, "HTTP status (message %q)", msg)
	require.NotNil(t, out.Response)
	require.True(t, out.Response.Allowed, "%+v", out.Response)
}

func TestReadBody(t *testing.T) {
	body := []byte(`{"apiVersion":"admission.k8s.io/v1"}`)
	tests := []struct {
		name   string
		length int64 // the request's ContentLength (-1: unknown)
		body   []byte
		want   []byte
	}{
		{"length stated", int64(len(body)), body, body},
		{"length unknown", -1, body, body},
		{"shorter than stated", int64(len(body)) + 10, body, body},
		{"empty although a length is stated", int64(len(body)), nil, []byte{}},
		{"longer than stated", 5, body, body},
		{"stated over the limit", MaxBodyBytes + 1, body, body},
		{"over the limit: one byte more is read", -1, bytes.Repeat([]byte(" "), MaxBodyBytes+10), bytes.Repeat([]byte(" "), MaxBodyBytes+1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, buf := range [][]byte{nil, []byte("a previous, longer body that the read must not keep any of")} {
				r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(tc.body))
				r.ContentLength = tc.length
				got, err := readBody(r, buf)
				require.NoError(t, err)
				require.Equal(t, string(tc.want), string(got))
			}
		})
	}
}

// FuzzDecodeReviewBody: fastJSON's RawExtension decoder (one copy, into the pooled objects buffer
// for a review) decodes what encoding/json decodes, the object and old object byte for byte, and
// a buffer reused from an earlier review changes nothing.
func FuzzDecodeReviewBody(f *testing.F) {
	old := mkNode("node-a1", "zone-a", rr("224.0.0.1"))
	f.Add(reviewBody(f, nodeReq(f, alice, old.DeepCopy(), old)))
	f.Add(reviewBody(f, nodeReq(f, alice, nil, old)))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","object":null,"oldObject":{"a":[1,{"b":"c"}]}}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","object":"x","oldObject":7}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","object":{}}} {}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var want admissionv1.AdmissionReview
		wantErr := json.Unmarshal(body, &want)
		var got admissionv1.AdmissionReview
		if err := fastJSON.Unmarshal(body, &got); err == nil && wantErr == nil && want.Request != nil {
			require.NotNil(t, got.Request)
			require.Equal(t, want.Request.Object.Raw, got.Request.Object.Raw, "object of %s", body)
			require.Equal(t, want.Request.OldObject.Raw, got.Request.OldObject.Raw, "oldObject of %s", body)
		}
		for _, objects := range [][]byte{nil, []byte("objects of an earlier review")} {
			var pooled admissionv1.AdmissionReview
			err := unmarshal(body, &objects, &pooled)
			require.Equal(t, wantErr == nil, err == nil, "error %v, encoding/json's %v, of %s", err, wantErr, body)
			if err != nil || want.Request == nil {
				continue
			}
			require.NotNil(t, pooled.Request)
			require.Equal(t, want.Request.Object.Raw, pooled.Request.Object.Raw, "object of %s", body)
			require.Equal(t, want.Request.OldObject.Raw, pooled.Request.OldObject.Raw, "oldObject of %s", body)
		}
	})
}

// FuzzDecodeNode: whatever encoding/json decodes as a Node, decodeNode decodes to the same fields
// the webhooks read: the annotations the cache keeps (an empty map, not nil, when the node has
// annotations but none of those: the patch must not create the map anew), the slim conditions,
// the times as metav1.Time parses them.
func FuzzDecodeNode(f *testing.F) {
	n := nodetest.DefaultKubeletFleet().Kubelet(7, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	n.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}
	n.Annotations[extender.AnnotationClusterID] = "244.0.0.1"
	del := metav1.NewTime(time.Date(2026, 11, 2, 3, 4, 5, 0, time.UTC))
	n.DeletionTimestamp = &del
	f.Add(mustMarshal(f, n))
	f.Add(mustMarshal(f, mkNode("node-a1", "zone-a", rr("224.0.0.1"), notReady)))
	f.Add([]byte(`{"metadata":{"name":"a","annotations":{"x":{"y":[1]},"projectcalico.org/IPv4Address":"10.0.0.1/24"}}}`))
	f.Add([]byte(`{"metadata":{"annotations":{"x":"y"},"labels":null,"creationTimestamp":null},"status":{"conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-01-02T03:04:05Z"},{"type":"DiskPressure","status":"True"}]}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var full corev1.Node
		// Only what an API server can send: its encoder writes valid UTF-8 (invalid bytes in a
		// string are kept by jsoniter and replaced with U+FFFD by encoding/json).
		if !utf8.Valid(raw) || json.Unmarshal(raw, &full) != nil {
			return
		}
		got, err := decodeNode(raw, "request.object")
		require.NoError(t, err, "%s", raw)
		want := &extender.Node{}
		want.Name, want.UID, want.ResourceVersion, want.Labels = full.Name, full.UID, full.ResourceVersion, full.Labels
		if full.Annotations != nil {
			want.Annotations = map[string]string{}
			for k, v := range full.Annotations {
				if state.KeptAnnotation(k) {
					want.Annotations[k] = v
				}
			}
		}
		want.CreationTimestamp, want.DeletionTimestamp = full.CreationTimestamp, full.DeletionTimestamp
		want.Spec.Unschedulable, want.Spec.Taints = full.Spec.Unschedulable, full.Spec.Taints
		want.Status.Conditions = extender.SlimConditions(full.Status.Conditions)
		require.Equal(t, want, got, "%s", raw)
	})
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
