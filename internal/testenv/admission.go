package testenv

import (
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
)

// Review is one admission review a fake webhook received.
type Review struct {
	Path, Operation, SubResource, User, Name string
}

// AdmissionRecorder is a fake admission webhook over HTTPS that allows every review and records
// it: it stands in for the product where a test checks what the API server sends (the chart's
// rules and conditions, certificate rotation), not what the product answers. Keep-alives are off:
// every review is a new TLS handshake, so every call checks the certificate served at that moment.
type AdmissionRecorder struct {
	Port int
	mu   sync.Mutex
	seen []Review
	n    int
}

// StartAdmissionRecorder serves on ln with cfg (its certificate, and the product's TLS settings
// where the test wants them) until the test ends.
func StartAdmissionRecorder(t testing.TB, ln net.Listener, cfg *tls.Config) *AdmissionRecorder {
	t.Helper()
	rec := &AdmissionRecorder{Port: ln.Addr().(*net.TCPAddr).Port}
	srv := &http.Server{Handler: rec, ReadHeaderTimeout: 5 * time.Second}
	srv.SetKeepAlivesEnabled(false)
	go func() { _ = srv.Serve(tls.NewListener(ln, cfg)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return rec
}

// ServeHTTP answers an AdmissionReview with Allowed, and a bad one with 400.
func (rec *AdmissionRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var ar admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&ar); err != nil || ar.Request == nil {
		http.Error(w, "bad review", http.StatusBadRequest)
		return
	}
	rec.mu.Lock()
	rec.n++
	rec.seen = append(rec.seen, Review{Path: r.URL.Path, Operation: string(ar.Request.Operation),
		SubResource: ar.Request.SubResource, User: ar.Request.UserInfo.Username, Name: ar.Request.Name})
	rec.mu.Unlock()
	ar.Response = &admissionv1.AdmissionResponse{UID: ar.Request.UID, Allowed: true}
	ar.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&ar)
}

// Take returns and forgets the reviews received since the last Take.
func (rec *AdmissionRecorder) Take() []Review {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	out := rec.seen
	rec.seen = nil
	return out
}

// Calls is the number of reviews answered since the start.
func (rec *AdmissionRecorder) Calls() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.n
}
