package bgpmodel

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// TestHashToIPv4 is confd's own test vector (confd/pkg/resource/template/template_funcs_test.go).
func TestHashToIPv4(t *testing.T) {
	assert.Equal(t, "207.94.5.27", HashToIPv4("Testrobin123"))
}

func TestCheckRouterIDs(t *testing.T) {
	v4, v6, both := extender.FamilyIPv4, extender.FamilyIPv6, extender.FamilyIPv4|extender.FamilyIPv6
	for _, tc := range []struct {
		name       string
		nodes      []Node
		env        string
		missing    []string
		duplicates int
		err        bool
	}{
		{name: "IPv4 addresses are the router IDs", nodes: []Node{{Name: "a", IP: "10.0.0.1", Families: v4}, {Name: "b", IP: "10.0.0.2", IP6: "fd00::2", Families: both}}},
		{name: "IPv6-only nodes have none", nodes: []Node{{Name: "a", IP: "10.0.0.1", Families: v4}, {Name: "c", IP6: "fd00::3", Families: v6}, {Name: "b", IP6: "fd00::2", Families: v6}}, missing: []string{"b", "c"}},
		{name: "hash gives every node one", nodes: []Node{{Name: "b", IP6: "fd00::2", Families: v6}, {Name: "c", IP6: "fd00::3", Families: v6}}, env: "hash"},
		{name: "two nodes with one IPv4 address", nodes: []Node{{Name: "a", IP: "10.0.0.1"}, {Name: "b", IP: "10.0.0.1"}}, duplicates: 1},
		{name: "no annotation: IPv4 of its own, unknown", nodes: []Node{{Name: "a"}, {Name: "b"}}},
		{name: "a fixed CALICO_ROUTER_ID is refused", env: "10.0.0.1", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := CheckRouterIDs(tc.nodes, tc.env)
			if tc.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.missing, r.Missing)
			assert.Len(t, r.Duplicates, tc.duplicates)
			assert.Equal(t, r.OK(), r.String() == "")
		})
	}
}

// TestPropagateFamily: in a family, a node without an address of it has no session: its clients
// lose the routes it would reflect, and its own block is not expected.
func TestPropagateFamily(t *testing.T) {
	v4, both := extender.FamilyIPv4, extender.FamilyIPv4|extender.FamilyIPv6
	// Two route reflectors with one ID; rr2 is IPv4-only. c1 peers with both, c2 only with rr2.
	nodes := []Node{
		{Name: "c1", Labels: map[string]string{"set": "both"}, Families: both},
		{Name: "c2", Labels: map[string]string{"set": "two"}, Families: both},
		{Name: "c3", Labels: map[string]string{"set": "both"}, Families: v4},
		{Name: "rr1", ClusterID: "224.0.0.1", Labels: map[string]string{"rr": "1", "mesh": ""}, Families: both},
		{Name: "rr2", ClusterID: "224.0.0.1", Labels: map[string]string{"rr": "2", "mesh": ""}, Families: v4},
	}
	peers := []extender.BGPPeer{
		peer("both", "set == 'both'", "has(rr)"),
		peer("two", "set == 'two'", "rr == '2'"),
		peer("mesh", "has(mesh)", "has(mesh)"),
	}
	topo, err := Build(nodes, peers, Options{})
	require.NoError(t, err)
	assert.Equal(t, both, topo.Families())
	m4, err := topo.PropagateFamily(extender.FamilyIPv4, nil)
	require.NoError(t, err)
	assert.Equal(t, 5, m4.Summary.Nodes)
	assert.Zero(t, m4.Summary.MissingPairs)
	m6, err := topo.PropagateFamily(extender.FamilyIPv6, nil)
	require.NoError(t, err)
	assert.Equal(t, 3, m6.Summary.Nodes, "c3 and rr2 have no IPv6 address")
	// c2's only route reflector is IPv4-only: in IPv6 it learns nothing and nobody learns it.
	assert.Equal(t, int64(4), m6.Summary.MissingPairs)
	drills, err := topo.drills(topo.FamilyDown(extender.FamilyIPv6, nil))
	require.NoError(t, err)
	require.Len(t, drills, 1, "one route reflector in IPv6, one zone")
	assert.Equal(t, "rr1", drills[0].Name)
}

// TestFamilyDrills: the plan's drills (PlanDrills: FamilyDrills) run in each family when a node has
// an IPv6 address. Here every drill passes family-blind and in IPv4, while in IPv6 the only route
// reflector with an IPv6 address is a single point of failure: its drill fails there, and only
// there.
func TestFamilyDrills(t *testing.T) {
	v4, both := extender.FamilyIPv4, extender.FamilyIPv4|extender.FamilyIPv6
	nodes := []Node{
		{Name: "c1", Labels: map[string]string{"set": "s"}, Families: both},
		{Name: "c2", Labels: map[string]string{"set": "s"}, Families: both},
		{Name: "c3", Labels: map[string]string{"set": "s"}, Families: v4},
		{Name: "rr1", ClusterID: "224.0.0.1", Labels: map[string]string{"rr": "1"}, Families: both},
		{Name: "rr2", ClusterID: "224.0.0.1", Labels: map[string]string{"rr": "2"}, Families: v4},
	}
	topo, err := Build(nodes, []extender.BGPPeer{peer("s", "set == 's'", "has(rr)"), peer("mesh", "has(rr)", "has(rr)")}, Options{})
	require.NoError(t, err)

	blind, err := topo.Drills()
	require.NoError(t, err)
	assert.Empty(t, extender.FailedDrills(blind), "family-blind: every drill passes")

	drills, err := topo.FamilyDrills()
	require.NoError(t, err)
	var fams []string
	for _, d := range drills {
		fams = append(fams, d.Family+" "+d.Name)
	}
	assert.Equal(t, []string{"IPv4 rr1", "IPv4 rr2", "IPv6 rr1"}, fams)
	failed := extender.FailedDrills(drills)
	require.Len(t, failed, 1)
	assert.Equal(t, "route reflector rr1 lost: 2 node pairs missing in IPv6", failed[0].String())

	costs, err := topo.FamilyCosts()
	require.NoError(t, err)
	require.Len(t, costs, 2)
	assert.Equal(t, FamilyCost{Family: extender.FamilyIPv4, Nodes: 5, BusiestPaths: costs[0].BusiestPaths, MeanPaths: costs[0].MeanPaths}, costs[0])
	assert.Equal(t, extender.FamilyIPv6, costs[1].Family)
	assert.Equal(t, 3, costs[1].Nodes, "c3 and rr2 have no IPv6 address")
	assert.Zero(t, costs[1].MissingPairs)

	// An IPv4 topology: the family-blind drills as they were, no figures per family.
	for i := range nodes {
		nodes[i].Families = v4
	}
	topo4, err := Build(nodes, []extender.BGPPeer{peer("s", "set == 's'", "has(rr)"), peer("mesh", "has(rr)", "has(rr)")}, Options{})
	require.NoError(t, err)
	d4, err := topo4.FamilyDrills()
	require.NoError(t, err)
	assert.Equal(t, blind, d4)
	c4, err := topo4.FamilyCosts()
	require.NoError(t, err)
	assert.Nil(t, c4)
}
