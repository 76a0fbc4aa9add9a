package reconciler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// failover replaces the harness's reconciler with a new one over the same API server and caches:
// a new leader, with an empty ledger and nothing of the old one's memory (stabilization history,
// handover memos, BGP health records, staged changes, quiet plans).
func (h *harness) failover() {
	ledger := state.NewLedger(0, func() time.Time { return h.now })
	ledger.SetLeader(true)
	old := h.r
	h.r = &Reconciler{
		Client: old.Client, APIReader: old.APIReader, Nodes: old.Nodes, Policies: old.Policies,
		Ledger: ledger, Recorder: old.Recorder, PeerAPI: old.PeerAPI, Now: old.Now,
	}
	if old.Ledger.BGPHealth != nil { // the plans read the new leader's BGP health records
		ledger.BGPHealth = h.r.BGPHealthRecords
	}
}

// rendered is what confd renders of each node's BGP configuration from the product's writes: the
// route reflector label and cluster ID, the peering set and the uplink set (their BGPPeers' route
// reflectors), keyed by node name; and what every node's render reads besides: whether the
// node-to-node mesh is on (key "BGPConfiguration default") and every BGPPeer, the product's and
// hand-written ones (key "BGPPeer <name>").
func (h *harness) rendered() map[string]string {
	h.t.Helper()
	nodes := &corev1.NodeList{}
	require.NoError(h.t, h.client.List(context.Background(), nodes))
	sets := h.peerSelectors()
	out := map[string]string{}
	for _, n := range nodes.Items {
		_, rr := n.Labels["calico-route-reflector"]
		set, up := n.Labels[extender.LabelPeeringSet], n.Labels[extender.LabelUplinkSet]
		out[n.Name] = fmt.Sprintf("rr=%v id=%s set=%s peers=%s uplink=%s uplinks=%s", rr, n.Annotations[extender.AnnotationClusterID], set,
			sets[extender.BGPPeerPrefix+set], up, sets[extender.SetBGPPeerName(extender.LabelUplinkSet, up)])
	}
	mesh := "on"
	if meshOff(h) {
		mesh = "off"
	}
	out["BGPConfiguration default"] = "nodeToNodeMesh=" + mesh
	for name, sel := range sets {
		out["BGPPeer "+name] = sel
	}
	return out
}

// peerSelectors returns the BGPPeers' peer selectors by name.
func (h *harness) peerSelectors() map[string]string {
	h.t.Helper()
	list := &apiv3.BGPPeerList{}
	require.NoError(h.t, h.client.List(context.Background(), list))
	out := map[string]string{}
	for _, p := range list.Items {
		out[p.Name] = p.Spec.PeerSelector
	}
	return out
}

// TestReconcileFailoverMidHandover: the leader is lost at each step of a rack route reflector's
// cordon handover (DualPlane, racks of 10, 30 nodes, BGP health and the stabilization window as
// the live transitions proof runs them), and a new leader with none of its memory takes over. No
// node's rendered BGP configuration may go back to a state it left (a client re-rendered to its
// old route reflectors and then to the new ones again restarts its sessions twice; the live proof
// saw that after a failover), and the handover ends where the uninterrupted one ends.
func TestReconcileFailoverMidHandover(t *testing.T) {
	t.Run("BGP health and BGPSessions handover", func(t *testing.T) { failoverMidHandover(t, true, []int{0}) })
}

// TestReconcileFailoverMidHandoverLarge (make test-all) is TestReconcileFailoverMidHandover at more
// failure points, with and without BGP health.
func TestReconcileFailoverMidHandoverLarge(t *testing.T) {
	testenv.SlowProof(t)
	for _, sessions := range []bool{false, true} {
		t.Run(fmt.Sprintf("BGP health and BGPSessions handover %v", sessions), func(t *testing.T) {
			t.Parallel()
			failoverMidHandover(t, sessions, []int{0, 1, 3, 5})
		})
	}
}

func failoverMidHandover(t *testing.T, sessions bool, failAts []int) {
	spec := func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: ptrTo(int32(10))}
		s.RemovalDelay = &metav1.Duration{Duration: 3 * time.Second}
		s.NotReadyGracePeriod = &metav1.Duration{Duration: 10 * time.Second}
		s.Behavior = &v1alpha1.Behavior{ScaleDown: &v1alpha1.ScaleDown{StabilizationWindowSeconds: ptrTo(int32(3))}}
		if sessions {
			on := true
			s.BGPHealth = &v1alpha1.BGPHealth{Enabled: &on, GracePeriod: &metav1.Duration{Duration: 5 * time.Second}}
			s.Handover = v1alpha1.HandoverBGPSessions
		}
	}
	// run cordons the first route reflector of the settled cluster and reconciles every second for
	// 20 s; failAt >= 0 hands over to a new leader before that reconcile. It returns each node's
	// rendered states in order (repeats dropped) and the final state.
	run := func(t *testing.T, failAt, died int) (map[string][]string, map[string]string) {
		h := newHarness(t, spec, ipCluster(30))
		for range 3 {
			h.reconcile()
			if sessions {
				h.calicoNode()
			}
			h.now = h.now.Add(time.Second)
		}
		require.Zero(t, h.modelMissing(), "settled")
		rrs := slices.Sorted(maps.Keys(h.rrs()))
		require.NotEmpty(t, rrs)
		history := map[string][]string{}
		record := func() {
			for n, s := range h.rendered() {
				if l := history[n]; len(l) == 0 || l[len(l)-1] != s {
					history[n] = append(l, s)
				}
			}
		}
		record()
		h.update(rrs[0], func(n *corev1.Node) { n.Spec.Unschedulable = true })
		for step := range 20 {
			if step == failAt {
				if died > 0 {
					// The old leader's last reconcile: it dies after died-1 writes.
					h.writeLimit.Store(h.writes.Load() + int32(died))
					h.sync()
					_, _ = h.r.Reconcile(context.Background(), request(h.policyNm))
					h.writeLimit.Store(0)
					record()
				}
				h.failover()
			}
			h.reconcile()
			if sessions {
				h.calicoNode()
			}
			record()
			require.Zero(t, h.modelMissing(), "reconcile %d (failover before %d)", step, failAt)
			h.now = h.now.Add(time.Second)
		}
		require.Greater(t, len(history[rrs[0]]), 1, "the cordoned route reflector's configuration never changed")
		return history, h.rendered()
	}
	_, want := run(t, -1, 0)
	// The cordon's reconcile (0) promotes the replacement and moves the clients, the draining
	// route reflector is demoted after removalDelay (3 s), the stabilization window ends later.
	for _, failAt := range failAts {
		for _, died := range []int{0, 2, 5} {
			name := fmt.Sprintf("failover before reconcile %d", failAt)
			if died > 0 {
				name = fmt.Sprintf("leader dies at write %d of reconcile %d", died, failAt)
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				checkFailover(t, want, run, failAt, died)
			})
		}
	}
}

// checkFailover runs the handover with a failover and checks it against want, the final state
// without one.
func checkFailover(t *testing.T, want map[string]string, run func(*testing.T, int, int) (map[string][]string, map[string]string), failAt, died int) {
	{
		{
			history, got := run(t, failAt, died)
			for n, states := range history {
				for i, s := range states {
					if j := slices.Index(states[:i], s); j >= 0 && j < i-1 {
						require.Fail(t, fmt.Sprintf("%s went back to a state it had left:\n%s", n, strings.Join(states, "\n")))
					}
				}
			}
			require.Equal(t, want, got, "the handover ends elsewhere than without a failover")
		}
	}
}
