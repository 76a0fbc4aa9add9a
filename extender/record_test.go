package extender

import (
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv/nodetest"
)

// TestNodeRecordSize: the record stays in the allocator's 192-byte class (the node cache holds one
// per node: 65,000 of them). A field added to it must earn its bytes.
func TestNodeRecordSize(t *testing.T) {
	require.LessOrEqual(t, unsafe.Sizeof(Node{}), uintptr(192), "extender.Node")
	require.Less(t, unsafe.Sizeof(Node{}), unsafe.Sizeof(corev1.Node{}))
}

// TestFromNodeToNode: a record reads what the product reads of a Node, and gives it back.
func TestFromNodeToNode(t *testing.T) {
	del := metav1.NewTime(t0.Add(time.Hour))
	n := nodetest.New("a", nodetest.Zone("zone-a"), nodetest.Created(t0), nodetest.Cordoned, nodetest.ResourceVersion("7"),
		nodetest.Annotation(AnnotationClusterID, "224.0.0.1"), nodetest.Taint(corev1.Taint{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}))
	n.UID, n.DeletionTimestamp = "uid-a", &del
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}
	r := FromNode(n)
	require.Equal(t, n.Name, r.Name)
	require.Equal(t, n.UID, r.UID)
	require.Equal(t, "7", r.ResourceVersion)
	require.True(t, r.CreationTimestamp.Equal(&n.CreationTimestamp))
	require.Same(t, n.DeletionTimestamp, r.DeletionTimestamp)
	require.True(t, r.Spec.Unschedulable)
	require.Equal(t, n.Spec.Taints, r.Spec.Taints)
	require.Equal(t, n.Status.Conditions, r.Status.Conditions)
	require.Equal(t, n.Status.Addresses, r.Status.Addresses)
	require.Equal(t, IsReady(r), true)

	back := r.ToNode()
	require.Equal(t, "Node", back.Kind)
	require.Equal(t, "v1", back.APIVersion)
	require.Equal(t, r, FromNode(back), "a record through ToNode and FromNode")
	back.Labels["x"] = "y"
	require.NotContains(t, r.Labels, "x", "ToNode shares the record's labels")
	require.Nil(t, FromNode(nil))
}

// TestNodeDeepCopy: a copy shares nothing the product could write.
func TestNodeDeepCopy(t *testing.T) {
	r := FromNode(nodetest.New("a", nodetest.Zone("zone-a"), nodetest.Taint(corev1.Taint{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}),
		nodetest.Annotation(AnnotationClusterID, "224.0.0.1")))
	r.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}
	c := r.DeepCopy()
	require.Equal(t, r, c)
	c.Labels["x"], c.Annotations["y"] = "1", "2"
	c.Spec.Taints[0].Value = "w"
	c.Status.Conditions[0].Status = corev1.ConditionFalse
	c.Status.Addresses[0].Address = "10.0.0.2"
	require.NotContains(t, r.Labels, "x")
	require.NotContains(t, r.Annotations, "y")
	require.Equal(t, "v", r.Spec.Taints[0].Value)
	require.True(t, IsReady(r))
	require.Equal(t, "10.0.0.1", r.Status.Addresses[0].Address)
	require.Nil(t, (*Node)(nil).DeepCopy())
}

// TestNodeIsAnObject: metadata reads through the accessors the informer keys objects with see a
// record's fields (the node store's tests key records in an indexer); it reports itself a core/v1
// Node.
func TestNodeIsAnObject(t *testing.T) {
	r := FromNode(nodetest.New("node-1", nodetest.Zone("zone-a")))
	acc, err := meta.Accessor(r)
	require.NoError(t, err)
	require.Equal(t, "node-1", acc.GetName())
	require.Empty(t, acc.GetNamespace())
	acc.SetResourceVersion("42")
	require.Equal(t, "42", r.ResourceVersion)
	require.Equal(t, r.Labels, acc.GetLabels())
	require.Equal(t, corev1.SchemeGroupVersion.WithKind("Node"), r.GetObjectKind().GroupVersionKind())
	obj := r.DeepCopyObject()
	require.Equal(t, r, obj)
	require.NotSame(t, r, obj)
}
