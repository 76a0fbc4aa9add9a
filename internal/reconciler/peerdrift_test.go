package reconciler

import (
	"context"
	"testing"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestPeerDriftRevertedWithEvents: in the Kubernetes API (where a change can get past the guard:
// its failurePolicy Ignore or the webhook down), a managed BGPPeer edited or deleted by hand is
// reverted at the next reconcile with an Event naming what changed; planned writes report none.
func TestPeerDriftRevertedWithEvents(t *testing.T) {
	h := newHarness(t, nil, cluster(12))
	h.sync()
	h.reconcile()
	h.sync()
	h.reconcile()
	if ev := driftEvents(h.events()); len(ev) != 0 {
		t.Fatalf("drift reported for planned writes: %v", ev)
	}
	const mesh = "rr-autoscaler-mesh-default"
	get := func() *apiv3.BGPPeer {
		p := &apiv3.BGPPeer{}
		if err := h.client.Get(context.Background(), client.ObjectKey{Name: mesh}, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	want := get().Spec.PeerSelector
	for _, tc := range []struct {
		name  string
		edit  func()
		event string
	}{
		{"selector edited", func() {
			p := get()
			p.Spec.PeerSelector = "all()"
			if err := h.client.Update(context.Background(), p); err != nil {
				t.Fatal(err)
			}
		}, `Warning CalicoDriftReverted BGPPeer ` + mesh + ` changed by hand, reverted: spec.peerSelector "all()" (want "` + want + `")`},
		{"deleted", func() {
			if err := h.client.Delete(context.Background(), get()); err != nil {
				t.Fatal(err)
			}
		}, "Warning CalicoDriftReverted BGPPeer " + mesh + " deleted by hand, recreated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.edit()
			h.reconcile()
			if got := get().Spec.PeerSelector; got != want {
				t.Fatalf("peerSelector %q, want %q", got, want)
			}
			if ev := driftEvents(h.events()); len(ev) != 1 || ev[0] != tc.event {
				t.Fatalf("events %q, want %q", ev, tc.event)
			}
		})
	}
}
