package extender

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// Families is a set of IP address families a node peers in. Calico's confd renders bird.cfg (IPv4)
// sessions between nodes that both have an IPv4 address and bird6.cfg (IPv6) sessions between nodes
// that both have an IPv6 address: a BGPPeer's selectors make a session in each family where both
// ends have an address of it.
type Families uint8

// The address families.
const (
	FamilyIPv4 Families = 1 << iota
	FamilyIPv6
)

// AllFamilies lists the families in their stable order.
var AllFamilies = []Families{FamilyIPv4, FamilyIPv6}

// Has reports whether f holds every family of g.
func (f Families) Has(g Families) bool { return f&g == g }

// Key is the family's name in JSON figures ("ipv4", "ipv6"); for a set, the names joined by "+".
func (f Families) Key() string { return strings.ToLower(f.String()) }

// String names the families: "IPv4", "IPv6", "IPv4+IPv6" ("none" for the empty set).
func (f Families) String() string {
	var parts []string
	if f.Has(FamilyIPv4) {
		parts = append(parts, "IPv4")
	}
	if f.Has(FamilyIPv6) {
		parts = append(parts, "IPv6")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

// annotation is the Calico address annotation of one family.
func (f Families) annotation() string {
	if f == FamilyIPv6 {
		return AnnotationCalicoIPv6
	}
	return AnnotationCalicoIPv4
}

// FamiliesOf returns the families of a node from its Calico address annotations (KDD mode, written
// by calico-node: projectcalico.org/IPv4Address and projectcalico.org/IPv6Address, "addr/len" or a
// bare address): a family whose annotation holds an address of that family. A node with neither
// annotation (calico-node has not written them yet, simulated nodes, nodes files without them)
// counts as IPv4, Calico's default, so that IPv4 plans stay what they were.
func FamiliesOf(annotations map[string]string) Families {
	var f Families
	present := false
	for _, fam := range AllFamilies {
		s, ok := annotations[fam.annotation()]
		if !ok || strings.TrimSpace(s) == "" {
			continue
		}
		present = true
		if a, ok := parseAddress(s); ok && a.Is4() == (fam == FamilyIPv4) {
			f |= fam
		}
	}
	if !present {
		return FamilyIPv4
	}
	return f
}

// parseAddress reads "10.0.0.1/24", "fd00::1/64" or a bare address.
func parseAddress(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr().Unmap(), true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	return netip.Addr{}, false
}

// NodeFamilies returns the families of a node (FamiliesOf its annotations).
func NodeFamilies(n *Node) Families { return FamiliesOf(n.Annotations) }

// CalicoAddresses are a node's Calico BGP addresses ("addr/len" or a bare address, "" for none):
// with the Kubernetes datastore, the projectcalico.org/IPv4Address and IPv6Address annotations
// calico-node writes on the Kubernetes Node; with the etcd datastore, spec.bgp.ipv4Address and
// spec.bgp.ipv6Address of the Calico Node, which the Kubernetes Node does not carry.
type CalicoAddresses struct{ IPv4, IPv6 string }

// HasCalicoAddress reports whether a node carries a Calico address annotation (non-empty).
func HasCalicoAddress(n *Node) bool {
	return strings.TrimSpace(n.Annotations[AnnotationCalicoIPv4]) != "" || strings.TrimSpace(n.Annotations[AnnotationCalicoIPv6]) != ""
}

// OnNode returns the node as the planner and the graph model read it with these addresses: the
// node itself when it carries a Calico address annotation already (the Kubernetes datastore) or
// when a holds no address, else a shallow copy whose annotations (a new map) add them as the
// projectcalico.org annotations, so that FamiliesOf reads an etcd datastore's node as it reads a
// KDD one. The copy is a view: its annotations are never written (the product patches owned keys
// only).
func (a CalicoAddresses) OnNode(n *Node) *Node {
	if n == nil || a == (CalicoAddresses{}) || HasCalicoAddress(n) {
		return n
	}
	c := *n
	c.Annotations = make(map[string]string, len(n.Annotations)+2)
	for k, v := range n.Annotations {
		c.Annotations[k] = v
	}
	a.Annotate(c.Annotations)
	return &c
}

// Annotate writes the addresses that are set into annotations as Calico's projectcalico.org
// address annotations (the Kubernetes datastore's shape).
func (a CalicoAddresses) Annotate(annotations map[string]string) {
	if a.IPv4 != "" {
		annotations[AnnotationCalicoIPv4] = a.IPv4
	}
	if a.IPv6 != "" {
		annotations[AnnotationCalicoIPv6] = a.IPv6
	}
}

// WithCalicoAddresses returns the nodes with their Calico addresses from addrs (by node name) on
// them (CalicoAddresses.OnNode); nodes is returned as it is when addrs changes none of them.
func WithCalicoAddresses(nodes []*Node, addrs map[string]CalicoAddresses) []*Node {
	if len(addrs) == 0 {
		return nodes
	}
	out, copied := nodes, false
	for i, n := range nodes {
		if n == nil {
			continue
		}
		a, ok := addrs[n.Name]
		if !ok {
			continue
		}
		if c := a.OnNode(n); c != n {
			if !copied {
				out, copied = slices.Clone(nodes), true
			}
			out[i] = c
		}
	}
	return out
}

// Filter and Degraded reasons of the address families.
const (
	AddressFamiliesName = "AddressFamilies"
	// RuleMissingAddressFamily: the node lacks an address family that other nodes of the policy
	// peer in, so it could not reflect their routes of that family.
	RuleMissingAddressFamily = "missing-address-family"
	reasonMissingFamily      = "node has no %s address (%s) while nodes of the policy peer in %s: as a route reflector it could not reflect their %s routes"
	// ReasonClientsMissingFamily: clients peer with no route reflector that has an address of a
	// family they have (IPv6-only clients of IPv4-only route reflectors): their routes of that
	// family are missing.
	ReasonClientsMissingFamily = "ClientsWithoutRouteReflectorInFamily"
)

// AddressFamilies rejects, when the policy's nodes peer in more than one family, the nodes that do
// not have every one of them: a route reflector must serve each family its clients have. The
// planner adds it (to any filter list) when the nodes it plans use both families; in an IPv4-only
// or IPv6-only cluster it is not there, so it changes nothing.
type AddressFamilies struct{ want Families }

var _ FilterPlugin = &AddressFamilies{}

// NewAddressFamilies returns the AddressFamilies filter for the families the policy's nodes use.
func NewAddressFamilies(want Families) *AddressFamilies { return &AddressFamilies{want: want} }

// Name implements FilterPlugin.
func (*AddressFamilies) Name() string { return AddressFamiliesName }

// Rule implements FilterPlugin.
func (*AddressFamilies) Rule() string { return RuleMissingAddressFamily }

// Filter implements FilterPlugin.
func (f *AddressFamilies) Filter(_ *policy.Resolved, n *NodeInfo) string {
	for _, fam := range AllFamilies {
		if f.want.Has(fam) && !n.Families.Has(fam) {
			return fmt.Sprintf(reasonMissingFamily, fam, fam.annotation(), fam, fam)
		}
	}
	return ""
}

// familiesFilter returns the AddressFamilies filter of nodes that peer in families (the union of
// theirs), nil when that is one family or none. The planner (filterFamilies) and admission
// (AdmitState.readFamilies) both decide through it and rejectFamily: the same predicate.
func familiesFilter(families Families) *AddressFamilies {
	if !families.Has(FamilyIPv4 | FamilyIPv6) {
		return nil
	}
	return NewAddressFamilies(families)
}

// rejectFamily runs f (nil: none) on a node already read through the other filters, as the last
// filter of the list: a node already rejected keeps its first reason, and one that failed
// NodeReady only is no longer awaited. It reports whether f rejects the node.
func rejectFamily(f *AddressFamilies, p *policy.Resolved, n *NodeInfo) bool {
	if f == nil {
		return false
	}
	r := f.Filter(p, n)
	if r == "" {
		return false
	}
	if n.Eligible {
		n.Eligible, n.Reason, n.Rule = false, r, f.Rule()
	}
	n.Awaited = false
	return true
}

// filterFamilies runs AddressFamilies after the other filters when the policy's nodes peer in both
// families (rejectFamily).
func (pl *planner) filterFamilies() {
	var families Families
	for _, n := range pl.nodes {
		families |= n.Families
	}
	f := familiesFilter(families)
	for _, n := range pl.nodes {
		rejectFamily(f, pl.p, n)
	}
}

// clientsMissingFamily returns a Degraded condition when clients of the plan have a family none of
// their route reflectors has: the model's figures of that family miss their routes.
func (pl *planner) clientsMissingFamily() *condition {
	var names []string
	count := map[Families]int{}
	for i, n := range pl.nodes {
		d := &pl.dec[i]
		if d.role != roleClient || len(d.peers) == 0 {
			continue
		}
		var served Families
		for _, j := range d.peers {
			served |= pl.nodes[j].Families
		}
		lack := n.Families &^ served
		if lack == 0 {
			continue
		}
		for _, fam := range AllFamilies {
			if lack.Has(fam) {
				count[fam]++
			}
		}
		if len(names) < 5 {
			names = append(names, n.Name)
		}
	}
	if len(count) == 0 {
		return nil
	}
	var parts []string
	for _, fam := range AllFamilies {
		if count[fam] > 0 {
			parts = append(parts, fmt.Sprintf("%d in %s", count[fam], fam))
		}
	}
	return &condition{ReasonClientsMissingFamily, fmt.Sprintf("clients peer with no route reflector that has an address of a family they have (%s), so their routes of that family are missing: %s",
		strings.Join(parts, ", "), strings.Join(names, ", "))}
}
