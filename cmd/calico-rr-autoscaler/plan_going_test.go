package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv/nodetest"
)

// goingCluster is the cluster: 30 simulated nodes in 3 zones, the default layout's plan
// applied to them (its owned labels and annotations), as corev1 Nodes; and that plan.
func goingCluster(t *testing.T, now string) ([]*corev1.Node, extender.Result) {
	t.Helper()
	var out bytes.Buffer
	require.NoError(t, runPlan([]string{"--simulate", "30", "--now", now, "-o", "json", "--routes=false"}, &out))
	var first extender.Result
	require.NoError(t, json.Unmarshal(out.Bytes(), &first))
	input, err := (&planInputs{simulate: 30, zones: 3, now: now}).load()
	require.NoError(t, err)
	want := map[string]extender.NodeState{}
	for _, st := range first.Nodes {
		want[st.Name] = st
	}
	var nodes []*corev1.Node
	for _, n := range input.Nodes {
		c := n.ToNode()
		w := want[c.Name]
		c.Labels = extender.ApplyOwned(c.Labels, extender.OwnedLabelKeys(input.Policy.RRLabelKey), w.Labels)
		c.Annotations = extender.ApplyOwned(c.Annotations, extender.OwnedAnnotationKeysOf(c.Annotations, w.Annotations), w.Annotations)
		nodes = append(nodes, c)
	}
	return nodes, first
}

func writeYAML(t *testing.T, name string, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, b, 0o600))
	return p
}

// TestPlanGoingSignals: `plan --nodes --now` on the cluster, the default layout applied,
// with each going signal on a route reflector: the handover starts in that plan exactly as with a
// cordon (draining since --now, a replacement, no client left on it), -o json names the cause under
// ineligible with its rule, and the table says why it drains.
func TestPlanGoingSignals(t *testing.T) {
	now := "2030-01-01T00:00:00Z"
	at, _ := time.Parse(time.RFC3339, now)
	pol := writeYAML(t, "policy.yaml", map[string]any{"apiVersion": "routereflector.io/v1alpha1", "kind": "RouteReflectorPolicy",
		"metadata": map[string]any{"name": "default"},
		"spec": map[string]any{"goingSignals": map[string]any{"taints": []any{map[string]any{"key": nodetest.GoingPolicyTaint}},
			"labels": []any{map[string]any{"key": nodetest.GoingPolicyLabel, "value": "retiring"}}}}})
	for _, sig := range nodetest.GoingSignals(at) {
		t.Run(sig.Name, func(t *testing.T) {
			nodes, first := goingCluster(t, now)
			victim := first.RouteReflectors[0].Node
			for _, n := range nodes {
				if n.Name == victim {
					require.Equal(t, "true", n.Annotations["karpenter.sh/do-not-disrupt"], "the route reflector is protected")
					sig.Opt(n)
				}
			}
			file := writeYAML(t, "nodes.yaml", map[string]any{"apiVersion": "v1", "kind": "List", "items": nodes})
			var out bytes.Buffer
			require.NoError(t, runPlan([]string{"--nodes", file, "--policy", pol, "--now", now, "-o", "json", "--routes=false"}, &out))
			var got extender.Result
			require.NoError(t, json.Unmarshal(out.Bytes(), &got))
			drained := false
			for _, rr := range got.RouteReflectors {
				if rr.Node == victim {
					drained = rr.Draining
					assert.Zero(t, rr.Clients)
				}
			}
			require.True(t, drained, "%s does not drain: %+v", victim, got.RouteReflectors)
			assert.Equal(t, first.Summary.RouteReflectors, got.Summary.RouteReflectors, "a replacement is active")
			for _, c := range got.Clients {
				require.NotContains(t, c.RouteReflectors, victim, "client %s", c.Node)
			}
			for _, st := range got.Nodes {
				if st.Name == victim {
					assert.Equal(t, now, st.Annotations[extender.AnnotationDrainingSince])
				}
			}
			i := slices.IndexFunc(got.Ineligible, func(in extender.Ineligible) bool { return in.Node == victim })
			require.GreaterOrEqual(t, i, 0)
			assert.Equal(t, sig.Rule, got.Ineligible[i].Rule)
			assert.Contains(t, got.Ineligible[i].Reason, sig.Reason)

			out.Reset()
			require.NoError(t, runPlan([]string{"--nodes", file, "--policy", pol, "--now", now, "--routes=false"}, &out))
			assert.Contains(t, out.String(), "Draining "+victim+": ")
			assert.Contains(t, out.String(), sig.Reason)
		})
	}
}

// TestPlanSpot: the cluster with its 15 oldest nodes labelled
// karpenter.sh/capacity-type=spot: no client's route reflectors are all spot (NodeAge alone picked
// the two oldest), -o json lists the 15 under scoredDown and the table counts them.
func TestPlanSpot(t *testing.T) {
	now := "2030-01-01T00:00:00Z"
	input, err := (&planInputs{simulate: 30, zones: 3, now: now}).load()
	require.NoError(t, err)
	var nodes []*corev1.Node
	for _, n := range input.Nodes {
		nodes = append(nodes, n.ToNode())
	}
	slices.SortFunc(nodes, func(a, b *corev1.Node) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
	})
	spot := map[string]bool{}
	for _, n := range nodes[:15] {
		n.Labels["karpenter.sh/capacity-type"] = "spot"
		spot[n.Name] = true
	}
	file := writeYAML(t, "nodes.yaml", map[string]any{"apiVersion": "v1", "kind": "List", "items": nodes})
	var out bytes.Buffer
	require.NoError(t, runPlan([]string{"--nodes", file, "--now", now, "-o", "json", "--routes=false"}, &out))
	var got extender.Result
	require.NoError(t, json.Unmarshal(out.Bytes(), &got))
	require.NotEmpty(t, got.RouteReflectors)
	for _, c := range got.Clients {
		all := true
		for _, rr := range c.RouteReflectors {
			all = all && spot[rr]
		}
		require.False(t, all, "client %s has only spot route reflectors %v", c.Node, c.RouteReflectors)
	}
	require.Len(t, got.ScoredDown, 15)
	for _, s := range got.ScoredDown {
		assert.True(t, spot[s.Node], s.Node)
		assert.Equal(t, "label karpenter.sh/capacity-type=spot", s.Detail)
	}
	out.Reset()
	require.NoError(t, runPlan([]string{"--nodes", file, "--now", now, "--routes=false"}, &out))
	assert.Contains(t, out.String(), "Scored down: 15 nodes")
}
