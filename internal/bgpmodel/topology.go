// Package bgpmodel is a graph model of how Calico and BIRD propagate routes for a plan: the BGP
// sessions confd would configure from the labels, annotations and BGPPeers the product writes, then
// RFC 4456 route reflection (cluster-list and originator-ID loop prevention, as BIRD 1.6 applies
// them) with ADD-PATH as Calico enables it (`add paths on`: every node stores and advertises every
// distinct path, not only its best). It tells, for every node, which other nodes' blocks it learns
// and how many paths it stores, for plans far larger than real speakers can run on one machine.
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
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoselector"
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

	adj   [][]int32 // established sessions per node, sorted
	index map[string]int
}

// Index returns the index of a node by name, or -1.
func (t *Topology) Index(name string) int {
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
	byName := make(map[string]*corev1.Node, len(in.Nodes))
	for _, n := range in.Nodes {
		if n != nil {
			byName[n.Name] = n
		}
	}
	rrKey, zoneKey := "", corev1.LabelTopologyZone
	if in.Policy != nil {
		rrKey, zoneKey = in.Policy.RRLabelKey, in.Policy.ZoneLabel
	}
	ownedLabels := extender.OwnedLabelKeys(rrKey)
	ownedAnn := extender.OwnedAnnotationKeys()
	nodes := make([]Node, 0, len(res.Nodes))
	for _, st := range res.Nodes {
		var labels, ann map[string]string
		if n := byName[st.Name]; n != nil {
			labels, ann = n.Labels, n.Annotations
		}
		labels = overlay(labels, ownedLabels, st.Labels)
		ann = overlay(ann, ownedAnn, st.Annotations)
		nodes = append(nodes, NodeFromObject(st.Name, labels, ann, zoneKey))
	}
	return Build(nodes, res.BGPPeers, opts)
}

// overlay returns base without the owned keys, with set on top.
func overlay(base map[string]string, owned []string, set map[string]string) map[string]string {
	out := make(map[string]string, len(base)+len(set))
	for k, v := range base {
		out[k] = v
	}
	for _, k := range owned {
		delete(out, k)
	}
	for k, v := range set {
		out[k] = v
	}
	return out
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
	return Node{Name: name, Zone: labels[zoneLabel], ClusterID: ParseClusterID(annotations[extender.AnnotationClusterID]), Labels: merged}
}

// ParseClusterID returns the cluster ID in normal form, or "" when s is not an IPv4 address.
func ParseClusterID(s string) string {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil || !a.Is4() {
		return ""
	}
	return a.String()
}

// Build derives the sessions confd configures from BGPPeers: a BGPPeer configures, on every node
// its nodeSelector (or node) selects — every node when both are empty — a peering with every node
// its peerSelector selects; confd adds the reverse peering on the peer nodes unless reversePeering
// is Manual. A node never peers with itself. A session establishes only when both ends configure
// it. BGPPeers with a peerIP (not a node) are ignored.
func Build(nodes []Node, peers []extender.BGPPeer, opts Options) (*Topology, error) {
	if opts.MaxPairs <= 0 {
		opts.MaxPairs = 50_000_000
	}
	t := &Topology{Nodes: nodes, Mesh: opts.NodeToNodeMesh, index: make(map[string]int, len(nodes)), adj: make([][]int32, len(nodes))}
	for i, n := range nodes {
		if _, dup := t.index[n.Name]; dup {
			return nil, fmt.Errorf("node %q appears twice", n.Name)
		}
		t.index[n.Name] = i
	}
	type parsed struct {
		node, peer *calicoselector.Selector
		spec       *apiv3.BGPPeerSpec
	}
	ps := make([]parsed, len(peers))
	var all []*calicoselector.Selector
	for i := range peers {
		p := &peers[i]
		ps[i].spec = &p.Spec
		var err error
		if p.Spec.NodeSelector != "" {
			if ps[i].node, err = calicoselector.Parse(p.Spec.NodeSelector); err != nil {
				return nil, fmt.Errorf("BGPPeer %s: nodeSelector: %v", p.Name, err)
			}
			all = append(all, ps[i].node)
		}
		if p.Spec.PeerSelector != "" {
			if ps[i].peer, err = calicoselector.Parse(p.Spec.PeerSelector); err != nil {
				return nil, fmt.Errorf("BGPPeer %s: peerSelector: %v", p.Name, err)
			}
			all = append(all, ps[i].peer)
		}
	}
	// Group nodes that agree on every label the selectors name: one evaluation per group.
	keySet := map[string]bool{}
	for _, n := range nodes {
		for k := range n.Labels {
			keySet[k] = true
		}
	}
	keys := calicoselector.KeysIn(mapKeys(keySet), all...)
	groupOf := map[string]int{}
	var groups [][]int32
	var groupLabels []map[string]string
	var sb strings.Builder
	for i, n := range nodes {
		sb.Reset()
		proj := map[string]string{}
		for _, k := range keys {
			if v, ok := n.Labels[k]; ok {
				proj[k] = v
				sb.WriteString(k)
				sb.WriteByte(0)
				sb.WriteString(v)
				sb.WriteByte(1)
			}
		}
		g, ok := groupOf[sb.String()]
		if !ok {
			g = len(groups)
			groupOf[sb.String()] = g
			groups = append(groups, nil)
			groupLabels = append(groupLabels, proj)
		}
		groups[g] = append(groups[g], int32(i))
	}
	match := func(s *calicoselector.Selector) []int32 {
		var out []int32
		for g, gl := range groupLabels {
			if s.Matches(gl) {
				out = append(out, groups[g]...)
			}
		}
		return out
	}
	allNodes := make([]int32, len(nodes))
	for i := range allNodes {
		allNodes[i] = int32(i)
	}
	cfg := map[uint64]uint8{} // (lo<<32 | hi) -> bit 1: lo configures hi, bit 2: hi configures lo
	mark := func(from, to int32) {
		if from == to {
			return
		}
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
			if j, ok := t.index[p.spec.Node]; ok {
				local = []int32{int32(j)}
			}
		default:
			local = allNodes
		}
		if p.peer == nil {
			continue // a peerIP: not a node of the plan
		}
		remote := match(p.peer)
		if len(local)*len(remote) > opts.MaxPairs {
			return nil, fmt.Errorf("BGPPeer %s selects %d x %d node pairs, more than %d", peers[i].Name, len(local), len(remote), opts.MaxPairs)
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
	for k, v := range cfg {
		if v != 3 {
			t.OneSided++
			continue
		}
		lo, hi := int32(k>>32), int32(k&0xffffffff)
		t.Sessions = append(t.Sessions, [2]int32{lo, hi})
		t.adj[lo] = append(t.adj[lo], hi)
		t.adj[hi] = append(t.adj[hi], lo)
	}
	slices.SortFunc(t.Sessions, func(a, b [2]int32) int {
		if a[0] != b[0] {
			return int(a[0] - b[0])
		}
		return int(a[1] - b[1])
	})
	for i := range t.adj {
		slices.Sort(t.adj[i])
	}
	return t, nil
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
