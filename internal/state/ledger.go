package state

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// DefaultAssumeTTL is how long an assumed decision counts when its object never shows up.
const DefaultAssumeTTL = 30 * time.Second

// Ledger is the single writer's memory: the assume overlay (decisions admitted or written but not
// yet seen in the informer cache) and, per policy, the AdmitState of the last committed full plan
// with every admission decided since. See doc.go for the design.
//
// Admission decisions that allocate (promotions, cluster IDs) are taken only while Leader is true.
//
// Locks: an admission takes its policy's planState.mu for its one decision and its record, then mu
// for the record's entry; Commit builds the next plan's state under no lock, and takes them only
// to catch up with the decisions recorded meanwhile and swap the state in (states, a pointer to a
// map written copy-on-write under statesMu). mu is held for map operations only, never for a pass
// over the cache's nodes. Lock order: statesMu, planState.mu, mu.
type Ledger struct {
	mu       sync.Mutex
	statesMu sync.Mutex
	states   atomic.Pointer[map[string]*planState]
	leader   atomic.Bool
	// hold counts HoldPromotions in force: decisions then promote no node.
	hold atomic.Int32

	ttl     time.Duration
	now     func() time.Time
	seq     uint64
	entries map[string]*entry

	// Drills runs the failure drills on every plan the leader computes (Plan): the planner then
	// prefers a plan that survives them. nil plans without drills.
	Drills extender.DrillFunc
	// Registered returns the nodes Calico has registered (the etcd datastore's Calico Nodes, from
	// the reconciler's watch), nil when unknown: a plan then keeps other nodes from new route
	// reflector roles (extender.CalicoNodeRegistered). nil for the Kubernetes datastore.
	Registered func() map[string]bool
	// CalicoAddresses returns the nodes' Calico BGP addresses when the Kubernetes Nodes do not
	// carry them (the etcd datastore's Calico Nodes, from the reconciler's watch), nil when none
	// are known: every plan reads the policy's nodes with them (extender.WithCalicoAddresses), so
	// that their address families are those of KDD's annotations. nil for the Kubernetes datastore.
	CalicoAddresses func() map[string]extender.CalicoAddresses
	// BGPHealth returns the leader's BGP health records of route reflectors (the policies'
	// bgpHealth), nil when none: every plan reads them (extender.Input.BGPHealth).
	BGPHealth func() map[string]extender.BGPHealth
	// Cached reports whether the node cache holds a node (nil: assumed to). An update admitted
	// while it does not (a node's first status update can come before the watch delivers its
	// create) is recorded as a creation: until the cache shows the change, the node's absence
	// from the cache is the cache's lag, not a deletion (stale).
	Cached func(name string) bool

	// built, when set (tests), is called by Commit once it has built the plan's state, before it
	// takes any lock to publish it.
	built func()
}

// planState is a committed plan's admission state. Admissions decide and record on st holding mu;
// once a newer state is published, retired sends them to it.
type planState struct {
	mu         sync.Mutex
	st         *extender.AdmitState
	seq        uint64 // the overlay sequence the plan's input reflected
	generation int64
	retired    bool
	// res is the plan the state was built from; when replayed is false (no decision was replayed
	// on the state at its commit), end is the ledger's sequence at the commit: while the sequence
	// stays there, the state is the plan's alone (see Reuse).
	res      *extender.Result
	replayed bool
	end      uint64
}

type entry struct {
	seq     uint64
	at      time.Time // when the change was admitted or written
	policy  string
	change  Change
	expires time.Time
	adm     *extender.Admission // an admission decision (leader only)
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
	Object *extender.Node
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
	l := &Ledger{ttl: ttl, now: now, entries: map[string]*entry{}}
	l.states.Store(&map[string]*planState{})
	return l
}

// SetLeader says whether this replica holds the leader lease. Losing it drops the plan states, so
// that no allocating decision is taken until the next commit as leader.
func (l *Ledger) SetLeader(v bool) {
	l.leader.Store(v)
	if !v {
		l.publish(func(m map[string]*planState) { clear(m) })
	}
}

// Leader reports whether this replica holds the leader lease.
func (l *Ledger) Leader() bool { return l.leader.Load() }

// publish swaps in a copy of the plan states changed by edit, and retires the states it replaced
// or dropped (an admission holding one finishes first).
func (l *Ledger) publish(edit func(map[string]*planState)) {
	l.statesMu.Lock()
	defer l.statesMu.Unlock()
	l.publishLocked(edit)
}

func (l *Ledger) publishLocked(edit func(map[string]*planState)) {
	cur := *l.states.Load()
	next := maps.Clone(cur)
	edit(next)
	l.states.Store(&next)
	for name, ps := range cur {
		if next[name] != ps {
			ps.mu.Lock()
			ps.retired = true
			ps.mu.Unlock()
		}
	}
}

// lockState returns the published state of m's plan of m's generation, locked, nil when none is
// committed. It waits for the one admission deciding on it, never for a plan.
func (l *Ledger) lockState(m Managed) *planState {
	for {
		ps := (*l.states.Load())[m.Policy.Name]
		if ps == nil || ps.generation != m.Policy.Generation {
			return nil
		}
		ps.mu.Lock()
		if !ps.retired {
			return ps
		}
		ps.mu.Unlock() // a newer state was published meanwhile
	}
}

// options returns a decision's options on m's state (held): whether to record it, whether
// promotions are held, and the node's last decision the cache does not show yet.
func (l *Ledger) options(m Managed, node string, record bool) extender.DecideOptions {
	o := extender.DecideOptions{Record: record, NoPromotion: l.hold.Load() > 0}
	if record {
		l.mu.Lock()
		if e := l.entries[node]; e != nil && e.adm != nil && e.policy == m.Policy.Name {
			o.Prev = e.adm
		}
		l.mu.Unlock()
	}
	return o
}

// NodeAdmission is one admission of a node by the mutating webhook.
type NodeAdmission struct {
	Node *extender.Node
	// Old is the node before an UPDATE, nil for a CREATE.
	Old *extender.Node
	// Now is the webhook's time of the request.
	Now time.Time
	// DryRun: the same answer, and no trace (nothing assumed, nothing recorded).
	DryRun bool
	// DeferRoles: a role decision is left to the reconciler (see webhook.NodeMutator.DeferRoles).
	DeferRoles bool
}

// AdmitNode is the mutating webhook's admission of a node, in one walk: it finds the node's
// policy, asks the planner once (extender.AdmitNodeRequest) on the policy's admission state, held
// for the call, and records the answer: a draining mark (Assume), a role decision (the entry the
// next plan sees). A replica without the lease decides no role (extender.AdmitDeferred). ok is
// false when no valid policy selects the node. The answer's Labels and Annotations are the patch.
func (l *Ledger) AdmitNode(pols *Policies, req NodeAdmission) (m Managed, ans extender.AdmitAnswer, ok bool) {
	m, ok = pols.ForNode(req.Node.Labels)
	if !ok {
		return m, ans, false
	}
	p := m.Resolved
	enforce := p.Mode == v1alpha1.Enforce
	record := enforce && !req.DryRun
	xr := extender.AdmitRequest{Node: req.Node, Old: req.Old, Now: req.Now, Observe: !enforce,
		Defer: !l.Leader() || enforce && req.DeferRoles}
	if !xr.Defer {
		if ps := l.lockState(m); ps != nil {
			defer ps.mu.Unlock()
			ps.st.Now = l.now()
			xr.State, xr.Decide = ps.st, l.options(m, req.Node.Name, record)
		}
	}
	ans = extender.AdmitNodeRequest(p, xr)
	if !record || ans.Action != extender.AdmitDrain && !ans.Recorded {
		return m, ans, true
	}
	unseen := req.Old != nil && l.Cached != nil && !l.Cached(req.Node.Name)
	change := Change{Node: req.Node.Name, Object: req.Node.DeepCopy(), Create: req.Old == nil || unseen}
	if req.Old != nil {
		change.BaseRV = req.Old.ResourceVersion
	}
	if ans.Action == extender.AdmitDrain {
		change.Annotations = ans.Annotations
		change.Object = ApplyChange(change.Object, &change)
		l.Assume(p.Name, change)
	} else {
		l.record(m, &ans.Decision, change)
	}
	return m, ans, true
}

// Admit decides the role of a node that is not a route reflector, read once by the caller through
// the planner's filters (see extender.AdmitState.AdmitNode), and records the decision with change
// as AdmitNode does. It returns false when this replica is not the leader, when no plan of the
// policy's current generation is committed, or when there is nothing to decide.
func (l *Ledger) Admit(m Managed, ni *extender.NodeInfo, change Change) (extender.Admission, bool) {
	if !l.Leader() {
		return extender.Admission{}, false
	}
	ps := l.lockState(m)
	if ps == nil {
		return extender.Admission{}, false
	}
	defer ps.mu.Unlock()
	ps.st.Now = l.now()
	d := ps.st.Decide(ni, l.options(m, ni.Node.Name, true))
	if d.Recorded {
		change.Node = ni.Node.Name
		l.record(m, &d, change)
	}
	return d.Admission, d.Decided
}

// record adds the entry of a decision recorded on m's state, which the caller holds: the next
// commit replays it on its plan's state when the plan's input did not see it.
func (l *Ledger) record(m Managed, d *extender.Decision, change Change) {
	change.Labels, change.Annotations = d.Labels, d.Annotations
	if change.Object != nil {
		change.Object = ApplyChange(change.Object, &change)
	}
	adm := d.Admission
	l.mu.Lock()
	defer l.mu.Unlock()
	if prev := l.entries[change.Node]; prev != nil {
		// A node created but not in the cache yet stays a creation.
		change.Create = change.Create || prev.change.Create
		// Keep what an earlier change not seen yet wrote on other keys.
		change.Labels = mergeChanges(prev.change.Labels, change.Labels)
		change.Annotations = mergeChanges(prev.change.Annotations, change.Annotations)
	}
	l.seq++
	l.entries[change.Node] = &entry{seq: l.seq, at: l.now(), policy: m.Policy.Name, change: change, expires: l.now().Add(l.ttl), adm: &adm}
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
// is given are not modified. It holds the ledger's lock only to copy the changes and to drop the
// settled ones, not over the nodes.
func (l *Ledger) Overlay(nodes []*extender.Node) ([]*extender.Node, uint64) {
	l.mu.Lock()
	seq := l.seq
	if len(l.entries) == 0 {
		l.mu.Unlock()
		return nodes, seq
	}
	entries := maps.Clone(l.entries) // entries are never changed once made
	now := l.now()
	l.mu.Unlock()
	pos := make(map[string]int, len(entries))
	for i, n := range nodes {
		if _, ok := entries[n.Name]; ok {
			pos[n.Name] = i
		}
	}
	out := nodes
	copied := false
	var drop []*entry
	for _, name := range slices.Sorted(maps.Keys(entries)) {
		e := entries[name]
		i, inCache := pos[name]
		var cached *extender.Node
		if inCache {
			cached = nodes[i]
		}
		if stale(e, cached, now) {
			drop = append(drop, e)
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
	if len(drop) > 0 {
		l.mu.Lock()
		for _, e := range drop {
			if l.entries[e.change.Node] == e { // not replaced meanwhile
				delete(l.entries, e.change.Node)
			}
		}
		l.mu.Unlock()
	}
	return out, seq
}

// stale reports whether entry e no longer changes what a plan sees of its node, cached as the
// cache holds it (nil: the cache does not): expired, shown by the cache, or the node is gone.
func stale(e *entry, cached *extender.Node, now time.Time) bool {
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
func (l *Ledger) Unsettled(n *extender.Node) bool {
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
func shows(c *Change, cached *extender.Node) bool {
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

func settled(c *Change, cached *extender.Node) bool {
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
func ApplyChange(n *extender.Node, c *Change) *extender.Node {
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
//
// The plan's admission state is built, and the decisions admitted after seq replayed on it, under
// no lock an admission takes; Commit then waits for the one admission deciding on the policy's
// current state, replays the decisions recorded since it looked, and swaps the new state in.
func (l *Ledger) Commit(generation int64, in extender.Input, res *extender.Result, seq uint64) bool {
	return l.commit(generation, in, res, seq) != nil
}

// commit is Commit, returning the published state (nil when it failed).
func (l *Ledger) commit(generation int64, in extender.Input, res *extender.Result, seq uint64) *planState {
	pol := in.Policy.Name
	l.mu.Lock()
	since := l.decidedSince(pol, seq)
	mark := l.seq
	l.mu.Unlock()
	st := extender.NewAdmitState(in, res)
	if !replay(st, since) {
		return nil
	}
	if l.built != nil {
		l.built()
	}
	l.statesMu.Lock()
	defer l.statesMu.Unlock()
	if old := (*l.states.Load())[pol]; old != nil {
		old.mu.Lock() // no decision on the old state from here: it is retired below
		defer old.mu.Unlock()
	}
	l.mu.Lock()
	late := l.decidedSince(pol, mark)
	end := l.seq
	l.mu.Unlock()
	if !replay(st, late) {
		return nil
	}
	ps := &planState{st: st, seq: seq, generation: generation, res: res, replayed: len(since)+len(late) > 0, end: end}
	cur := *l.states.Load()
	next := maps.Clone(cur)
	next[pol] = ps
	l.states.Store(&next)
	if old := cur[pol]; old != nil {
		old.retired = true // its lock is held
	}
	return ps
}

// decidedSince returns policy pol's admission decisions recorded after seq, in their order. The
// caller holds mu.
func (l *Ledger) decidedSince(pol string, seq uint64) []*entry {
	var out []*entry
	for _, e := range l.entries {
		if e.policy == pol && e.seq > seq && e.adm != nil {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b *entry) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

// replay records on a new plan's state the decisions taken after its input was read, in their
// order. It reports false, a conflict, when a promotion among them is not one the state takes
// again (extender.AdmitState.Replays): the plan filled that gap otherwise, and the two must not
// both stand.
func replay(st *extender.AdmitState, es []*entry) bool {
	for _, e := range es {
		if e.adm.Role == extender.AdmitRouteReflector && !st.Replays(e.change.Object, e.at, e.adm) {
			return false
		}
		st.Remember(e.adm)
	}
	return true
}

// Plan computes policy m's plan from the cache with the ledger's assumed changes and commits it, as
// the leader does on every reconcile: the input is m's share of the nodes, with the facts the other
// valid policies bring (their cluster IDs, cross-policy peering, the nodes outside every selector).
// ok is Commit's answer: false means an admission promoted a node meanwhile and the caller must plan
// again.
func (l *Ledger) Plan(valid []Managed, cache []*extender.Node, m Managed, now time.Time, history []extender.Recommendation) (in extender.Input, res *extender.Result, ok bool) {
	pd, ok := l.PlanKept(valid, cache, m, now, history)
	return pd.In, pd.Res, ok
}

// PlanKept is Plan, returning the plan with what Reuse needs to reuse it (never nil; ok is
// Commit's answer).
func (l *Ledger) PlanKept(valid []Managed, cache []*extender.Node, m Managed, now time.Time, history []extender.Recommendation) (*Planned, bool) {
	all, seq := l.Overlay(cache)
	nodes := Partition(valid, all)[m.Policy.Name]
	if l.CalicoAddresses != nil {
		nodes = extender.WithCalicoAddresses(nodes, l.CalicoAddresses())
	}
	in := extender.Input{Policy: m.Resolved, Nodes: nodes, Now: now, Recommendations: history,
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
	res := extender.Plan(in)
	ps := l.commit(m.Policy.Generation, in, res, seq)
	pd := &Planned{In: in, Res: res, policies: PoliciesKey(valid), generation: m.Policy.Generation, cache: cache, ps: ps}
	if len(all) != len(cache) || len(all) > 0 && &all[0] != &cache[0] {
		pd.cache = nil // the plan read assumed changes: never reused
	}
	return pd, ps != nil
}

// HoldPromotions keeps admission decisions from promoting a node until the returned function is
// called, so that a plan computed meanwhile cannot conflict with them (the reconciler's plan after
// two conflicts). Admissions are still answered at once: a client role, or none. It waits only for
// the decisions being taken as it starts.
func (l *Ledger) HoldPromotions() (release func()) {
	l.hold.Add(1)
	for _, ps := range *l.states.Load() {
		ps.mu.Lock() // a decision that read no hold is recorded before this returns
		ps.mu.Unlock()
	}
	var once sync.Once
	return func() { once.Do(func() { l.hold.Add(-1) }) }
}

// DropPolicy forgets a deleted policy's plan.
func (l *Ledger) DropPolicy(name string) {
	l.publish(func(m map[string]*planState) { delete(m, name) })
}

// OwnedChanges returns the label and annotation changes that turn n's owned keys into want's.
func OwnedChanges(rrLabelKey string, n *extender.Node, want extender.NodeState) (lbl, ann map[string]*string) {
	return extender.OwnedChanges(rrLabelKey, n, want)
}

// CeilSecond rounds t up to the second, in UTC (extender.CeilSecond).
func CeilSecond(t time.Time) time.Time { return extender.CeilSecond(t) }
