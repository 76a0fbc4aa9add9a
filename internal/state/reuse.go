package state

import (
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// Planned is a policy's plan as PlanKept computed and committed it, kept by the reconciler for
// the next plan of the policy (Reuse).
type Planned struct {
	In  extender.Input
	Res *extender.Result

	policies   string // the valid policies it was planned with (PoliciesKey)
	generation int64
	// cache is the cache's nodes the input was read from (nil: the input held assumed changes,
	// and the plan is not reused); seen holds them, built at the first Reuse, and byName too,
	// built when a node's object has changed.
	cache  []*extender.Node
	seen   map[*extender.Node]struct{}
	byName map[string]*extender.Node
	ps     *planState // the admission state commit published for it
}

// PoliciesKey names the valid policies with their UIDs and generations.
func PoliciesKey(valid []Managed) string {
	var b strings.Builder
	for _, m := range valid {
		b.WriteString(m.Policy.Name)
		b.WriteByte('/')
		b.WriteString(string(m.Policy.UID))
		b.WriteByte('/')
		b.WriteString(strconv.FormatInt(m.Policy.Generation, 10))
		b.WriteByte(' ')
	}
	return b.String()
}

// Reuse returns prev's plan as the plan of policy m at now from the cache's nodes, with its
// admission state left published, and true, when the planner would read nothing new: the same
// valid policies, the same nodes (the same objects, or objects that differ from them in their
// resourceVersion only: a kubelet's heartbeat), no assumed change, no admission decision since the
// plan's commit, the same BGP health records, and a time at which the plan is still the same
// (extender.Result.At). The plan is then the one PlanKept would compute and commit (a settled
// reconcile costs no plan: issue 38). Otherwise nil and false: plan with PlanKept. The etcd
// datastore's plans (Registered, CalicoAddresses) are never reused.
func (l *Ledger) Reuse(prev *Planned, valid []Managed, cache []*extender.Node, m Managed, now time.Time, history []extender.Recommendation) (*Planned, bool) {
	if prev == nil || prev.cache == nil || prev.ps == nil || prev.generation != m.Policy.Generation ||
		prev.In.Policy != m.Resolved || l.Registered != nil || l.CalicoAddresses != nil ||
		len(cache) != len(prev.cache) || PoliciesKey(valid) != prev.policies {
		return nil, false
	}
	var health map[string]extender.BGPHealth
	if l.BGPHealth != nil {
		health = l.BGPHealth()
	}
	if !maps.EqualFunc(health, prev.In.BGPHealth, func(a, b extender.BGPHealth) bool { return reflect.DeepEqual(a, b) }) {
		return nil, false
	}
	if !l.quietSince(m.Policy.Name, prev.ps) {
		return nil, false
	}
	res, ok := prev.Res.At(m.Resolved, now, history)
	if !ok {
		return nil, false
	}
	if prev.seen == nil {
		prev.seen = make(map[*extender.Node]struct{}, len(prev.cache))
		for _, n := range prev.cache {
			prev.seen[n] = struct{}{}
		}
	}
	var moved map[string]*extender.Node // the nodes whose object changed in its resourceVersion only
	for _, n := range cache {
		if _, ok := prev.seen[n]; ok {
			continue
		}
		if prev.byName == nil {
			prev.byName = make(map[string]*extender.Node, len(prev.cache))
			for _, n := range prev.cache {
				prev.byName[n.Name] = n
			}
		}
		if was := prev.byName[n.Name]; was == nil || !sameButVersion(was, n) {
			return nil, false
		}
		if moved == nil {
			moved = map[string]*extender.Node{}
		}
		moved[n.Name] = n
	}
	in := prev.In
	in.Now, in.Recommendations, in.BGPHealth = now, history, health
	next := *prev
	next.In, next.Res, next.cache = in, res, cache
	if moved != nil {
		in.Nodes = slices.Clone(in.Nodes)
		for i, n := range in.Nodes {
			if c := moved[n.Name]; c != nil {
				in.Nodes[i] = c
			}
		}
		next.In.Nodes = in.Nodes
		next.seen, next.byName = nil, nil // built again at the next Reuse, from cache
	}
	return &next, true
}

// quietSince reports whether ps is policy pol's published admission state, with no decision
// replayed on it, and the ledger has recorded nothing since its commit (no assumed change, no
// admission): the state is what committing the same plan again would publish. As Commit, it waits
// for the one admission deciding on the state: a decision after it is one after a commit.
func (l *Ledger) quietSince(pol string, ps *planState) bool {
	if (*l.states.Load())[pol] != ps || ps.replayed {
		return false
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	return !ps.retired && len(l.entries) == 0 && l.seq == ps.end
}

// sameButVersion reports whether two objects of a node differ in their resourceVersion only.
func sameButVersion(a, b *extender.Node) bool {
	if a.UID != b.UID || !maps.Equal(a.Labels, b.Labels) || !maps.Equal(a.Annotations, b.Annotations) {
		return false
	}
	c := *b
	c.ResourceVersion = a.ResourceVersion
	return equality.Semantic.DeepEqual(a, &c)
}
