package reconciler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// TestDualPlaneRackLostKeepsFailedInClientSet (diagnostic, issue 52 item 4): a DualPlane rack's two
// route reflectors down at once (BIRD killed, Nodes Ready): they are replaced in one reconcile, and
// the rack's set BGPPeer is logged reconcile by reconcile: whether the clients keep their sessions to
// the failed route reflectors (whose stale routes graceful restart holds) until the replacements'
// sessions are up.
func TestDualPlaneRackLostKeepsFailedInClientSet(t *testing.T) {
	on := true
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: ptr(int32(10))}
		s.BGPHealth = &v1alpha1.BGPHealth{Enabled: &on, GracePeriod: &metav1.Duration{Duration: 2 * time.Minute}}
		s.RemovalDelay = &metav1.Duration{Duration: 75 * time.Second}
	}, dualCluster(30))
	h.r.Ledger.BGPHealth = h.r.BGPHealthRecords
	h.reconcile()
	h.reconcile()
	allUp := func(string, string, extender.Families) bool { return true }
	start := h.now
	for h.now.Sub(start) <= idSettleMax+5*time.Second {
		h.now = h.now.Add(5 * time.Second)
		h.calicoNodeBy(allUp)
		h.reconcile()
	}
	var client string
	var set []string
	for _, n := range h.nodes() {
		if a := n.Annotations[extender.AnnotationRouteReflectors]; a != "" && client == "" && len(strings.Split(a, ",")) == 2 {
			client, set = n.Name, strings.Split(a, ",")
		}
	}
	require.NotEmpty(t, client)
	selectors := func() string {
		list := &apiv3.BGPPeerList{}
		require.NoError(t, h.client.List(context.Background(), list))
		var out []string
		for _, p := range list.Items {
			if strings.Contains(p.Spec.PeerSelector, extender.RouteReflectorID(set[0])) || strings.Contains(p.Spec.PeerSelector, "'"+extender.RouteReflectorID(set[1])+"'") {
				out = append(out, p.Name+": "+p.Spec.PeerSelector)
			}
		}
		return fmt.Sprintf("client %s set %q annotation %q peers %v", client, h.node(client).Labels[extender.LabelPeeringSet], h.node(client).Annotations[extender.AnnotationRouteReflectors], out)
	}
	t.Logf("before: %s", selectors())
	dead := func(rr, peer string, _ extender.Families) bool { return !slices.Contains(set, rr) && !slices.Contains(set, peer) }
	for i := range 8 {
		h.now = h.now.Add(time.Second)
		h.calicoNodeBy(dead)
		h.reconcile()
		m := h.r.memo("default")
		t.Logf("reconcile %d: rrs %v; %s; waits node-08 %v node-11 %v", i, h.rrs(), selectors(), m.trans.Wait("node-08", h.now, false), m.trans.Wait("node-11", h.now, false))
	}
}
