package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/tools/bgpverify"
)

// settledState is a cluster of n simulated nodes as its settled plan leaves it (the plan's labels
// and annotations on the nodes, its BGPPeers), with the rack route reflector of plane 1 NotReady
// for 10 minutes (past the grace), written as one List of Nodes and BGPPeers. It returns the
// file, the settled plan and the dead route reflector.
func settledState(t *testing.T, n int, now string) (string, *extender.Result, string) {
	t.Helper()
	in := planInputs{simulate: n, zones: 3, now: now}
	input, err := in.load()
	require.NoError(t, err)
	first := extender.Plan(input)
	want := map[string]extender.NodeState{}
	for _, st := range first.Nodes {
		want[st.Name] = st
	}
	var victim string
	for _, rr := range first.RouteReflectors {
		if rr.Plane == 1 {
			victim = rr.Node
		}
	}
	require.NotEmpty(t, victim, "a route reflector of plane 1")
	var items []any
	for _, nd := range input.Nodes {
		c := nd.ToNode()
		c.Labels = extender.ApplyOwned(c.Labels, extender.OwnedLabelKeys(input.Policy.RRLabelKey), want[c.Name].Labels)
		c.Annotations = extender.ApplyOwned(c.Annotations, extender.OwnedAnnotationKeys(), want[c.Name].Annotations)
		c.APIVersion, c.Kind = "v1", "Node"
		if c.Name == victim {
			c.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse,
				LastTransitionTime: metav1.NewTime(input.Now.Add(-10 * time.Minute))}}
		}
		items = append(items, c)
	}
	for _, p := range first.BGPPeers {
		items = append(items, apiv3.BGPPeer{TypeMeta: metav1.TypeMeta{APIVersion: "crd.projectcalico.org/v1", Kind: "BGPPeer"},
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Labels: p.Labels}, Spec: p.Spec})
	}
	b, err := yaml.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "state.yaml")
	require.NoError(t, os.WriteFile(p, b, 0o600))
	return p, first, victim
}

// TestVerifyFromDeadRackRouteReflector replays, on Calico's confd and one BIRD per node, the
// transition issue 36 measured losing routes: a rack route reflector dead (its BIRD not running)
// and NotReady past the grace in a settled cluster of 24 nodes, replaced by the plan. No pair of
// nodes that keep their role misses a route in any 200 ms sample, and the graph model's pairs at
// risk all involve the promoted node. It fails when the surviving mate's cluster ID changes (its
// sessions restart and its rack's clients lose routes) or when a sample misses such a pair.
func TestVerifyFromDeadRackRouteReflectorLarge(t *testing.T) {
	// A slow proof (about 40 s: a scratch API server, confd and 24 BIRDs): make test-all runs it,
	// make test keeps to its 10 minutes.
	testenv.SlowProof(t)
	if err := bgpverify.NetnsAvailable(); err != nil {
		if errors.Is(err, bgpverify.ErrNoNetns) {
			t.Skipf("verify --from needs network namespaces: %v", err)
		}
		require.NoError(t, err)
	}
	start := time.Now()
	now := "2030-01-01T00:00:00Z"
	state, first, victim := settledState(t, 24, now)
	var out, errb bytes.Buffer
	err := runVerify([]string{"--from", state, "--now", now, "-o", "json", "-v"}, &out, &errb)
	t.Logf("verify --from took %v", time.Since(start).Round(100*time.Millisecond))
	if err != nil {
		t.Logf("stderr:\n%s", errb.String())
	}
	var rep bgpverify.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), "verify --from -o json: %v", err)
	tr := rep.Transition
	require.NotNil(t, tr, "the report's transition")
	m := tr.Measured
	t.Logf("measured: %d samples over %.1fs, %d missing pair-samples (%d pairs; %d between nodes keeping their role %v), longest gap %.1fs (%s), %d sessions restarted %v, changed protocols %v, routes %d -> peak %d (%s)",
		m.Samples, m.DurationSeconds, m.MissingPairSamples, m.MissingPairs, m.MissingPairSamplesKeepingRole, m.MissingKeepingRole,
		m.LongestGapSeconds, m.LongestGapPair, m.SessionsRestarted, m.RestartsByNode, m.ChangedProtocols, m.RoutesAtStart, m.PeakRoutes, m.PeakNode)
	t.Logf("model: %s", tr.Model)
	require.NoError(t, err)
	assert.Equal(t, []string{victim}, tr.Dead)
	assert.Positive(t, m.Samples)
	assert.Positive(t, m.Configures, "the plan changed some node's BIRD configuration")
	assert.Zero(t, m.MissingPairSamplesKeepingRole, "missing pair-samples between nodes that keep their role: %v", m.MissingKeepingRole)
	assert.Zero(t, rep.Summary.MissingPairs, "pairs missing after the transition")

	was := map[string]bool{}
	for _, rr := range first.RouteReflectors {
		was[rr.Node] = true
	}
	promoted := map[string]bool{}
	for _, nd := range rep.Nodes {
		if nd.ClusterID != "" && !was[nd.Name] {
			promoted[nd.Name] = true
		}
	}
	require.Len(t, promoted, 1, "one node promoted in place of %s", victim)
	require.NotNil(t, tr.Model)
	for _, p := range tr.Model.AtRisk {
		assert.True(t, promoted[p[0]] || promoted[p[1]], "the model's pair %v at risk without the promoted node", p)
	}
	for _, r := range m.Restarted {
		node, rest, _ := strings.Cut(r, "->")
		peer, _, _ := strings.Cut(rest, "@")
		assert.True(t, promoted[node] || promoted[peer], "session %s restarted without the promoted node", r)
	}
}

// TestVerifyFromBadInput: --from takes a state file with the calico speaker; anything else is one
// line and exit status 2.
func TestVerifyFromBadInput(t *testing.T) {
	dir := t.TempDir()
	pod := filepath.Join(dir, "pod.yaml")
	require.NoError(t, os.WriteFile(pod, []byte("kind: Pod\nmetadata: {name: x}\n"), 0o600))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--from", pod, "--speaker", "bird"}, `--from needs --speaker calico`},
		{[]string{"--from", pod, "--speaker", "gobgp"}, `--from needs --speaker calico`},
		{[]string{"--from", pod, "--simulate", "5"}, "--from FILE holds the nodes"},
		{[]string{"--from", pod, "--fail-zone", "zone-a"}, "--from replays a transition"},
		{[]string{"--from", pod}, `kind "Pod" is not Node or BGPPeer`},
	} {
		var out, errb bytes.Buffer
		err := runVerify(tc.args, &out, &errb)
		require.Error(t, err, "%v", tc.args)
		assert.Equal(t, 2, exitCode(err), fmt.Sprintf("%v: %v", tc.args, err))
		assert.Contains(t, err.Error(), tc.want)
		assert.NotContains(t, err.Error(), "\n")
	}
}
