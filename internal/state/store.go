package state

import (
	"cmp"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// IndexRouteReflectors is the node informer's index of the nodes that carry a cluster ID or the
// route reflector ID label, under the key "rr".
const IndexRouteReflectors = "routereflector.io/route-reflectors"

const rrKey = "rr"

// NodeIndexers are the indexes NodeStore needs on the node informer.
func NodeIndexers() toolscache.Indexers {
	return toolscache.Indexers{
		IndexRouteReflectors: func(obj any) ([]string, error) {
			n, ok := obj.(*extender.Node)
			if !ok {
				return nil, nil
			}
			_, id := n.Annotations[extender.AnnotationClusterID]
			_, rid := n.Labels[extender.LabelRouteReflectorID]
			if id || rid {
				return []string{rrKey}, nil
			}
			return nil, nil
		},
	}
}

// NodeStore reads nodes from the informer's indexer: no copies and no API round trip. The nodes it
// returns are shared with the cache and must not be modified.
type NodeStore struct {
	idx toolscache.Indexer
}

// NewNodeStore wraps the node informer's indexer, which must have NodeIndexers.
func NewNodeStore(idx toolscache.Indexer) *NodeStore { return &NodeStore{idx: idx} }

// Get returns a node, or nil.
func (s *NodeStore) Get(name string) *extender.Node {
	obj, ok, err := s.idx.GetByKey(name)
	if err != nil || !ok {
		return nil
	}
	n, _ := obj.(*extender.Node)
	return n
}

// List returns every node.
func (s *NodeStore) List() []*extender.Node { return nodes(s.idx.List()) }

// RouteReflectors returns the nodes that carry a cluster ID or a route reflector ID.
func (s *NodeStore) RouteReflectors() []*extender.Node { return s.byIndex(IndexRouteReflectors, rrKey) }

// ClientsOf returns the nodes whose route reflectors include rr, in no order (ClientsOfEach).
func (s *NodeStore) ClientsOf(rr string) []*extender.Node { return s.ClientsOfEach(rr)[rr] }

// ClientsOfEach returns, for each of rrs, the nodes whose route reflectors include it, in no
// order. It reads every cached node once (15 ms at 65,000 nodes: BenchmarkClientsOf): its callers,
// a route reflector's demotion by the reconciler (one call for all of a reconcile's demotions) or
// by hand (the validating webhook), are rare, and the index of the clients by route-reflector list
// it replaces cost about 100 heap bytes per node at 65,000. The clients of a peering set share one
// list, parsed once.
func (s *NodeStore) ClientsOfEach(rrs ...string) map[string][]*extender.Node {
	out := make(map[string][]*extender.Node, len(rrs))
	if len(rrs) == 0 {
		return out
	}
	named := map[string][]string{} // a list's route reflectors among rrs
	for _, o := range s.idx.List() {
		n, ok := o.(*extender.Node)
		if !ok {
			continue
		}
		list := n.Annotations[extender.AnnotationRouteReflectors]
		if list == "" {
			continue
		}
		in, parsed := named[list]
		if !parsed {
			for _, r := range strings.Split(list, ",") {
				if slices.Contains(rrs, r) && !slices.Contains(in, r) {
					in = append(in, r)
				}
			}
			named[list] = in
		}
		for _, r := range in {
			out[r] = append(out[r], n)
		}
	}
	return out
}

func (s *NodeStore) byIndex(index, key string) []*extender.Node {
	objs, err := s.idx.ByIndex(index, key)
	if err != nil {
		return nil
	}
	return nodes(objs)
}

func nodes(objs []any) []*extender.Node {
	out := make([]*extender.Node, 0, len(objs))
	for _, o := range objs {
		if n, ok := o.(*extender.Node); ok {
			out = append(out, n)
		}
	}
	return out
}

// Managed is a valid policy with its resolved form.
type Managed struct {
	Policy   *v1alpha1.RouteReflectorPolicy
	Resolved *policy.Resolved
}

// Policies resolves the policies of the informer cache, once per generation, and finds the policy
// that manages a node. A node selected by two policies is managed by neither (as in Cilium's BGP
// control plane); the policy webhook rejects such overlaps.
type Policies struct {
	store toolscache.Store

	mu       sync.Mutex
	resolved map[types.UID]*resolvedPolicy
}

type resolvedPolicy struct {
	generation int64
	resolved   *policy.Resolved
	errs       field.ErrorList
}

// NewPolicies reads policies from the policy informer's store.
func NewPolicies(store toolscache.Store) *Policies {
	return &Policies{store: store, resolved: map[types.UID]*resolvedPolicy{}}
}

// Store is the policy store.
func (ps *Policies) Store() toolscache.Store { return ps.store }

// List returns every policy, by name.
func (ps *Policies) List() []*v1alpha1.RouteReflectorPolicy {
	objs := ps.store.List()
	out := make([]*v1alpha1.RouteReflectorPolicy, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*v1alpha1.RouteReflectorPolicy); ok {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *v1alpha1.RouteReflectorPolicy) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Resolve resolves a policy (cached by UID and generation).
func (ps *Policies) Resolve(p *v1alpha1.RouteReflectorPolicy) (*policy.Resolved, field.ErrorList) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if r := ps.resolved[p.UID]; r != nil && r.generation == p.Generation && p.UID != "" {
		return r.resolved, r.errs
	}
	r, errs := policy.Resolve(p)
	if p.UID != "" {
		if len(ps.resolved) > 1000 {
			clear(ps.resolved)
		}
		ps.resolved[p.UID] = &resolvedPolicy{generation: p.Generation, resolved: r, errs: errs}
	}
	return r, errs
}

// Valid returns the valid policies, by name. A policy being deleted is not: its nodes are managed
// by no policy while the reconciler takes its roles back (see reconciler.cleanup).
func (ps *Policies) Valid() []Managed {
	var out []Managed
	for _, p := range ps.List() {
		if p.DeletionTimestamp != nil {
			continue
		}
		if r, errs := ps.Resolve(p); len(errs) == 0 {
			out = append(out, Managed{Policy: p, Resolved: r})
		}
	}
	return out
}

// Get returns a valid policy by name.
func (ps *Policies) Get(name string) (Managed, bool) {
	obj, ok, err := ps.store.GetByKey(name)
	if err != nil || !ok {
		return Managed{}, false
	}
	p, ok := obj.(*v1alpha1.RouteReflectorPolicy)
	if !ok || p.DeletionTimestamp != nil {
		return Managed{}, false
	}
	r, errs := ps.Resolve(p)
	if len(errs) > 0 {
		return Managed{}, false
	}
	return Managed{Policy: p, Resolved: r}, true
}

// ForNode returns the policy that manages a node with these labels: the only valid policy whose
// nodeSelector selects it.
func (ps *Policies) ForNode(l map[string]string) (Managed, bool) {
	return forNode(ps.Valid(), l)
}

func forNode(valid []Managed, l map[string]string) (Managed, bool) {
	var found Managed
	n := 0
	for _, m := range valid {
		if m.Resolved.NodeSelector.Matches(labels.Set(l)) {
			found = m
			n++
		}
	}
	return found, n == 1
}

// Overlaps returns the nodes the policy name selects that other valid policies select too, each
// with those policies' names: such nodes are managed by neither (see forNode).
func Overlaps(valid []Managed, nodes []*extender.Node, name string) map[string][]string {
	var self *Managed
	for i := range valid {
		if valid[i].Policy.Name == name {
			self = &valid[i]
		}
	}
	if self == nil || len(valid) < 2 {
		return nil
	}
	var out map[string][]string
	for _, n := range nodes {
		if !self.Resolved.NodeSelector.Matches(labels.Set(n.Labels)) {
			continue
		}
		for _, m := range valid {
			if m.Policy.Name != name && m.Resolved.NodeSelector.Matches(labels.Set(n.Labels)) {
				if out == nil {
					out = map[string][]string{}
				}
				out[n.Name] = append(out[n.Name], m.Policy.Name)
			}
		}
	}
	return out
}

// OutsideSelector returns the Calico selector of the nodes no valid policy selects
// (extender.OutsideSelector) when at least one of nodes is such a node, else "".
func OutsideSelector(valid []Managed, nodes []*extender.Node) string {
	if len(valid) == 0 {
		return ""
	}
	sels := make([]string, len(valid))
	for i, m := range valid {
		sels[i] = m.Resolved.CalicoNodeSelector()
	}
	sel := extender.OutsideSelector(sels)
	if sel == "" {
		return ""
	}
	for _, n := range nodes {
		if !slices.ContainsFunc(valid, func(m Managed) bool { return m.Resolved.NodeSelector.Matches(labels.Set(n.Labels)) }) {
			return sel
		}
	}
	return ""
}

// Partition returns, for each valid policy, the nodes it manages (nodes selected by two policies
// are in none), in the order of nodes.
func Partition(valid []Managed, nodes []*extender.Node) map[string][]*extender.Node {
	out := make(map[string][]*extender.Node, len(valid))
	for _, n := range nodes {
		if m, ok := forNode(valid, n.Labels); ok {
			out[m.Policy.Name] = append(out[m.Policy.Name], n)
		}
	}
	return out
}
