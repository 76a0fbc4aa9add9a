//go:build !slim

package calicoetcd

import (
	"context"
	"maps"
	"sync"
	"time"

	libapiv3 "github.com/projectcalico/calico/libcalico-go/lib/apis/v3"

	"github.com/projectcalico/calico/libcalico-go/lib/options"
	"github.com/projectcalico/calico/libcalico-go/lib/watch"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
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

// Addresses returns each Calico Node's BGP addresses (spec.bgp.ipv4Address and ipv6Address) as
// the watch of WatchChanges has seen them, by node name (nodes without any are absent), or nil
// before the watch has seen a node. The planner reads a node's address families from them
// (extender.WithCalicoAddresses): the Kubernetes Nodes do not carry Calico's addresses with this
// datastore.
func (s *Store) Addresses() map[string]extender.CalicoAddresses { return s.registered.addresses() }

// registry is the set of Calico Nodes fed by watch events: their names and BGP addresses.
type registry struct {
	mu    sync.Mutex
	set   map[string]bool
	addrs map[string]extender.CalicoAddresses
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
		r.set, r.addrs = map[string]bool{}, map[string]extender.CalicoAddresses{}
	}
	delete(r.addrs, n.Name)
	if ev.Type == watch.Deleted {
		delete(r.set, n.Name)
		return
	}
	r.set[n.Name] = true
	if a := AddressesOf(n); a != (extender.CalicoAddresses{}) {
		r.addrs[n.Name] = a
	}
}

func (r *registry) addresses() map[string]extender.CalicoAddresses {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.addrs) == 0 {
		return nil
	}
	return maps.Clone(r.addrs)
}

func (r *registry) names() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.set) == 0 {
		return nil
	}
	return maps.Clone(r.set)
}
