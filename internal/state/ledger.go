package state

import (
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// DefaultAssumeTTL is how long an assumed decision counts when its object never shows up.
const DefaultAssumeTTL = 30 * time.Second

// Ledger is the single writer's memory: the assume overlay (decisions admitted or written but not
// yet seen in the informer cache) and, per policy, the AdmitState of the last committed full plan
// with every admission decided since. See doc.go for the design.
//
// Admission decisions that allocate (promotions, cluster IDs) are taken only while Leader is true.
type Ledger struct {
	// decide is held for reading by admission decisions and for writing by a plan that must not
	// race them (the fallback when a plan keeps conflicting with admissions).
	decide sync.RWMutex
	mu     sync.Mutex
	leader atomic.Bool

	ttl     time.Duration
	now     func() time.Time
	seq     uint64
	entries map[string]*entry
	states  map[string]*planState

	// Drills runs the failure drills on every plan the leader computes (Plan): the planner then
	// prefers a plan that survives them. nil plans without drills.
	Drills extender.DrillFunc
	// Registered returns the nodes Calico has registered (the etcd datastore's Calico Nodes, from
	// the reconciler's watch), nil when unknown: a plan then keeps other nodes from new route
	// reflector roles (extender.CalicoNodeRegistered). nil for the Kubernetes datastore.
	Registered func() map[string]bool
	// BGPHealth returns the leader's BGP health records of route reflectors (the policies'
	// bgpHealth), nil when none: every plan reads them (extender.Input.BGPHealth).
	BGPHealth func() map[string]extender.BGPHealth
}

type planState struct {
	st         *extender.AdmitState
	seq        uint64 // the overlay sequence the plan's input reflected
	generation int64
}

type entry struct {
	seq     uint64
	at      time.Time // when the change was admitted or written
	policy  string
	change  Change
	expires time.Time
	adm     *extender.Admission // an admission decision (leader only)
	undo    func()              // takes adm back out of its policy's current state
}

// Change is a write to the owned keys of a node that the cache may not show yet.
type Change struct {
	Node string
	// Labels and Annotations to set (a value) or remove (nil).
	Labels      map[string]*string
	Annotations map[string]*string
	// Object is the node as admitted or written (with the change), shown to the planner instead
	// of the cached node until the change is settled: the facts the decision was taken on (a
	// node just turned Ready) come with it.
	Object *corev1.Node
	// Create: the change is a CREATE, settled once the cache holds the node.
	Create bool
	// BaseRV is the resourceVersion the change was admitted on (an UPDATE's old object): the
	// change is settled once the cache holds a newer version.
	BaseRV string
	// AfterRV is the resourceVersion the change produced (a patch's answer): the change is settled
	// once the cache holds that version or a newer one.
	AfterRV string
}

// NewLedger returns an empty ledger; ttl <= 0 means DefaultAssumeTTL, now nil means time.Now.
func NewLedger(ttl time.Duration, now func() time.Time) *Ledger {
	if ttl <= 0 {
		ttl = DefaultAssumeTTL
	}
	if now == nil {
		now = time.Now
	}
	return &Ledger{ttl: ttl, now: now, entries: map[string]*entry{}, states: map[string]*planState{}}
}

// SetLeader says whether this replica holds the leader lease. Losing it drops the plan states, so
// that no allocating decision is taken until the next commit as leader.
func (l *Ledger) SetLeader(v bool) {
	l.leader.Store(v)
	if !v {
		l.mu.Lock()
		clear(l.states)
		l.mu.Unlock()
	}
}

// Leader reports whether this replica holds the leader lease.
func (l *Ledger) Leader() bool { return l.leader.Load() }

// Decide decides the role of a node as Admit does, without recording anything: for a dry-run
// request, which must leave no trace.
func (l *Ledger) Decide(m Managed, ni *extender.NodeInfo) (extender.Admission, bool) {
	return l.admit(m, ni, nil)
}

// Admit decides the role of a node that is not a route reflector, read once by the caller through
// the planner's filters (see extender.AdmitState.AdmitNode), and records the decision. It returns
// false when this replica is not the leader, when no plan of the policy's current generation is
// committed, or when there is nothing to decide.
func (l *Ledger) Admit(m Managed, ni *extender.NodeInfo, change Change) (extender.Admission, bool) {
	return l.admit(m, ni, &change)
}

// admit decides, and records the decision with change unless change is nil.
func (l *Ledger) admit(m Managed, ni *extender.NodeInfo, change *Change) (extender.Admission, bool) {
	n := ni.Node
	if !l.Leader() {
		return extender.Admission{}, false
	}
	l.decide.RLock()
	defer l.decide.RUnlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	ps := l.states[m.Policy.Name]
	if ps == nil || ps.generation != m.Policy.Generation {
		return extender.Admission{}, false
	}
	ps.st.Now = l.now()
	a := ps.st.AdmitNode(ni)
	decided := a.Role != extender.AdmitNone
	// An awaited node without a role is recorded too (its zone keeps a share of route reflectors
	// for it), with no change to its keys.
	if change == nil || !decided && !a.Awaited {
		return a, decided
	}
	prev := l.entries[n.Name]
	if prev != nil && prev.adm != nil && prev.policy == m.Policy.Name && sameAdmission(prev.adm, &a) {
		return *prev.adm, decided // a retry or a reinvocation of the same decision
	}
	if prev != nil && prev.undo != nil {
		prev.undo()
	}
	change.Node = n.Name
	change.Labels, change.Annotations = nil, nil
	if decided {
		change.Labels, change.Annotations = OwnedChanges(m.Resolved.RRLabelKey, n, a.State(m.Resolved))
	}
	if change.Object != nil {
		change.Object = ApplyChange(change.Object, change)
	}
	if prev != nil {
		// A node created but not in the cache yet stays a creation.
		change.Create = change.Create || prev.change.Create
		// Keep what an earlier change not seen yet wrote on other keys.
		change.Labels = mergeChanges(prev.change.Labels, change.Labels)
		change.Annotations = mergeChanges(prev.change.Annotations, change.Annotations)
	}
	l.seq++
	e := &entry{seq: l.seq, at: l.now(), policy: m.Policy.Name, change: *change, expires: l.now().Add(l.ttl), adm: &a}
	e.undo = ps.st.Record(e.adm)
	l.entries[n.Name] = e
	return a, decided
}

func sameAdmission(a, b *extender.Admission) bool {
	return a.Role == b.Role && a.ClusterID == b.ClusterID && a.PeeringSet == b.PeeringSet && a.Rack == b.Rack &&
		a.Healthy == b.Healthy && a.Eligible == b.Eligible && a.Awaited == b.Awaited && a.Zone == b.Zone
}

// Assume records a write that is not an admission decision (a draining mark, a patch of the
// reconciler): the planner sees it until the cache does.
func (l *Ledger) Assume(policyName string, c Change) {
	if len(c.Labels) == 0 && len(c.Annotations) == 0 && c.Object == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.entries[c.Node]; e != nil {
		// Merge onto an earlier change not seen yet.
		merged := e.change
		merged.Labels = mergeChanges(e.change.Labels, c.Labels)
		merged.Annotations = mergeChanges(e.change.Annotations, c.Annotations)
		if c.AfterRV != "" {
			merged.AfterRV, merged.BaseRV = c.AfterRV, ""
		}
		switch {
		case c.Object != nil:
			merged.Object = c.Object
		case merged.Object != nil:
			merged.Object = ApplyChange(merged.Object, &c)
		}
		c = merged
	}
	l.seq++
	l.entries[c.Node] = &entry{seq: l.seq, at: l.now(), policy: policyName, change: c, expires: l.now().Add(l.ttl)}
	if len(l.entries) > maxEntriesBeforePrune {
		// A replica without the lease never plans (Overlay prunes): drop what expired here.
		now := l.now()
		for name, e := range l.entries {
			if now.After(e.expires) {
				delete(l.entries, name)
			}
		}
	}
}

const maxEntriesBeforePrune = 4096

func mergeChanges(a, b map[string]*string) map[string]*string {
	if len(a) == 0 {
		return b
	}
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

// Forget drops what the ledger assumes of a node (it is gone).
func (l *Ledger) Forget(node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.entries, node)
}

// Assumed reports whether the ledger holds an assumed change of the node.
func (l *Ledger) Assumed(node string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.entries[node]
	return ok
}

// Pending returns the number of assumed changes.
func (l *Ledger) Pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.entries)
}

// Overlay returns the nodes as the planner must see them: each with the assumed changes the cache
// does not show yet, plus the admitted nodes the cache does not hold yet; and the sequence number
// of the last change it reflects, for Commit. It drops settled and expired changes. The nodes it
// is given are not modified.
func (l *Ledger) Overlay(nodes []*corev1.Node) ([]*corev1.Node, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.entries) == 0 {
		return nodes, l.seq
	}
	now := l.now()
	pos := make(map[string]int, len(l.entries))
	for i, n := range nodes {
		if _, ok := l.entries[n.Name]; ok {
			pos[n.Name] = i
		}
	}
	out := nodes
	copied := false
	for _, name := range slices.Sorted(maps.Keys(l.entries)) {
		e := l.entries[name]
		i, inCache := pos[name]
		var cached *corev1.Node
		if inCache {
			cached = nodes[i]
		}
		if stale(e, cached, now) {
			delete(l.entries, name)
			continue
		}
		if !copied {
			out, copied = slices.Clone(nodes), true
		}
		switch {
		case !inCache:
			out = append(out, e.change.Object)
		case e.change.Object != nil:
			out[i] = e.change.Object
		default:
			out[i] = ApplyChange(nodes[i], &e.change)
		}
	}
	return out, l.seq
}

// stale reports whether entry e no longer changes what a plan sees of its node, cached as the
// cache holds it (nil: the cache does not): expired, shown by the cache, or the node is gone.
func stale(e *entry, cached *corev1.Node, now time.Time) bool {
	switch {
	case now.After(e.expires):
		return true
	case cached != nil:
		return settled(&e.change, cached) && (shows(&e.change, cached) || now.Sub(e.at) > SettleGrace)
	default:
		return !e.change.Create || e.change.Object == nil // the node is gone
	}
}

// Unsettled reports whether the ledger holds a change of node n, as the cache holds it, that a
// plan would still see through Overlay (the cache does not show it yet). An entry the cache shows
// is dropped, as Overlay drops it.
func (l *Ledger) Unsettled(n *corev1.Node) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entries[n.Name]
	if e == nil {
		return false
	}
	if stale(e, n, l.now()) {
		delete(l.entries, n.Name)
		return false
	}
	return true
}

// SettleGrace is how long a change admitted on a node's old version (BaseRV) still counts when the
// cache holds a newer version without it. That newer version can be another writer's, landed first
// while the API server retries the admitted request (a conflict re-runs admission): settling then
// let a plan see the gap the admission had filled, and fill it a second time.
const SettleGrace = 5 * time.Second

// shows reports whether the cached node carries the change, or whether its resourceVersion is
// proof enough (a patch's answer, a creation).
func shows(c *Change, cached *corev1.Node) bool {
	if c.AfterRV != "" || c.BaseRV == "" {
		return true
	}
	return keysShow(cached.Labels, c.Labels) && keysShow(cached.Annotations, c.Annotations)
}

func keysShow(have map[string]string, want map[string]*string) bool {
	for k, v := range want {
		got, ok := have[k]
		if v == nil && ok || v != nil && (!ok || got != *v) {
			return false
		}
	}
	return true
}

func settled(c *Change, cached *corev1.Node) bool {
	if c.Create && c.BaseRV == "" && c.AfterRV == "" {
		return true // the created node is in the cache
	}
	rv, ok := parseRV(cached.ResourceVersion)
	switch {
	case c.AfterRV != "":
		after, ok2 := parseRV(c.AfterRV)
		if !ok || !ok2 {
			return cached.ResourceVersion == c.AfterRV
		}
		return rv >= after
	case c.BaseRV != "":
		base, ok2 := parseRV(c.BaseRV)
		if !ok || !ok2 {
			return cached.ResourceVersion != c.BaseRV
		}
		return rv > base
	}
	return false
}

func parseRV(s string) (uint64, bool) {
	v, err := strconv.ParseUint(s, 10, 64)
	return v, err == nil
}

// ApplyChange returns a copy of n with the change's labels and annotations.
func ApplyChange(n *corev1.Node, c *Change) *corev1.Node {
	out := *n
	out.Labels = maps.Clone(n.Labels)
	out.Annotations = maps.Clone(n.Annotations)
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	set := func(m map[string]string, ch map[string]*string) {
		for k, v := range ch {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = *v
			}
		}
	}
	set(out.Labels, c.Labels)
	set(out.Annotations, c.Annotations)
	return &out
}

// Commit publishes the plan of a policy computed from Overlay's nodes at seq. It fails, and the
// caller must plan again, when a promotion was admitted after seq: the plan did not count it. On
// success, admissions decide on this plan plus the decisions admitted after seq.
func (l *Ledger) Commit(generation int64, in extender.Input, res *extender.Result, seq uint64) bool {
	pol := in.Policy.Name
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.entries {
		if e.policy == pol && e.seq > seq && e.adm != nil && e.adm.Role == extender.AdmitRouteReflector {
			return false
		}
	}
	st := extender.NewAdmitState(in, res)
	for _, node := range slices.Sorted(maps.Keys(l.entries)) {
		if e := l.entries[node]; e.policy == pol {
			e.undo = nil
			if e.seq > seq && e.adm != nil {
				e.undo = st.Record(e.adm)
			}
		}
	}
	l.states[pol] = &planState{st: st, seq: seq, generation: generation}
	return true
}

// Plan computes policy m's plan from the cache with the ledger's assumed changes and commits it, as
// the leader does on every reconcile: the input is m's share of the nodes, with the facts the other
// valid policies bring (their cluster IDs, cross-policy peering, the nodes outside every selector).
// ok is Commit's answer: false means an admission promoted a node meanwhile and the caller must plan
// again.
func (l *Ledger) Plan(valid []Managed, cache []*corev1.Node, m Managed, now time.Time, history []extender.Recommendation) (in extender.Input, res *extender.Result, ok bool) {
	all, seq := l.Overlay(cache)
	nodes := Partition(valid, all)[m.Policy.Name]
	in = extender.Input{Policy: m.Resolved, Nodes: nodes, Now: now, Recommendations: history,
		ForeignClusterIDs: extender.ForeignClusterIDs(all, nodes), CrossPolicy: len(valid) > 1,
		OutsideSelector: OutsideSelector(valid, all), Drills: l.Drills}
	if l.BGPHealth != nil {
		in.BGPHealth = l.BGPHealth()
	}
	if l.Registered != nil {
		if names := l.Registered(); len(names) > 0 {
			in.Filters = append(extender.DefaultFilters(), extender.NewCalicoNodeRegistered(names))
		}
	}
	res = extender.Plan(in)
	return in, res, l.Commit(m.Policy.Generation, in, res, seq)
}

// BlockDecisions stops admission decisions until the returned function is called, so that a plan
// computed meanwhile cannot conflict with them.
func (l *Ledger) BlockDecisions() (unblock func()) {
	l.decide.Lock()
	return l.decide.Unlock
}

// DropPolicy forgets a deleted policy's plan.
func (l *Ledger) DropPolicy(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.states, name)
}

// OwnedChanges returns the label and annotation changes that turn n's owned keys into want's.
func OwnedChanges(rrLabelKey string, n *corev1.Node, want extender.NodeState) (lbl, ann map[string]*string) {
	return diffKeys(extender.OwnedLabelKeys(rrLabelKey), n.Labels, want.Labels), diffKeys(ownedAnnotationKeys, n.Annotations, want.Annotations)
}

var ownedAnnotationKeys = extender.OwnedAnnotationKeys()

func diffKeys(keys []string, cur, want map[string]string) map[string]*string {
	var out map[string]*string
	for _, k := range keys {
		w, wok := want[k]
		c, cok := cur[k]
		if wok == cok && w == c {
			continue
		}
		if out == nil {
			out = map[string]*string{}
		}
		if wok {
			out[k] = &w
		} else {
			out[k] = nil
		}
	}
	return out
}

// CeilSecond rounds t up to the second, in UTC. Draining marks have a resolution of one second
// (RFC 3339); rounding up keeps the removalDelay from ever being cut short.
func CeilSecond(t time.Time) time.Time {
	u := t.UTC().Truncate(time.Second)
	if u.Before(t) {
		u = u.Add(time.Second)
	}
	return u
}
