package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
)

// TestPlanTransitionOfADeadRackRouteReflector: `plan --nodes --bgppeers` on a cluster whose rack
// route reflector is NotReady past the grace reports routes.transition: the replacement, the
// surviving mate's sessions not restarted (it keeps its cluster ID), and the pairs at risk those of
// the promoted node only. Bad input to --bgppeers is one line.
func TestPlanTransitionOfADeadRackRouteReflector(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, v any) string {
		b, err := yaml.Marshal(v)
		require.NoError(t, err)
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o600))
		return p
	}
	now := "2030-01-01T00:00:00Z"
	var out bytes.Buffer
	require.NoError(t, runPlan([]string{"--simulate", "30", "--now", now, "-o", "json", "--routes=false"}, &out))
	var first struct {
		extender.Result
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &first))
	// The cluster as the plan leaves it: the nodes with its labels, its BGPPeers.
	in := planInputs{simulate: 30, zones: 3, now: now}
	input, err := in.load()
	require.NoError(t, err)
	want := map[string]extender.NodeState{}
	for _, st := range first.Nodes {
		want[st.Name] = st
	}
	var victim extender.RouteReflector
	for _, rr := range first.RouteReflectors {
		if rr.Plane == 1 {
			victim = rr
		}
	}
	require.NotEmpty(t, victim.Node)
	var nodes []*corev1.Node
	for _, n := range input.Nodes {
		c := n.ToNode()
		c.Labels = extender.ApplyOwned(c.Labels, extender.OwnedLabelKeys(input.Policy.RRLabelKey), want[c.Name].Labels)
		c.Annotations = extender.ApplyOwned(c.Annotations, extender.OwnedAnnotationKeys(), want[c.Name].Annotations)
		c.APIVersion, c.Kind = "v1", "Node"
		if c.Name == victim.Node {
			c.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse,
				LastTransitionTime: metav1.NewTime(input.Now.Add(-10 * time.Minute))}}
		}
		nodes = append(nodes, c)
	}
	var peers []apiv3.BGPPeer
	for _, p := range first.BGPPeers {
		peers = append(peers, apiv3.BGPPeer{TypeMeta: metav1.TypeMeta{APIVersion: "projectcalico.org/v3", Kind: "BGPPeer"},
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Labels: p.Labels}, Spec: p.Spec})
	}
	nodesFile := write("nodes.yaml", map[string]any{"apiVersion": "v1", "kind": "List", "items": nodes})
	peersFile := write("peers.yaml", map[string]any{"apiVersion": "v1", "kind": "List", "items": peers})
	out.Reset()
	require.NoError(t, runPlan([]string{"--nodes", nodesFile, "--bgppeers", peersFile, "--now", now, "-o", "json"}, &out))
	var got struct {
		extender.Result
		Routes struct {
			Transition *bgpmodel.Transition `json:"transition"`
		} `json:"routes"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &got))
	tr := got.Routes.Transition
	require.NotNil(t, tr, "routes.transition")
	t.Logf("%s", tr)
	promoted := map[string]bool{}
	was := map[string]string{}
	for _, rr := range first.RouteReflectors {
		was[rr.Node] = rr.ClusterID
	}
	for _, rr := range got.RouteReflectors {
		if id, ok := was[rr.Node]; !ok {
			promoted[rr.Node] = true
		} else if !rr.Draining {
			assert.Equal(t, id, rr.ClusterID, "%s keeps its cluster ID", rr.Node)
		}
	}
	require.Len(t, promoted, 1, "one replacement")
	assert.Positive(t, tr.Added)
	assert.Zero(t, tr.MissingAfter)
	for _, nc := range tr.RestartsByNode {
		assert.True(t, promoted[nc.Node] || nc.Count <= 1, "%s restarts %d sessions: only its session to the promoted node may", nc.Node, nc.Count)
	}
	for _, p := range tr.AtRisk {
		assert.True(t, promoted[p[0]] || promoted[p[1]], "pair %v at risk without the promoted node", p)
	}

	// Bad input: one line naming the file.
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("kind: Node\nmetadata: {name: x}\n"), 0o600))
	err = runPlan([]string{"--nodes", nodesFile, "--bgppeers", bad, "--now", now}, &out)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "want only BGPPeers")
	assert.NotContains(t, err.Error(), "\n")
}
