package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"

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
			if w.Code != tc.code {
				t.Fatalf("HTTP %d (%s), want %d", w.Code, w.Body, tc.code)
			}
			if tc.code != 200 {
				if got := strings.TrimSpace(w.Body.String()); !strings.HasPrefix(got, tc.wantMessage) {
					t.Fatalf("message %q, want prefix %q", got, tc.wantMessage)
				}
				return
			}
			out := &admissionv1.AdmissionReview{}
			if err := json.Unmarshal(w.Body.Bytes(), out); err != nil || out.Response == nil || out.Response.UID != valid.UID || out.Kind != "AdmissionReview" {
				t.Fatalf("response %s: %v", w.Body, err)
			}
		})
	}
}

func TestServeRecoversPanics(t *testing.T) {
	h := Serve("x", HandlerFunc(func(context.Context, *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
		panic("boom")
	}))
	code, _, msg := serveReview(t, h, reviewBody(t, nodeReq(t, alice, mkNode("n", "z"), nil)))
	if code != 500 || !strings.Contains(msg, "internal error: boom") {
		t.Fatalf("HTTP %d %q", code, msg)
	}
}

func TestServeAnswersWithTheRequestUID(t *testing.T) {
	f := newFixture(t, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, threeZones())
	old := mkNode("node-a1", "zone-a", rr("224.0.0.1"))
	n := old.DeepCopy()
	delete(n.Labels, "calico-route-reflector")
	req := nodeReq(t, alice, n, old)
	req.UID = "abc-123"
	code, out, _ := serveReview(t, Serve("validate-v1-node", f.nodeVal), reviewBody(t, req))
	if code != 200 || out.Response.UID != "abc-123" || out.Response.Allowed || out.Response.Result.Code != 422 {
		t.Fatalf("HTTP %d %+v", code, out.Response)
	}
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
				if err := json.Unmarshal(w.Body.Bytes(), out); err != nil || out.Response == nil {
					t.Fatalf("200 with %q: %v", w.Body, err)
				}
				if in.Request == nil || string(out.Response.UID) != in.Request.UID {
					t.Fatalf("response UID %q for request %s", out.Response.UID, body)
				}
			case 400, 413:
				if !strings.Contains(w.Body.String(), "AdmissionReview") {
					t.Fatalf("HTTP %d without a clear message: %q", w.Code, w.Body)
				}
			default:
				t.Fatalf("HTTP %d: %s", w.Code, w.Body)
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
	if code, _, msg := serveReview(t, h, body); code != 503 || !strings.Contains(msg, "not synced") {
		t.Fatalf("HTTP %d %q", code, msg)
	}
	ready = true
	if code, out, _ := serveReview(t, h, body); code != 200 || !out.Response.Allowed {
		t.Fatalf("HTTP %d", code)
	}
}
