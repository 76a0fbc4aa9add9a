package nodedecode

import (
	"bytes"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// protobufPrefix starts every Kubernetes protobuf object (k8s.io/apimachinery's protobuf
// serializer): "k8s\x00", then a runtime.Unknown holding the type and the object's bytes.
var protobufPrefix = []byte{0x6b, 0x38, 0x73, 0x00}

// Codecs wraps a client's negotiated serializer: protobuf Nodes and NodeLists decode with d, every
// other object and media type as base decodes them.
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
		if infos[i].MediaType == runtime.ContentTypeProtobuf && infos[i].Serializer != nil {
			infos[i].Serializer = serializer{Serializer: infos[i].Serializer, d: c.d}
		}
	}
	return infos
}

// serializer is the protobuf serializer but for Nodes and NodeLists.
type serializer struct {
	runtime.Serializer
	d Decoder
}

var nodeGVK, nodeListGVK = corev1.SchemeGroupVersion.WithKind("Node"), corev1.SchemeGroupVersion.WithKind("NodeList")

func (s serializer) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	gvk, raw, ok := envelope(data)
	if !ok {
		return s.Serializer.Decode(data, defaults, into)
	}
	switch {
	case gvk == nodeGVK:
		n, isNode := into.(*corev1.Node)
		switch {
		case into == nil:
			n = &corev1.Node{}
		case !isNode:
			return s.Serializer.Decode(data, defaults, into)
		}
		if err := s.d.Node(raw, n); err != nil {
			return nil, &gvk, err
		}
		n.SetGroupVersionKind(gvk)
		return n, &gvk, nil
	case gvk == nodeListGVK:
		l, isList := into.(*corev1.NodeList)
		switch {
		case into == nil:
			l = &corev1.NodeList{}
		case !isList:
			return s.Serializer.Decode(data, defaults, into)
		}
		if err := s.d.NodeList(raw, l); err != nil {
			return nil, &gvk, err
		}
		l.SetGroupVersionKind(gvk)
		return l, &gvk, nil
	}
	return s.Serializer.Decode(data, defaults, into)
}

// envelope reads a protobuf object's type and bytes without copying them. ok is false for anything
// but a plain (not content-encoded) protobuf object with a kind and a version.
func envelope(data []byte) (gvk schema.GroupVersionKind, raw []byte, ok bool) {
	if !bytes.HasPrefix(data, protobufPrefix) {
		return gvk, nil, false
	}
	var apiVersion, encoding, contentType string
	err := walk(data[len(protobufPrefix):], func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			return walk(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				switch {
				case typ != protowire.BytesType:
				case num == 1:
					apiVersion = string(v)
				case num == 2:
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
