package state

import (
	"maps"
	"slices"
	"strings"
	"unique"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// keptAnnotations are the node annotations the cache keeps: the ones this product owns (the
// protection annotations among them: whether a node carries them decides whether they are the
// product's, extender.OwnedAnnotationKeysOf), Calico's node labels and Calico's BGP addresses, IPv4 and IPv6 (the peer IPs a route reflector's CalicoNodeStatus reports
// for the node, read by the BGPSessions handover). Everything else (last-applied configurations,
// CSI and volume annotations) goes.
var keptAnnotations = func() map[string]bool {
	m := map[string]bool{extender.AnnotationCalicoLabels: true, extender.AnnotationCalicoIPv4: true, extender.AnnotationCalicoIPv6: true}
	for _, k := range slices.Concat(extender.OwnedAnnotationKeys(), policy.ProtectionAnnotations()) {
		m[k] = true
	}
	return m
}()

// uniqueAnnotations are the kept annotations whose value is one node's own (its BGP addresses).
var uniqueAnnotations = map[string]bool{extender.AnnotationCalicoIPv4: true, extender.AnnotationCalicoIPv6: true}

// KeptAnnotation reports whether the cache keeps a node annotation of this key (the webhooks'
// decoded nodes keep the same ones).
func KeptAnnotation(key string) bool { return keptAnnotations[key] }

// StripNode returns the record the node cache keeps of a node (extender.Node): only the fields the
// planner, the webhooks and the reconciler read. Everything else goes: managedFields,
// status.images, addresses but InternalIPs, capacity, node info, the heartbeat times and messages
// of conditions, all conditions but Ready (with its lastTransitionTime) and the pressure
// conditions that are True, and the spec but unschedulable and taints. It keeps a 65,000-node
// cache small and makes kubelet heartbeats invisible to everything but the resourceVersion. The
// node itself is left as it was (the record shares its taints). (The BGPSessions handover matches the
// InternalIPs against a route reflector's BGP peers when Calico's BGP address annotation is
// absent; a node that carries the annotation keeps no address at all: 54 heap bytes per node.)
//
// Label keys and values, and the kept annotations but the node's own BGP addresses, are interned
// (unique.Make): a kubelet's Node has
// some forty labels whose keys, and most values (zone, region, instance type, node pool, os,
// arch), are the same on thousands of nodes, and each decoded Node carries its own copy of them.
//
// StripNode keeps every label; the serve process's cache keeps only the labels the product reads
// (LabelKeys.Strip).
func StripNode(n *corev1.Node) *extender.Node { return stripNode(n, nil) }

// stripNode is StripNode keeping the labels whose key keep accepts (every label when keep is nil):
// a new record of what the product reads of n; n itself is left as it was.
func stripNode(n *corev1.Node, keep func(key string) bool) *extender.Node {
	r := &extender.Node{ObjectMeta: extender.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion,
		Generation: n.Generation, CreationTimestamp: n.CreationTimestamp, DeletionTimestamp: n.DeletionTimestamp}}
	if len(n.Labels) > 0 {
		var labels map[string]string
		for k, v := range n.Labels {
			if keep == nil || keep(k) {
				if labels == nil {
					labels = make(map[string]string, sizeHint(keep, len(n.Labels)))
				}
				labels[intern(k)] = intern(v)
			}
		}
		r.Labels = labels
	}
	if len(n.Annotations) > 0 {
		var keep map[string]string
		for k, v := range n.Annotations {
			if keptAnnotations[k] {
				if keep == nil {
					keep = map[string]string{}
				}
				if uniqueAnnotations[k] {
					keep[intern(k)] = strings.Clone(v) // one node's own: interning would only add an entry
				} else {
					keep[intern(k)] = intern(v)
				}
			}
		}
		r.Annotations = keep
	}
	r.Spec = extender.NodeSpec{Unschedulable: n.Spec.Unschedulable, Taints: n.Spec.Taints}
	ready := extender.SlimConditions(n.Status.Conditions)
	var internal []corev1.NodeAddress
	if !extender.HasCalicoAddress(r) {
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				internal = append(internal, a)
			}
		}
	}
	r.Status = extender.NodeStatus{Conditions: ready, Addresses: internal}
	return r
}

// reuseKept points the kept parts of n, a node just stripped, at those of was, the cache's object
// of the same node, where they are equal: its name and UID, annotations, conditions, addresses and
// taints (its labels are shared already: LabelKeys.share). A kubelet's status report changes
// none of them, only the resourceVersion. Without this, each report would replace every part
// with a new copy of the same bytes, a small object placed among older ones. With it, the decoded
// copies are garbage at once: the live heap is the same, and the heap the collector keeps in use
// is about a tenth smaller (BenchmarkHeartbeatHeap, issue 38). The cache's objects are never
// modified, so sharing their parts is safe.
func reuseKept(n, was *extender.Node) {
	if was == n || was.UID != n.UID || was.Name != n.Name {
		return
	}
	n.Name, n.UID = was.Name, was.UID
	if maps.Equal(n.Annotations, was.Annotations) {
		n.Annotations = was.Annotations
	}
	if slices.Equal(n.Status.Addresses, was.Status.Addresses) {
		n.Status.Addresses = was.Status.Addresses
	}
	if slices.EqualFunc(n.Status.Conditions, was.Status.Conditions, sameCondition) {
		n.Status.Conditions = was.Status.Conditions
	}
	if slices.EqualFunc(n.Spec.Taints, was.Spec.Taints, sameTaint) {
		n.Spec.Taints = was.Spec.Taints
	}
}

func sameCondition(a, b corev1.NodeCondition) bool {
	return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message &&
		a.LastTransitionTime.Equal(&b.LastTransitionTime) && a.LastHeartbeatTime.Equal(&b.LastHeartbeatTime)
}

func sameTaint(a, b corev1.Taint) bool {
	return a.Key == b.Key && a.Value == b.Value && a.Effect == b.Effect && a.TimeAdded.Equal(b.TimeAdded)
}

// TransformStrip is the cache's transform: nodes are stripped with StripNode, every other object
// loses its managedFields.
func TransformStrip(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Node:
		return StripNode(o), nil
	case *extender.Node: // stripped already: the informer may transform an object twice
		return o, nil
	case client.Object:
		o.SetManagedFields(nil)
		return o, nil
	}
	return obj, nil
}

// sizeHint is the size of a stripped node's labels map: all of them, or a few.
func sizeHint(keep func(string) bool, n int) int {
	if keep == nil {
		return n
	}
	return min(n, 4)
}

// intern returns the canonical copy of s: equal strings share their bytes.
func intern(s string) string { return unique.Make(s).Value() }
