package nodedecode

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	restwatch "k8s.io/client-go/rest/watch"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
)

// watchFrames is a protobuf watch stream as the API server writes it: each event a length-prefixed
// WatchEvent whose object is the protobuf envelope of obj.
func watchFrames(t testing.TB, events ...watch.Event) []byte {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	require.True(t, ok)
	var buf bytes.Buffer
	w := info.StreamSerializer.Framer.NewFrameWriter(&buf)
	for _, ev := range events {
		b, err := (&metav1.WatchEvent{Type: string(ev.Type), Object: runtime.RawExtension{Raw: protobufBytes(t, ev.Object)}}).Marshal()
		require.NoError(t, err)
		_, err = w.Write(b)
		require.NoError(t, err)
	}
	return buf.Bytes()
}

// watchDecoder decodes a watch stream as client-go's REST client does with ns (rest.Request's
// newStreamWatcher): the stream serializer reads each frame's WatchEvent, the object decoder its object.
func watchDecoder(t testing.TB, ns runtime.NegotiatedSerializer, stream []byte) *restwatch.Decoder {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(ns.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	require.True(t, ok)
	frames := info.StreamSerializer.Framer.NewFrameReader(io.NopCloser(bytes.NewReader(stream)))
	return restwatch.NewDecoder(streaming.NewDecoder(frames, info.StreamSerializer.Serializer),
		ns.DecoderToVersion(info.Serializer, corev1.SchemeGroupVersion))
}

// TestWatchEventsDecodeWithoutCopy: through Codecs, a watch stream's events decode as client-go's
// own codecs decode them (nodes once stripped, a bookmark, an error's Status), and a decoded node
// keeps nothing of the stream's buffer: it is unchanged after the next frames are read into it.
func TestWatchEventsDecodeWithoutCopy(t *testing.T) {
	ns := nodes()
	events := []watch.Event{
		{Type: watch.Added, Object: ns["every kept field"]},
		{Type: watch.Modified, Object: ns["ready"]},
		{Type: watch.Deleted, Object: ns["registering"]},
		{Type: watch.Bookmark, Object: ns["bookmark"]},
		{Type: watch.Error, Object: &metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonExpired, Code: 410, Message: "too old"}},
	}
	stream := watchFrames(t, events...)
	short := watchDecoder(t, Codecs(scheme.Codecs.WithoutConversion(), cacheDecoder), stream)
	whole := watchDecoder(t, scheme.Codecs.WithoutConversion(), stream)
	var kept []runtime.Object
	for i, want := range events {
		typ, got, err := short.Decode()
		require.NoError(t, err, "event %d", i)
		wtyp, wobj, err := whole.Decode()
		require.NoError(t, err, "event %d", i)
		require.Equal(t, want.Type, typ, "event %d", i)
		require.Equal(t, wtyp, typ, "event %d", i)
		if n, ok := got.(*corev1.Node); ok {
			require.Empty(t, n.ManagedFields, "event %d: decoded short", i)
			require.Equal(t, state.StripNode(wobj.(*corev1.Node).DeepCopy()), state.StripNode(n.DeepCopy()), "event %d", i)
		} else {
			require.Equal(t, wobj, got, "event %d", i)
		}
		kept = append(kept, got)
		// Every event decoded so far is what it was: none shares the buffer the frames are read into.
		for j, k := range kept[:i] {
			require.Equal(t, k, mustDecodeAgain(t, stream, j), "event %d after event %d was read", j, i)
		}
	}
	_, _, err := short.Decode()
	require.ErrorIs(t, err, io.EOF)
}

// mustDecodeAgain decodes the i-th event of stream on a fresh decoder.
func mustDecodeAgain(t *testing.T, stream []byte, i int) runtime.Object {
	t.Helper()
	d := watchDecoder(t, Codecs(scheme.Codecs.WithoutConversion(), cacheDecoder), stream)
	for range i {
		_, _, err := d.Decode()
		require.NoError(t, err)
	}
	_, obj, err := d.Decode()
	require.NoError(t, err)
	return obj
}

// TestWatchEventsFallBack: what the short path does not read (a frame that is no WatchEvent
// message, another target type) goes to the stream's own serializer, and fails as it does.
func TestWatchEventsFallBack(t *testing.T) {
	info, _ := runtime.SerializerInfoForMediaType(Codecs(scheme.Codecs.WithoutConversion(), cacheDecoder).SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	s := info.StreamSerializer.Serializer
	require.IsType(t, watchEvents{}, s)
	_, _, err := s.Decode([]byte{0x0a, 0x05, 'A'}, nil, &metav1.WatchEvent{})
	require.Error(t, err, "a truncated frame")
	_, _, err = s.Decode(nil, nil, &metav1.WatchEvent{})
	require.Error(t, err, "an empty frame")
	var u runtime.Unknown
	_, _, err = s.Decode([]byte{1, 2, 3}, nil, &u)
	require.NoError(t, err)
	require.Equal(t, []byte{1, 2, 3}, u.Raw, "decoded by the stream's serializer")
}

// BenchmarkWatchEvents: decoding one event of a watch stream of kubelet Nodes (16 KB each), as
// the node informer's watch does, with client-go's codecs and with Codecs (short node decode,
// events not copied).
func BenchmarkWatchEvents(b *testing.B) {
	const n = 200
	node := nodes()["ready"]
	events := make([]watch.Event, n)
	for i := range events {
		events[i] = watch.Event{Type: watch.Modified, Object: node}
	}
	stream := watchFrames(b, events...)
	for _, bc := range []struct {
		name string
		ns   runtime.NegotiatedSerializer
	}{
		{"client-go", scheme.Codecs.WithoutConversion()},
		{"codecs", Codecs(scheme.Codecs.WithoutConversion(), cacheDecoder)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(stream) / n))
			var d *restwatch.Decoder
			left := 0
			for b.Loop() {
				if left == 0 {
					d, left = watchDecoder(b, bc.ns, stream), n
				}
				if _, _, err := d.Decode(); err != nil {
					b.Fatal(err)
				}
				left--
			}
		})
	}
}
