package serve_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/uninstall"
)

func (w *world) meshEnabled() (bool, error) {
	cfg, err := w.dyn.Resource(bgpConfigGVR).Get(w.t.Context(), "default", metav1.GetOptions{})
	if err != nil {
		return true, err // Calico's default
	}
	on, found, _ := unstructured.NestedBool(cfg.Object, "spec", "nodeToNodeMeshEnabled")
	return !found || on, nil
}

// TestUninstallOnRealAPIServer: what the chart's pre-delete hook runs. A policy that migrated the
// cluster off the node-to-node mesh is released by `uninstall`: the mesh is back on before any
// route reflector loses its role, then every owned label, annotation and BGPPeer is gone, and the
// policy with it.
func TestUninstallOnRealAPIServer(t *testing.T) {
	w := newWorld(t)
	w.applyDefaultPolicy(`
  topology: {type: MultiCluster}
  removalDelay: 2s
  migrateFromNodeMesh: true
`)
	w.joinCluster(12)
	w.eventually("mesh off", 60*time.Second, func() error {
		if on, err := w.meshEnabled(); on || err != nil {
			return fmt.Errorf("mesh on (%v)", err)
		}
		return nil
	})
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- uninstall.Run(t.Context(), w.env.ConfigFor(testenv.UserAdmin), 90*time.Second, &out) }()
	// While the policy is released: never a route reflector gone while the mesh is still off.
	for released := false; !released; {
		select {
		case err := <-done:
			if err != nil {
				require.Fail(t, fmt.Sprintf("uninstall: %v\n%s", err, out.String()))
			}
			released = true
		case <-time.After(100 * time.Millisecond):
		}
		on, _ := w.meshEnabled()
		if s := w.snapshot(); !on && len(s.rrs) < 3 {
			require.Fail(t, fmt.Sprintf("a route reflector lost its role while the mesh was off: %v", s.roles()))
		}
	}
	if on, err := w.meshEnabled(); !on || err != nil {
		require.Fail(t, fmt.Sprintf("mesh not back on: %v", err))
	}
	s := w.snapshot()
	for name, n := range s.nodes {
		for _, k := range extender.OwnedLabelKeys("calico-route-reflector") {
			if _, ok := n.Labels[k]; ok {
				require.Fail(t, fmt.Sprintf("%s still has label %s", name, k))
			}
		}
		for _, k := range extender.OwnedAnnotationKeys() {
			if _, ok := n.Annotations[k]; ok {
				require.Fail(t, fmt.Sprintf("%s still has annotation %s", name, k))
			}
		}
	}
	require.Emptyf(t, s.peers, "BGPPeers left: %v", s.peers)
	if got, _, _ := w.kubectl(testenv.UserAdmin, "get", "rrp", "-o", "name"); strings.TrimSpace(got) != "" {
		require.Fail(t, fmt.Sprintf("policies left: %q", got))
	}
	if !strings.Contains(out.String(), "every RouteReflectorPolicy released") {
		require.Fail(t, fmt.Sprintf("output: %s", out.String()))
	}
	t.Logf("uninstall:\n%s", out.String())
}
