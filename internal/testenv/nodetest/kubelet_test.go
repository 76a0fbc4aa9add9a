package nodetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// A kubelet's Node is 10 to 20 KB of JSON; the fleet's nodes are all different where a real
// fleet's are (name, address, instance, images) and NotReady until their Ready patch.
func TestKubeletNodeSize(t *testing.T) {
	f := DefaultKubeletFleet()
	now := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	names, ips := map[string]bool{}, map[string]bool{}
	for _, i := range []int{0, 1, 2, 7, 499, 5000, 64999, 65535, 99999} {
		n := f.Kubelet(i, now)
		b, err := json.Marshal(n)
		require.NoError(t, err)
		assert.GreaterOrEqualf(t, len(b), 10_000, "node %d: %d bytes of JSON", i, len(b))
		assert.LessOrEqualf(t, len(b), 20_000, "node %d: %d bytes of JSON", i, len(b))
		assert.GreaterOrEqual(t, len(n.Labels), 30, "labels")
		assert.Len(t, n.Status.Images, 50)
		assert.Len(t, n.Status.Conditions, 5)
		assert.Equal(t, n.Name, n.Labels[corev1.LabelHostname])
		assert.Equal(t, f.Zone(i), n.Labels[corev1.LabelTopologyZone])
		names[n.Name], ips[f.IP(i)] = true, true
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				assert.Equal(t, corev1.ConditionFalse, c.Status, "registered NotReady")
			}
		}
		if i == 0 {
			t.Logf("node %s: %d bytes of JSON, %d labels, %d annotations, %d images", n.Name, len(b), len(n.Labels), len(n.Annotations), len(n.Status.Images))
		}
	}
	assert.Len(t, names, 9, "unique names")
	assert.Len(t, ips, 9, "unique addresses")
	assert.Equal(t, f.Kubelet(42, now), f.Kubelet(42, now), "generated the same way twice")
}

// The Ready and heartbeat patches apply as the API server applies them (strategic merge on the
// conditions' type key): Ready turns True, a heartbeat moves only the heartbeat times.
func TestKubeletPatches(t *testing.T) {
	f := DefaultKubeletFleet()
	t0 := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	n := f.Kubelet(3, t0)
	apply := func(n *corev1.Node, patch []byte) *corev1.Node {
		orig, err := json.Marshal(n)
		require.NoError(t, err)
		out, err := strategicpatch.StrategicMergePatch(orig, patch, corev1.Node{})
		require.NoError(t, err)
		var m corev1.Node
		require.NoError(t, json.Unmarshal(out, &m))
		return &m
	}
	ready := apply(n, KubeletReadyPatch(t0.Add(5*time.Second)))
	require.Len(t, ready.Status.Conditions, 5)
	for _, c := range ready.Status.Conditions {
		if c.Type == corev1.NodeReady {
			assert.Equal(t, corev1.ConditionTrue, c.Status)
			assert.Equal(t, t0.Add(5*time.Second), c.LastTransitionTime.UTC())
		}
	}
	hb := apply(ready, KubeletHeartbeatPatch(t0.Add(5*time.Minute)))
	require.Len(t, hb.Status.Conditions, 5)
	for j, c := range hb.Status.Conditions {
		was := ready.Status.Conditions[j]
		assert.Equal(t, was.Type, c.Type)
		assert.Equal(t, was.Status, c.Status)
		assert.Equal(t, was.LastTransitionTime.UTC(), c.LastTransitionTime.UTC())
		if c.Type != corev1.NodeNetworkUnavailable {
			assert.Equal(t, t0.Add(5*time.Minute), c.LastHeartbeatTime.UTC(), c.Type)
		}
	}
}
