package webhook

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// TestObserveAndPausedWebhooks: in Observe the mutating webhook patches nothing and says what
// Enforce would do, and the validating webhook refuses nothing and says what Enforce would refuse;
// Paused patches nothing and still refuses.
func TestObserveAndPausedWebhooks(t *testing.T) {
	for _, tc := range []struct {
		mode         v1alpha1.Mode
		joinWarning  string
		removeDenied bool
	}{
		{v1alpha1.Observe, `policy "default" is in Observe mode: Enforce would make node-new a client of node-a1, node-b1, node-c1`, false},
		{v1alpha1.Paused, `policy "default" is in Paused mode: Enforce would make node-new a client of node-a1, node-b1, node-c1`, true},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			pol := mkPolicy("default", func(s *v1alpha1.RouteReflectorPolicySpec) { s.Mode = tc.mode })
			f := newFixture(t, []*v1alpha1.RouteReflectorPolicy{pol}, threeZones())
			f.ledger.SetLeader(true)
			f.commit(t)

			joiner := mkNode("node-new", "zone-a")
			resp, err := f.mutator.Handle(context.Background(), nodeReq(t, alice, joiner, nil))
			require.NoError(t, err)
			require.Empty(t, resp.Patch, "patch %s, want none", resp.Patch)
			require.Equal(t, tc.joinWarning, strings.Join(resp.Warnings, "\n"), "warnings")
			old, obj := mkNode("node-a1", "zone-a", rr("224.0.0.1")), mkNode("node-a1", "zone-a", rr("224.0.0.1"), cordon)
			resp, err = f.mutator.Handle(context.Background(), nodeReq(t, alice, obj, old))
			require.NoError(t, err)
			require.Empty(t, resp.Patch, "cordon: patch %s, want none", resp.Patch)
			require.Contains(t, strings.Join(resp.Warnings, "\n"), "Enforce would hand route reflector node-a1 over (node is cordoned", "cordon: warnings")

			// Removing a route reflector's label below the minimum of 3.
			removed := mkNode("node-a1", "zone-a", rr("224.0.0.1"), func(n *corev1.Node) { delete(n.Labels, "calico-route-reflector") })
			resp, err = f.nodeVal.Handle(context.Background(), request(t, admissionv1.Update, nodeKind, "", alice, removed, old))
			require.NoError(t, err)
			require.Equal(t, !tc.removeDenied, resp.Allowed, "allowed; causes: %s", causes(resp))
			if !tc.removeDenied {
				require.Contains(t, strings.Join(resp.Warnings, "\n"), `policy "default" is in Observe mode: Enforce would refuse this change: metadata.labels[calico-route-reflector]: Invalid value: [min-route-reflectors] removing the route reflector label from node-a1 would leave 2 route reflectors`, "warnings")
			}
		})
	}
}
