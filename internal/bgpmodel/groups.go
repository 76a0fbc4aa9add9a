package bgpmodel

import (
	"fmt"
	"slices"

	"github.com/projectcalico/calico/libcalico-go/lib/selector/parser"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoselector"
)

// selectorInfo is a selector with what Build reads from Calico's syntax tree: the labels it names,
// the values it compares them with, and the labels a node must carry (possibly with one of a few
// values) to match.
type selectorInfo struct {
	src  string
	tree *parser.Selector
	// keys: label -> literal values it is compared with (==, !=, in, not in); raw: labels matched
	// by substring (contains, starts with, ends with), whose every value counts.
	keys    map[string][]string
	raw     map[string]bool
	unknown bool // a node type this code does not know: every label may count
}

// parseSelector parses a selector with Calico's parser, as calicoselector.Parse does (whose errors
// it returns).
func parseSelector(s string) (*selectorInfo, error) {
	tree, err := parser.Parse(s)
	if err != nil || len(s) > calicoselector.MaxLength {
		if _, err := calicoselector.Parse(s); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("selector %q: %v", s, err)
	}
	info := &selectorInfo{src: s, tree: tree, keys: map[string][]string{}, raw: map[string]bool{}}
	tree.AcceptVisitor(visitor{info})
	return info, nil
}

// matches is calicoselector's Matches: Calico's evaluation of the selector on the labels.
func (s *selectorInfo) matches(labels map[string]string) bool { return s.tree.Evaluate(labels) }

type visitor struct{ info *selectorInfo }

func (v visitor) Visit(n any) {
	in := v.info
	lit := func(k string, vals ...string) {
		in.keys[k] = append(in.keys[k], vals...)
	}
	switch x := n.(type) {
	case *parser.LabelEqValueNode:
		lit(x.LabelName.Value(), x.Value.Value())
	case *parser.LabelNeValueNode:
		lit(x.LabelName.Value(), x.Value.Value())
	case *parser.LabelInSetNode:
		lit(x.LabelName.Value(), x.Value.StringSlice()...)
	case *parser.LabelNotInSetNode:
		lit(x.LabelName.Value(), x.Value.StringSlice()...)
	case *parser.HasNode:
		lit(x.LabelName.Value())
	case *parser.LabelContainsValueNode:
		lit(x.LabelName.Value())
		in.raw[x.LabelName.Value()] = true
	case *parser.LabelStartsWithValueNode:
		lit(x.LabelName.Value())
		in.raw[x.LabelName.Value()] = true
	case *parser.LabelEndsWithValueNode:
		lit(x.LabelName.Value())
		in.raw[x.LabelName.Value()] = true
	case *parser.AndNode, *parser.OrNode, *parser.NotNode, *parser.AllNode, *parser.GlobalNode:
	default:
		in.unknown = true
	}
}

// groups partitions the nodes into classes no selector tells apart.
type groups struct {
	of      []int32   // node -> group
	members [][]int32 // group -> nodes, ascending
	labels  []map[string]string
	// index: label -> value (as in the group key) -> groups; has: label -> groups carrying it.
	index map[string]map[string][]int32
	has   map[string][]int32
}

// groupNodes groups nodes by the labels the selectors name: by presence and value, where a value
// none of the selectors compares with counts as "another value" (selectors cannot tell two such
// values apart: ==, != and in test for their literals only). Labels matched by substring keep their
// value. The nodes in named (named by a BGPPeer's node field) each get a group of their own.
func groupNodes(nodes []Node, sels []*selectorInfo, named map[int]bool) *groups {
	lits := map[string]map[string]bool{}
	raw := map[string]bool{}
	unknown := false
	for _, s := range sels {
		unknown = unknown || s.unknown
		for k, vs := range s.keys {
			if lits[k] == nil {
				lits[k] = map[string]bool{}
			}
			for _, v := range vs {
				lits[k][v] = true
			}
		}
		for k := range s.raw {
			raw[k] = true
		}
	}
	if unknown {
		// Fall back to every label any selector's text mentions, by value.
		keySet := map[string]bool{}
		for _, n := range nodes {
			for k := range n.Labels {
				keySet[k] = true
			}
		}
		var cs []*calicoselector.Selector
		for _, s := range sels {
			if c, err := calicoselector.Parse(s.src); err == nil {
				cs = append(cs, c)
			}
		}
		for _, k := range calicoselector.KeysIn(mapKeys(keySet), cs...) {
			raw[k] = true
			if lits[k] == nil {
				lits[k] = map[string]bool{}
			}
		}
	}
	keys := make([]string, 0, len(lits))
	for k := range lits {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	keyLits, keyRaw := make([]map[string]bool, len(keys)), make([]bool, len(keys))
	for ki, k := range keys {
		keyLits[ki], keyRaw[ki] = lits[k], raw[k]
	}
	gr := &groups{of: make([]int32, len(nodes)), index: map[string]map[string][]int32{}, has: map[string][]int32{}}
	groupOf := map[string]int32{}
	const other = "\x00other"
	var kb []byte
	for i, n := range nodes {
		kb = kb[:0]
		if named[i] {
			kb = append(kb, 'n')
			kb = appendU32(kb, uint32(i))
		}
		for ki, k := range keys {
			v, ok := n.Labels[k]
			if !ok {
				continue
			}
			kb = appendU32(kb, uint32(ki))
			if !keyRaw[ki] && !keyLits[ki][v] {
				kb = append(kb, 0)
				continue
			}
			kb = append(kb, 1)
			kb = appendU32(kb, uint32(len(v)))
			kb = append(kb, v...)
		}
		g, ok := groupOf[string(kb)]
		if !ok {
			g = int32(len(gr.members))
			groupOf[string(kb)] = g
			gr.members = append(gr.members, nil)
			proj := map[string]string{}
			for _, k := range keys {
				v, ok := n.Labels[k]
				if !ok {
					continue
				}
				proj[k] = v
				if gr.index[k] == nil {
					gr.index[k] = map[string][]int32{}
				}
				iv := v
				if !raw[k] && !lits[k][v] {
					iv = other
				}
				gr.index[k][iv] = append(gr.index[k][iv], g)
				gr.has[k] = append(gr.has[k], g)
			}
			gr.labels = append(gr.labels, proj)
		}
		gr.members[g] = append(gr.members[g], int32(i))
		gr.of[i] = g
	}
	return gr
}

// candidates returns the groups a selector may match (a superset of those it matches, ascending):
// Calico's label restrictions of the selector (labels it requires, with the values it allows)
// looked up in the index; every group when it has none.
func (gr *groups) candidates(s *selectorInfo) []int32 {
	var best []int32
	found := false
	if !s.unknown {
		for h, r := range s.tree.LabelRestrictions() {
			k := h.Value()
			var c []int32
			switch {
			case !r.PossibleToSatisfy():
				return nil
			case r.MustHaveOneOfValues != nil:
				for _, v := range r.MustHaveOneOfValues {
					c = append(c, gr.index[k][v.Value()]...)
				}
				slices.Sort(c)
				c = slices.Compact(c)
			case r.MustBePresent:
				c = gr.has[k]
			default:
				continue
			}
			if !found || len(c) < len(best) {
				best, found = c, true
			}
		}
	}
	if found {
		return best
	}
	all := make([]int32, len(gr.members))
	for g := range all {
		all[g] = int32(g)
	}
	return all
}
