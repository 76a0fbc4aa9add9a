package extender

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

func v4(i int) nodeOpt { return annot(AnnotationCalicoIPv4, fmt.Sprintf("10.0.0.%d/24", i)) }
func v6(i int) nodeOpt { return annot(AnnotationCalicoIPv6, fmt.Sprintf("fd00::%x/64", i)) }

func TestFamiliesOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		ann  map[string]string
		want Families
	}{
		{"no address annotation: IPv4, Calico's default", nil, FamilyIPv4},
		{"IPv4 with a prefix length", map[string]string{AnnotationCalicoIPv4: "10.0.0.1/24"}, FamilyIPv4},
		{"IPv6 only", map[string]string{AnnotationCalicoIPv6: "fd00::1/64"}, FamilyIPv6},
		{"dual-stack, bare addresses", map[string]string{AnnotationCalicoIPv4: "10.0.0.1", AnnotationCalicoIPv6: "fd00::1"}, FamilyIPv4 | FamilyIPv6},
		{"an IPv6 address in the IPv4 annotation counts for nothing", map[string]string{AnnotationCalicoIPv4: "fd00::1/64"}, 0},
		{"an unparsable IPv6 annotation beside a good IPv4 one", map[string]string{AnnotationCalicoIPv4: "10.0.0.1/24", AnnotationCalicoIPv6: "junk"}, FamilyIPv4},
		{"empty annotations: as absent", map[string]string{AnnotationCalicoIPv4: " ", AnnotationCalicoIPv6: ""}, FamilyIPv4},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, FamiliesOf(tc.ann)) })
	}
	assert.Equal(t, "IPv4+IPv6", (FamilyIPv4 | FamilyIPv6).String())
	assert.Equal(t, "ipv6", FamilyIPv6.Key())
}

func TestAddressFamiliesFilter(t *testing.T) {
	p := policy.MustResolve(policy.Default("default"))
	both := FamilyIPv4 | FamilyIPv6
	for _, tc := range []struct {
		name       string
		want, node Families
		rejected   bool
	}{
		{"dual-stack node, dual-stack cluster", both, both, false},
		{"IPv4-only node, dual-stack cluster", both, FamilyIPv4, true},
		{"IPv6-only node, dual-stack cluster", both, FamilyIPv6, true},
		{"IPv6-only node, IPv6-only cluster", FamilyIPv6, FamilyIPv6, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewAddressFamilies(tc.want).Filter(p, &NodeInfo{Families: tc.node})
			assert.Equal(t, tc.rejected, r != "", r)
		})
	}
}

// TestPlanFamilies: the planner makes route reflectors of the nodes that have every family of the
// policy's nodes, adds the filter only when the nodes use both, and says so when clients are left
// without a route reflector in a family they have.
func TestPlanFamilies(t *testing.T) {
	p := policy.MustResolve(policy.Default("default"))
	t.Run("IPv4-only nodes: no filter, as before", func(t *testing.T) {
		var nodes []*Node
		for i := range 12 {
			nodes = append(nodes, node(fmt.Sprintf("n%02d", i), fmt.Sprintf("z%d", i%3), i, v4(i+1)))
		}
		res := plan(t, p, nodes)
		assert.Empty(t, res.Ineligible)
		assert.False(t, res.Summary.Degraded)
	})
	t.Run("IPv6-only nodes: no filter", func(t *testing.T) {
		var nodes []*Node
		for i := range 12 {
			nodes = append(nodes, node(fmt.Sprintf("n%02d", i), fmt.Sprintf("z%d", i%3), i, v6(i+1)))
		}
		res := plan(t, p, nodes)
		assert.Empty(t, res.Ineligible)
		assert.False(t, res.Summary.Degraded)
	})
	t.Run("mixed: the oldest nodes are IPv4-only, the route reflectors dual-stack", func(t *testing.T) {
		var nodes []*Node
		for i := range 12 {
			opts := []nodeOpt{v4(i + 1)}
			if i >= 6 {
				opts = append(opts, v6(i+1))
			}
			nodes = append(nodes, node(fmt.Sprintf("n%02d", i), fmt.Sprintf("z%d", i%3), i, opts...))
		}
		res := plan(t, p, nodes)
		require.NotEmpty(t, res.RouteReflectors)
		for _, rr := range res.RouteReflectors {
			assert.GreaterOrEqual(t, rr.Node, "n06", "route reflector %s is IPv4-only", rr.Node)
		}
		require.Len(t, res.Ineligible, 6)
		assert.Equal(t, RuleMissingAddressFamily, res.Ineligible[0].Rule)
		assert.Contains(t, res.Ineligible[0].Reason, "no IPv6 address")
		assert.False(t, res.Summary.Degraded, "%+v", res.Conditions)
	})
	t.Run("IPv6-only clients of IPv4-only route reflectors: Degraded", func(t *testing.T) {
		// The current route reflectors are IPv4-only and no node has both families: none is
		// eligible, the current ones stay (draining) and their IPv6-only clients have no IPv6 routes.
		var nodes []*Node
		for i := range 9 {
			opts := []nodeOpt{v6(i + 1)}
			if i < 3 {
				opts = []nodeOpt{v4(i + 1), asRR("224.0.0.1")}
			}
			nodes = append(nodes, node(fmt.Sprintf("n%02d", i), fmt.Sprintf("z%d", i%3), i, opts...))
		}
		res := plan(t, p, nodes)
		var reasons []string
		for _, c := range res.Conditions {
			reasons = append(reasons, c.Reason)
			if c.Reason == ReasonClientsMissingFamily {
				assert.Contains(t, c.Message, "6 in IPv6")
				assert.Contains(t, c.Message, "n03")
			}
		}
		assert.Contains(t, reasons, ReasonClientsMissingFamily)
	})
}

// TestCalicoAddressesOnNode: the etcd datastore's Calico Node addresses put on a Kubernetes Node
// that carries none are read as KDD's annotations (families, and so the AddressFamilies filter); a
// node that carries Calico's annotations keeps its own; the input is never changed.
func TestCalicoAddressesOnNode(t *testing.T) {
	bare := node("bare", "z0", 1, annot("other", "x"))
	both := CalicoAddresses{IPv4: "10.1.0.1/24", IPv6: "fd00::1/64"}

	got := both.OnNode(bare)
	require.NotSame(t, bare, got)
	assert.Equal(t, FamilyIPv4|FamilyIPv6, NodeFamilies(got))
	assert.Equal(t, "x", got.Annotations["other"])
	assert.Equal(t, map[string]string{"other": "x"}, bare.Annotations, "the input is not changed")
	assert.Equal(t, FamilyIPv4, NodeFamilies(bare))

	assert.Equal(t, FamilyIPv6, NodeFamilies(CalicoAddresses{IPv6: "fd00::1"}.OnNode(bare)), "an IPv6-only Calico Node")
	assert.Same(t, bare, CalicoAddresses{}.OnNode(bare), "no address: the node as it is")
	kdd := node("kdd", "z0", 1, v4(1))
	assert.Same(t, kdd, both.OnNode(kdd), "Calico's annotations on the node win")

	nodes := []*Node{bare, kdd}
	same := WithCalicoAddresses(nodes, map[string]CalicoAddresses{"kdd": both, "other": both})
	assert.Same(t, &nodes[0], &same[0], "nothing changed: the same slice")
	out := WithCalicoAddresses(nodes, map[string]CalicoAddresses{"bare": {IPv4: "10.1.0.1/24"}})
	assert.Same(t, bare, nodes[0], "the input slice is not changed")
	assert.Equal(t, FamilyIPv4, NodeFamilies(out[0]))
	assert.Equal(t, "10.1.0.1/24", out[0].Annotations[AnnotationCalicoIPv4])

	// The planner on an etcd datastore's nodes: the oldest are IPv4-only in etcd, the others
	// dual-stack; their Kubernetes Nodes carry no Calico address. With the addresses on them the
	// route reflectors are dual-stack; without, every node counts as IPv4 and the oldest are taken.
	p := policy.MustResolve(policy.Default("default"))
	var kube []*Node
	addrs := map[string]CalicoAddresses{}
	for i := range 12 {
		name := fmt.Sprintf("n%02d", i)
		kube = append(kube, node(name, fmt.Sprintf("z%d", i%3), i))
		a := CalicoAddresses{IPv4: fmt.Sprintf("10.1.0.%d/24", i+1)}
		if i >= 6 {
			a.IPv6 = fmt.Sprintf("fd00::%x/64", i+1)
		}
		addrs[name] = a
	}
	blind := plan(t, p, kube)
	assert.Contains(t, rrNames(blind), "n00", "without the addresses, the oldest node is a route reflector")
	res := plan(t, p, WithCalicoAddresses(kube, addrs))
	require.NotEmpty(t, res.RouteReflectors)
	for _, rr := range res.RouteReflectors {
		assert.GreaterOrEqual(t, rr.Node, "n06", "route reflector %s is IPv4-only in etcd", rr.Node)
	}
	require.Len(t, res.Ineligible, 6)
	assert.Equal(t, RuleMissingAddressFamily, res.Ineligible[0].Rule)
}

// TestTallyDrillsFamilies: drills run in each address family count once per loss, in the worst
// family: a loss that passes in IPv4 and fails in IPv6 does not pass; a family-blind tally is what
// it was.
func TestTallyDrillsFamilies(t *testing.T) {
	z := func(name, fam string, missing int64) Drill {
		return Drill{Kind: DrillZone, Name: name, Family: fam, MissingPairs: missing}
	}
	rr := func(name, fam string, missing int64, represents int) Drill {
		return Drill{Kind: DrillRouteReflector, Name: name, Family: fam, MissingPairs: missing, Represents: represents}
	}
	for _, tc := range []struct {
		name       string
		drills     []Drill
		zone, rrs  DrillTally
		failed     int
		failedText string
	}{
		{"family-blind", []Drill{z("a", "", 0), z("b", "", 3), rr("n1", "", 0, 0), rr("n2", "", 0, 4)},
			DrillTally{1, 2}, DrillTally{5, 5}, 1, "zone b lost: 3 node pairs missing"},
		{"both families pass", []Drill{z("a", "IPv4", 0), z("b", "IPv4", 0), rr("n1", "IPv4", 0, 0), z("a", "IPv6", 0), z("b", "IPv6", 0), rr("n1", "IPv6", 0, 0)},
			DrillTally{2, 2}, DrillTally{1, 1}, 0, ""},
		{"IPv4 passes, IPv6 fails", []Drill{z("a", "IPv4", 0), z("b", "IPv4", 0), rr("n1", "IPv4", 0, 0), z("a", "IPv6", 0), z("b", "IPv6", 7), rr("n1", "IPv6", 2, 0)},
			DrillTally{1, 2}, DrillTally{0, 1}, 2, "zone b lost: 7 node pairs missing in IPv6"},
		{"IPv6 nodes in fewer zones, all pass", []Drill{z("a", "IPv4", 0), z("b", "IPv4", 0), z("c", "IPv4", 0), z("a", "IPv6", 0), z("b", "IPv6", 0)},
			DrillTally{3, 3}, DrillTally{}, 0, ""},
		{"classes differ by family", []Drill{rr("n1", "IPv4", 0, 50), rr("n2", "IPv6", 1, 50)},
			DrillTally{}, DrillTally{0, 50}, 1, "route reflector n2 lost: 1 node pairs missing in IPv6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := TallyDrills(tc.drills)
			assert.Equal(t, tc.zone, got[DrillZone], "zones")
			assert.Equal(t, tc.rrs, got[DrillRouteReflector], "route reflectors")
			failed := FailedDrills(tc.drills)
			require.Len(t, failed, tc.failed)
			if tc.failed > 0 {
				assert.Equal(t, tc.failedText, failed[0].String())
			}
		})
	}
}

// TestSafestReadsFamilyDrills: the drill-driven handover (safest) counts a drill that fails in one
// family only: current route reflectors whose plan fails a drill in IPv6 (passing in IPv4) are
// handed over to the fresh plan's, as for a family-blind failure; a plan that passes in every
// family is kept.
func TestSafestReadsFamilyDrills(t *testing.T) {
	pol := policy.Default("default")
	pol.Spec.Topology = &v1alpha1.Topology{Type: v1alpha1.MultiCluster}
	p := policy.MustResolve(pol)
	for _, tc := range []struct {
		name         string
		failing      []Drill // the drills of a plan whose active route reflectors include the current ones
		handedOver   bool
		failedInPlan int
	}{
		{"passes in both families: kept", []Drill{{Kind: DrillZone, Name: "z0", Family: "IPv4"}, {Kind: DrillZone, Name: "z0", Family: "IPv6"}}, false, 0},
		{"fails in IPv6 only: handed over", []Drill{{Kind: DrillZone, Name: "z0", Family: "IPv4"}, {Kind: DrillZone, Name: "z0", Family: "IPv6", MissingPairs: 5}}, true, 0},
		{"fails family-blind: handed over, as before", []Drill{{Kind: DrillZone, Name: "z0", MissingPairs: 5}}, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var nodes []*Node
			for i := range 9 {
				opts := []nodeOpt{v4(i + 1), v6(i + 1)}
				if i >= 6 {
					opts = append(opts, asRR(fmt.Sprintf("224.0.0.%d", i-5)))
				}
				nodes = append(nodes, node(fmt.Sprintf("n%02d", i), fmt.Sprintf("z%d", i%3), i, opts...))
			}
			current := map[string]bool{"n06": true, "n07": true, "n08": true}
			drills := func(_ Input, res *Result) ([]Drill, error) {
				for _, rr := range res.RouteReflectors {
					if current[rr.Node] && !rr.Draining {
						return tc.failing, nil
					}
				}
				return []Drill{{Kind: DrillZone, Name: "z0", Family: "IPv4"}, {Kind: DrillZone, Name: "z0", Family: "IPv6"}}, nil
			}
			res := Plan(Input{Policy: p, Nodes: nodes, Now: t0.Add(time.Hour), Drills: drills})
			assert.Equal(t, tc.handedOver, len(res.HandedOver) > 0, "handed over %v", res.HandedOver)
			assert.Len(t, FailedDrills(res.Drills), tc.failedInPlan, "%v", res.Drills)
		})
	}
}
