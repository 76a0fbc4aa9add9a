// Package calicoselector evaluates Calico selectors (the syntax of BGPPeer nodeSelector and
// peerSelector: has(k), k == 'v', k in {'a','b'}, !has(k), all(), &&, ||) with Calico's own parser,
// so that a selector means here exactly what it means to calico-node.
//
// Running product: the reconciler's adoption step and the graph model call it.
package calicoselector

import (
	"fmt"
	"slices"
	"strings"

	"github.com/projectcalico/calico/libcalico-go/lib/selector"
	"github.com/projectcalico/calico/libcalico-go/lib/selector/parser"
)

// MaxLength is the longest selector Calico's validator accepts.
const MaxLength = 1024

// Selector is a parsed Calico selector.
type Selector struct {
	src string
	sel *selector.Selector
}

// Parse parses a Calico selector. An empty string selects every node, as Calico treats it.
func Parse(s string) (*Selector, error) {
	if len(s) > MaxLength {
		return nil, fmt.Errorf("selector %q is longer than %d characters", abbreviate(s), MaxLength)
	}
	sel, err := selector.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("selector %q: %v", abbreviate(s), err)
	}
	return &Selector{src: s, sel: sel}, nil
}

// Matches reports whether a node with these labels is selected.
func (s *Selector) Matches(labels map[string]string) bool { return s.sel.Evaluate(labels) }

// String returns Calico's normal form of the selector.
func (s *Selector) String() string { return s.sel.String() }

// Source returns the selector as written.
func (s *Selector) Source() string { return s.src }

// KeysIn returns, of the given label keys, those that occur literally in any of the selectors'
// source text, sorted. A selector can only depend on labels it names, so projecting labels onto
// these keys does not change any selector's result; nodes that agree on them can be evaluated once.
func KeysIn(keys []string, sels ...*Selector) []string {
	var out []string
	for _, k := range keys {
		for _, s := range sels {
			if s != nil && strings.Contains(s.src, k) {
				out = append(out, k)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

func abbreviate(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

// LabelKeys returns the label keys a selector names (sorted), or all true when it has a term whose
// keys this code cannot read (a newer Calico's syntax): then any label may count. A selector that
// does not parse names none (Calico does not use it either).
func LabelKeys(s string) (keys []string, all bool) {
	tree, err := parser.Parse(s)
	if err != nil {
		return nil, false
	}
	v := &keyVisitor{}
	tree.AcceptVisitor(v)
	slices.Sort(v.keys)
	return slices.Compact(v.keys), v.all
}

type keyVisitor struct {
	keys []string
	all  bool
}

func (v *keyVisitor) Visit(n any) {
	switch x := n.(type) {
	case *parser.LabelEqValueNode:
		v.keys = append(v.keys, x.LabelName.Value())
	case *parser.LabelNeValueNode:
		v.keys = append(v.keys, x.LabelName.Value())
	case *parser.LabelInSetNode:
		v.keys = append(v.keys, x.LabelName.Value())
	case *parser.LabelNotInSetNode:
		v.keys = append(v.keys, x.LabelName.Value())
	case *parser.HasNode:
		v.keys = append(v.keys, x.LabelName.Value())
	case *parser.LabelContainsValueNode:
		v.keys = append(v.keys, x.LabelName.Value())
	case *parser.LabelStartsWithValueNode:
		v.keys = append(v.keys, x.LabelName.Value())
	case *parser.LabelEndsWithValueNode:
		v.keys = append(v.keys, x.LabelName.Value())
	case *parser.AndNode, *parser.OrNode, *parser.NotNode, *parser.AllNode, *parser.GlobalNode:
	default:
		v.all = true
	}
}
