package reconciler

import (
	"context"
	"fmt"
	"testing"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
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
		require.Fail(t, fmt.Sprintf("drift reported for planned writes: %v", ev))
	}
	const mesh = "rr-autoscaler-mesh-default"
	get := func() *apiv3.BGPPeer {
		p := &apiv3.BGPPeer{}
		require.NoError(t, h.client.Get(context.Background(), client.ObjectKey{Name: mesh}, p))
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
			require.NoError(t, h.client.Update(context.Background(), p))
		}, `Warning CalicoDriftReverted BGPPeer ` + mesh + ` changed by hand, reverted: spec.peerSelector "all()" (want "` + want + `")`},
		{"deleted", func() {
			require.NoError(t, h.client.Delete(context.Background(), get()))
		}, "Warning CalicoDriftReverted BGPPeer " + mesh + " deleted by hand, recreated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.edit()
			h.reconcile()
			if got := get().Spec.PeerSelector; got != want {
				require.Fail(t, fmt.Sprintf("peerSelector %q, want %q", got, want))
			}
			if ev := driftEvents(h.events()); len(ev) != 1 || ev[0] != tc.event {
				require.Fail(t, fmt.Sprintf("events %q, want %q", ev, tc.event))
			}
		})
	}
}
