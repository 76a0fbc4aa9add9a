package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	jsoniter "github.com/json-iterator/go"
	"github.com/modern-go/reflect2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
)

// MaxBodyBytes bounds an AdmissionReview: the API server's largest object (3 MiB), twice (object and
// old object), plus room.
const MaxBodyBytes = 7 << 20

// Handler decides one admission request. An error means the request is malformed (HTTP 400).
type Handler interface {
	Handle(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error)

// Handle implements Handler.
func (f HandlerFunc) Handle(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	return f(ctx, req)
}

// ErrNotReady means the informer cache has not synced yet: Serve answers 503 and the API server
// applies the webhook's failurePolicy.
var ErrNotReady = errors.New("the informer cache has not synced yet")

// Gate answers ErrNotReady until ready reports true.
func Gate(h Handler, ready func() bool) Handler {
	return HandlerFunc(func(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
		if !ready() {
			return nil, ErrNotReady
		}
		return h.Handle(ctx, req)
	})
}

// malformed is a request error: the caller answers HTTP 400 with its message.
type malformed struct{ msg string }

func (e *malformed) Error() string { return e.msg }

func malformedf(format string, args ...any) error {
	return &malformed{msg: fmt.Sprintf(format, args...)}
}

// httpError is an error with an HTTP status.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

// decodeReview reads an admission.k8s.io/v1 AdmissionReview request from an HTTP request into
// bufs. The error, if any, is an *httpError with the status to answer (400 for a malformed body).
func decodeReview(r *http.Request, bufs *reviewBuffers) (*admissionv1.AdmissionReview, error) {
	if r.Method != http.MethodPost {
		return nil, &httpError{http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed: an AdmissionReview is POSTed", r.Method)}
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return nil, &httpError{http.StatusUnsupportedMediaType, fmt.Sprintf("content type %q is not application/json", ct)}
		}
	}
	if r.Body == nil {
		return nil, &httpError{http.StatusBadRequest, "malformed AdmissionReview: empty body"}
	}
	body, err := readBody(r, bufs.body)
	bufs.body = body
	if err != nil {
		return nil, &httpError{http.StatusBadRequest, "malformed AdmissionReview: reading the body: " + err.Error()}
	}
	if len(body) > MaxBodyBytes {
		return nil, &httpError{http.StatusRequestEntityTooLarge, fmt.Sprintf("AdmissionReview larger than %d bytes", MaxBodyBytes)}
	}
	review, err := decodeReviewBody(body, &bufs.objects)
	if err != nil {
		return nil, &httpError{http.StatusBadRequest, "malformed AdmissionReview: " + err.Error()}
	}
	return review, nil
}

// reviewBuffers hold one admission: its body, and the copies of its object and old object (the
// RawExtensions the handlers decode). Serve takes them from reviewPool and gives them back once the
// answer is written, so that a thousand admissions a second of a kubelet's 16 KB node do not each
// leave some 65 KB for the collector, which at 65,000 cached nodes makes the handlers' tail (GC
// assists: BENCHMARKS.md). Nothing a handler keeps refers to them: decodeNode and decodeObject
// copy every string they decode.
type reviewBuffers struct{ body, objects []byte }

// maxPooledBytes: a buffer grown past this by an unusual review is left to the collector, not kept.
const maxPooledBytes = 1 << 20

var reviewPool = sync.Pool{New: func() any { return new(reviewBuffers) }}

func (b *reviewBuffers) release() {
	if cap(b.body) > maxPooledBytes || cap(b.objects) > maxPooledBytes {
		return
	}
	b.body, b.objects = b.body[:0], b.objects[:0]
	reviewPool.Put(b)
}

// readBody reads at most MaxBodyBytes+1 bytes of r's body into buf (from its start), growing it
// once to the request's stated length, and returns what it read (io.ReadAll, into a buffer kept
// between requests).
func readBody(r *http.Request, buf []byte) ([]byte, error) {
	body := io.LimitReader(r.Body, MaxBodyBytes+1)
	buf = buf[:0]
	if n := r.ContentLength; n > 0 && n <= MaxBodyBytes {
		buf = slices.Grow(buf, int(n)+1) // one byte more: the end of the body is read without growing
	}
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, max(512, len(buf))) // a body longer than it says, or of no stated length
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// decodeReviewBody decodes an AdmissionReview; the bytes of its object and old object are appended
// to *objects (see reviewBuffers).
func decodeReviewBody(body []byte, objects *[]byte) (*admissionv1.AdmissionReview, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, errors.New("empty body")
	}
	review := &admissionv1.AdmissionReview{}
	if err := unmarshal(body, objects, review); err != nil {
		return nil, err
	}
	if gv := admissionv1.SchemeGroupVersion.String(); review.APIVersion != gv || review.Kind != "AdmissionReview" {
		return nil, fmt.Errorf("apiVersion %q kind %q, want %s AdmissionReview", review.APIVersion, review.Kind, gv)
	}
	if review.Request == nil {
		return nil, errors.New("no request")
	}
	if review.Request.UID == "" {
		return nil, errors.New("request.uid is empty")
	}
	return review, nil
}

// fastJSON decodes admission requests about twice as fast as encoding/json, which matters for
// nodes of ten kilobytes at a thousand admissions a second. It decodes a RawExtension (the
// request's object and old object) with one copy of its bytes, not two (the capture, then
// RawExtension.UnmarshalJSON's own copy), and a node's annotations without those it skips.
var fastJSON = func() jsoniter.API {
	// The settings of jsoniter.ConfigCompatibleWithStandardLibrary, frozen anew: an extension
	// registered on that shared value would change it for every user in the process.
	api := jsoniter.Config{EscapeHTML: true, SortMapKeys: true, ValidateJsonRawMessage: true}.Froze()
	api.RegisterExtension(&decoders{})
	return api
}()

// decoders is fastJSON's extension: the product's own decoders of two types.
type decoders struct{ jsoniter.DummyExtension }

var (
	rawExtensionType    = reflect2.TypeOf(runtime.RawExtension{})
	keptAnnotationsType = reflect2.TypeOf(keptAnnotations{})
)

func (*decoders) CreateDecoder(typ reflect2.Type) jsoniter.ValDecoder {
	switch typ {
	case rawExtensionType:
		return rawExtensionDecoder{}
	case keptAnnotationsType:
		return keptAnnotationsDecoder{}
	}
	return nil
}

// rawExtensionDecoder decodes runtime.RawExtension as RawExtension.UnmarshalJSON does (the bytes
// as they are, nothing for null) from the iterator's capture, appended to the review's objects
// buffer when the iterator carries one (unmarshal).
type rawExtensionDecoder struct{}

func (rawExtensionDecoder) Decode(ptr unsafe.Pointer, iter *jsoniter.Iterator) {
	var raw []byte
	if objects, ok := iter.Attachment.(*[]byte); ok {
		start := len(*objects)
		*objects = iter.SkipAndAppendBytes(*objects) // never nil (unmarshal): nil is no capture to jsoniter
		raw = (*objects)[start:len(*objects):len(*objects)]
	} else {
		raw = iter.SkipAndReturnBytes()
	}
	re := (*runtime.RawExtension)(ptr)
	if string(raw) == "null" {
		return
	}
	re.Raw = raw
}

// unmarshal decodes with fastJSON; on failure, encoding/json decodes again for its clearer error
// (and its answer stands). With objects, the bytes of the RawExtensions go to *objects (see
// reviewBuffers); without, each is a copy of its own.
func unmarshal(data []byte, objects *[]byte, v any) error {
	iter := fastJSON.BorrowIterator(data)
	defer fastJSON.ReturnIterator(iter)
	if objects != nil {
		if *objects == nil {
			*objects = make([]byte, 0, len(data)) // the objects are part of the data: one allocation
		}
		iter.Attachment = objects
	}
	iter.ReadVal(v)
	if iter.Error == nil {
		iter.WhatIsNext() // only the end may follow: it reads as io.EOF
	}
	if iter.Error == io.EOF {
		return nil
	}
	return json.Unmarshal(data, v)
}

// decodeObject decodes an embedded object of the request into out; what names it in errors.
func decodeObject(raw []byte, what string, out any) error {
	if len(raw) == 0 {
		return malformedf("%s is missing", what)
	}
	if err := unmarshal(raw, nil, out); err != nil {
		return malformedf("%s: %v", what, err)
	}
	return nil
}

// Serve turns a Handler into the HTTP handler of a webhook path: it decodes the AdmissionReview,
// answers 400 (never a panic) when the body or its objects are malformed, and records metrics.
func Serve(name string, h Handler) http.Handler {
	log := ctrl.Log.WithName("webhook").WithName(name)
	initMetrics(name)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		bufs := reviewPool.Get().(*reviewBuffers)
		defer bufs.release() // after the answer is written: the request refers to bufs
		review, err := decodeReview(r, bufs)
		if err != nil {
			var he *httpError
			errors.As(err, &he)
			observe(name, resultMalformed, start)
			http.Error(w, he.msg, he.status)
			return
		}
		req := review.Request
		resp, err := call(r.Context(), h, req)
		if err != nil {
			var m *malformed
			if errors.As(err, &m) {
				observe(name, resultMalformed, start)
				http.Error(w, "malformed AdmissionReview: "+m.msg, http.StatusBadRequest)
				return
			}
			if errors.Is(err, ErrNotReady) {
				observe(name, resultError, start)
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			log.Error(err, "handler failed", "uid", req.UID, "kind", req.Kind.Kind, "name", req.Name)
			observe(name, resultError, start)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		resp.UID = req.UID
		out, err := json.Marshal(&admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp})
		if err != nil {
			observe(name, resultError, start)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		countDenials(name, resp)
		observe(name, resultOf(resp), start)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	})
}

// call runs the handler; a panic becomes an error (HTTP 500: the API server applies the webhook's
// failurePolicy), never a crash.
func call(ctx context.Context, h Handler, req *admissionv1.AdmissionRequest) (resp *admissionv1.AdmissionResponse, err error) {
	defer func() {
		if r := recover(); r != nil {
			resp, err = nil, fmt.Errorf("internal error: %v", r)
		}
	}()
	resp, err = h.Handle(ctx, req)
	if err == nil && resp == nil {
		err = errors.New("internal error: no response")
	}
	return resp, err
}

// slimNode is what the webhooks read of a Node: decoding only these fields (the rest is skipped,
// not allocated) keeps an admission of a real, image-laden node well under a millisecond. Of the
// annotations it keeps those the cache keeps (state.KeptAnnotation); of the conditions their type,
// status, transition time, reason and message (extender.SlimConditions keeps no more); times are parsed from their
// strings (metav1.Time's UnmarshalJSON decodes each through encoding/json: eleven a kubelet's node).
type slimNode struct {
	Metadata struct {
		Name              string            `json:"name"`
		UID               types.UID         `json:"uid"`
		ResourceVersion   string            `json:"resourceVersion"`
		Labels            map[string]string `json:"labels"`
		Annotations       keptAnnotations   `json:"annotations"`
		CreationTimestamp rfc3339           `json:"creationTimestamp"`
		DeletionTimestamp *rfc3339          `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		Unschedulable bool           `json:"unschedulable"`
		Taints        []corev1.Taint `json:"taints"`
	} `json:"spec"`
	Status struct {
		Conditions []slimCondition `json:"conditions"`
	} `json:"status"`
}

type slimCondition struct {
	Type               corev1.NodeConditionType `json:"type"`
	Status             corev1.ConditionStatus   `json:"status"`
	LastTransitionTime rfc3339                  `json:"lastTransitionTime"`
	// Reason and Message: SlimConditions keeps them only when they say a graceful node shutdown.
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// rfc3339 is a metav1.Time as its JSON string; null and "" are the zero time.
type rfc3339 string

func (s rfc3339) time() (metav1.Time, error) {
	if s == "" {
		return metav1.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, string(s))
	if err != nil {
		return metav1.Time{}, err
	}
	return metav1.NewTime(t.Local()), nil // as metav1.Time.UnmarshalJSON
}

// keptAnnotations decodes (with fastJSON) only the annotations state.KeptAnnotation keeps; the
// others are skipped unread. An object of none of them is an empty map, not nil: the patch then
// adds to the annotations, it does not create them (which would replace the others).
type keptAnnotations map[string]string

type keptAnnotationsDecoder struct{}

func (keptAnnotationsDecoder) Decode(ptr unsafe.Pointer, iter *jsoniter.Iterator) {
	if iter.ReadNil() {
		*(*keptAnnotations)(ptr) = nil
		return
	}
	m := keptAnnotations{}
	iter.ReadMapCB(func(iter *jsoniter.Iterator, key string) bool {
		if state.KeptAnnotation(key) {
			m[key] = iter.ReadString()
		} else {
			iter.Skip()
		}
		return true
	})
	*(*keptAnnotations)(ptr) = m
}

// decodeNode decodes the fields of a node that the webhooks read (see StripNode).
func decodeNode(raw []byte, what string) (*extender.Node, error) {
	var s slimNode
	if len(raw) == 0 {
		return nil, malformedf("%s is missing", what)
	}
	if err := unmarshal(raw, nil, &s); err != nil {
		msg := strings.NewReplacer("webhook.slimNode", "Node", "slimNode", "Node").Replace(err.Error())
		return nil, malformedf("%s is not a Node: %s", what, msg)
	}
	n := &extender.Node{}
	m := &s.Metadata
	n.Name, n.UID, n.ResourceVersion = m.Name, m.UID, m.ResourceVersion
	n.Labels, n.Annotations = m.Labels, m.Annotations
	badTime := func(field string, err error) error {
		return malformedf("%s is not a Node: %s: %v", what, field, err)
	}
	var err error
	if n.CreationTimestamp, err = m.CreationTimestamp.time(); err != nil {
		return nil, badTime("metadata.creationTimestamp", err)
	}
	if m.DeletionTimestamp != nil {
		t, err := m.DeletionTimestamp.time()
		if err != nil {
			return nil, badTime("metadata.deletionTimestamp", err)
		}
		n.DeletionTimestamp = &t
	}
	n.Spec.Unschedulable, n.Spec.Taints = s.Spec.Unschedulable, s.Spec.Taints
	conds := make([]corev1.NodeCondition, 0, len(s.Status.Conditions))
	for i, c := range s.Status.Conditions {
		t, err := c.LastTransitionTime.time()
		if err != nil {
			return nil, badTime(fmt.Sprintf("status.conditions[%d].lastTransitionTime", i), err)
		}
		conds = append(conds, corev1.NodeCondition{Type: c.Type, Status: c.Status, LastTransitionTime: t, Reason: c.Reason, Message: c.Message})
	}
	n.Status.Conditions = extender.SlimConditions(conds)
	return n, nil
}
