// Package nodedecode decodes a Node from its protobuf bytes keeping only what the product reads,
// and skips the rest without allocating it: managed fields, owner references, the annotations the
// cache drops, every spec field but unschedulable and taints, and every status field but the
// conditions (their type, status and last transition time) and the addresses. A kubelet's Node is
// about 16 KB of JSON, most of it images, node info, capacity and managed fields; the full decode
// of each watch event was the product's largest CPU cost at 65,000 nodes (a restart's first list,
// kubelet heartbeats) and most of its garbage.
//
// The result is the input of the cache's transform (state.LabelKeys.Strip), which still strips
// and interns: after it, a node decoded here equals one decoded whole (the tests hold them equal).
package nodedecode

import (
	"bytes"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// Decoder decodes Nodes. KeepAnnotation says which annotations to keep (all when nil); the
// watch-list markers client-go reads on bookmarks (metav1.InitialEventsAnnotationKey and its
// kin) are always kept.
type Decoder struct {
	KeepAnnotation func(key string) bool
	// Labels, when set, is asked once per Node for the labels to keep (keep sees the key's bytes,
	// which it must not retain) and the generation of that choice (a set of keys that only
	// grows, as the cache's: state.LabelKeys.DecodeLabels). The labels it does not keep are
	// skipped without being allocated, and the Node's metadata.generation, which the API server
	// leaves at 0 on Nodes, is set to the generation negated: a Node decoded while the set grew
	// says which set it was decoded under (state.LabelKeys.Strip stamps it with that one). Every
	// label is kept when Labels is nil.
	Labels func() (keep func(key []byte) bool, generation int64)
}

// initialEventsPrefix is the watch-list bookmarks' annotations (metav1.InitialEventsAnnotationKey).
var initialEventsPrefix = metav1.InitialEventsAnnotationKey[:len("k8s.io/initial-events")]

// Node decodes a Node message (the bytes inside the protobuf envelope) into n, which it resets.
func (d Decoder) Node(b []byte, n *corev1.Node) error {
	*n = corev1.Node{}
	var keepLabel func([]byte) bool
	var generation int64
	if d.Labels != nil {
		keepLabel, generation = d.Labels()
	}
	return fields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			if err := d.objectMeta(v, &n.ObjectMeta, keepLabel); err != nil {
				return err
			}
			if keepLabel != nil {
				n.Generation = -generation
			}
			return nil
		case 2:
			return spec(v, &n.Spec)
		case 3:
			return status(v, &n.Status)
		}
		return nil
	})
}

// NodeList decodes a NodeList message into l, which it resets.
func (d Decoder) NodeList(b []byte, l *corev1.NodeList) error {
	*l = corev1.NodeList{}
	return list(b, &l.ListMeta, func(v []byte) error {
		l.Items = append(l.Items, corev1.Node{})
		return d.Node(v, &l.Items[len(l.Items)-1])
	})
}

// MetadataList decodes a PartialObjectMetadataList (a list of objects' metadata, as the API
// server sends it for Accept: ...;as=PartialObjectMetadataList) into l, which it resets: each
// item's metadata as Node decodes a node's.
func (d Decoder) MetadataList(b []byte, l *metav1.PartialObjectMetadataList) error {
	*l = metav1.PartialObjectMetadataList{}
	return list(b, &l.ListMeta, func(v []byte) error {
		l.Items = append(l.Items, metav1.PartialObjectMetadata{})
		item := &l.Items[len(l.Items)-1]
		return fields(v, func(num protowire.Number, v []byte) error {
			if num == 1 {
				return d.objectMeta(v, &item.ObjectMeta, nil)
			}
			return nil
		})
	})
}

// list decodes a list message: its ListMeta (field 1) into meta, each item (field 2) with item.
func list(b []byte, meta *metav1.ListMeta, item func(v []byte) error) error {
	return fields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			return meta.Unmarshal(v)
		case 2:
			return item(v)
		}
		return nil
	})
}

func (d Decoder) keepAnnotation(k string) bool {
	return d.KeepAnnotation == nil || d.KeepAnnotation(k) ||
		strings.HasPrefix(k, initialEventsPrefix)
}

// objectMeta decodes an ObjectMeta but its owner references, managed fields, the annotations
// the decoder does not keep and the labels keepLabel does not (every label when it is nil).
func (d Decoder) objectMeta(b []byte, m *metav1.ObjectMeta, keepLabel func([]byte) bool) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ == protowire.VarintType {
			x, _ := protowire.ConsumeVarint(v)
			switch num {
			case 7:
				m.Generation = int64(x)
			case 10:
				g := int64(x)
				m.DeletionGracePeriodSeconds = &g
			}
			return nil
		}
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			m.Name = string(v)
		case 2:
			m.GenerateName = string(v)
		case 3:
			m.Namespace = string(v)
		case 4:
			m.SelfLink = string(v)
		case 5:
			m.UID = types.UID(v)
		case 6:
			m.ResourceVersion = string(v)
		case 8:
			return m.CreationTimestamp.Unmarshal(v)
		case 9:
			m.DeletionTimestamp = &metav1.Time{}
			return m.DeletionTimestamp.Unmarshal(v)
		case 11:
			return mapEntry(v, func(k, val []byte) {
				if keepLabel != nil && !keepLabel(k) {
					return
				}
				if m.Labels == nil {
					m.Labels = map[string]string{}
				}
				m.Labels[string(k)] = string(val)
			})
		case 12:
			return mapEntry(v, func(k, val []byte) {
				if !d.keepAnnotation(string(k)) { // no allocation: the conversion does not escape
					return
				}
				if m.Annotations == nil {
					m.Annotations = map[string]string{}
				}
				m.Annotations[string(k)] = string(val)
			})
		case 14:
			m.Finalizers = append(m.Finalizers, string(v))
		}
		return nil
	})
}

// spec decodes unschedulable and the taints.
func spec(b []byte, s *corev1.NodeSpec) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == 4 && typ == protowire.VarintType:
			x, _ := protowire.ConsumeVarint(v)
			s.Unschedulable = x != 0
		case num == 5 && typ == protowire.BytesType:
			s.Taints = append(s.Taints, corev1.Taint{})
			return s.Taints[len(s.Taints)-1].Unmarshal(v)
		}
		return nil
	})
}

// status decodes the conditions (type, status, last transition time) and the addresses, each list
// in one allocation of its length (appending one by one allocated a kubelet's five conditions
// four times: 1.7 KB of garbage per event).
func status(b []byte, s *corev1.NodeStatus) error {
	var conditions, addresses int
	if err := fields(b, func(num protowire.Number, _ []byte) error {
		switch num {
		case 4:
			conditions++
		case 5:
			addresses++
		}
		return nil
	}); err != nil {
		return err
	}
	if conditions > 0 {
		s.Conditions = make([]corev1.NodeCondition, 0, conditions)
	}
	if addresses > 0 {
		s.Addresses = make([]corev1.NodeAddress, 0, addresses)
	}
	return fields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 4:
			s.Conditions = append(s.Conditions, corev1.NodeCondition{})
			return condition(v, &s.Conditions[len(s.Conditions)-1])
		case 5:
			s.Addresses = append(s.Addresses, corev1.NodeAddress{})
			return s.Addresses[len(s.Addresses)-1].Unmarshal(v)
		}
		return nil
	})
}

// condition decodes a NodeCondition's type, status and last transition time (the heartbeat time
// changes with every kubelet report and nothing reads it). Of the reason and message it keeps, as
// constants (no allocation), only what says the kubelet's graceful node shutdown
// (extender.IsShuttingDown); extender.SlimConditions keeps them on the Ready condition only.
func condition(b []byte, c *corev1.NodeCondition) error {
	return fields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			c.Type = conditionType(v)
		case 2:
			c.Status = conditionStatus(v)
		case 4:
			return c.LastTransitionTime.Unmarshal(v)
		case 5:
			if string(v) == extender.ReadyReasonKubeletNotReady {
				c.Reason = extender.ReadyReasonKubeletNotReady
			}
		case 6:
			if bytes.Contains(v, shuttingDown) {
				c.Message = extender.MessageNodeShuttingDown
			}
		}
		return nil
	})
}

var shuttingDown = []byte(extender.MessageNodeShuttingDown)

// conditionType is a condition's type, a kubelet's without an allocation.
func conditionType(b []byte) corev1.NodeConditionType {
	return known(b, corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure,
		corev1.NodeNetworkUnavailable)
}

// conditionStatus is a condition's status, without an allocation for True, False and Unknown.
func conditionStatus(b []byte) corev1.ConditionStatus {
	return known(b, corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown)
}

// known returns the constant of consts whose bytes are b (no allocation), or a new string of b.
func known[T ~string](b []byte, consts ...T) T {
	for _, c := range consts {
		if string(b) == string(c) {
			return c
		}
	}
	return T(b)
}

// mapEntry decodes one entry of a map<string, string>.
func mapEntry(b []byte, set func(k, v []byte)) error {
	var k, val []byte
	err := fields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			k = v
		case 2:
			val = v
		}
		return nil
	})
	if err == nil {
		set(k, val)
	}
	return err
}

// fields calls f with each length-delimited field of a message (a string, bytes, a message, a map
// entry): its number and content. Other fields are skipped.
func fields(b []byte, f func(num protowire.Number, v []byte) error) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		return f(num, v)
	})
}

// walk calls f with each field of a message: for a length-delimited field v is its content, for a
// varint its encoding; other fields are skipped after f.
func walk(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("node protobuf: %w", protowire.ParseError(n))
		}
		b = b[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			c, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return fmt.Errorf("node protobuf: field %d: %w", num, protowire.ParseError(m))
			}
			v, n = c, m
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fmt.Errorf("node protobuf: field %d: %w", num, protowire.ParseError(n))
			}
			v = b[:n]
		}
		if err := f(num, typ, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}
