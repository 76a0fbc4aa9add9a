package reconciler

import (
	"maps"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// viewFacts are what several steps read of every node of a plan's view: whether any node's owned
// keys differ from the plan, the active route reflectors by zone, the nodes in a transitional set,
// the plan's shape for the route figures. Each is computed at most once per plan, on the view as
// the plan read it (before the reconcile's own patches: State.pristine), and a plan that
// state.Ledger.Reuse gave again keeps its predecessor's: it reads the same nodes (the same objects,
// or objects that differ in their resourceVersion only) and is the same plan, so a settled
// reconcile does not read its 65,000 nodes four more times (issue 38).
type viewFacts struct {
	ownedRead, ownedNone bool
	current              map[string]int32 // active route reflectors by zone (nil: not read)
	total                int32
	sets                 map[string][]string // label key -> the nodes in a transitional set of it
	shapeRead            bool
	shape                uint64
	// view is the view of the nodes viewNodes (the plan's input nodes), shared by the reconciles
	// of the plan until one patches a node (State.setView).
	view      map[string]*extender.Node
	viewNodes []*extender.Node
}

// viewOf returns the view of a plan's input nodes: the view of the last reconcile of the plan when
// it read the same slice of nodes, else a new one. The view is shared: State.setView copies it
// before its first change.
func (f *viewFacts) viewOf(nodes []*extender.Node) map[string]*extender.Node {
	if f.view != nil && len(nodes) == len(f.viewNodes) && (len(nodes) == 0 || &nodes[0] == &f.viewNodes[0]) {
		return f.view
	}
	view := make(map[string]*extender.Node, len(nodes))
	for _, n := range nodes {
		view[n.Name] = n
	}
	f.view, f.viewNodes = view, nodes
	return view
}

// setView puts this reconcile's patched node n in the view, copied first when it is a plan's
// shared view.
func (st *State) setView(name string, n *extender.Node) {
	if st.patched == 0 && st.facts != nil && st.facts.view != nil {
		st.View = maps.Clone(st.View)
	}
	st.View[name] = n
	st.patched++
}

// pristine reports whether the reconcile's view is still the one its plan read, with facts to
// keep: no patch of this reconcile is in it yet.
func (st *State) pristine() bool { return st.facts != nil && st.patched == 0 }

// currentRouteReflectors returns the view's active route reflectors (extender.IsActiveRouteReflector)
// by zone label value, and their number. The map is shared: read only.
func (st *State) currentRouteReflectors() (map[string]int32, int32) {
	if st.pristine() && st.facts.current != nil {
		return st.facts.current, st.facts.total
	}
	p := st.Managed.Resolved
	current := map[string]int32{}
	total := int32(0)
	for _, n := range st.View {
		if extender.IsActiveRouteReflector(n, p) {
			current[n.Labels[p.ZoneLabel]]++
			total++
		}
	}
	if st.pristine() {
		st.facts.current, st.facts.total = current, total
	}
	return current, total
}

// transitionalSet returns the nodes of the view in a transitional set of label (read only).
func (st *State) transitionalSet(label string) []string {
	if st.pristine() {
		if names, ok := st.facts.sets[label]; ok {
			return names
		}
	}
	var names []string
	for name, n := range st.View {
		if extender.IsTransitionalSet(n.Labels[label]) {
			names = append(names, name)
		}
	}
	if st.pristine() {
		if st.facts.sets == nil {
			st.facts.sets = map[string][]string{}
		}
		st.facts.sets[label] = names
	}
	return names
}
