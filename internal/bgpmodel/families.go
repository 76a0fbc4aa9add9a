package bgpmodel

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strconv"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// Address families. Calico's confd renders two BIRD configurations from the same BGPPeers and
// cluster IDs: bird.cfg (IPv4) with a session wherever both ends have an IPv4 address, and
// bird6.cfg (IPv6) with one wherever both ends have an IPv6 address (confd's
// bird.cfg.template/bird6.cfg.template: "# No IPv6 address configured for this node" skips the
// peer). The route reflector cluster ID, an IPv4-formatted value, is the same in both. So the model
// of one family is the model of the whole topology with the nodes that lack an address of that
// family taken out: they have no session, no block and learn nothing in it.

// Families returns the families the topology's nodes peer in.
func (t *Topology) Families() extender.Families {
	var f extender.Families
	for i := range t.Nodes {
		f |= t.Nodes[i].families()
	}
	return f
}

// FamilyDown returns the down-mask of family f: the nodes down in down (nil: none) and those
// without an address of f.
func (t *Topology) FamilyDown(f extender.Families, down []bool) []bool {
	out := make([]bool, len(t.Nodes))
	for i := range t.Nodes {
		out[i] = isDown(down, i) || !t.Nodes[i].families().Has(f)
	}
	return out
}

// PropagateFamily is Propagate in family f: the nodes without an address of f count as down (the
// summary's nodes are those of the family, its down count the others).
func (t *Topology) PropagateFamily(f extender.Families, down []bool) (*Model, error) {
	return t.Propagate(t.FamilyDown(f, down))
}

// FamilyFigures are a plan's figures in one address family.
type FamilyFigures struct {
	Summary Summary          `json:"summary"`
	Cost    Cost             `json:"cost"`
	Drills  []extender.Drill `json:"drills"`
}

// FamiliesOf runs the graph model of a plan in each address family its nodes peer in, keyed by
// family ("ipv4", "ipv6"): the summary, the cost beside the default layout's in the same family,
// and the failure drills. It returns nil when no node has an IPv6 address (an IPv4 plan's figures
// are the plan's own).
func FamiliesOf(in extender.Input, res *extender.Result, topo *Topology) (map[string]*FamilyFigures, error) {
	all := topo.Families()
	if !all.Has(extender.FamilyIPv6) {
		return nil, nil
	}
	var def *Topology // the default layout's, built once
	out := map[string]*FamilyFigures{}
	for _, f := range extender.AllFamilies {
		if !all.Has(f) {
			continue
		}
		m, err := topo.PropagateFamily(f, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		ff := &FamilyFigures{Summary: m.Summary}
		ff.Cost = Cost{Layout: layoutName(in.Policy), MissingPairs: m.Summary.MissingPairs}
		ff.Cost.BusiestPaths, ff.Cost.MeanPaths = perPrefix(m.Summary)
		dp := policy.DefaultLayoutOf(in.Policy)
		ff.Cost.DefaultLayout = layoutName(dp)
		if in.Policy.IsDefaultLayout() {
			ff.Cost.DefaultBusiest, ff.Cost.DefaultMean = ff.Cost.BusiestPaths, ff.Cost.MeanPaths
		} else {
			if def == nil {
				din := in
				din.Policy = dp
				if def, err = FromPlan(din, extender.Plan(din), Options{}); err != nil {
					return nil, fmt.Errorf("the default layout: %w", err)
				}
			}
			dm, err := def.PropagateFamily(f, nil)
			if err != nil {
				return nil, fmt.Errorf("the default layout, %s: %w", f, err)
			}
			ff.Cost.DefaultBusiest, ff.Cost.DefaultMean = perPrefix(dm.Summary)
		}
		if ff.Drills, err = topo.familyDrills(f); err != nil {
			return nil, err
		}
		out[f.Key()] = ff
	}
	return out, nil
}

// FamilyCost is the graph model's figures of a topology in one address family.
type FamilyCost struct {
	Family       extender.Families
	Nodes        int // the nodes with an address of the family
	MissingPairs int64
	BusiestPaths float64 // paths per prefix on the busiest node
	MeanPaths    float64 // and on the mean node
}

// FamilyCosts propagates the topology in each family its nodes peer in, IPv4 first, when a node
// has an IPv6 address; nil otherwise (an IPv4 topology's figures are its own). The reconciler's
// status and the status command report them beside the family-blind figures.
func (t *Topology) FamilyCosts() ([]FamilyCost, error) {
	all := t.Families()
	if !all.Has(extender.FamilyIPv6) {
		return nil, nil
	}
	var out []FamilyCost
	for _, f := range extender.AllFamilies {
		if !all.Has(f) {
			continue
		}
		m, err := t.PropagateFamily(f, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		c := FamilyCost{Family: f, Nodes: m.Summary.Nodes, MissingPairs: m.Summary.MissingPairs}
		c.BusiestPaths, c.MeanPaths = perPrefix(m.Summary)
		out = append(out, c)
	}
	return out, nil
}

// Router IDs. BIRD needs a 4-octet router ID in both configurations. confd renders
// `router id` from calico-node's CALICO_ROUTER_ID environment variable: "hash" gives
// hashToIPv4(node name) (confd/pkg/resource/template/template_funcs.go: the first 4 bytes of the
// name's SHA-256, the first octet less 32 when above 223), another value is used as it is, and
// without it the node's IPv4 address (bird.cfg.template and bird6.cfg.template: "Use IPv4 address
// since router id is 4 octets, even in MP-BGP"). An IPv6-only node without CALICO_ROUTER_ID renders
// an empty `router id` and its BIRD does not start. Calico's API (NodeBGPSpec, BGPConfiguration)
// has no router ID field; only CalicoNodeStatus reports the one BIRD uses.

// Router ID sources (RouterIDs.Source).
const (
	RouterIDFromIPv4 = "ipv4Address"
	RouterIDHash     = "hash"
)

// RouterIDs is the check of the nodes' BGP router IDs.
type RouterIDs struct {
	// Source is where the router IDs come from: RouterIDFromIPv4 (calico-node without
	// CALICO_ROUTER_ID) or RouterIDHash (CALICO_ROUTER_ID=hash).
	Source string `json:"source"`
	// Missing are the nodes without a router ID (IPv6-only nodes under RouterIDFromIPv4).
	Missing []string `json:"missing,omitempty"`
	// Duplicates are the groups of nodes sharing a router ID: BIRD drops a reflected route whose
	// ORIGINATOR_ID is its own router ID, so they lose each other's routes.
	Duplicates [][]string `json:"duplicates,omitempty"`
}

// OK reports whether every node has a router ID of its own.
func (r RouterIDs) OK() bool { return len(r.Missing) == 0 && len(r.Duplicates) == 0 }

// String is the one-line warning, "" when OK.
func (r RouterIDs) String() string {
	if r.OK() {
		return ""
	}
	s := ""
	if len(r.Missing) > 0 {
		s = fmt.Sprintf("%d IPv6-only nodes have no BGP router ID (calico-node takes it from the node's IPv4 address unless CALICO_ROUTER_ID is set, e.g. to hash): %s", len(r.Missing), firstNames(r.Missing, 5))
	}
	if len(r.Duplicates) > 0 {
		if s != "" {
			s += "; "
		}
		s += fmt.Sprintf("%d groups of nodes share a BGP router ID (%s), e.g. %s", len(r.Duplicates), r.Source, firstNames(r.Duplicates[0], 5))
	}
	return s
}

func firstNames(names []string, k int) string {
	if len(names) <= k {
		return fmt.Sprint(names)
	}
	return fmt.Sprintf("%v and %d more", names[:k], len(names)-k)
}

// CheckRouterIDs checks the router IDs the nodes' BIRDs would use, with calico-node's
// CALICO_ROUTER_ID set to calicoRouterID ("" when unset, or "hash"). A node whose IPv4 address is
// unknown (no annotation) but that counts as IPv4 is taken to have one of its own.
func CheckRouterIDs(nodes []Node, calicoRouterID string) (RouterIDs, error) {
	out := RouterIDs{Source: RouterIDFromIPv4}
	switch calicoRouterID {
	case "":
	case "hash":
		out.Source = RouterIDHash
	default:
		return out, fmt.Errorf("CALICO_ROUTER_ID %q: only \"\" (the node's IPv4 address) or hash give every node its own router ID", calicoRouterID)
	}
	holders := map[string][]string{}
	var ids []string
	for i := range nodes {
		n := &nodes[i]
		id := ""
		switch {
		case out.Source == RouterIDHash:
			id = HashToIPv4(n.Name)
		case n.IP != "":
			id = n.IP
		case !n.families().Has(extender.FamilyIPv4):
			out.Missing = append(out.Missing, n.Name)
		}
		if id == "" {
			continue
		}
		if _, seen := holders[id]; !seen {
			ids = append(ids, id)
		}
		holders[id] = append(holders[id], n.Name)
	}
	for _, id := range ids {
		if h := holders[id]; len(h) > 1 {
			slices.Sort(h)
			out.Duplicates = append(out.Duplicates, h)
		}
	}
	slices.Sort(out.Missing)
	slices.SortFunc(out.Duplicates, func(a, b []string) int { return slices.Compare(a, b) })
	return out, nil
}

// HashToIPv4 is confd's hashToIPv4: the router ID of a node under CALICO_ROUTER_ID=hash.
func HashToIPv4(name string) string {
	h := sha256.Sum256([]byte(name))
	first := int(h[0])
	if first > 223 {
		first -= 32
	}
	return strconv.Itoa(first) + "." + strconv.Itoa(int(h[1])) + "." + strconv.Itoa(int(h[2])) + "." + strconv.Itoa(int(h[3]))
}
