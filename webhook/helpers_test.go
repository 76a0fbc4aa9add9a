package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv/nodetest"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

const testSA = "system:serviceaccount:calico-rr-autoscaler:calico-rr-autoscaler"

var (
	tNow    = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	alice   = authenticationv1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}}
	kubelet = authenticationv1.UserInfo{Username: "system:node:node-1", Groups: []string{"system:nodes", "system:authenticated"}}
	sa      = authenticationv1.UserInfo{Username: testSA, Groups: []string{"system:serviceaccounts"}}
)

type nodeOpt = nodetest.Opt

// mkNode is a Ready node of zone as an admission request carries it, created an hour before tNow.
func mkNode(name, zone string, opts ...nodeOpt) *corev1.Node {
	base := []nodeOpt{nodetest.TypeMeta, nodetest.Hostname, nodetest.Zone(zone), nodetest.ResourceVersion("100"), nodetest.Created(tNow.Add(-time.Hour))}
	return nodetest.New(name, append(base, opts...)...)
}

func rr(id string) nodeOpt {
	return func(n *corev1.Node) {
		n.Labels[policy.DefaultRouteReflectorLabelKey] = ""
		n.Labels[extender.LabelRouteReflectorID] = n.Name
		n.Annotations[extender.AnnotationClusterID] = id
	}
}

func clientOf(rrs ...string) nodeOpt {
	return func(n *corev1.Node) {
		n.Labels[extender.LabelPeeringSet] = "set-" + strings.Join(rrs, "-")
		n.Annotations[extender.AnnotationRouteReflectors] = strings.Join(rrs, ",")
	}
}

var (
	withLabel     = nodetest.Label
	cordon        = nodetest.Cordoned
	notReady      = nodetest.NotReady
	notReadySince = nodetest.NotReadySince // the Ready condition's lastTransitionTime
)

func drainingMark(n *corev1.Node) {
	n.Annotations[extender.AnnotationDrainingSince] = tNow.Add(-time.Minute).Format(time.RFC3339)
}

// mkPolicy is the default policy changed by mut, in MultiCluster unless mut names another
// topology: the tests that use it were written for MultiCluster, the default before DualPlane.
func mkPolicy(name string, mut func(*v1alpha1.RouteReflectorPolicySpec)) *v1alpha1.RouteReflectorPolicy {
	p := policy.Default(name)
	p.UID = types.UID("uid-" + name)
	p.Generation = 1
	p.Spec.Topology = &v1alpha1.Topology{Type: v1alpha1.MultiCluster}
	if mut != nil {
		mut(&p.Spec)
	}
	return p
}

func i32(v int32) *int32 { return &v }

// fixture is a webhook's view of a cluster: the informer stores, the ledger and the handlers.
type fixture struct {
	policies *state.Policies
	nodes    *state.NodeStore
	nodeIdx  toolscache.Indexer
	ledger   *state.Ledger
	mutator  *NodeMutator
	nodeVal  *NodeValidator
	polVal   *PolicyValidator
	peerVal  *BGPPeerValidator
}

func newFixture(t testing.TB, policies []*v1alpha1.RouteReflectorPolicy, nodes []*corev1.Node) *fixture {
	t.Helper()
	pidx := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
	for _, p := range policies {
		require.NoError(t, pidx.Add(p), "policy %s", p.Name)
	}
	nidx := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, state.NodeIndexers())
	for _, n := range nodes {
		require.NoError(t, nidx.Add(state.StripNode(n.DeepCopy())), "node %s", n.Name)
	}
	f := &fixture{policies: state.NewPolicies(pidx), nodes: state.NewNodeStore(nidx), nodeIdx: nidx, ledger: state.NewLedger(0, func() time.Time { return tNow })}
	f.mutator = &NodeMutator{Policies: f.policies, Ledger: f.ledger, Now: func() time.Time { return tNow }}
	f.nodeVal = &NodeValidator{Policies: f.policies, Nodes: f.nodes, ServiceAccount: testSA}
	f.polVal = &PolicyValidator{Policies: f.policies, Nodes: f.nodes}
	f.peerVal = &BGPPeerValidator{ServiceAccount: testSA, Policies: f.policies, Synced: func() bool { return true }}
	return f
}

// commit plans every policy from the store, as the leader's reconciler does, and commits it.
func (f *fixture) commit(t testing.TB) {
	t.Helper()
	valid := f.policies.Valid()
	for _, m := range valid {
		_, _, ok := f.ledger.Plan(valid, f.nodes.List(), m, tNow, nil)
		require.True(t, ok, "commit conflict")
	}
}

// admit reads n as the mutating webhook does (the planner's filters at tNow) and asks the ledger to
// admit it.
func (f *fixture) admit(m state.Managed, n *corev1.Node, change state.Change) (extender.Admission, bool) {
	ni := extender.NewNodeInfo(extender.FromNode(n), m.Resolved)
	ni.Now = tNow
	extender.RunFilters(extender.DefaultFilters(), m.Resolved, ni)
	return f.ledger.Admit(m, ni, change)
}

func raw(t testing.TB, obj runtime.Object) runtime.RawExtension {
	t.Helper()
	if obj == nil {
		return runtime.RawExtension{}
	}
	b, err := json.Marshal(obj)
	require.NoError(t, err)
	return runtime.RawExtension{Raw: b}
}

var nodeKind = metav1.GroupVersionKind{Version: "v1", Kind: "Node"}

func request(t testing.TB, op admissionv1.Operation, kind metav1.GroupVersionKind, sub string, user authenticationv1.UserInfo, obj, old runtime.Object) *admissionv1.AdmissionRequest {
	t.Helper()
	req := &admissionv1.AdmissionRequest{
		UID: "uid-1", Kind: kind, Operation: op, SubResource: sub, UserInfo: user,
		Object: raw(t, obj), OldObject: raw(t, old),
	}
	if m, ok := obj.(metav1.Object); ok && obj != nil && !isNil(obj) {
		req.Name = m.GetName()
	} else if m, ok := old.(metav1.Object); ok && old != nil && !isNil(old) {
		req.Name = m.GetName()
	}
	return req
}

func isNil(o runtime.Object) bool {
	switch v := o.(type) {
	case *corev1.Node:
		return v == nil
	case *v1alpha1.RouteReflectorPolicy:
		return v == nil
	}
	return false
}

// nodeReq is an admission request for a node; old nil means CREATE.
func nodeReq(t testing.TB, user authenticationv1.UserInfo, n, old *corev1.Node) *admissionv1.AdmissionRequest {
	t.Helper()
	switch {
	case old == nil:
		return request(t, admissionv1.Create, nodeKind, "", user, n, nil)
	case n == nil:
		return request(t, admissionv1.Delete, nodeKind, "", user, nil, old)
	}
	return request(t, admissionv1.Update, nodeKind, "", user, n, old)
}

// patched applies a response's patch to obj and returns the result.
func patched(t testing.TB, obj *corev1.Node, resp *admissionv1.AdmissionResponse) *corev1.Node {
	t.Helper()
	out := obj.DeepCopy()
	if len(resp.Patch) == 0 {
		return out
	}
	doc, _ := json.Marshal(obj)
	p, err := jsonpatch.DecodePatch(resp.Patch)
	require.NoError(t, err, "patch %s", resp.Patch)
	doc, err = p.Apply(doc)
	require.NoError(t, err, "patch %s", resp.Patch)
	out = &corev1.Node{}
	require.NoError(t, json.Unmarshal(doc, out))
	return out
}

// serveReview posts a review through Serve and returns the HTTP status and the decoded response.
func serveReview(t testing.TB, h http.Handler, body []byte) (int, *admissionv1.AdmissionReview, string) {
	t.Helper()
	r := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/x", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		return w.Code, nil, w.Body.String()
	}
	out := &admissionv1.AdmissionReview{}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), out), "response %q", w.Body.String())
	return w.Code, out, ""
}

func reviewBody(t testing.TB, req *admissionv1.AdmissionRequest) []byte {
	t.Helper()
	b, err := json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  req,
	})
	require.NoError(t, err)
	return b
}

func causes(resp *admissionv1.AdmissionResponse) string {
	if resp.Result == nil || resp.Result.Details == nil {
		return ""
	}
	var out []string
	for _, c := range resp.Result.Details.Causes {
		out = append(out, fmt.Sprintf("%s: %s", c.Field, c.Message))
	}
	return strings.Join(out, "\n")
}
