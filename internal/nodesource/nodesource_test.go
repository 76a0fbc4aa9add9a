package nodesource

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecodeNodes(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr string
	}{
		{"NodeList YAML", "apiVersion: v1\nkind: NodeList\nitems:\n- metadata: {name: a}\n- metadata: {name: b}\n", []string{"a", "b"}, ""},
		{"List JSON", `{"apiVersion":"v1","kind":"List","items":[{"kind":"Node","metadata":{"name":"a"}}]}`, []string{"a"}, ""},
		{"stream of Nodes", "kind: Node\nmetadata: {name: a}\n---\nkind: Node\nmetadata: {name: b}\n", []string{"a", "b"}, ""},
		{"JSON stream", `{"kind":"Node","metadata":{"name":"a"}} {"kind":"Node","metadata":{"name":"b"}}`, []string{"a", "b"}, ""},
		{"empty", "", nil, ""},
		{"not YAML", "{{{ not yaml", nil, "document 1:"},
		{"wrong kind", "kind: Pod\nmetadata: {name: a}\n", nil, `document 1: kind "Pod" is not Node`},
		{"no kind", "metadata: {name: a}\n", nil, "document 1: no kind"},
		{"no name", "kind: Node\nmetadata: {}\n", nil, "metadata.name: Required value"},
		{"duplicate", "kind: Node\nmetadata: {name: a}\n---\nkind: Node\nmetadata: {name: a}\n", nil, `document 2: metadata.name: Duplicate value: "a"`},
		{"bad field type", "kind: Node\nmetadata: {name: a}\nspec: {unschedulable: maybe}\n", nil, "document 1:"},
		{"wrong item kind", "kind: List\nitems:\n- kind: Pod\n  metadata: {name: a}\n", nil, `items[0]: kind "Pod" is not Node`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes, err := DecodeNodes([]byte(tt.in))
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				assert.NotContains(t, err.Error(), "\n")
				return
			}
			require.NoError(t, err)
			var names []string
			for _, n := range nodes {
				names = append(names, n.Name)
			}
			assert.Equal(t, tt.want, names)
		})
	}
}

func TestReadFiles(t *testing.T) {
	dir := t.TempDir()
	_, err := ReadNodesFile(filepath.Join(dir, "missing.yaml"))
	require.Error(t, err)
	assert.Equal(t, filepath.Join(dir, "missing.yaml")+": no such file or directory", err.Error())

	empty := filepath.Join(dir, "empty.yaml")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	_, err = ReadNodesFile(empty)
	assert.EqualError(t, err, empty+": no Node objects found")

	pol := filepath.Join(dir, "p.yaml")
	require.NoError(t, os.WriteFile(pol, []byte("apiVersion: routereflector.io/v1alpha1\nkind: RouteReflectorPolicy\nmetadata: {name: x}\nspec: {minRouteReflectors: 5, maxRouteReflectors: 2, topology: {clusterID: nope}}\n"), 0o644))
	_, _, err = ReadPolicyFile(pol)
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), pol+": spec.minRouteReflectors: Invalid value: 5"), err.Error())
	assert.Contains(t, err.Error(), "spec.topology.clusterID")

	require.NoError(t, os.WriteFile(pol, []byte("kind: RouteReflectorPolicy\nspec: {minRouteReflector: 5}\n"), 0o644))
	_, _, err = ReadPolicyFile(pol)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `: unknown field "minRouteReflector"`)
}

func TestSimulate(t *testing.T) {
	nodes, err := Simulate(30, 3)
	require.NoError(t, err)
	require.Len(t, nodes, 30)
	assert.Equal(t, "node-00001", nodes[0].Name)
	assert.Equal(t, "zone-a", nodes[0].Labels["topology.kubernetes.io/zone"])
	assert.Equal(t, "zone-b", nodes[1].Labels["topology.kubernetes.io/zone"])
	assert.Equal(t, "zone-aa", ZoneName(26))
	_, err = Simulate(0, 3)
	assert.Error(t, err)
	_, err = Simulate(10, 0)
	assert.Error(t, err)
}

func FuzzDecodeNodes(f *testing.F) {
	f.Add([]byte("kind: NodeList\nitems:\n- metadata: {name: a}\n"))
	f.Add([]byte(`{"kind":"Node","metadata":{"name":"a","labels":{"x":"y"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		nodes, err := DecodeNodes(data)
		if err != nil {
			require.Falsef(t, strings.Contains(err.Error(), "\n"), "multi-line error: %q", err)
			return
		}
		for _, n := range nodes {
			require.NotEmpty(t, n.Name, "node without a name accepted")
		}
	})
}

func TestDecodeState(t *testing.T) {
	for _, tc := range []struct {
		name, in   string
		nodes, bgp int
		err        string
	}{
		{"mixed List", "kind: List\nitems:\n- kind: Node\n  metadata: {name: a}\n- apiVersion: crd.projectcalico.org/v1\n  kind: BGPPeer\n  metadata: {name: p}\n  spec: {nodeSelector: all(), peerSelector: has(x)}\n", 1, 1, ""},
		{"stream", "kind: Node\nmetadata: {name: a}\n---\nkind: Node\nmetadata: {name: b}\n---\nkind: BGPPeerList\nitems:\n- metadata: {name: p}\n", 2, 1, ""},
		{"wrong kind", "kind: List\nitems:\n- kind: Pod\n  metadata: {name: a}\n", 0, 0, `document 1: items[0]: kind "Pod" is not Node or BGPPeer`},
		{"duplicate peer", "kind: BGPPeer\nmetadata: {name: p}\n---\nkind: BGPPeer\nmetadata: {name: p}\n", 0, 0, `document 2: metadata.name: Duplicate value: "p"`},
		{"no kind", "metadata: {name: a}\n", 0, 0, "document 1: no kind (want Node or BGPPeer)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes, peers, err := DecodeState([]byte(tc.in))
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Len(t, nodes, tc.nodes)
			require.Len(t, peers, tc.bgp)
		})
	}
}
