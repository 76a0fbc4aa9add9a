package bgpmodel

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// ExactDrillNodes and ExactDrillRRs bound the clusters in which every route reflector gets its own
// drill; beyond either, one drill runs per class of route reflectors (see rrClasses), so that the
// drills of a layout with very many route reflectors (racks of a few nodes under many planes) stay
// a few propagations.
var (
	ExactDrillNodes = 5000
	ExactDrillRRs   = 100
)

// Drills runs the failure drills on a plan's topology: every zone lost (when there are two zones
// or more) and every route reflector lost, each a propagation of the graph model with those nodes
// down. The drills come in a stable order: zones by name, then route reflectors by name.
func (t *Topology) Drills() ([]extender.Drill, error) { return t.drills(nil) }

// drills runs the drills with the nodes of base down throughout (nil: none; a family's down-mask):
// the zones and route reflectors of the nodes up in base.
func (t *Topology) drills(base []bool) ([]extender.Drill, error) {
	var out []extender.Drill
	var zones []string
	for i, n := range t.Nodes {
		if !isDown(base, i) && !slices.Contains(zones, n.Zone) {
			zones = append(zones, n.Zone)
		}
	}
	slices.Sort(zones)
	with := func(down []bool) []bool {
		for i := range down {
			down[i] = down[i] || isDown(base, i)
		}
		return down
	}
	if len(zones) > 1 {
		for _, z := range zones {
			m, err := t.Propagate(with(t.ZoneDown(z)))
			if err != nil {
				return nil, fmt.Errorf("zone %s drill: %w", z, err)
			}
			out = append(out, extender.Drill{Kind: extender.DrillZone, Name: z, MissingPairs: m.Summary.MissingPairs})
		}
	}
	for _, class := range t.rrClasses(base) {
		down := make([]bool, len(t.Nodes))
		down[class[0]] = true
		m, err := t.Propagate(with(down))
		if err != nil {
			return nil, fmt.Errorf("route reflector %s drill: %w", t.Nodes[class[0]].Name, err)
		}
		d := extender.Drill{Kind: extender.DrillRouteReflector, Name: t.Nodes[class[0]].Name, MissingPairs: m.Summary.MissingPairs}
		if len(class) > 1 {
			d.Represents = len(class)
		}
		out = append(out, d)
	}
	return out, nil
}

// rrClasses groups the route reflectors whose loss is the same drill. Up to ExactDrillNodes nodes
// and ExactDrillRRs route reflectors every route reflector is its own class. Above, route reflectors with the same standing in the layout
// form one: the same number of peers that share their cluster ID, of route reflector peers with
// other IDs, and of client peers, and the same number of route reflectors sharing their ID (a
// rack's planes, or the spine). Classes and their members are in name order; the first member
// runs the drill.
func (t *Topology) rrClasses(base []bool) [][]int {
	var rrs []int
	for i := range t.Nodes {
		if t.IsRR(i) && !isDown(base, i) {
			rrs = append(rrs, i)
		}
	}
	slices.SortFunc(rrs, func(a, b int) int { return strings.Compare(t.Nodes[a].Name, t.Nodes[b].Name) })
	if len(t.Nodes) <= ExactDrillNodes && len(rrs) <= ExactDrillRRs {
		out := make([][]int, len(rrs))
		for k, i := range rrs {
			out[k] = []int{i}
		}
		return out
	}
	idSize := map[string]int{}
	for _, i := range rrs {
		idSize[t.Nodes[i].ClusterID]++
	}
	type key struct{ same, otherRR, clients, idSize int }
	index := map[key]int{}
	var out [][]int
	for _, i := range rrs {
		k := key{idSize: idSize[t.Nodes[i].ClusterID]}
		for _, j := range t.adj[i] {
			switch {
			case t.Nodes[j].ClusterID == t.Nodes[i].ClusterID:
				k.same++
			case t.IsRR(int(j)):
				k.otherRR++
			default:
				k.clients++
			}
		}
		c, ok := index[k]
		if !ok {
			c = len(out)
			index[k] = c
			out = append(out, nil)
		}
		out[c] = append(out[c], i)
	}
	return out
}

// PlanDrills builds a plan's topology and runs its drills (FamilyDrills): the planner's
// extender.DrillFunc. A plan whose nodes have IPv6 addresses is drilled in each family, so that
// the planner's preference for a plan that survives its drills, the Resilient condition and the
// drills in the policy's status see a loss in IPv6 that IPv4 does not have.
func PlanDrills(in extender.Input, res *extender.Result) ([]extender.Drill, error) {
	topo, err := FromPlan(in, res, Options{})
	if err != nil {
		return nil, err
	}
	return topo.FamilyDrills()
}

// FamilyDrills runs the failure drills in each address family the nodes peer in when a node has
// an IPv6 address (each drill on the sessions both of whose ends have an address of the family,
// Drill.Family set; IPv4 first), and the family-blind drills (Drills) otherwise: an IPv4 cluster's
// drills are what they were.
func (t *Topology) FamilyDrills() ([]extender.Drill, error) {
	all := t.Families()
	if !all.Has(extender.FamilyIPv6) {
		return t.Drills()
	}
	var out []extender.Drill
	for _, f := range extender.AllFamilies {
		if !all.Has(f) {
			continue
		}
		ds, err := t.familyDrills(f)
		if err != nil {
			return nil, err
		}
		out = append(out, ds...)
	}
	return out, nil
}

// familyDrills runs the drills in family f, each marked with it.
func (t *Topology) familyDrills(f extender.Families) ([]extender.Drill, error) {
	ds, err := t.drills(t.FamilyDown(f, nil))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f, err)
	}
	for i := range ds {
		ds[i].Family = f.String()
	}
	return ds, nil
}

var _ extender.DrillFunc = PlanDrills

// DrillMemo is a DrillFunc that remembers the last outcome per policy: a plan of the same shape
// (the nodes with their zones, each node's planned labels and annotations, the BGPPeers) gets it
// back without running the model again, so the reconciler pays for the drills only when the
// layout changes. Safe for concurrent use.
type DrillMemo struct {
	mu   sync.Mutex
	last map[string]drillMemoEntry
}

type drillMemoEntry struct {
	key    uint64
	drills []extender.Drill
	err    error
}

// Drills is the memo's extender.DrillFunc.
func (m *DrillMemo) Drills(in extender.Input, res *extender.Result) ([]extender.Drill, error) {
	key := planShape(in, res)
	m.mu.Lock()
	e, ok := m.last[res.Policy]
	m.mu.Unlock()
	if ok && e.key == key {
		return e.drills, e.err
	}
	drills, err := PlanDrills(in, res)
	m.mu.Lock()
	if m.last == nil {
		m.last = map[string]drillMemoEntry{}
	}
	m.last[res.Policy] = drillMemoEntry{key: key, drills: drills, err: err}
	m.mu.Unlock()
	return drills, err
}

// planShape hashes everything a plan's topology is built from.
func planShape(in extender.Input, res *extender.Result) uint64 {
	h := fnv.New64a()
	w := func(s string) { h.Write([]byte(s)); h.Write([]byte{0}) }
	zoneKey := corev1.LabelTopologyZone
	if in.Policy != nil {
		zoneKey = in.Policy.ZoneLabel
	}
	for _, n := range in.Nodes {
		if n != nil {
			w(n.Name)
			w(n.Labels[zoneKey])
			w(extender.NodeFamilies(n).Key()) // a node's address families (its drills per family)
		}
	}
	w("")
	var keys []string
	for _, st := range res.Nodes {
		w(st.Name)
		for _, m := range []map[string]string{st.Labels, st.Annotations} {
			keys = keys[:0]
			for k := range m {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				w(k)
				w(m[k])
			}
			w("")
		}
	}
	for _, p := range res.BGPPeers {
		w(p.Name)
		w(p.Spec.Node)
		w(p.Spec.NodeSelector)
		w(p.Spec.PeerSelector)
		w(p.Spec.PeerIP)
	}
	return h.Sum64()
}
