package nodedecode

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv/nodetest"
)

// cacheDecoder keeps the annotations the cache keeps, as the serve process configures it.
var cacheDecoder = Decoder{KeepAnnotation: state.KeptAnnotation}

// nodes are the shapes the product meets: kubelet nodes as they register, become Ready and
// report, and nodes with every field the cache keeps set (taints, cordon, deletion, the
// product's and Calico's annotations, pressure conditions, several address types).
func nodes() map[string]*corev1.Node {
	fleet := nodetest.DefaultKubeletFleet()
	created := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	ready := fleet.Kubelet(7, created)
	ready.Status.Conditions = nodetest.KubeletConditions(metav1.NewTime(created.Add(time.Minute)), metav1.NewTime(created.Add(30*time.Second)), true)
	full := fleet.Kubelet(8, created)
	full.ResourceVersion, full.UID, full.Generation = "12345", "5b0c5a52-2d6e-4b7e-9d6a-0e0f2a6a1c11", 3
	full.DeletionTimestamp = ptr.To(metav1.NewTime(created.Add(time.Hour)))
	full.DeletionGracePeriodSeconds = ptr.To[int64](30)
	full.Finalizers = []string{"example.com/keep"}
	full.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "x", UID: "u"}}
	full.Labels[extender.LabelPeeringSet] = "rack-abc"
	full.Labels["calico-route-reflector"] = ""
	full.Annotations[extender.AnnotationClusterID] = "244.0.0.1"
	full.Annotations[extender.AnnotationCalicoIPv4] = "10.16.0.8/16"
	full.Annotations[extender.AnnotationCalicoIPv6] = "fd00::8/64"
	full.Annotations["example.com/dropped"] = "x"
	full.Spec.Unschedulable = true
	full.Spec.Taints = []corev1.Taint{{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute, TimeAdded: ptr.To(metav1.NewTime(created))}, {Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}}
	full.Status.Conditions = append(nodetest.KubeletConditions(metav1.NewTime(created), metav1.NewTime(created), true),
		corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue, Reason: "r", Message: "m"})
	full.Status.Addresses = append(full.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "fd00::8"})
	full.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{}}`)}}}
	bookmark := &corev1.Node{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "99", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	return map[string]*corev1.Node{
		"registering":      fleet.Kubelet(6, created),
		"ready":            ready,
		"every kept field": full,
		"empty":            {},
		"bookmark":         bookmark,
	}
}

// TestNodeMatchesFullDecode: a node decoded here and stripped by the cache equals the node decoded
// whole and stripped.
func TestNodeMatchesFullDecode(t *testing.T) {
	for name, n := range nodes() {
		t.Run(name, func(t *testing.T) {
			b, err := n.Marshal()
			require.NoError(t, err)
			var whole, fast corev1.Node
			require.NoError(t, whole.Unmarshal(b))
			require.NoError(t, cacheDecoder.Node(b, &fast))
			require.Equal(t, state.StripNode(&whole), state.StripNode(&fast))
			require.Empty(t, fast.ManagedFields)
		})
	}
}

// TestNodeKeepsTheChosenLabels: decoded with the cache's choice of labels (LabelKeys.DecodeLabels),
// a node stripped by the cache equals the node decoded whole and stripped, and carries the
// generation it was decoded under until the strip stamps it.
func TestNodeKeepsTheChosenLabels(t *testing.T) {
	for name, n := range nodes() {
		t.Run(name, func(t *testing.T) {
			keys := state.NewLabelKeys()
			keys.Want("node.kubernetes.io/instance-type")
			b, err := n.Marshal()
			require.NoError(t, err)
			var whole, fast corev1.Node
			require.NoError(t, whole.Unmarshal(b))
			require.NoError(t, Decoder{KeepAnnotation: state.KeptAnnotation, Labels: keys.DecodeLabels}.Node(b, &fast))
			require.Equal(t, -keys.Generation(), fast.Generation, "the generation decoded under")
			for k := range fast.Labels {
				require.True(t, keys.Kept(k), "label %s decoded, not kept", k)
			}
			require.Equal(t, keys.Strip(&whole), keys.Strip(&fast))
		})
	}
}

// TestBookmarkKeepsInitialEventsEnd: client-go's watch-list ends its first sync on the bookmark's
// annotation, which the cache's own filter does not keep.
func TestBookmarkKeepsInitialEventsEnd(t *testing.T) {
	b, err := nodes()["bookmark"].Marshal()
	require.NoError(t, err)
	var n corev1.Node
	require.NoError(t, Decoder{KeepAnnotation: func(string) bool { return false }}.Node(b, &n))
	require.Equal(t, "true", n.Annotations[metav1.InitialEventsAnnotationKey])
	require.Equal(t, "99", n.ResourceVersion)
}

// TestNodeSkipsWhatNothingReads: the decoded node holds no image, node info, capacity, heartbeat
// or dropped annotation.
func TestNodeSkipsWhatNothingReads(t *testing.T) {
	n := nodes()["every kept field"]
	b, err := n.Marshal()
	require.NoError(t, err)
	var got corev1.Node
	require.NoError(t, cacheDecoder.Node(b, &got))
	require.Empty(t, got.Status.Images)
	require.Empty(t, got.Status.Capacity)
	require.Equal(t, corev1.NodeSystemInfo{}, got.Status.NodeInfo)
	require.Empty(t, got.OwnerReferences)
	require.NotContains(t, got.Annotations, "example.com/dropped")
	require.Equal(t, n.Annotations[extender.AnnotationCalicoIPv6], got.Annotations[extender.AnnotationCalicoIPv6])
	for _, c := range got.Status.Conditions {
		require.True(t, c.LastHeartbeatTime.IsZero(), "%s heartbeat", c.Type)
		require.Empty(t, c.Message)
	}
	require.Len(t, got.Spec.Taints, 2)
	require.True(t, got.Spec.Unschedulable)
	require.Equal(t, n.DeletionGracePeriodSeconds, got.DeletionGracePeriodSeconds)
}

// TestNodeRejectsTruncatedBytes: bad bytes are an error, not a panic or a half-read node passed
// on silently.
func TestNodeRejectsTruncatedBytes(t *testing.T) {
	b, err := nodes()["ready"].Marshal()
	require.NoError(t, err)
	for _, cut := range []int{1, 2, 10, len(b) / 2, len(b) - 1} {
		var n corev1.Node
		require.Error(t, cacheDecoder.Node(b[:cut], &n), "cut at %d", cut)
	}
}

// protobufBytes encodes obj as the API server sends it (the envelope with its type).
func protobufBytes(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	s := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	enc := scheme.Codecs.EncoderForVersion(s, corev1.SchemeGroupVersion)
	b, err := runtime.Encode(enc, obj)
	require.NoError(t, err)
	return b
}

// protobufDecoder is the decoder a client of Codecs gets for protobuf responses.
func protobufDecoder(t testing.TB, dec Decoder) runtime.Decoder {
	t.Helper()
	ns := Codecs(scheme.Codecs.WithoutConversion(), dec)
	info, ok := runtime.SerializerInfoForMediaType(ns.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	require.True(t, ok)
	return ns.DecoderToVersion(info.Serializer, corev1.SchemeGroupVersion)
}

// wholeDecoder is client-go's own protobuf decoder, which decodes every field.
func wholeDecoder() runtime.Decoder {
	ns := scheme.Codecs.WithoutConversion()
	info, _ := runtime.SerializerInfoForMediaType(ns.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	return ns.DecoderToVersion(info.Serializer, corev1.SchemeGroupVersion)
}

// TestCodecsDecodeNodesAndDelegateTheRest: through a client's negotiated protobuf decoder, Nodes
// and NodeLists take the short decode (no managed fields), every other kind the usual one.
func TestCodecsDecodeNodesAndDelegateTheRest(t *testing.T) {
	dec := protobufDecoder(t, cacheDecoder)
	n := nodes()["every kept field"]
	t.Run("node", func(t *testing.T) {
		data := protobufBytes(t, n)
		obj, gvk, err := dec.Decode(data, nil, nil)
		require.NoError(t, err)
		require.Equal(t, schema.GroupVersionKind{Version: "v1", Kind: "Node"}, *gvk)
		whole, wholeGVK, err := wholeDecoder().Decode(data, nil, nil)
		require.NoError(t, err)
		require.Equal(t, wholeGVK, gvk)
		got := obj.(*corev1.Node)
		require.Empty(t, got.ManagedFields)
		require.Equal(t, whole.GetObjectKind(), got.GetObjectKind())
		require.Equal(t, state.StripNode(whole.(*corev1.Node)), state.StripNode(got))
	})
	t.Run("node into", func(t *testing.T) {
		into := &corev1.Node{Spec: corev1.NodeSpec{ProviderID: "stale"}}
		obj, _, err := dec.Decode(protobufBytes(t, n), nil, into)
		require.NoError(t, err)
		require.Same(t, into, obj)
		require.Empty(t, into.Spec.ProviderID, "reset before decoding")
		require.Equal(t, n.Name, into.Name)
	})
	t.Run("into a nil node", func(t *testing.T) {
		obj, _, err := dec.Decode(protobufBytes(t, n), nil, (*corev1.Node)(nil))
		require.NoError(t, err)
		require.Equal(t, n.Name, obj.(*corev1.Node).Name)
	})
	t.Run("node list", func(t *testing.T) {
		list := &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "7", Continue: "c"}, Items: []corev1.Node{*n, *nodes()["ready"]}}
		data := protobufBytes(t, list)
		var got, whole corev1.NodeList
		_, _, err := dec.Decode(data, nil, &got)
		require.NoError(t, err)
		_, _, err = wholeDecoder().Decode(data, nil, &whole)
		require.NoError(t, err)
		require.Equal(t, list.ListMeta, got.ListMeta)
		require.Len(t, got.Items, 2)
		for i := range got.Items {
			require.Empty(t, got.Items[i].ManagedFields)
			require.Equal(t, state.StripNode(&whole.Items[i]), state.StripNode(&got.Items[i]))
		}
	})
	t.Run("metadata list", func(t *testing.T) {
		list := &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: "8", Continue: "c"},
			Items: []metav1.PartialObjectMetadata{{ObjectMeta: n.ObjectMeta}}}
		raw, err := list.Marshal()
		require.NoError(t, err)
		unk, err := (&runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList"}, Raw: raw}).Marshal()
		require.NoError(t, err)
		var got metav1.PartialObjectMetadataList
		_, gvk, err := dec.Decode(append(slices.Clone(protobufPrefix), unk...), nil, &got)
		require.NoError(t, err)
		require.Equal(t, metadataListGVK, *gvk)
		require.Equal(t, list.ListMeta, got.ListMeta)
		require.Len(t, got.Items, 1)
		require.Equal(t, n.Name, got.Items[0].Name)
		require.Equal(t, n.ResourceVersion, got.Items[0].ResourceVersion)
		require.Empty(t, got.Items[0].ManagedFields)
		require.NotContains(t, got.Items[0].Annotations, "example.com/dropped")
	})
	t.Run("other kinds", func(t *testing.T) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", ManagedFields: n.ManagedFields}}
		obj, _, err := dec.Decode(protobufBytes(t, pod), nil, nil)
		require.NoError(t, err)
		require.Equal(t, n.ManagedFields, obj.(*corev1.Pod).ManagedFields, "decoded whole")
	})
	t.Run("into another type", func(t *testing.T) {
		var u runtime.Unknown
		_, _, err := dec.Decode(protobufBytes(t, n), nil, &u)
		require.NoError(t, err)
		require.NotEmpty(t, u.Raw)
	})
}

// FuzzNode: any bytes decode without a panic; where the whole decode accepts them too, the two
// agree once stripped.
func FuzzNode(f *testing.F) {
	for _, n := range nodes() {
		b, err := n.Marshal()
		require.NoError(f, err)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var whole, fast corev1.Node
		errFast := cacheDecoder.Node(b, &fast)
		if whole.Unmarshal(b) != nil || errFast != nil {
			return
		}
		require.Equal(t, state.StripNode(&whole), state.StripNode(&fast))
	})
}

// BenchmarkDecodeKubeletNode: one kubelet node's watch event, decoded whole (as client-go does)
// and here; the cache's transform follows in both.
func BenchmarkDecodeKubeletNode(b *testing.B) {
	n := nodetest.DefaultKubeletFleet().Kubelet(5, time.Now())
	n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: make([]byte, 6000)}}}
	data := protobufBytes(b, n)
	keys := state.NewLabelKeys()
	for name, dec := range map[string]runtime.Decoder{
		"whole": wholeDecoder(),
		"short": protobufDecoder(b, cacheDecoder),
		// The labels the product reads, as serve decodes the node watch.
		"short-read-labels": protobufDecoder(b, Decoder{KeepAnnotation: state.KeptAnnotation, Labels: keys.DecodeLabels}),
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				obj, _, err := dec.Decode(data, nil, nil)
				if err != nil {
					b.Fatal(err)
				}
				state.StripNode(obj.(*corev1.Node))
			}
		})
	}
}
