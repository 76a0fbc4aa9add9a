package nodedecode

import (
	"bytes"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// protobufPrefix starts every Kubernetes protobuf object (k8s.io/apimachinery's protobuf
// serializer): "k8s\x00", then a runtime.Unknown holding the type and the object's bytes.
var protobufPrefix = []byte{0x6b, 0x38, 0x73, 0x00}

// Codecs wraps a client's negotiated serializer: protobuf Nodes, NodeLists and lists of objects'
// metadata (PartialObjectMetadataList) decode with d, every other object and media type as base
// decodes them.
func Codecs(base runtime.NegotiatedSerializer, d Decoder) runtime.NegotiatedSerializer {
	return codecs{NegotiatedSerializer: base, d: d}
}

type codecs struct {
	runtime.NegotiatedSerializer
	d Decoder
}

func (c codecs) SupportedMediaTypes() []runtime.SerializerInfo {
	infos := slices.Clone(c.NegotiatedSerializer.SupportedMediaTypes())
	for i := range infos {
		if infos[i].MediaType != runtime.ContentTypeProtobuf {
			continue
		}
		if infos[i].Serializer != nil {
			infos[i].Serializer = serializer{Serializer: infos[i].Serializer, d: c.d}
		}
		if ss := infos[i].StreamSerializer; ss != nil && ss.Serializer != nil {
			stream := *ss
			stream.Serializer = watchEvents{Serializer: ss.Serializer}
			infos[i].StreamSerializer = &stream
		}
	}
	return infos
}

// watchEvents is the protobuf watch stream's serializer, which decodes each frame into a
// metav1.WatchEvent, but without copying the event's object: its Raw is a slice of the frame.
// That is safe because client-go's watch decoder (rest/watch.Decoder.Decode) decodes Raw into the
// event's object at once, before it reads the next frame into the same buffer, and the decoders
// behind it (serializer, and the base protobuf serializer) copy what they keep. The copy was a
// kubelet Node's 16 KB of garbage per event: 1 GB in a restart's first list at 65,000 nodes, a
// third of the product's CPU in it spent by the collector (BenchmarkWatchEvents). Anything but a
// WatchEvent, and a frame it cannot read, goes to the stream's own serializer.
type watchEvents struct{ runtime.Serializer }

var watchEventGVK = metav1.SchemeGroupVersion.WithKind("WatchEvent")

func (s watchEvents) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	ev, ok := into.(*metav1.WatchEvent)
	if !ok || ev == nil || len(data) == 0 {
		return s.Serializer.Decode(data, defaults, into)
	}
	var typ, raw []byte
	err := fields(data, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			typ = v
		case 2: // a runtime.RawExtension: its raw bytes are field 1
			return fields(v, func(num protowire.Number, v []byte) error {
				if num == 1 {
					raw = v
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return s.Serializer.Decode(data, defaults, into)
	}
	*ev = metav1.WatchEvent{Type: eventType(typ), Object: runtime.RawExtension{Raw: raw}}
	gvk := watchEventGVK
	return ev, &gvk, nil
}

// eventType is a watch event's type, the known ones without an allocation.
func eventType(b []byte) string {
	return string(known(b, watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error))
}

// serializer is the protobuf serializer but for Nodes, NodeLists and lists of metadata.
type serializer struct {
	runtime.Serializer
	d Decoder
}

var (
	nodeGVK, nodeListGVK = corev1.SchemeGroupVersion.WithKind("Node"), corev1.SchemeGroupVersion.WithKind("NodeList")
	metadataListGVK      = metav1.SchemeGroupVersion.WithKind("PartialObjectMetadataList")
)

func (s serializer) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	gvk, raw, ok := envelope(data)
	var obj runtime.Object
	var err error
	switch {
	case !ok:
	case gvk == nodeGVK:
		obj, ok, err = short(into, func(n *corev1.Node) error { return s.d.Node(raw, n) })
	case gvk == nodeListGVK:
		obj, ok, err = short(into, func(l *corev1.NodeList) error { return s.d.NodeList(raw, l) })
	case gvk == metadataListGVK:
		obj, ok, err = short(into, func(l *metav1.PartialObjectMetadataList) error { return s.d.MetadataList(raw, l) })
	default:
		ok = false
	}
	switch {
	case !ok:
		return s.Serializer.Decode(data, defaults, into)
	case err != nil:
		return nil, &gvk, err
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return obj, &gvk, nil
}

// short decodes with decode into into, or into a new T when into is nil (or a nil *T). ok is
// false, and nothing is decoded, when into is of another type.
func short[T any, P interface {
	*T
	runtime.Object
}](into runtime.Object, decode func(P) error) (obj runtime.Object, ok bool, err error) {
	p, is := into.(P)
	switch {
	case into == nil || is && p == nil:
		p = new(T)
	case !is:
		return nil, false, nil
	}
	return p, true, decode(p)
}

// envelope reads a protobuf object's type and bytes without copying them. ok is false for anything
// but a plain (not content-encoded) protobuf object with a kind and a version.
func envelope(data []byte) (gvk schema.GroupVersionKind, raw []byte, ok bool) {
	if !bytes.HasPrefix(data, protobufPrefix) {
		return gvk, nil, false
	}
	var apiVersion, encoding, contentType string
	err := fields(data[len(protobufPrefix):], func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			return fields(v, func(num protowire.Number, v []byte) error {
				switch num {
				case 1:
					apiVersion = string(v)
				case 2:
					gvk.Kind = string(v)
				}
				return nil
			})
		case 2:
			raw = v
		case 3:
			encoding = string(v)
		case 4:
			contentType = string(v)
		}
		return nil
	})
	if err != nil || encoding != "" || contentType != "" && contentType != runtime.ContentTypeProtobuf || gvk.Kind == "" || apiVersion == "" {
		return gvk, nil, false
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return gvk, nil, false
	}
	gvk.Group, gvk.Version = gv.Group, gv.Version
	return gvk, raw, true
}
