package calicoetcd

import (
	"context"
	"time"

	"github.com/projectcalico/calico/libcalico-go/lib/options"
	"github.com/projectcalico/calico/libcalico-go/lib/watch"
)

// WatchChanges calls changed after every change in etcd to a Calico Node, a BGPPeer, a
// BGPConfiguration or a CalicoNodeStatus (and once per object when a watch starts) until ctx
// ends. A broken watch starts again after a second. No admission webhook sees etcd: this is how
// a hand change reaches the reconciler within a second.
func (s *Store) WatchChanges(ctx context.Context, changed func()) {
	starts := []func(context.Context, options.ListOptions) (watch.Interface, error){
		s.client.Nodes().Watch, s.client.BGPPeers().Watch, s.client.BGPConfigurations().Watch, s.client.CalicoNodeStatus().Watch,
	}
	for _, start := range starts {
		go func() {
			for ctx.Err() == nil {
				watchOnce(ctx, start, changed)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}()
	}
	<-ctx.Done()
}

func watchOnce(ctx context.Context, start func(context.Context, options.ListOptions) (watch.Interface, error), changed func()) {
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
			changed()
		}
	}
}
