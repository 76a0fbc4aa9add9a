// Package bgpmodel is a graph model of how Calico and BIRD propagate routes for a plan: the BGP
// sessions confd would configure from the labels, annotations and BGPPeers the product writes, then
// RFC 4456 route reflection (cluster-list and originator-ID loop prevention, as BIRD 1.6 applies
// them) with ADD-PATH as Calico enables it (`add paths on`: every node stores and advertises every
// distinct path, not only its best). It tells, for every node, which other nodes' blocks it learns
// and how many paths it stores, for plans far larger than real speakers can run on one machine.
//
// Running product (the cost measure) and the tools: the reconciler and the policy webhook
// (status.routes, the ExpensiveTopology condition and warning), the plan, verify and status
// commands and bgpverify (the model it is checked against) call it.
package bgpmodel

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// Options tune how sessions are derived.
type Options struct {
	// NodeToNodeMesh turns Calico's node-to-node mesh on: every node without a cluster ID peers with
	// every other node without one (route reflectors leave the mesh). Off by default, as a plan with
	// route reflectors expects.
	NodeToNodeMesh bool
	// MaxPairs bounds the node pairs one BGPPeer may expand to [50,000,000].
	MaxPairs int
}

// Node is a node as confd sees it after the plan: its labels (Kubernetes labels over the Calico
// labels annotation) and its route reflector cluster ID ("" when it has none).
type Node struct {
	Name      string            `json:"name"`
	Zone      string            `json:"zone,omitempty"`
	ClusterID string            `json:"clusterID,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	// IP is Calico's BGP address of the node (projectcalico.org/IPv4Address), "" when unknown: a
	// BGPPeer whose peerIP is this address peers with the node.
	IP string `json:"ip,omitempty"`
	// IP6 is the node's IPv6 BGP address (projectcalico.org/IPv6Address), "" when none.
	IP6 string `json:"ip6,omitempty"`
	// Families are the families the node peers in (extender.FamiliesOf its annotations; IPv4 when
	// it has no address annotation). The zero value counts as IPv4.
	Families extender.Families `json:"families,omitempty"`
}

// families returns the node's families, IPv4 for the zero value.
func (n *Node) families() extender.Families {
	if n.Families == 0 {
		return extender.FamilyIPv4
	}
	return n.Families
}

// Topology is the nodes and the BGP sessions between them.
type Topology struct {
	Nodes []Node
	// Mesh: nodes without a cluster ID all peer with each other (not listed in Sessions).
	Mesh bool
	// Sessions are the sessions that establish: both ends configure the other. Node indexes, i < j.
	Sessions [][2]int32
	// OneSided counts peerings configured at one end only; they never establish.
	OneSided int

	adj   [][]int32      // established sessions per node, sorted
	index map[string]int // nil when the nodes are sorted by name
}

// Index returns the index of a node by name, or -1.
func (t *Topology) Index(name string) int {
	if t.index == nil { // the nodes are sorted by name
		i, ok := slices.BinarySearchFunc(t.Nodes, name, func(n Node, name string) int { return strings.Compare(n.Name, name) })
		if !ok {
			return -1
		}
		return i
	}
	if i, ok := t.index[name]; ok {
		return i
	}
	return -1
}

// Peers returns the indexes of the nodes a node has an explicit session with (not the mesh).
func (t *Topology) Peers(i int) []int32 { return t.adj[i] }

// IsRR reports whether a node is a route reflector (carries a valid cluster ID).
func (t *Topology) IsRR(i int) bool { return t.Nodes[i].ClusterID != "" }

// RRClient reports whether node a treats its peer b as a route reflector client: a has a cluster ID
// and b has none or a different one (the rule of Calico's bird.cfg.template).
func (t *Topology) RRClient(a, b int) bool {
	ca := t.Nodes[a].ClusterID
	return ca != "" && t.Nodes[b].ClusterID != ca
}

// FromPlan builds the topology a plan produces: every node the plan manages, with its original
// labels and annotations where the plan's owned keys are replaced by the plan's values, and the
// plan's BGPPeers.
func FromPlan(in extender.Input, res *extender.Result, opts Options) (*Topology, error) {
	var byName map[string]*extender.Node // built when the plan's order is not the input's
	rrKey, zoneKey := "", corev1.LabelTopologyZone
	if in.Policy != nil {
		rrKey, zoneKey = in.Policy.RRLabelKey, in.Policy.ZoneLabel
	}
	ownedLabels := extender.OwnedLabelKeys(rrKey)
	ownedAnn := extender.OwnedAnnotationKeys()
	nodes := make([]Node, 0, len(res.Nodes))
	var labelSets labelSets
	next := 0 // the input node expected next
	for _, st := range res.Nodes {
		var n *extender.Node
		for next < len(in.Nodes) && in.Nodes[next] == nil {
			next++
		}
		if next < len(in.Nodes) && in.Nodes[next].Name == st.Name {
			n = in.Nodes[next]
			next++
		} else {
			if byName == nil {
				byName = make(map[string]*extender.Node, len(in.Nodes))
				for _, n := range in.Nodes {
					if n != nil {
						byName[n.Name] = n
					}
				}
			}
			n = byName[st.Name]
		}
		var labels, ann map[string]string
		if n != nil {
			labels, ann = n.Labels, n.Annotations
		}
		node := planNode(st.Name, labels, ann, ownedLabels, ownedAnn, st.Labels, st.Annotations, zoneKey)
		node.Labels = labelSets.share(node.Labels)
		nodes = append(nodes, node)
	}
	return Build(nodes, res.BGPPeers, opts)
}

// planNode is NodeFromObject(name, extender.ApplyOwned(labels, ownedLabels, setLabels),
// extender.ApplyOwned(ann, ownedAnn, setAnn), zoneLabel) without the intermediate maps.
func planNode(name string, labels, ann map[string]string, ownedLabels, ownedAnn []string, setLabels, setAnn map[string]string, zoneLabel string) Node {
	merged := make(map[string]string, len(labels)+len(setLabels))
	if s := overlaid(ann, ownedAnn, setAnn, extender.AnnotationCalicoLabels); s != "" {
		var cl map[string]string
		if json.Unmarshal([]byte(s), &cl) == nil {
			for k, v := range cl {
				merged[k] = v
			}
		}
	}
	for k, v := range labels {
		if !slices.Contains(ownedLabels, k) {
			merged[k] = v
		}
	}
	for k, v := range setLabels {
		merged[k] = v
	}
	return Node{Name: name, Zone: overlaid(labels, ownedLabels, setLabels, zoneLabel),
		ClusterID: ParseClusterID(overlaid(ann, ownedAnn, setAnn, extender.AnnotationClusterID)), Labels: merged,
		IP:  nodeAddress(overlaid(ann, ownedAnn, setAnn, extender.AnnotationCalicoIPv4)),
		IP6: nodeAddress(ann[extender.AnnotationCalicoIPv6]), Families: extender.FamiliesOf(ann)}
}

// labelSets holds one labels map per distinct set of labels: the nodes of a zone, a rack and a
// peering set have the same few labels (the product's cache keeps only the labels it reads), and
// share one map in a topology: 9.6 instead of 31.2 MB for a 65,000-node DualPlane plan. A
// topology's label maps are never modified. It holds at most maxLabelSets sets: nodes whose
// labels are their own (a hostname label) keep their own map, and the set stays small.
type labelSets struct {
	m   map[string]map[string]string
	key []byte
}

// maxLabelSets bounds the distinct label sets a labelSets holds.
const maxLabelSets = 4096

// share returns the map of these labels the set already holds, or makes labels that map.
func (s *labelSets) share(labels map[string]string) map[string]string {
	if len(labels) == 0 {
		return labels
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	s.key = s.key[:0]
	for _, k := range keys {
		s.key = append(append(append(append(s.key, k...), 0), labels[k]...), 0)
	}
	if m, ok := s.m[string(s.key)]; ok { // no allocation for the lookup's key
		return m
	}
	if s.m == nil {
		s.m = map[string]map[string]string{}
	}
	if len(s.m) < maxLabelSets {
		s.m[string(s.key)] = labels
	}
	return labels
}

// overlaid is extender.ApplyOwned(base, owned, set)[k].
func overlaid(base map[string]string, owned []string, set map[string]string, k string) string {
	if v, ok := set[k]; ok {
		return v
	}
	if slices.Contains(owned, k) {
		return ""
	}
	return base[k]
}

// NodeFromObject makes a Node from a node's labels and annotations as Calico reads them in the
// Kubernetes datastore: the labels of the `projectcalico.org/labels` annotation under the
// Kubernetes labels, and the cluster ID of `projectcalico.org/RouteReflectorClusterID` when it is an
// IPv4 address (Calico ignores any other value).
func NodeFromObject(name string, labels, annotations map[string]string, zoneLabel string) Node {
	merged := map[string]string{}
	if s := annotations[extender.AnnotationCalicoLabels]; s != "" {
		var cl map[string]string
		if json.Unmarshal([]byte(s), &cl) == nil {
			for k, v := range cl {
				merged[k] = v
			}
		}
	}
	for k, v := range labels {
		merged[k] = v
	}
	return Node{Name: name, Zone: labels[zoneLabel], ClusterID: ParseClusterID(annotations[extender.AnnotationClusterID]), Labels: merged,
		IP: nodeAddress(annotations[extender.AnnotationCalicoIPv4]), IP6: nodeAddress(annotations[extender.AnnotationCalicoIPv6]),
		Families: extender.FamiliesOf(annotations)}
}

// nodeAddress is the address of Calico's BGP address annotation ("10.0.0.1/24" or a bare address).
func nodeAddress(s string) string {
	if p, err := netip.ParsePrefix(strings.TrimSpace(s)); err == nil {
		return p.Addr().String()
	}
	if a, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil {
		return a.String()
	}
	return ""
}

// ParseClusterID returns the cluster ID in normal form, or "" when Calico ignores s. Calico takes
// an IPv4 address, and also a strictly masked IPv4 network ("224.0.0.9/32", its validator's
// ValidateIPv4Network): confd then writes that network into `rr cluster id`, which BIRD refuses,
// so the node's BIRD does not load the configuration. The product never writes one (its validator
// refuses a cluster ID that is not an IPv4 address); the model takes it as confd does.
func ParseClusterID(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if !a.Is4() {
			return ""
		}
		return a.String()
	}
	if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is4() && p.Masked() == p {
		return p.String()
	}
	return ""
}

// calicoASN is the AS number every node has in the model (Calico's default); a peerIP BGPPeer with
// another AS number is eBGP, outside the model.
const calicoASN = 64512

// Build derives the sessions confd configures from BGPPeers: a BGPPeer configures, on every node
// its nodeSelector (or node) selects — every node when both are empty — a peering with every node
// its peerSelector selects; confd adds the reverse peering on the peer nodes unless reversePeering
// is Manual. A node never peers with itself. A session establishes only when both ends configure
// it. A BGPPeer with a peerIP peers with the node whose BGP address (Node.IP) that is, as confd
// does (reverse peering included, for Calico's AS); a peerIP of no node is outside the model.
//
// Nodes that no selector tells apart (same presence and values of the labels the selectors name,
// values no selector names counting as one) form a group: selectors are evaluated once per group,
// the peerings are derived between groups, and every node of a group gets the same session list.
func Build(nodes []Node, peers []extender.BGPPeer, opts Options) (*Topology, error) {
	if opts.MaxPairs <= 0 {
		opts.MaxPairs = 50_000_000
	}
	t := &Topology{Nodes: nodes, Mesh: opts.NodeToNodeMesh, adj: make([][]int32, len(nodes))}
	if !slices.IsSortedFunc(nodes, func(a, b Node) int { return strings.Compare(a.Name, b.Name) }) {
		t.index = make(map[string]int, len(nodes))
	}
	for i, n := range nodes {
		if t.index == nil {
			if i > 0 && nodes[i-1].Name == n.Name {
				return nil, fmt.Errorf("node %q appears twice", n.Name)
			}
			continue
		}
		if _, dup := t.index[n.Name]; dup {
			return nil, fmt.Errorf("node %q appears twice", n.Name)
		}
		t.index[n.Name] = i
	}
	type parsed struct {
		node, peer *selectorInfo
		spec       *apiv3.BGPPeerSpec
		named      int // the node of spec.Node, -1 when none or unknown
		peerNode   int // the node whose address is spec.PeerIP, -1 when none
	}
	ps := make([]parsed, len(peers))
	var all []*selectorInfo
	named := map[int]bool{}
	byIP := map[string]int{}
	for i, n := range nodes {
		if n.IP != "" {
			byIP[n.IP] = i
		}
	}
	for i := range peers {
		p := &peers[i]
		ps[i].spec, ps[i].named, ps[i].peerNode = &p.Spec, -1, -1
		if p.Spec.PeerSelector == "" && p.Spec.PeerIP != "" && (p.Spec.ASNumber == 0 || uint32(p.Spec.ASNumber) == calicoASN) {
			host := p.Spec.PeerIP
			if ap, err := netip.ParseAddrPort(host); err == nil {
				host = ap.Addr().String()
			} else if a, err := netip.ParseAddr(host); err == nil {
				host = a.String()
			}
			if j, ok := byIP[host]; ok {
				ps[i].peerNode = j
				named[j] = true
			}
		}
		var err error
		if p.Spec.NodeSelector != "" {
			if ps[i].node, err = parseSelector(p.Spec.NodeSelector); err != nil {
				return nil, fmt.Errorf("BGPPeer %s: nodeSelector: %v", p.Name, err)
			}
			all = append(all, ps[i].node)
		} else if p.Spec.Node != "" {
			if j := t.Index(p.Spec.Node); j >= 0 {
				ps[i].named = j
				named[j] = true
			}
		}
		if p.Spec.PeerSelector != "" {
			if ps[i].peer, err = parseSelector(p.Spec.PeerSelector); err != nil {
				return nil, fmt.Errorf("BGPPeer %s: peerSelector: %v", p.Name, err)
			}
			all = append(all, ps[i].peer)
		}
	}
	gr := groupNodes(nodes, all, named)
	G := len(gr.members)
	match := func(s *selectorInfo) []int32 {
		var out []int32
		for _, g := range gr.candidates(s) {
			if s.matches(gr.labels[g]) {
				out = append(out, g)
			}
		}
		return out
	}
	allGroups := make([]int32, G)
	for g := range allGroups {
		allGroups[g] = int32(g)
	}
	size := func(gs []int32) int {
		n := 0
		for _, g := range gs {
			n += len(gr.members[g])
		}
		return n
	}
	cfg := map[uint64]uint8{} // groups (lo<<32 | hi) -> bit 1: lo configures hi, bit 2: hi configures lo
	mark := func(from, to int32) {
		lo, hi, bit := from, to, uint8(1)
		if lo > hi {
			lo, hi, bit = hi, lo, 2
		}
		cfg[uint64(lo)<<32|uint64(hi)] |= bit
	}
	for i, p := range ps {
		var local []int32
		switch {
		case p.node != nil:
			local = match(p.node)
		case p.spec.Node != "":
			if p.named >= 0 {
				local = []int32{gr.of[p.named]}
			}
		default:
			local = allGroups
		}
		var remote []int32
		switch {
		case p.peer != nil:
			remote = match(p.peer)
		case p.peerNode >= 0:
			remote = []int32{gr.of[p.peerNode]}
		default:
			continue // a peerIP of no node: outside the model
		}
		if nl, nr := size(local), size(remote); nl*nr > opts.MaxPairs {
			return nil, fmt.Errorf("BGPPeer %s selects %d x %d node pairs, more than %d", peers[i].Name, nl, nr, opts.MaxPairs)
		}
		reverse := p.spec.ReversePeering == nil || *p.spec.ReversePeering != apiv3.ReversePeeringManual
		for _, l := range local {
			for _, r := range remote {
				mark(l, r)
				if reverse {
					mark(r, l)
				}
			}
		}
	}
	// Sessions between groups: a node of one peers with every node of the other (within a group,
	// with every other member) when both configure it.
	partners := make([][]int32, G)
	for k, v := range cfg {
		lo, hi := int32(k>>32), int32(k&0xffffffff)
		if lo == hi {
			if len(gr.members[lo]) > 1 {
				partners[lo] = append(partners[lo], lo)
			}
			continue
		}
		if v != 3 {
			t.OneSided += len(gr.members[lo]) * len(gr.members[hi])
			continue
		}
		partners[lo] = append(partners[lo], hi)
		partners[hi] = append(partners[hi], lo)
	}
	total := 0
	var runs [][]int32
	var buf []int32
	for g, ps := range partners {
		if len(ps) == 0 {
			continue
		}
		slices.Sort(ps)
		runs = runs[:0]
		self := false
		for _, h := range ps {
			runs = append(runs, gr.members[h])
			self = self || h == int32(g)
		}
		list := mergeSorted(runs, &buf)
		if !self {
			for _, i := range gr.members[g] {
				t.adj[i] = list
			}
			total += len(gr.members[g]) * len(list)
			continue
		}
		for _, i := range gr.members[g] {
			k, _ := slices.BinarySearch(list, i)
			own := make([]int32, 0, len(list)-1)
			own = append(append(own, list[:k]...), list[k+1:]...)
			t.adj[i] = own
			total += len(own)
		}
	}
	t.Sessions = make([][2]int32, 0, total/2)
	for i, adj := range t.adj {
		k, _ := slices.BinarySearch(adj, int32(i))
		for _, j := range adj[k:] {
			t.Sessions = append(t.Sessions, [2]int32{int32(i), j})
		}
	}
	return t, nil
}

// mergeSorted merges disjoint sorted lists into a new sorted list.
func mergeSorted(runs [][]int32, buf *[]int32) []int32 {
	n := 0
	for _, r := range runs {
		n += len(r)
	}
	if len(runs) == 1 {
		return runs[0]
	}
	out := make([]int32, 0, n)
	for _, r := range runs {
		out = append(out, r...)
	}
	// Merge sorted runs pairwise, ping-ponging with buf.
	bounds := make([]int, 0, len(runs)+1)
	bounds = append(bounds, 0)
	for _, r := range runs {
		bounds = append(bounds, bounds[len(bounds)-1]+len(r))
	}
	if cap(*buf) < n {
		*buf = make([]int32, n)
	}
	src, dst := out, (*buf)[:n]
	for len(bounds) > 2 {
		nb := bounds[:1]
		for k := 0; k+1 < len(bounds); k += 2 {
			lo, mid := bounds[k], bounds[k+1]
			hi := mid
			if k+2 < len(bounds) {
				hi = bounds[k+2]
			}
			a, b, d := lo, mid, lo
			for a < mid && b < hi {
				if src[a] < src[b] {
					dst[d] = src[a]
					a++
				} else {
					dst[d] = src[b]
					b++
				}
				d++
			}
			d += copy(dst[d:], src[a:mid])
			copy(dst[d:], src[b:hi])
			nb = append(nb, hi)
		}
		bounds = nb
		src, dst = dst, src
	}
	if &src[0] != &out[0] {
		copy(out, src)
	}
	return out
}

// SessionCount is the number of established sessions among the nodes not down, mesh included.
func (t *Topology) SessionCount(down []bool) int {
	n := 0
	for _, s := range t.Sessions {
		if !isDown(down, int(s[0])) && !isDown(down, int(s[1])) {
			n++
		}
	}
	if t.Mesh {
		plain := 0
		for i := range t.Nodes {
			if !isDown(down, i) && !t.IsRR(i) {
				plain++
			}
		}
		n += plain * (plain - 1) / 2
		// An explicit session between two plain nodes is the same pair as their mesh session.
		for _, s := range t.Sessions {
			if !isDown(down, int(s[0])) && !isDown(down, int(s[1])) && !t.IsRR(int(s[0])) && !t.IsRR(int(s[1])) {
				n--
			}
		}
	}
	return n
}

// Down returns the down-mask of the nodes in a zone.
func (t *Topology) ZoneDown(zone string) []bool {
	down := make([]bool, len(t.Nodes))
	for i, n := range t.Nodes {
		down[i] = n.Zone == zone
	}
	return down
}

// NamesDown returns the down-mask of the named nodes; it fails on an unknown name.
func (t *Topology) NamesDown(names ...string) ([]bool, error) {
	down := make([]bool, len(t.Nodes))
	for _, name := range names {
		i := t.Index(name)
		if i < 0 {
			return nil, fmt.Errorf("no node %q in the plan", name)
		}
		down[i] = true
	}
	return down, nil
}

func isDown(down []bool, i int) bool { return down != nil && down[i] }

func mapKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
