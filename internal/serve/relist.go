package serve

import (
	"context"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
)

// relister makes the node informer list again when asked (state.LabelKeys.Want, when the cache
// must refill a label key it dropped): it wraps the informer's ListerWatcher, and ends the current
// watch with the error the API server sends when a watch's resource version is too old (410
// Expired). client-go's reflector then lists again (as a stream of watch events with
// WatchListClient), and every node passes the cache's transform again. A watch that starts
// without listing while a relist is owed ends the same way at once.
type relister struct {
	mu sync.Mutex
	// wanted counts the relists asked for, listed the relists a list (or a watch-list stream)
	// started since.
	wanted, listed uint64
	kick           chan struct{} // closed on each request: the running watches end
	// nodes, when set, replaces the node informer's ListerWatcher (nodeListWatch).
	nodes toolscache.ListerWatcher
	// progress records the node watch's events for the takeover (catchUp).
	progress *watchProgress
}

func newRelister(nodes toolscache.ListerWatcher) *relister {
	return &relister{kick: make(chan struct{}), nodes: nodes, progress: newWatchProgress()}
}

// Relist asks for a new list.
func (r *relister) Relist() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wanted++
	close(r.kick)
	r.kick = make(chan struct{})
}

// newInformer is cache.Options.NewInformer: the node informer's ListerWatcher (r.nodes if set)
// wrapped.
func (r *relister) newInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
	if _, ok := obj.(*corev1.Node); ok {
		if r.nodes != nil {
			lw = r.nodes
		}
		lw = r.wrap(toolscache.ToListerWatcherWithContext(lw))
	}
	return toolscache.NewSharedIndexInformer(lw, obj, resync, idx)
}

func (r *relister) wrap(lw toolscache.ListerWatcherWithContext) toolscache.ListerWatcher {
	return &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			r.started()
			return lw.ListWithContext(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			r.mu.Lock()
			kick, owed := r.kick, r.listed < r.wanted
			if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
				r.listed, owed = r.wanted, false
			}
			r.mu.Unlock()
			w, err := lw.WatchWithContext(ctx, opts)
			if err != nil {
				return nil, err
			}
			return newKickable(w, kick, owed, r.progress), nil
		},
	}
}

func (r *relister) started() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.listed = r.wanted
}

// kickable forwards a watch's events until kick is closed (or at once when expired), then sends
// the 410 Expired error and stops the watch. Each event is shown to progress first.
type kickable struct {
	w    watch.Interface
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
	// progress sees each event before it is forwarded.
	progress *watchProgress
}

func newKickable(w watch.Interface, kick <-chan struct{}, expired bool, progress *watchProgress) *kickable {
	k := &kickable{w: w, out: make(chan watch.Event), stop: make(chan struct{}), progress: progress}
	go k.run(kick, expired)
	return k
}

func (k *kickable) run(kick <-chan struct{}, expired bool) {
	defer close(k.out)
	defer k.w.Stop()
	in := k.w.ResultChan()
	for !expired {
		select {
		case ev, ok := <-in:
			if !ok {
				return
			}
			k.progress.observe(ev)
			select {
			case k.out <- ev:
			case <-k.stop:
				return
			}
		case <-kick:
			expired = true
		case <-k.stop:
			return
		}
	}
	select {
	case k.out <- watch.Event{Type: watch.Error, Object: &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired,
		Message: "calico-rr-autoscaler: the node cache lists again to keep a label key it dropped",
	}}:
	case <-k.stop:
	}
}

func (k *kickable) Stop() { k.once.Do(func() { close(k.stop) }) }

func (k *kickable) ResultChan() <-chan watch.Event { return k.out }
