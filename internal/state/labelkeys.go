package state

import (
	"bytes"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoselector"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// LabelKeys is the set of node label keys the node cache keeps: the keys the product reads. A
// kubelet's Node carries some thirty-five labels (hostname, instance ID, the cloud's and the node
// group's); a plan reads a handful: the policies' route reflector, zone and rack labels and the keys
// their node, preferred and forbidden selectors name, the keys the BGPPeers' selectors name (the
// graph model, adoption and release evaluate them), and the product's own (routereflector.io/).
// Every other label is dropped as each node arrives (Transform).
//
// The set only grows while the process runs: a key a policy or a BGPPeer stops reading stays kept
// until the next start. When a key is added (Want), the nodes already cached lack it: the set's
// generation goes up and the node informer is asked to list again (the relist function, see
// serve), and every node the transform strips is stamped with the generation it was stripped
// under. Held reports whether every cached node was stripped under a set holding the keys; until
// it does, a selector on a new key must not be evaluated on the cache (it would silently match
// nothing): the reconciler waits and says so in the policy's Ready condition (CacheRefilling), the
// policy webhook asks the API server.
//
// The stamp is the node's metadata.generation, which the API server leaves at 0 on nodes and the
// product never reads; a stamp is stampBase plus the generation.
type LabelKeys struct {
	set atomic.Pointer[keySet]

	mu sync.Mutex
	// relist asks the node informer to list again (nil: no informer, as in tests).
	relist func()
	// store is the node cache (nil before SetRelist): Held scans its nodes' stamps, and Strip
	// points a new object's kept parts at the cached object's when they are equal (reuseKept).
	// Strip runs on the informer's goroutine without mu: an atomic pointer.
	store atomic.Pointer[toolscache.Store]
	// noReuse turns reuseKept off (the heartbeat benchmark's comparison).
	noReuse bool
	// refilled: a generation every cached node was last found stamped at or above.
	refilled int64

	// shared holds one labels map per distinct set of kept labels (by sharedKey): the nodes of a
	// zone and a peering set carry the same few labels, and share one map (the cache's nodes are
	// never modified). Cleared when it reaches maxShared.
	sharedMu sync.Mutex
	shared   map[string]map[string]string
	// sharedTaints holds one taints slice per distinct list of taints (keyed by their content,
	// the time added included): the API
	// server's TaintNodesByCondition puts the same not-ready taint on every new node, and a node
	// group's nodes carry the same taints. Cleared when it reaches maxShared.
	sharedTaints map[string][]corev1.Taint
	// sharedConds holds one conditions slice per distinct list of stripped conditions (type,
	// status and the time of the last transition: StripNode keeps no more): the nodes that
	// became Ready in the same second, and every node under a pressure condition since the same
	// second, share one. Cleared when it reaches maxShared.
	sharedConds map[string][]corev1.NodeCondition
}

// maxShared bounds the distinct label maps, taint lists and condition lists LabelKeys keeps for
// sharing (each).
const maxShared = 8192

type keySet struct {
	gen  int64
	all  bool
	keys map[string]bool
	// addedAt: the generation each key joined the set (0 for the fixed ones).
	addedAt map[string]int64
}

// stampBase marks a node the transform has stripped: its generation is stampBase + the set's.
const stampBase = int64(1) << 62

// keptPrefix starts the node labels this product writes (but a policy's route reflector label),
// always kept.
const keptPrefix = "routereflector.io/"

// FixedLabelKeys are the keys kept whatever the policies say: the product's own (but for the
// route reflector label of a policy that names its own), the default zone and route reflector
// labels (the graph model's drills read the default zone label).
func FixedLabelKeys() []string {
	return slices.Concat(extender.OwnedLabelKeys(policy.DefaultRouteReflectorLabelKey), []string{policy.DefaultZoneLabel})
}

// NewLabelKeys returns the set of the fixed keys, generation 1.
func NewLabelKeys() *LabelKeys {
	l := &LabelKeys{}
	s := &keySet{gen: 1, keys: map[string]bool{}, addedAt: map[string]int64{}}
	for _, k := range FixedLabelKeys() {
		s.keys[k] = true
	}
	l.set.Store(s)
	return l
}

// SetRelist sets how the node informer is asked to list again, and the store whose nodes Held
// checks.
func (l *LabelKeys) SetRelist(store toolscache.Store, relist func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.relist = relist
	l.store.Store(&store)
}

// cache returns the node cache SetRelist gave, nil if none.
func (l *LabelKeys) cache() toolscache.Store {
	if st := l.store.Load(); st != nil {
		return *st
	}
	return nil
}

// Kept reports whether the cache keeps label key.
func (l *LabelKeys) Kept(key string) bool { return l.set.Load().keeps(key) }

// keeps reports whether the set keeps label key.
func (s *keySet) keeps(key string) bool {
	return s.all || s.keys[key] || strings.HasPrefix(key, keptPrefix)
}

// keepsBytes is keeps on a key's bytes, without allocating a string of them (the watch's decoder,
// about thirty labels a node; a string of a key over 32 bytes would be allocated).
func (s *keySet) keepsBytes(key []byte) bool {
	return s.all || s.keys[string(key)] || bytes.HasPrefix(key, keptPrefixBytes)
}

var keptPrefixBytes = []byte(keptPrefix)

// Keys returns the kept keys, sorted (the product's prefix not listed), and whether every key is
// kept.
func (l *LabelKeys) Keys() ([]string, bool) {
	s := l.set.Load()
	return slices.Sorted(maps.Keys(s.keys)), s.all
}

// Generation is the set's generation.
func (l *LabelKeys) Generation() int64 { return l.set.Load().gen }

// Want adds keys to the set. When one was not kept, the set's generation goes up and the node
// informer is asked to list again; it returns the keys added.
func (l *LabelKeys) Want(keys ...string) []string {
	return l.grow(false, keys)
}

// WantAll keeps every label key from now on (a selector this code cannot read the keys of).
func (l *LabelKeys) WantAll() bool {
	return len(l.grow(true, nil)) > 0
}

func (l *LabelKeys) grow(all bool, keys []string) []string {
	cur := l.set.Load()
	if cur.all || !all && !slices.ContainsFunc(keys, func(k string) bool { return !cur.keys[k] && !strings.HasPrefix(k, keptPrefix) }) {
		return nil // the common case: nothing new
	}
	l.mu.Lock()
	cur = l.set.Load() // another Want may have won
	next := &keySet{gen: cur.gen + 1, all: cur.all || all, keys: maps.Clone(cur.keys), addedAt: maps.Clone(cur.addedAt)}
	var added []string
	if all && !cur.all {
		added = append(added, "*")
		next.addedAt["*"] = next.gen
	}
	if !next.all {
		for _, k := range keys {
			if !next.keys[k] && !strings.HasPrefix(k, keptPrefix) {
				next.keys[k] = true
				next.addedAt[k] = next.gen
				added = append(added, k)
			}
		}
	}
	if len(added) == 0 {
		l.mu.Unlock()
		return nil
	}
	l.set.Store(next)
	relist := l.relist
	l.mu.Unlock()
	if relist != nil {
		relist()
	}
	return added
}

// Held reports whether every cached node was stripped under a set that holds keys (Want them
// first): a selector on them reads the same on the cache as on the API server's nodes. It returns
// the keys not held yet (a key not even wanted among them).
func (l *LabelKeys) Held(keys ...string) []string {
	s := l.set.Load()
	need := int64(0)
	var pending []string
	for _, k := range keys {
		switch {
		case strings.HasPrefix(k, keptPrefix):
		case s.keys[k]:
			if g := s.addedAt[k]; g > 0 {
				need = max(need, g)
				pending = append(pending, k)
			}
		case s.all:
			need = max(need, s.addedAt["*"])
			pending = append(pending, k)
		default:
			return []string{k} // not even wanted
		}
	}
	if need == 0 || l.refilledThrough(s, need) {
		return nil
	}
	return pending
}

// Refilling returns the keys of the set the cache does not hold on every node yet, sorted ("*"
// when every key is wanted): none once the relist after the last Want has been stripped under it.
func (l *LabelKeys) Refilling() []string {
	s := l.set.Load()
	need := int64(0)
	for _, g := range s.addedAt {
		need = max(need, g)
	}
	if need == 0 || l.refilledThrough(s, need) {
		return nil
	}
	var out []string
	for k, g := range s.addedAt {
		if g > l.refilledGen() {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func (l *LabelKeys) refilledGen() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refilled
}

// refilledThrough reports whether every cached node was stripped under generation need or later
// (scanning the store only while that is not known yet).
func (l *LabelKeys) refilledThrough(s *keySet, need int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	store := l.cache()
	if l.refilled >= need || store == nil {
		return true
	}
	low := s.gen
	for _, o := range store.List() {
		if n, ok := o.(*extender.Node); ok {
			low = min(low, StrippedUnder(n))
		}
	}
	l.refilled = max(l.refilled, low)
	return l.refilled >= need
}

// share returns the labels map shared by every node with these labels (which it becomes when it is
// the first).
func (l *LabelKeys) share(labels map[string]string) map[string]string {
	if len(labels) == 0 {
		return labels
	}
	keys := slices.Sorted(maps.Keys(labels))
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(labels[k])
		b.WriteByte(0)
	}
	return shared(&l.sharedMu, &l.shared, b.String(), labels)
}

// shared returns the value *m holds under key, or makes v that value (clearing *m first when it
// holds maxShared) and returns it.
func shared[V any](mu *sync.Mutex, m *map[string]V, key string, v V) V {
	mu.Lock()
	defer mu.Unlock()
	if s, ok := (*m)[key]; ok {
		return s
	}
	if *m == nil || len(*m) >= maxShared {
		*m = map[string]V{}
	}
	(*m)[key] = v
	return v
}

// shareTaints returns the taints slice shared by every node with these taints (which it becomes
// when it is the first).
func (l *LabelKeys) shareTaints(taints []corev1.Taint) []corev1.Taint {
	if len(taints) == 0 {
		return taints
	}
	var b strings.Builder
	for _, t := range taints {
		b.WriteString(t.Key)
		b.WriteByte(0)
		b.WriteString(t.Value)
		b.WriteByte(0)
		b.WriteString(string(t.Effect))
		b.WriteByte(0)
		if t.TimeAdded == nil {
			b.WriteString("nil")
			b.WriteByte(0)
		} else {
			writeTime(&b, *t.TimeAdded)
		}
	}
	return shared(&l.sharedMu, &l.sharedTaints, b.String(), slices.Clip(taints))
}

// shareConditions returns the conditions slice shared by every node with these stripped
// conditions (which it becomes when it is the first).
func (l *LabelKeys) shareConditions(conds []corev1.NodeCondition) []corev1.NodeCondition {
	if len(conds) == 0 {
		return conds
	}
	var b strings.Builder
	for _, c := range conds {
		b.WriteString(string(c.Type))
		b.WriteByte(0)
		b.WriteString(string(c.Status))
		b.WriteByte(0)
		b.WriteString(c.Reason)
		b.WriteByte(0)
		b.WriteString(c.Message)
		b.WriteByte(0)
		writeTime(&b, c.LastTransitionTime)
		writeTime(&b, c.LastHeartbeatTime)
	}
	return shared(&l.sharedMu, &l.sharedConds, b.String(), slices.Clip(conds))
}

// writeTime writes a time's instant and zone offset (two equal times in other zones are not the
// same value to a reader that formats them), then a separator.
func writeTime(b *strings.Builder, t metav1.Time) {
	if !t.IsZero() {
		_, off := t.Zone()
		b.WriteString(strconv.FormatInt(t.UnixNano(), 10))
		b.WriteByte('@')
		b.WriteString(strconv.Itoa(off))
	}
	b.WriteByte(0)
}

// WantSelectors adds the keys Calico selectors name (a BGPPeer's nodeSelector and peerSelector:
// the graph model, adoption and release evaluate them on the cache); every key when one has a term
// whose keys cannot be read. It returns the keys added.
func (l *LabelKeys) WantSelectors(sels ...string) []string {
	var keys []string
	var added []string
	for _, sel := range sels {
		if sel == "" {
			continue
		}
		k, all := calicoselector.LabelKeys(sel)
		if all && l.WantAll() {
			added = append(added, "*")
		}
		keys = append(keys, k...)
	}
	return append(added, l.Want(keys...)...)
}

// StrippedUnder returns the generation of the set a cached node was stripped under, 0 if it was
// not stripped by a LabelKeys transform.
func StrippedUnder(n *extender.Node) int64 {
	if n.Generation < stampBase {
		return 0
	}
	return n.Generation - stampBase
}

// Transform is the cache's transform with this set: nodes are stripped (Strip) and
// stamped, every other object loses its managedFields.
func (l *LabelKeys) Transform(obj any) (any, error) {
	if n, ok := obj.(*corev1.Node); ok {
		return l.Strip(n), nil
	}
	return TransformStrip(obj) // a record passes as it is: the informer may transform an object twice
}

// DecodeLabels is the node decoder's choice of labels (nodedecode.Decoder.Labels): the set's
// keys now and its generation. The watch's decoder skips the other labels without allocating
// them (a kubelet node carries some thirty that no policy reads, in every status report); a
// node it decoded carries the generation negated, and Strip stamps it with that generation, not
// a later one: a key added between the decode and the strip is missing from it.
func (l *LabelKeys) DecodeLabels() (keep func(key []byte) bool, generation int64) {
	s := l.set.Load()
	return s.keepsBytes, s.gen
}

// Strip returns the record of a node that the cache keeps: the labels of the set, stamped with the
// set's generation (the decoder's when it chose the labels: DecodeLabels).
func (l *LabelKeys) Strip(n *corev1.Node) *extender.Node {
	s := l.set.Load()
	gen := s.gen
	if n.Generation < 0 { // decoded keeping the labels of generation -n.Generation
		gen = min(gen, -n.Generation)
	}
	var r *extender.Node
	if s.all {
		r = StripNode(n)
	} else {
		r = stripNode(n, s.keeps)
		r.Labels = l.share(r.Labels)
	}
	r.Spec.Taints = l.shareTaints(r.Spec.Taints)
	r.Status.Conditions = l.shareConditions(r.Status.Conditions)
	r.Generation = stampBase + gen
	if store := l.cache(); store != nil && !l.noReuse {
		if o, ok, _ := store.GetByKey(r.Name); ok {
			if was, ok := o.(*extender.Node); ok {
				reuseKept(r, was)
			}
		}
	}
	return r
}
