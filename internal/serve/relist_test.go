package serve

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// TestRelisterKicksWatches: a relist ends the running watch with 410 Expired (the reflector then
// lists again); a watch started without a list while a relist is owed ends at once; a list, or a
// watch that streams the initial state, settles what is owed.
func TestRelisterKicksWatches(t *testing.T) {
	r := newRelister(nil)
	var fakes []*watch.FakeWatcher
	lw := r.wrap(toolscache.ToListerWatcherWithContext(&toolscache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &corev1.NodeList{}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			f := watch.NewFake()
			fakes = append(fakes, f)
			return f, nil
		},
	})).(toolscache.ListerWatcherWithContext)
	ctx := t.Context()
	expired := func(w watch.Interface) {
		t.Helper()
		for {
			select {
			case ev := <-w.ResultChan():
				if ev.Type != watch.Error {
					continue
				}
				if err := apierrors.FromObject(ev.Object); !apierrors.IsResourceExpired(err) {
					t.Fatalf("error event %v, want 410 Expired", err)
				}
				return
			case <-time.After(5 * time.Second):
				t.Fatal("the watch did not end with 410 Expired")
			}
		}
	}
	w, err := lw.WatchWithContext(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go fakes[0].Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}})
	if ev := <-w.ResultChan(); ev.Type != watch.Added {
		t.Fatalf("forwarded %v, want Added", ev.Type)
	}
	r.Relist()
	expired(w)

	// Owed: a plain watch ends at once.
	w, _ = lw.WatchWithContext(ctx, metav1.ListOptions{})
	expired(w)
	// A watch-list stream settles it.
	w, _ = lw.WatchWithContext(ctx, metav1.ListOptions{SendInitialEvents: ptr.To(true)})
	go fakes[len(fakes)-1].Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b"}})
	if ev := <-w.ResultChan(); ev.Type != watch.Added {
		t.Fatalf("stream forwarded %v, want Added", ev.Type)
	}
	w.Stop()
	// And a list.
	r.Relist()
	if _, err := lw.ListWithContext(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	w, _ = lw.WatchWithContext(ctx, metav1.ListOptions{})
	go fakes[len(fakes)-1].Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c"}})
	if ev := <-w.ResultChan(); ev.Type != watch.Added {
		t.Fatalf("after a list forwarded %v, want Added", ev.Type)
	}
	w.Stop()
}
