package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/nodesource"
)

// familyNodesFile writes n simulated nodes in 3 zones with the Calico addresses fam(i) gives node i
// (extender.FamilyIPv4, FamilyIPv6 or both) and returns the file's path.
func familyNodesFile(t *testing.T, n int, fam func(i int) extender.Families) string {
	t.Helper()
	nodes, err := nodesource.Simulate(n, 3)
	require.NoError(t, err)
	list := corev1.NodeList{}
	list.APIVersion, list.Kind = "v1", "NodeList"
	for i, node := range nodes {
		node.Annotations = map[string]string{}
		f := fam(i)
		if f.Has(extender.FamilyIPv4) {
			node.Annotations[extender.AnnotationCalicoIPv4] = fmt.Sprintf("10.0.%d.%d/16", i/250, i%250+1)
		}
		if f.Has(extender.FamilyIPv6) {
			node.Annotations[extender.AnnotationCalicoIPv6] = fmt.Sprintf("fd00::%x/64", i+1)
		}
		list.Items = append(list.Items, *node)
	}
	b, err := yaml.Marshal(list)
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "nodes.yaml")
	require.NoError(t, os.WriteFile(p, b, 0o600))
	return p
}

type familyPlan struct {
	extender.Result
	Routes struct {
		Summary   bgpmodel.Summary                   `json:"summary"`
		Drills    []extender.Drill                   `json:"drills"`
		Families  map[string]*bgpmodel.FamilyFigures `json:"families"`
		RouterIDs *bgpmodel.RouterIDs                `json:"routerIDs"`
	} `json:"routes"`
}

func runFamilyPlan(t *testing.T, args ...string) (familyPlan, []byte) {
	t.Helper()
	var out bytes.Buffer
	require.NoError(t, runPlan(append([]string{"--now", "2030-01-01T00:00:00Z", "-o", "json"}, args...), &out))
	var p familyPlan
	require.NoError(t, json.Unmarshal(out.Bytes(), &p))
	return p, out.Bytes()
}

// TestPlanFamilies: `plan -o json` reports routes.families (figures per address family) when a node
// has an IPv6 address, and only then.
func TestPlanFamilies(t *testing.T) {
	both := extender.FamilyIPv4 | extender.FamilyIPv6
	t.Run("IPv4 only: no families, today's fields", func(t *testing.T) {
		p, raw := runFamilyPlan(t, "--nodes", familyNodesFile(t, 30, func(int) extender.Families { return extender.FamilyIPv4 }))
		assert.Nil(t, p.Routes.Families)
		assert.Nil(t, p.Routes.RouterIDs)
		assert.NotContains(t, string(raw), `"families"`)
		assert.Zero(t, p.Routes.Summary.MissingPairs)
	})
	t.Run("dual-stack: both families, 0 missing pairs, 2.0 paths per prefix", func(t *testing.T) {
		file := familyNodesFile(t, 30, func(int) extender.Families { return both })
		p, raw := runFamilyPlan(t, "--nodes", file)
		require.Len(t, p.Routes.Families, 2)
		for _, k := range []string{"ipv4", "ipv6"} {
			f := p.Routes.Families[k]
			require.NotNil(t, f, k)
			assert.Equal(t, 30, f.Summary.Nodes, k)
			assert.Zero(t, f.Summary.MissingPairs, k)
			assert.InDelta(t, 2.0, f.Cost.BusiestPaths, 0.05, k)
			assert.InDelta(t, 2.0, f.Cost.MeanPaths, 0.05, k)
			assert.Equal(t, p.Routes.Summary, f.Summary, "%s: every node in the family, the family-blind figures", k)
			assert.NotEmpty(t, f.Drills, k)
			assert.Empty(t, extender.FailedDrills(f.Drills), k)
		}
		require.NotNil(t, p.Routes.RouterIDs)
		assert.True(t, p.Routes.RouterIDs.OK(), "every node has an IPv4 address: its router ID")
		assert.False(t, p.Summary.Degraded)
		_, again := runFamilyPlan(t, "--nodes", file)
		assert.Equal(t, string(raw), string(again), "deterministic")
	})
	t.Run("IPv6 only: the ipv6 family, router IDs missing unless hash", func(t *testing.T) {
		file := familyNodesFile(t, 30, func(int) extender.Families { return extender.FamilyIPv6 })
		p, _ := runFamilyPlan(t, "--nodes", file)
		require.Len(t, p.Routes.Families, 1)
		f := p.Routes.Families["ipv6"]
		require.NotNil(t, f)
		assert.Equal(t, 30, f.Summary.Nodes)
		assert.Zero(t, f.Summary.MissingPairs)
		assert.InDelta(t, 2.0, f.Cost.MeanPaths, 0.05)
		require.NotNil(t, p.Routes.RouterIDs)
		assert.Len(t, p.Routes.RouterIDs.Missing, 30)
		assert.Contains(t, p.Routes.RouterIDs.String(), "node-00001")
		p, _ = runFamilyPlan(t, "--nodes", file, "--calico-router-id", "hash")
		assert.True(t, p.Routes.RouterIDs.OK(), "%+v", p.Routes.RouterIDs)
		assert.Equal(t, bgpmodel.RouterIDHash, p.Routes.RouterIDs.Source)
		var out bytes.Buffer
		err := runPlan([]string{"--nodes", file, "--calico-router-id", "10.0.0.1"}, &out)
		var u usageError
		assert.ErrorAs(t, err, &u)
	})
	t.Run("mixed: IPv4-only nodes are clients, route reflectors dual-stack", func(t *testing.T) {
		p, _ := runFamilyPlan(t, "--nodes", familyNodesFile(t, 30, func(i int) extender.Families {
			if i%3 == 0 {
				return extender.FamilyIPv4
			}
			return both
		}))
		require.Len(t, p.Routes.Families, 2)
		assert.Equal(t, 30, p.Routes.Families["ipv4"].Summary.Nodes)
		assert.Equal(t, 20, p.Routes.Families["ipv6"].Summary.Nodes)
		for k, f := range p.Routes.Families {
			assert.Zero(t, f.Summary.MissingPairs, k)
			assert.Empty(t, extender.FailedDrills(f.Drills), k)
		}
		ineligible := map[string]string{}
		for _, n := range p.Ineligible {
			ineligible[n.Node] = n.Rule
		}
		for _, rr := range p.RouteReflectors {
			var i int
			_, err := fmt.Sscanf(rr.Node, "node-%05d", &i)
			require.NoError(t, err)
			assert.NotZero(t, (i-1)%3, "route reflector %s is IPv4-only", rr.Node)
		}
		assert.Equal(t, extender.RuleMissingAddressFamily, ineligible["node-00001"])
		assert.False(t, p.Summary.Degraded, "%+v", p.Conditions)
	})
}
