package nodetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

func TestNew(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		opts  []Opt
		check func(t *testing.T, n *corev1.Node)
	}{
		{"ready with empty maps", nil, func(t *testing.T, n *corev1.Node) {
			assert.NotNil(t, n.Labels)
			assert.NotNil(t, n.Annotations)
			require.Len(t, n.Status.Conditions, 1)
			assert.Equal(t, corev1.ConditionTrue, n.Status.Conditions[0].Status)
		}},
		{"zone and hostname", []Opt{Zone("zone-b"), Hostname}, func(t *testing.T, n *corev1.Node) {
			assert.Equal(t, map[string]string{corev1.LabelTopologyZone: "zone-b", corev1.LabelHostname: "n"}, n.Labels)
		}},
		{"empty zone sets no label", []Opt{Zone("")}, func(t *testing.T, n *corev1.Node) {
			assert.Empty(t, n.Labels)
		}},
		{"not ready since", []Opt{NotReadySince(t0)}, func(t *testing.T, n *corev1.Node) {
			require.Len(t, n.Status.Conditions, 1)
			assert.Equal(t, corev1.ConditionFalse, n.Status.Conditions[0].Status)
			assert.True(t, n.Status.Conditions[0].LastTransitionTime.Time.Equal(t0))
		}},
		{"a condition is replaced, another added", []Opt{Condition(corev1.NodeReady, corev1.ConditionUnknown), Condition(corev1.NodeMemoryPressure, corev1.ConditionTrue)}, func(t *testing.T, n *corev1.Node) {
			require.Len(t, n.Status.Conditions, 2)
			assert.Equal(t, corev1.ConditionUnknown, n.Status.Conditions[0].Status)
			assert.Equal(t, corev1.NodeMemoryPressure, n.Status.Conditions[1].Type)
		}},
		{"cordoned, tainted, deleting", []Opt{Cordoned, Taint(corev1.Taint{Key: "k", Effect: corev1.TaintEffectNoSchedule}), Deleting(t0)}, func(t *testing.T, n *corev1.Node) {
			assert.True(t, n.Spec.Unschedulable)
			assert.Len(t, n.Spec.Taints, 1)
			require.NotNil(t, n.DeletionTimestamp)
		}},
		{"metadata", []Opt{TypeMeta, ResourceVersion("7"), UID("u"), Created(t0), Label("a", "b"), Annotation("c", "d")}, func(t *testing.T, n *corev1.Node) {
			assert.Equal(t, "Node", n.Kind)
			assert.Equal(t, "7", n.ResourceVersion)
			assert.EqualValues(t, "u", n.UID)
			assert.True(t, n.CreationTimestamp.Time.Equal(t0))
			assert.Equal(t, "b", n.Labels["a"])
			assert.Equal(t, "d", n.Annotations["c"])
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, New("n", tc.opts...)) })
	}
}

func TestCluster(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	ns := Cluster(4, 3, t0, time.Minute, Label("x", "y"))
	require.Len(t, ns, 4)
	var zones, names []string
	for _, n := range ns {
		zones = append(zones, n.Labels[corev1.LabelTopologyZone])
		names = append(names, n.Name)
		assert.Equal(t, "y", n.Labels["x"])
	}
	assert.Equal(t, []string{"zone-a", "zone-b", "zone-c", "zone-a"}, zones)
	assert.Equal(t, []string{"node-00001", "node-00002", "node-00003", "node-00004"}, names)
	assert.True(t, ns[3].CreationTimestamp.Time.Equal(t0.Add(3*time.Minute)))
}
