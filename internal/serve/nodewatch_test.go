package serve

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv/nodetest"
)

// TestNodeListWatchDecodesShort: on a real API server (protobuf responses), the node informer's
// list, watch-list stream and watch, and the takeover's pages of metadata, return nodes without what the cache never keeps (images, node info, managed
// fields, other annotations) and with what it keeps (labels, Calico's address, conditions).
func TestNodeListWatchDecodesShort(t *testing.T) {
	env := testenv.Start(t)
	admin := kubernetes.NewForConfigOrDie(env.Config)
	n := nodetest.DefaultKubeletFleet().Kubelet(3, time.Now())
	n.Annotations[extender.AnnotationCalicoIPv4] = "10.16.0.3/16"
	_, err := admin.CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{})
	require.NoError(t, err)
	rc, err := nodeClient(env.Config, nil)
	require.NoError(t, err)
	lw := nodeListWatch(rc)

	check := func(got *corev1.Node) {
		t.Helper()
		require.Equal(t, n.Name, got.Name)
		require.NotEmpty(t, got.ResourceVersion)
		require.Equal(t, n.Labels, got.Labels)
		require.Equal(t, map[string]string{extender.AnnotationCalicoIPv4: "10.16.0.3/16"}, got.Annotations)
		require.Empty(t, got.ManagedFields)
		require.Empty(t, got.Status.Images)
		require.Equal(t, corev1.NodeSystemInfo{}, got.Status.NodeInfo)
		require.Len(t, got.Status.Conditions, len(n.Status.Conditions))
	}
	obj, err := lw.ListWithContext(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	list := obj.(*corev1.NodeList)
	require.Len(t, list.Items, 1)
	check(&list.Items[0])

	// The first sync as client-go's WatchListClient asks for it: the nodes as events, then a
	// bookmark that must keep its initial-events-end annotation (nothing else ends the sync).
	stream, err := lw.WatchWithContext(t.Context(), metav1.ListOptions{SendInitialEvents: ptr.To(true),
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
	require.NoError(t, err)
	defer stream.Stop()
	for _, want := range []watch.EventType{watch.Added, watch.Bookmark} {
		select {
		case ev := <-stream.ResultChan():
			require.Equal(t, want, ev.Type)
			if want == watch.Added {
				check(ev.Object.(*corev1.Node))
			} else {
				require.Equal(t, "true", ev.Object.(*corev1.Node).Annotations[metav1.InitialEventsAnnotationKey])
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s event in 30s", want)
		}
	}

	// The takeover's read of the nodes' versions: their metadata, short too.
	page, err := nodeMetadataPages(rc)(t.Context(), metav1.ListOptions{Limit: catchUpPage})
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
	require.Equal(t, n.Name, page.Items[0].Name)
	require.Equal(t, list.Items[0].ResourceVersion, page.Items[0].ResourceVersion)
	require.Empty(t, page.Items[0].ManagedFields)

	w, err := lw.WatchWithContext(t.Context(), metav1.ListOptions{ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true})
	require.NoError(t, err)
	defer w.Stop()
	n.Labels["example.com/changed"] = "1"
	_, err = admin.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{})
	require.NoError(t, err)
	select {
	case ev := <-w.ResultChan():
		require.Equal(t, watch.Modified, ev.Type)
		check(ev.Object.(*corev1.Node))
	case <-time.After(30 * time.Second):
		t.Fatal("no watch event in 30s")
	}
}
