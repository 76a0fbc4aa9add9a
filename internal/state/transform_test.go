package state

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/nodedecode"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv/nodetest"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// kubeletNode is a node with what a kubelet writes that the product never reads: images, node
// info, capacity, heartbeats, managed fields, and annotations of other components.
func kubeletNode(i int) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: fmt.Sprintf("node-%05d", i),
		Labels: map[string]string{
			corev1.LabelHostname: fmt.Sprintf("node-%05d", i), corev1.LabelTopologyZone: "zone-a",
			corev1.LabelInstanceTypeStable: "m5.2xlarge", "eks.amazonaws.com/nodegroup": "general-purpose",
		},
		Annotations: map[string]string{
			"node.alpha.kubernetes.io/ttl": "0", "csi.volume.kubernetes.io/nodeid": `{"ebs.csi.aws.com":"i-0abc"}`,
			extender.AnnotationCalicoIPv4: fmt.Sprintf("10.0.%d.%d/16", i/256, i%256),
		},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}},
	}}
	n.Status.Images = []corev1.ContainerImage{{Names: []string{"registry/image@sha256:0123"}, SizeBytes: 1 << 20}}
	n.Status.NodeInfo.KubeletVersion = "v1.34.3"
	n.Status.Capacity = corev1.ResourceList{}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeHostName, Address: "node"}}
	n.Status.Conditions = []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), Message: "kubelet is posting ready status"},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
	}
	return n
}

func TestStripNode(t *testing.T) {
	in := kubeletNode(1)
	a, b := StripNode(in), StripNode(kubeletNode(2))
	// The record has no field for what nothing reads (images, node info, capacity, managedFields).
	if a.Name != in.Name || a.UID != in.UID || a.ResourceVersion != in.ResourceVersion || !a.CreationTimestamp.Equal(&in.CreationTimestamp) {
		t.Errorf("metadata %+v, want that of %+v", a.ObjectMeta, in.ObjectMeta)
	}
	if len(a.Status.Addresses) != 0 {
		t.Errorf("addresses %v, want none: the node has Calico's address", a.Status.Addresses)
	}
	noCalico := kubeletNode(3)
	delete(noCalico.Annotations, extender.AnnotationCalicoIPv4)
	noCalico.Annotations[extender.AnnotationCalicoIPv6] = " "
	if got := StripNode(noCalico).Status.Addresses; len(got) != 1 || got[0].Type != corev1.NodeInternalIP {
		t.Errorf("addresses %v without Calico's address, want the InternalIP only", got)
	}
	if _, ok := a.Annotations["csi.volume.kubernetes.io/nodeid"]; ok || a.Annotations[extender.AnnotationCalicoIPv4] == "" {
		t.Errorf("annotations %v, want Calico's address only", a.Annotations)
	}
	if len(a.Labels) != 4 || a.Labels[corev1.LabelHostname] != "node-00001" {
		t.Errorf("labels %v, want all four", a.Labels)
	}
	if len(a.Status.Conditions) != 1 || !a.Status.Conditions[0].LastHeartbeatTime.IsZero() {
		t.Errorf("conditions %+v, want Ready without its heartbeat", a.Status.Conditions)
	}
	// Interned: the same label value of two nodes shares its bytes.
	za, zb := a.Labels[corev1.LabelInstanceTypeStable], b.Labels[corev1.LabelInstanceTypeStable]
	if unsafe.StringData(za) != unsafe.StringData(zb) {
		t.Error("the nodes' instance-type labels do not share their bytes")
	}
}

// BenchmarkStripNodeHeap reports the heap a cache of 5,000 stripped nodes keeps per node, the
// nodes as a kubelet registers them (nodetest.KubeletFleet: 34 labels, 16 KB of JSON) with the
// roles the product gives a settled cluster's clients (a peering set and the route reflectors'
// annotation, one per 40 nodes), decoded. all-labels keeps every label (StripNode); read-labels
// keeps the labels the default policy with a preferredNodeSelector reads (LabelKeys.Strip, as
// serve's cache does: `make load`'s policy), and nodes with the same kept labels share one map.
func BenchmarkStripNodeHeap(b *testing.B) {
	keys := NewLabelKeys()
	keys.Want(policy.MustResolve(loadPolicy()).LabelKeys()...)
	for _, bc := range []struct {
		name  string
		strip func(*corev1.Node) *extender.Node
	}{{"all-labels", StripNode}, {"read-labels", keys.Strip}} {
		b.Run(bc.name, func(b *testing.B) { benchStripHeap(b, bc.strip) })
	}
}

// loadPolicy is `make load`'s policy: the defaults and a preferredNodeSelector.
func loadPolicy() *v1alpha1.RouteReflectorPolicy {
	p := policy.Default("load")
	p.Spec.PreferredNodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"load.example.com/preferred": "true"}}
	return p
}

func benchStripHeap(b *testing.B, strip func(*corev1.Node) *extender.Node) {
	const n = 5000
	raws := kubeletRaws(b, n, false)
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		cache := make([]*extender.Node, n)
		for i := range cache {
			// Decoded, as the informer gets it: every string its own allocation.
			node := &corev1.Node{}
			if err := json.Unmarshal(raws[i], node); err != nil {
				b.Fatal(err)
			}
			cache[i] = strip(node)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/node")
		runtime.KeepAlive(cache)
	}
}

// BenchmarkHeartbeatHeap measures what the node cache holds after kubelets' status reports:
// 5,000 `make load` kubelet nodes stripped into an indexer with NodeIndexers (as the informer's),
// then three rounds of a status report from every node, in a shuffled order, each decoded and
// stripped as the informer does (decoded short from protobuf, internal/nodedecode; a new resourceVersion and heartbeat, nothing the cache keeps
// changed). It reports the live heap and the heap in use (the spans the collector keeps) per
// node after a collection: "reuse" points each new object's kept parts at the cached object's
// (reuseKept), "copy" keeps the decoded copies.
func BenchmarkHeartbeatHeap(b *testing.B) {
	for _, reuse := range []bool{true, false} {
		name := map[bool]string{true: "reuse", false: "copy"}[reuse]
		b.Run(name, func(b *testing.B) { benchHeartbeatHeap(b, reuse) })
	}
}

func benchHeartbeatHeap(b *testing.B, reuse bool) {
	const n, rounds = 5000, 3
	raws := kubeletRaws(b, n, true)
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		keys := NewLabelKeys()
		keys.Want(policy.MustResolve(loadPolicy()).LabelKeys()...)
		keys.noReuse = !reuse
		// As serve decodes the node watch: the labels read only.
		dec := nodedecode.Decoder{KeepAnnotation: KeptAnnotation, Labels: keys.DecodeLabels}
		idx := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, NodeIndexers())
		keys.SetRelist(idx, nil)
		decode := func(i, rv int) *corev1.Node {
			node := &corev1.Node{}
			if err := dec.Node(raws[i], node); err != nil {
				b.Fatal(err)
			}
			node.ResourceVersion = strconv.Itoa(rv)
			return node
		}
		rv := 200000
		for i := range n {
			rv++
			if err := idx.Add(keys.Strip(decode(i, rv))); err != nil {
				b.Fatal(err)
			}
		}
		rng := rand.New(rand.NewPCG(1, 2))
		for range rounds {
			for _, i := range rng.Perm(n) {
				rv++
				if err := idx.Update(keys.Strip(decode(i, rv))); err != nil {
					b.Fatal(err)
				}
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "live-B/node")
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/n, "inuse-B/node")
		runtime.KeepAlive(idx)
	}
}

// kubeletRaws is the JSON (or, with proto, the protobuf, as the product's watch gets them) of n
// `make load` kubelet nodes, as settled clients of racks of 40.
func kubeletRaws(b *testing.B, n int, proto bool) [][]byte {
	fleet := nodetest.DefaultKubeletFleet()
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	raws := make([][]byte, n)
	for i := range raws {
		// About a hundred nodes a second join, as in make load's join.
		node := fleet.Kubelet(i, created.Add(time.Duration(i/100)*time.Second))
		node.UID = types.UID(fmt.Sprintf("6f1c0a52-0000-4000-8000-%012d", i))
		node.ResourceVersion = fmt.Sprint(100000 + i)
		node.Labels[extender.LabelPeeringSet] = fmt.Sprintf("rack-%d", i/40)
		node.Annotations[extender.AnnotationRouteReflectors] = fmt.Sprintf("rr-%d-a,rr-%d-b", i/40, i/40)
		marshal := func() ([]byte, error) { return json.Marshal(node) }
		if proto {
			marshal = node.Marshal
		}
		raw, err := marshal()
		if err != nil {
			b.Fatal(err)
		}
		raws[i] = raw
	}
	return raws
}
