package calicoetcd

import (
	"context"
	"maps"
	"sync"
	"time"

	libapiv3 "github.com/projectcalico/calico/libcalico-go/lib/apis/v3"

	"github.com/projectcalico/calico/libcalico-go/lib/options"
	"github.com/projectcalico/calico/libcalico-go/lib/watch"
)

// WatchChanges calls changed after every change in etcd to a Calico Node, a BGPPeer, a
// BGPConfiguration or a CalicoNodeStatus (and once per object when a watch starts) until ctx
// ends. A broken watch starts again after a second. No admission webhook sees etcd: this is how
// a hand change reaches the reconciler within a second. The Calico Nodes it sees are what
// Registered returns.
func (s *Store) WatchChanges(ctx context.Context, changed func()) {
	starts := []func(context.Context, options.ListOptions) (watch.Interface, error){
		s.client.Nodes().Watch, s.client.BGPPeers().Watch, s.client.BGPConfigurations().Watch, s.client.CalicoNodeStatus().Watch,
	}
	for i, start := range starts {
		seen := func(watch.Event) {}
		if i == 0 {
			seen = s.registered.record
		}
		go func() {
			for ctx.Err() == nil {
				watchOnce(ctx, start, seen, changed)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}()
	}
	<-ctx.Done()
}

func watchOnce(ctx context.Context, start func(context.Context, options.ListOptions) (watch.Interface, error), seen func(watch.Event), changed func()) {
	w, err := start(ctx, options.ListOptions{})
	if err != nil {
		return
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return
			}
			seen(ev)
			changed()
		}
	}
}

// Registered returns the names of the Calico Nodes in etcd as the watch of WatchChanges has seen
// them (calico-node registers its node when it starts), or nil before the watch has seen one. A
// Calico Node deleted while the watch was broken stays listed until the product restarts: its
// Kubernetes Node is gone too, so no plan reads the name.
func (s *Store) Registered() map[string]bool { return s.registered.names() }

// registry is a set of Calico Node names fed by watch events.
type registry struct {
	mu  sync.Mutex
	set map[string]bool
}

func (r *registry) record(ev watch.Event) {
	obj := ev.Object
	if ev.Type == watch.Deleted {
		obj = ev.Previous
	}
	n, ok := obj.(*libapiv3.Node)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.set == nil {
		r.set = map[string]bool{}
	}
	if ev.Type == watch.Deleted {
		delete(r.set, n.Name)
	} else {
		r.set[n.Name] = true
	}
}

func (r *registry) names() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.set) == 0 {
		return nil
	}
	return maps.Clone(r.set)
}
