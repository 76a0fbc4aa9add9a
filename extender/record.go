package extender

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Node is what the product reads of a Kubernetes Node: the planner, the webhooks and the
// reconciler all take it, and the node cache holds one per node (184 bytes, where a corev1.Node
// is 768 before its maps and slices). Its fields keep corev1.Node's paths (n.Name, n.Labels,
// n.Spec.Taints, n.Status.Conditions), so a reader of one reads the other. FromNode makes one
// of a corev1.Node at the edges: the webhooks' decode, the plan command's nodes file, the etcd
// datastore and tests; the cache's transform makes one of each node it strips (state.LabelKeys).
//
// A Node is never modified once it is shared (cached, planned or recorded): a change is a copy.
// It implements client.Object so that the node informer can key and index it and deliver it to
// controller-runtime's event handlers; its metadata setters for fields it does not hold do
// nothing.
type Node struct {
	ObjectMeta
	Spec   NodeSpec
	Status NodeStatus
}

// ObjectMeta is the metadata of a Node that the product reads. Generation is the node cache's
// stamp of the label keys it kept (state.StrippedUnder), not the API object's generation.
type ObjectMeta struct {
	Name              string
	UID               types.UID
	ResourceVersion   string
	Generation        int64
	CreationTimestamp metav1.Time
	DeletionTimestamp *metav1.Time
	Labels            map[string]string
	Annotations       map[string]string
}

// NodeSpec is the spec of a Node that the product reads.
type NodeSpec struct {
	Unschedulable bool
	Taints        []corev1.Taint
}

// NodeStatus is the status of a Node that the product reads: its conditions (the node cache keeps
// Ready and the pressure conditions that are True: SlimConditions) and its addresses (the cache
// keeps the InternalIPs of a node without Calico's BGP address annotation).
type NodeStatus struct {
	Conditions []corev1.NodeCondition
	Addresses  []corev1.NodeAddress
}

// FromNode returns the fields of n that the product reads, sharing n's maps and slices; nil for
// nil.
func FromNode(n *corev1.Node) *Node {
	if n == nil {
		return nil
	}
	return &Node{
		ObjectMeta: ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Generation: n.Generation,
			CreationTimestamp: n.CreationTimestamp, DeletionTimestamp: n.DeletionTimestamp,
			Labels: n.Labels, Annotations: n.Annotations},
		Spec:   NodeSpec{Unschedulable: n.Spec.Unschedulable, Taints: n.Spec.Taints},
		Status: NodeStatus{Conditions: n.Status.Conditions, Addresses: n.Status.Addresses},
	}
}

// FromNodes is FromNode of each node.
func FromNodes(nodes []*corev1.Node) []*Node {
	out := make([]*Node, len(nodes))
	for i, n := range nodes {
		out[i] = FromNode(n)
	}
	return out
}

// ToNode returns n as a corev1.Node (a deep copy), for what writes or prints API objects.
func (n *Node) ToNode() *corev1.Node {
	c := n.DeepCopy()
	return &corev1.Node{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, UID: c.UID, ResourceVersion: c.ResourceVersion,
			CreationTimestamp: c.CreationTimestamp, DeletionTimestamp: c.DeletionTimestamp,
			Labels: c.Labels, Annotations: c.Annotations},
		Spec:   corev1.NodeSpec{Unschedulable: c.Spec.Unschedulable, Taints: c.Spec.Taints},
		Status: corev1.NodeStatus{Conditions: c.Status.Conditions, Addresses: c.Status.Addresses},
	}
}

// DeepCopy returns a copy of n that shares nothing with it.
func (n *Node) DeepCopy() *Node {
	if n == nil {
		return nil
	}
	c := *n
	c.CreationTimestamp = *n.CreationTimestamp.DeepCopy()
	c.DeletionTimestamp = n.DeletionTimestamp.DeepCopy()
	c.Labels = maps.Clone(n.Labels)
	c.Annotations = maps.Clone(n.Annotations)
	if n.Spec.Taints != nil {
		c.Spec.Taints = make([]corev1.Taint, len(n.Spec.Taints))
		for i := range n.Spec.Taints {
			n.Spec.Taints[i].DeepCopyInto(&c.Spec.Taints[i])
		}
	}
	if n.Status.Conditions != nil {
		c.Status.Conditions = make([]corev1.NodeCondition, len(n.Status.Conditions))
		for i := range n.Status.Conditions {
			n.Status.Conditions[i].DeepCopyInto(&c.Status.Conditions[i])
		}
	}
	if n.Status.Addresses != nil {
		c.Status.Addresses = append([]corev1.NodeAddress(nil), n.Status.Addresses...)
	}
	return &c
}

// nodeGVK is the kind a Node reports (GetObjectKind): a Kubernetes Node's.
var nodeGVK = corev1.SchemeGroupVersion.WithKind("Node")

// GetObjectKind implements runtime.Object: a Node is a core/v1 Node.
func (n *Node) GetObjectKind() schema.ObjectKind { return nodeKind{} }

// DeepCopyObject implements runtime.Object.
func (n *Node) DeepCopyObject() runtime.Object { return n.DeepCopy() }

// nodeKind is the fixed ObjectKind of a Node.
type nodeKind struct{}

func (nodeKind) SetGroupVersionKind(schema.GroupVersionKind)      {}
func (nodeKind) GroupVersionKind() schema.GroupVersionKind        { return nodeGVK }
func (n *ObjectMeta) GetNamespace() string                        { return "" }
func (n *ObjectMeta) SetNamespace(string)                         {}
func (n *ObjectMeta) GetName() string                             { return n.Name }
func (n *ObjectMeta) SetName(name string)                         { n.Name = name }
func (n *ObjectMeta) GetGenerateName() string                     { return "" }
func (n *ObjectMeta) SetGenerateName(string)                      {}
func (n *ObjectMeta) GetUID() types.UID                           { return n.UID }
func (n *ObjectMeta) SetUID(uid types.UID)                        { n.UID = uid }
func (n *ObjectMeta) GetResourceVersion() string                  { return n.ResourceVersion }
func (n *ObjectMeta) SetResourceVersion(v string)                 { n.ResourceVersion = v }
func (n *ObjectMeta) GetGeneration() int64                        { return n.Generation }
func (n *ObjectMeta) SetGeneration(g int64)                       { n.Generation = g }
func (n *ObjectMeta) GetSelfLink() string                         { return "" }
func (n *ObjectMeta) SetSelfLink(string)                          {}
func (n *ObjectMeta) GetCreationTimestamp() metav1.Time           { return n.CreationTimestamp }
func (n *ObjectMeta) SetCreationTimestamp(t metav1.Time)          { n.CreationTimestamp = t }
func (n *ObjectMeta) GetDeletionTimestamp() *metav1.Time          { return n.DeletionTimestamp }
func (n *ObjectMeta) SetDeletionTimestamp(t *metav1.Time)         { n.DeletionTimestamp = t }
func (n *ObjectMeta) GetDeletionGracePeriodSeconds() *int64       { return nil }
func (n *ObjectMeta) SetDeletionGracePeriodSeconds(*int64)        {}
func (n *ObjectMeta) GetLabels() map[string]string                { return n.Labels }
func (n *ObjectMeta) SetLabels(l map[string]string)               { n.Labels = l }
func (n *ObjectMeta) GetAnnotations() map[string]string           { return n.Annotations }
func (n *ObjectMeta) SetAnnotations(a map[string]string)          { n.Annotations = a }
func (n *ObjectMeta) GetFinalizers() []string                     { return nil }
func (n *ObjectMeta) SetFinalizers([]string)                      {}
func (n *ObjectMeta) GetOwnerReferences() []metav1.OwnerReference { return nil }
func (n *ObjectMeta) SetOwnerReferences([]metav1.OwnerReference)  {}
func (n *ObjectMeta) GetManagedFields() []metav1.ManagedFieldsEntry {
	return nil
}
func (n *ObjectMeta) SetManagedFields([]metav1.ManagedFieldsEntry) {}

var (
	_ metav1.Object  = &Node{}
	_ runtime.Object = &Node{}
)
