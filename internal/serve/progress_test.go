package serve

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
)

func nodeAt(name string, rv int) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: strconv.Itoa(rv)}}
}

// TestWatchProgressCaughtUp: the takeover's watch check holds only when the watch reached the
// consistent read's version and the cache applied every node event up to it: an event the cache
// has not applied yet (an update, a creation, a deletion) keeps it false, an event after the
// version does not, and a bookmark moves the watch without an event to apply.
func TestWatchProgressCaughtUp(t *testing.T) {
	type event struct {
		typ  watch.EventType
		name string
		rv   int
	}
	for _, tc := range []struct {
		name   string
		events []event
		cache  map[string]int // node -> the cache's resourceVersion
		rv     uint64
		want   bool
	}{
		{"no event yet", nil, nil, 10, false},
		{"watch short of the version", []event{{watch.Modified, "a", 9}}, map[string]int{"a": 9}, 10, false},
		{"update applied", []event{{watch.Modified, "a", 10}}, map[string]int{"a": 10}, 10, true},
		{"update not applied yet", []event{{watch.Modified, "a", 10}}, map[string]int{"a": 7}, 10, false},
		{"a newer object in the cache", []event{{watch.Modified, "a", 10}}, map[string]int{"a": 12}, 10, true},
		{"creation not applied yet", []event{{watch.Added, "b", 8}, {watch.Modified, "a", 11}}, map[string]int{"a": 11}, 10, false},
		{"creation applied", []event{{watch.Added, "b", 8}, {watch.Modified, "a", 11}}, map[string]int{"a": 11, "b": 8}, 10, true},
		{"deletion not applied yet", []event{{watch.Deleted, "b", 9}, {watch.Bookmark, "", 10}}, map[string]int{"b": 5}, 10, false},
		{"deletion applied", []event{{watch.Deleted, "b", 9}, {watch.Bookmark, "", 10}}, nil, 10, true},
		{"created and deleted since", []event{{watch.Added, "b", 5}, {watch.Deleted, "b", 8}, {watch.Bookmark, "", 10}}, nil, 10, true},
		{"created, deletion not applied yet", []event{{watch.Added, "b", 5}, {watch.Deleted, "b", 8}, {watch.Bookmark, "", 10}}, map[string]int{"b": 5}, 10, false},
		{"created again after its deletion", []event{{watch.Deleted, "b", 9}, {watch.Bookmark, "", 10}}, map[string]int{"b": 12}, 10, true},
		{"an event after the version is not waited for", []event{{watch.Modified, "a", 10}, {watch.Modified, "c", 11}}, map[string]int{"a": 10}, 10, true},
		{"a node's event after the version, the one before not applied", []event{{watch.Modified, "a", 9}, {watch.Modified, "a", 12}}, map[string]int{"a": 7}, 10, false},
		{"a node's event after the version, the one before applied", []event{{watch.Modified, "a", 9}, {watch.Modified, "a", 12}}, map[string]int{"a": 9}, 10, true},
		{"a bookmark reaches the version", []event{{watch.Modified, "a", 6}, {watch.Bookmark, "", 10}}, map[string]int{"a": 6}, 10, true},
		{"an error event moves nothing", []event{{watch.Error, "", 20}}, nil, 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newWatchProgress()
			for _, e := range tc.events {
				obj := nodeAt(e.name, e.rv)
				if e.typ == watch.Error {
					p.observe(watch.Event{Type: e.typ, Object: &metav1.Status{}})
					continue
				}
				p.observe(watch.Event{Type: e.typ, Object: obj})
			}
			get := func(name string) *extender.Node {
				if rv, ok := tc.cache[name]; ok {
					return extender.FromNode(nodeAt(name, rv))
				}
				return nil
			}
			p.setCache(get) // after the events: the check's own pruning, not observe's
			require.Equal(t, tc.want, p.caughtUp(tc.rv))
		})
	}
}

// TestWatchProgressStopped: once the takeover is done the events are forgotten, and the check no
// longer holds (a later takeover reads every node's version).
func TestWatchProgressStopped(t *testing.T) {
	p := newWatchProgress()
	p.observe(watch.Event{Type: watch.Modified, Object: nodeAt("a", 10)})
	p.setCache(func(string) *extender.Node { return extender.FromNode(nodeAt("a", 10)) })
	require.True(t, p.caughtUp(10))
	p.stop()
	p.observe(watch.Event{Type: watch.Modified, Object: nodeAt("a", 11)})
	require.Nil(t, p.pending)
	require.False(t, p.caughtUp(10))
}

// TestWatchProgressKeepsUnappliedEvents: a replica that does not lead never asks whether it caught
// up; each node's new event drops those the cache applied, so a node's heartbeats leave it one
// event, and only the events the cache has not applied pile up.
func TestWatchProgressKeepsUnappliedEvents(t *testing.T) {
	cache := map[string]int{}
	p := newWatchProgress()
	p.setCache(func(name string) *extender.Node {
		if rv, ok := cache[name]; ok {
			return extender.FromNode(nodeAt(name, rv))
		}
		return nil
	})
	for rv := 10; rv < 1000; rv += 10 {
		p.observe(watch.Event{Type: watch.Modified, Object: nodeAt("a", rv)})
		cache["a"] = rv // the cache applies it
	}
	require.Len(t, p.pending["a"], 1, "applied heartbeats are dropped")
	for rv := 1000; rv < 1050; rv += 10 {
		p.observe(watch.Event{Type: watch.Modified, Object: nodeAt("a", rv)})
	}
	require.Len(t, p.pending["a"], 5, "the events the cache has not applied are kept")
	require.False(t, p.caughtUp(1040))
	cache["a"] = 1040
	require.True(t, p.caughtUp(1040))
}

// TestCatchUpByWatch: the takeover takes the lead as soon as the node watch passes a consistent
// read's version with its events in the cache, while the read of every node's version is still
// going (here it would never end), and stops that read; when the watch stays short of the
// version, the read of every node's version decides.
func TestCatchUpByWatch(t *testing.T) {
	idx := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, state.NodeIndexers())
	require.NoError(t, idx.Add(extender.FromNode(nodeAt("a", 10))))
	s := &Server{Nodes: state.NewNodeStore(idx)}
	var (
		mu      sync.Mutex
		limits  []int64
		stopped = make(chan struct{}, 1)
	)
	pages := func(slow bool) metadataPages {
		return func(ctx context.Context, o metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
			mu.Lock()
			limits = append(limits, o.Limit)
			mu.Unlock()
			if slow && o.Limit != 1 {
				<-ctx.Done()
				stopped <- struct{}{}
				return nil, ctx.Err()
			}
			l := &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}
			l.Items = []metav1.PartialObjectMetadata{{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "10"}}}
			return l, nil
		}
	}

	p := newWatchProgress()
	p.setCache(s.Nodes.Get) // as serve does
	p.observe(watch.Event{Type: watch.Modified, Object: nodeAt("a", 10)})
	require.NoError(t, s.catchUp(t.Context(), pages(true), p, 0), "the watch decides")
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the read of every node's version was not stopped")
	}
	require.Nil(t, p.pending, "the events are forgotten")

	mu.Lock()
	limits = nil
	mu.Unlock()
	p = newWatchProgress()
	p.setCache(s.Nodes.Get)
	p.observe(watch.Event{Type: watch.Modified, Object: nodeAt("a", 9)})
	require.NoError(t, s.catchUp(t.Context(), pages(false), p, 0))
	mu.Lock()
	require.ElementsMatch(t, []int64{1, catchUpPage}, limits, "the watch short of the version: every node's version read")
	mu.Unlock()

	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, s.catchUp(canceled, pages(false), newWatchProgress(), time.Second), context.Canceled)
}
