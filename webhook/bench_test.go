package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv/nodetest"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// realistic gives a node what a kubelet reports (images, addresses, capacity, all conditions,
// managedFields), so that the benchmarks decode objects of a real size (about 8 KB).
func realistic(n *corev1.Node) *corev1.Node {
	n = n.DeepCopy()
	for i := range 40 {
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{
			Names:     []string{fmt.Sprintf("registry.example.com/team-%d/service-%d@sha256:%064d", i, i, i), fmt.Sprintf("registry.example.com/team-%d/service-%d:v1.%d.0", i, i, i)},
			SizeBytes: int64(1e8 + i),
		})
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeHostName, Address: n.Name}}
	for _, c := range []corev1.NodeConditionType{"MemoryPressure", "DiskPressure", "PIDPressure"} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: c, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficient" + string(c), Message: "kubelet has sufficient resources"})
	}
	n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1"}}
	return n
}

// bigCluster is a fixture of n nodes over three zones, settled on the default policy's plan, with
// the plan committed on a leader.
func bigCluster(b *testing.B, n int) *fixture {
	b.Helper()
	p := mkPolicy("default", nil)
	var nodes []*corev1.Node
	for i := range n {
		nodes = append(nodes, mkNode(fmt.Sprintf("node-%05d", i), fmt.Sprintf("zone-%c", 'a'+i%3)))
	}
	f := newFixture(b, []*v1alpha1.RouteReflectorPolicy{p}, nil)
	m, _ := f.policies.Get("default")
	in := extender.Input{Policy: m.Resolved, Nodes: extender.FromNodes(nodes), Now: tNow}
	res := extender.Plan(in)
	for i, node := range nodes {
		st := res.Nodes[i]
		for k, v := range st.Labels {
			node.Labels[k] = v
		}
		for k, v := range st.Annotations {
			node.Annotations[k] = v
		}
		require.NoError(b, f.nodeIdx.Add(state.StripNode(node.DeepCopy())), "node %s", node.Name)
	}
	f.ledger.SetLeader(true)
	f.commit(b)
	return f
}

// expect checks what a benchmark measured: the answer to its first request.
type expect func(*admissionv1.AdmissionResponse) error

func wantPatch(r *admissionv1.AdmissionResponse) error {
	if !r.Allowed || len(r.Patch) == 0 {
		return fmt.Errorf("want an allowed answer with a patch, got allowed=%v patch=%s", r.Allowed, r.Patch)
	}
	return nil
}

func wantAllowed(r *admissionv1.AdmissionResponse) error {
	if !r.Allowed {
		return fmt.Errorf("want allowed, got denied: %v", r.Result)
	}
	return nil
}

func wantDenied(r *admissionv1.AdmissionResponse) error {
	if r.Allowed {
		return fmt.Errorf("want a denial, got allowed")
	}
	return nil
}

// benchServe posts body(i) to h b.N times and reports the p50 and p99 latency per admission; the
// answer to the first request must pass check, so that the benchmark measures what it says.
func benchServe(b *testing.B, h http.Handler, check expect, body func(i int) []byte) {
	b.Helper()
	const bodies = 256
	pre := make([][]byte, bodies)
	for i := range pre {
		pre[i] = body(i)
	}
	var lat []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(pre[i%bodies]))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(w, r)
		lat = append(lat, time.Since(start))
		require.Equal(b, 200, w.Code, "HTTP status (body %s)", w.Body)
		if i == 0 {
			var review admissionv1.AdmissionReview
			require.NoError(b, json.Unmarshal(w.Body.Bytes(), &review), "not an AdmissionReview: %s", w.Body)
			require.NotNil(b, review.Response, "not an AdmissionReview: %s", w.Body)
			require.NoError(b, check(review.Response))
		}
		i++
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

func benchMutateJoin(b *testing.B, nodes int) {
	f := bigCluster(b, nodes)
	benchServe(b, Serve("mutate-v1-node", f.mutator), wantPatch, func(i int) []byte {
		n := realistic(mkNode(fmt.Sprintf("join-%05d", i), fmt.Sprintf("zone-%c", 'a'+i%3), notReady))
		return reviewBody(b, nodeReq(b, kubelet, n, nil))
	})
}

func benchMutateReady(b *testing.B, nodes int) {
	f := bigCluster(b, nodes)
	benchServe(b, Serve("mutate-v1-node", f.mutator), wantAllowed, func(i int) []byte {
		old := realistic(mkNode(fmt.Sprintf("ready-%05d", i), fmt.Sprintf("zone-%c", 'a'+i%3), notReady))
		n := old.DeepCopy()
		n.Status.Conditions[0].Status = corev1.ConditionTrue
		req := nodeReq(b, kubelet, n, old)
		req.SubResource = "status"
		return reviewBody(b, req)
	})
}

func benchMutateKnownNode(b *testing.B, nodes int) {
	f := bigCluster(b, nodes)
	benchServe(b, Serve("mutate-v1-node", f.mutator), wantAllowed, func(i int) []byte {
		old := realistic(f.nodes.Get(fmt.Sprintf("node-%05d", 100+i)).ToNode())
		n := old.DeepCopy()
		n.Labels["team"] = "x"
		return reviewBody(b, nodeReq(b, alice, n, old))
	})
}

func benchValidateRemoveRR(b *testing.B, nodes int) {
	f := bigCluster(b, nodes)
	rrs := f.nodes.RouteReflectors()
	// The policy requires every route reflector it has: each removal is denied (the rule checks).
	p := mkPolicy("default", func(s *v1alpha1.RouteReflectorPolicySpec) { s.MinRouteReflectors = i32(int32(len(rrs))) })
	p.Generation = 2
	require.NoError(b, f.policies.Store().Update(p))
	benchServe(b, Serve("validate-v1-node", f.nodeVal), wantDenied, func(i int) []byte {
		old := realistic(rrs[i%len(rrs)].ToNode())
		n := old.DeepCopy()
		delete(n.Labels, "calico-route-reflector")
		return reviewBody(b, nodeReq(b, alice, n, old))
	})
}

func benchValidateCordon(b *testing.B, nodes int) {
	f := bigCluster(b, nodes)
	benchServe(b, Serve("validate-v1-node", f.nodeVal), wantAllowed, func(i int) []byte {
		old := realistic(f.nodes.Get(fmt.Sprintf("node-%05d", 100+i)).ToNode())
		n := old.DeepCopy()
		n.Spec.Unschedulable = true
		return reviewBody(b, nodeReq(b, alice, n, old))
	})
}

func benchValidateDelete(b *testing.B, nodes int) {
	f := bigCluster(b, nodes)
	rrs := f.nodes.RouteReflectors()
	benchServe(b, Serve("validate-v1-node", f.nodeVal), wantAllowed, func(i int) []byte {
		return reviewBody(b, nodeReq(b, alice, nil, realistic(rrs[i%len(rrs)].ToNode())))
	})
}

func BenchmarkValidatePolicy5000(b *testing.B) {
	f := bigCluster(b, 5000)
	// Two policies with selectors: the overlap check scans every cached node. (The default policy,
	// which selects every node, would end the check at once with a denial.)
	require.NoError(b, f.policies.Store().Delete(mkPolicy("default", nil)))
	require.NoError(b, f.policies.Store().Add(mkPolicy("other", func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "other"}}
	})))
	benchServe(b, Serve("validate-routereflectorpolicy", f.polVal), wantAllowed, func(i int) []byte {
		p := mkPolicy("edge", func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "edge"}}
		})
		return reviewBody(b, request(b, admissionv1.Update, policyKind, "", alice, p, p))
	})
}

func BenchmarkValidateBGPPeer(b *testing.B) {
	f := newFixture(b, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, nil)
	benchServe(b, Serve("validate-bgppeer", f.peerVal), wantDenied, func(i int) []byte {
		return reviewBody(b, request(b, admissionv1.Update, peerKind, "", alice, peer("x", true), peer("x", true)))
	})
}

// The node webhooks at 5,000 nodes and at 65,000 (issue 27: p99 under 300 us on a 65,000-node
// cache, in-process).
func BenchmarkMutateJoin5000(b *testing.B)  { benchMutateJoin(b, 5000) }
func BenchmarkMutateJoin65000(b *testing.B) { benchMutateJoin(b, 65000) }

func BenchmarkMutateReady5000(b *testing.B)  { benchMutateReady(b, 5000) }
func BenchmarkMutateReady65000(b *testing.B) { benchMutateReady(b, 65000) }

func BenchmarkMutateKnownNode5000(b *testing.B)  { benchMutateKnownNode(b, 5000) }
func BenchmarkMutateKnownNode65000(b *testing.B) { benchMutateKnownNode(b, 65000) }

func BenchmarkValidateRemoveRR5000(b *testing.B)  { benchValidateRemoveRR(b, 5000) }
func BenchmarkValidateRemoveRR65000(b *testing.B) { benchValidateRemoveRR(b, 65000) }

func BenchmarkValidateCordon5000(b *testing.B)  { benchValidateCordon(b, 5000) }
func BenchmarkValidateCordon65000(b *testing.B) { benchValidateCordon(b, 65000) }

func BenchmarkValidateDelete5000(b *testing.B)  { benchValidateDelete(b, 5000) }
func BenchmarkValidateDelete65000(b *testing.B) { benchValidateDelete(b, 65000) }

// BenchmarkDecodeKubeletNode: decodeNode of a kubelet's node (nodetest.KubeletFleet: 16 KB of
// JSON, 34 labels, 6 annotations, 5 conditions, 50 images), as each admission does twice.
func BenchmarkDecodeKubeletNode(b *testing.B) {
	raw, err := json.Marshal(nodetest.DefaultKubeletFleet().Kubelet(7, tNow))
	require.NoError(b, err)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeNode(raw, "request.object"); err != nil {
			b.Fatal(err)
		}
	}
}
