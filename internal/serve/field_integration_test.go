package serve_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// setCondition sets a node condition through nodes/status, as a kubelet does.
func (w *world) setCondition(name string, typ corev1.NodeConditionType, status corev1.ConditionStatus) {
	w.t.Helper()
	w.updateStatus(name, func(n *corev1.Node) {
		n.Status.Conditions = slices.DeleteFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == typ })
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: typ, Status: status, LastTransitionTime: metav1.Now()})
	})
}

// TestFieldCasesOnRealAPIServer: the field-ready cases on the real API server with real kubectl.
// A server-side dry run of a node creation gets its role in the answer and leaves no trace (no
// node, nothing in the leader's ledger, no role counted by the next plan); a node under
// MemoryPressure may not be made a route reflector by hand ([node-condition]) while a route
// reflector under pressure keeps its role; and a leader change keeps the scale-down window.
func TestFieldCasesOnRealAPIServer(t *testing.T) {
	t.Parallel() // its own API server and product: beside the other live tests, mostly waiting
	w := newWorld(t)
	w.applyDefaultPolicy(`
  topology: {type: MultiCluster, clusterIDs: PerRouteReflector}
  scaling: {ratio: "0.1"}
  removalDelay: 2s
  behavior: {scaleDown: {stabilizationWindowSeconds: 600}}
`)
	w.joinCluster(60)
	w.eventually("settled on 6 route reflectors", 60*time.Second, func() error { return w.snapshot().settled(6) })

	t.Run("a dry run leaves no trace", func(t *testing.T) {
		node := `apiVersion: v1
kind: Node
metadata: {name: dry-1, labels: {topology.kubernetes.io/zone: zone-a}}
`
		out, stderr, err := w.env.KubectlStdin(t, testenv.UserAdmin, node, "create", "--dry-run=server", "-o", "yaml", "-f", "-")
		require.Falsef(t, err != nil, "dry run: %v %s", err, stderr)
		require.Truef(t, strings.Contains(out, extender.LabelPeeringSet), "the dry run's answer has no role:\n%s", out)
		if _, err := w.admin.CoreV1().Nodes().Get(t.Context(), "dry-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			require.Fail(t, fmt.Sprintf("dry-1 exists after a dry run: %v", err))
		}
		// Not a count of the ledger's entries: settled ones are dropped at any moment.
		require.False(t, w.rep.srv.Ledger.Assumed("dry-1"), "the leader's ledger holds an assumed change of dry-1 after a dry run")
	})

	t.Run("pressure: no new route reflector, the old one keeps its role", func(t *testing.T) {
		s := w.snapshot()
		var client, rr string
		for name := range s.nodes {
			if _, ok := s.rrs[name]; ok && rr == "" {
				rr = name
			} else if !ok && client == "" {
				client = name
			}
		}
		w.setCondition(client, corev1.NodeMemoryPressure, corev1.ConditionTrue)
		_, stderr, err := w.kubectl(testenv.UserAlice, "label", "node", client, "calico-route-reflector=")
		require.Error(t, err, "labelling a node under MemoryPressure was not refused")
		require.Contains(t, stderr, "[node-condition]", "labelling a node under MemoryPressure")
		require.Contains(t, stderr, "MemoryPressure", "labelling a node under MemoryPressure")
		w.setCondition(rr, corev1.NodeMemoryPressure, corev1.ConditionTrue)
		time.Sleep(3 * time.Second)
		s = w.snapshot()
		if _, ok := s.rrs[rr]; !ok || s.nodes[rr].Annotations[extender.AnnotationDrainingSince] != "" {
			require.Fail(t, fmt.Sprintf("%s lost its role or drains under MemoryPressure: %s", rr, s.roles()))
		}
	})

	t.Run("a leader change keeps the scale-down window", func(t *testing.T) {
		for i := 30; i < 60; i++ {
			require.NoError(t, w.admin.CoreV1().Nodes().Delete(t.Context(), fmt.Sprintf("node-%02d", i), metav1.DeleteOptions{}))
		}
		desired := func() string {
			out, err := w.policyPath("default", "{.status.nodes}/{.status.desiredRouteReflectors}")
			if err != nil {
				return fmt.Sprintf("get rrp default: %v", err)
			}
			return out
		}
		w.eventually("30 nodes, 6 held by the window", 30*time.Second, func() error {
			if got := desired(); got != "30/6" {
				return fmt.Errorf("status nodes/desired %q", got)
			}
			return nil
		})
		second := w.start(testenv.FreePort(t), false)
		w.rep.stop()
		w.eventually("the second replica leads", 30*time.Second, func() error {
			if !second.srv.Ledger.Leader() {
				return fmt.Errorf("not the leader yet")
			}
			return nil
		})
		// The new leader reconciles (a node change wakes it) and keeps 6 for the window (without
		// the old leader's window it would want ceil(31 x 0.1) = 4).
		w.join("late-1", "zone-a", nil)
		w.eventually("the new leader has reconciled", 30*time.Second, func() error {
			if got := desired(); got != "31/6" {
				return fmt.Errorf("status nodes/desired %q", got)
			}
			return nil
		})
		time.Sleep(2 * time.Second)
		if got := desired(); got != "31/6" {
			require.Fail(t, fmt.Sprintf("after the leader change: nodes/desired %q, want 31/6 (the window holds 6 for 10 minutes)", got))
		}
	})
}
