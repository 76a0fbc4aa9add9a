package state

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// admitFixture is a leader's ledger with the default policy (MultiCluster) committed on a cache of
// settled nodes over three zones.
type admitFixture struct {
	l     *Ledger
	pols  *Policies
	m     Managed
	cache []*extender.Node
}

func newAdmitFixture(t *testing.T, nodes int) *admitFixture {
	t.Helper()
	return newAdmitFixtureSpec(t, nodes, nil)
}

// newAdmitFixtureSpec is newAdmitFixture with the policy's spec edited by edit (nil: none).
func newAdmitFixtureSpec(t *testing.T, nodes int, edit func(*v1alpha1.RouteReflectorPolicySpec)) *admitFixture {
	t.Helper()
	p := policy.Default("default")
	p.UID, p.Generation = types.UID("uid-default"), 1
	p.Spec.Topology = &v1alpha1.Topology{Type: v1alpha1.MultiCluster}
	if edit != nil {
		edit(&p.Spec)
	}
	idx := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
	require.NoError(t, idx.Add(p))
	f := &admitFixture{l: NewLedger(0, func() time.Time { return tNow }), pols: NewPolicies(idx)}
	f.m, _ = f.pols.Get("default")
	for i := range nodes {
		f.cache = append(f.cache, mkNode(fmt.Sprintf("node-%02d", i), fmt.Sprintf("zone-%c", 'a'+i%3)))
	}
	f.l.SetLeader(true)
	in, res, ok := f.l.Plan(f.pols.Valid(), f.cache, f.m, tNow, nil)
	require.True(t, ok, "first commit")
	for i, n := range in.Nodes { // the cache shows the plan
		for k, v := range res.Nodes[i].Labels {
			n.Labels[k] = v
		}
		for k, v := range res.Nodes[i].Annotations {
			n.Annotations[k] = v
		}
	}
	_, _, ok = f.l.Plan(f.pols.Valid(), f.cache, f.m, tNow, nil)
	require.True(t, ok, "commit on the settled cache")
	return f
}

// join admits a new Ready node of zone as the mutating webhook does.
func (f *admitFixture) join(name, zone string) extender.AdmitAnswer {
	_, ans, _ := f.l.AdmitNode(f.pols, NodeAdmission{Node: mkNode(name, zone), Now: tNow})
	return ans
}

// known returns the role the published state of the default policy gives the node.
func (f *admitFixture) known(name string) (extender.AdmitRole, bool) {
	ps := (*f.l.states.Load())["default"]
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.st.Known(name)
}

// within fails the test when ch gives nothing for a minute: what it waits for is blocked (the
// minute only turns a deadlock into a failure; the order is the channels').
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		require.FailNow(t, what)
		panic("unreachable")
	}
}

// TestLedgerAdmissionDuringCommit: an admission is answered while a commit holds the state it built
// (it takes no lock an admission takes then), and the decisions taken after the plan's input was
// read (before the commit, and during it) are in the state the commit publishes.
func TestLedgerAdmissionDuringCommit(t *testing.T) {
	f := newAdmitFixture(t, 12)
	nodes, seq := f.l.Overlay(f.cache)   // the reconciler reads its input...
	before := f.join("join-1", "zone-a") // ...then a node joins
	require.Equal(t, extender.AdmitClient, before.Role, "join-1: %+v", before)
	in := extender.Input{Policy: f.m.Resolved, Nodes: nodes, Now: tNow}
	res := extender.Plan(in)

	built, release := make(chan struct{}), make(chan struct{})
	f.l.built = func() { close(built); <-release }
	committed := make(chan bool)
	go func() { committed <- f.l.Commit(1, in, res, seq) }()
	within(t, built, "the commit never built its state")

	answered := make(chan extender.AdmitAnswer)
	go func() { answered <- f.join("join-2", "zone-b") }()
	select {
	case ans := <-answered:
		require.Equal(t, extender.AdmitClient, ans.Role, "join-2 during the commit: %+v", ans)
		require.True(t, ans.Recorded, "join-2 during the commit: %+v", ans)
	case <-committed:
		require.FailNow(t, "the commit ended while it was held")
	case <-time.After(time.Minute):
		require.FailNow(t, "the admission waited for the commit")
	}
	close(release)
	require.True(t, within(t, committed, "the commit never ended"), "commit")

	for _, name := range []string{"join-1", "join-2"} {
		role, ok := f.known(name)
		assert.True(t, ok, "%s: not in the published state", name)
		assert.Equal(t, extender.AdmitClient, role, "%s: role in the published state", name)
	}
	// The published state is the one admissions decide on: join-2 again is the same decision.
	again := f.join("join-2", "zone-b")
	assert.True(t, again.Same, "join-2 again: %+v", again)
}

// commitHeld commits the plan of nodes on f's ledger, holding the commit once it has built its
// state while during runs (an admission between the plan and its publication). It returns the
// commit's answer.
func (f *admitFixture) commitHeld(t *testing.T, nodes []*extender.Node, during func()) bool {
	t.Helper()
	in0, seq := f.l.Overlay(nodes)
	in := extender.Input{Policy: f.m.Resolved, Nodes: in0, Now: tNow}
	res := extender.Plan(in)
	built, release := make(chan struct{}), make(chan struct{})
	f.l.built = func() { close(built); <-release }
	defer func() { f.l.built = nil }()
	committed := make(chan bool)
	go func() { committed <- f.l.Commit(1, in, res, seq) }()
	within(t, built, "the commit never built its state")
	during()
	close(release)
	return within(t, committed, "the commit never ended")
}

// TestLedgerPromotionIntoGapDuringCommit: a promotion decided while a commit builds its state,
// into a gap the commit's plan left (it never saw the node), is replayed on the plan's state: the
// commit stands, and the state counts the new route reflector.
func TestLedgerPromotionIntoGapDuringCommit(t *testing.T) {
	f := newAdmitFixture(t, 0)
	var ans extender.AdmitAnswer
	ok := f.commitHeld(t, nil, func() { ans = f.join("node-1", "zone-a") })
	require.Equal(t, extender.AdmitRouteReflector, ans.Role, "node-1: %+v", ans)
	require.True(t, ok, "a commit whose plan left the promotion's gap failed")
	role, known := f.known("node-1")
	assert.True(t, known && role == extender.AdmitRouteReflector, "the promotion is not in the published state: %v %v", role, known)
	// The next node of the zone counts it: the zone wants more than one, and gets another ID's
	// route reflector or a client role, never node-1's decision again.
	next := f.join("node-2", "zone-a")
	assert.NotEqual(t, extender.AdmitNone, next.Role, "node-2: %+v", next)
	in2, res2, ok := f.l.Plan(f.pols.Valid(), nil, f.m, tNow, nil)
	require.True(t, ok, "commit after the promotions")
	require.Len(t, in2.Nodes, 2, "input")
	assert.Equal(t, 1+b2i(next.Role == extender.AdmitRouteReflector), res2.Summary.RouteReflectors, "plan %+v", res2.Summary)
}

// TestLedgerCompetingPromotionDuringCommitConflicts: a promotion decided while a commit builds its
// state, into the gap the commit's plan filled with another node (maxRouteReflectors 1), fails
// the commit; the promotion stands, and the plan computed again keeps one route reflector.
func TestLedgerCompetingPromotionDuringCommitConflicts(t *testing.T) {
	f := newAdmitFixtureSpec(t, 0, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.MinRouteReflectors, s.MaxRouteReflectors = ptr(int32(1)), ptr(int32(1))
	})
	var ans extender.AdmitAnswer
	ok := f.commitHeld(t, []*extender.Node{mkNode("node-0", "zone-a")}, func() { ans = f.join("node-1", "zone-a") })
	require.Equal(t, extender.AdmitRouteReflector, ans.Role, "node-1: %+v", ans)
	require.False(t, ok, "a commit whose plan promoted node-0 kept node-1's promotion too")
	role, known := f.known("node-1")
	assert.True(t, known && role == extender.AdmitRouteReflector, "the promotion is not in the state admissions decide on: %v %v", role, known)
	in2, res2, ok := f.l.Plan(f.pols.Valid(), []*extender.Node{mkNode("node-0", "zone-a")}, f.m, tNow, nil)
	require.True(t, ok, "commit after the promotion")
	require.Len(t, in2.Nodes, 2, "input")
	require.Equal(t, 1, res2.Summary.RouteReflectors, "plan %+v", res2.Summary)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func ptr[T any](v T) *T { return &v }

// TestLedgerAnswersDuringSlowPlan: a plan made slow on purpose (its failure drills wait) holds the
// reconciler; admissions are answered meanwhile, and the plan commits with them.
func TestLedgerAnswersDuringSlowPlan(t *testing.T) {
	f := newAdmitFixture(t, 12)
	inPlan, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.l.Drills = func(extender.Input, *extender.Result) ([]extender.Drill, error) {
		once.Do(func() { close(inPlan) })
		<-release
		return nil, nil
	}
	planned := make(chan bool)
	go func() {
		_, _, ok := f.l.Plan(f.pols.Valid(), f.cache, f.m, tNow, nil)
		planned <- ok
	}()
	within(t, inPlan, "the plan never ran its drills")
	answered := make(chan extender.AdmitAnswer)
	go func() {
		for i := range 10 {
			answered <- f.join(fmt.Sprintf("join-%d", i), fmt.Sprintf("zone-%c", 'a'+i%3))
		}
	}()
	for i := range 10 {
		select {
		case ans := <-answered:
			require.Equal(t, extender.AdmitClient, ans.Role, "join-%d during the plan: %+v", i, ans)
		case <-planned:
			require.FailNow(t, "the plan ended while it was held")
		case <-time.After(time.Minute):
			require.FailNow(t, "an admission waited for the plan")
		}
	}
	close(release)
	require.True(t, within(t, planned, "the plan never ended"), "commit")
	for i := range 10 {
		_, ok := f.known(fmt.Sprintf("join-%d", i))
		assert.True(t, ok, "join-%d: not in the published state", i)
	}
}

// TestLedgerHoldPromotions: while promotions are held, a node that would be promoted is answered
// at once without the role; released, it is promoted.
func TestLedgerHoldPromotions(t *testing.T) {
	f := newAdmitFixture(t, 0)
	release := f.l.HoldPromotions()
	ans := f.join("node-1", "zone-a")
	require.Equal(t, extender.AdmitDecide, ans.Action, "%+v", ans)
	require.NotEqual(t, extender.AdmitRouteReflector, ans.Role, "promoted while promotions are held: %+v", ans)
	release()
	release() // twice is once
	ans = f.join("node-1", "zone-a")
	require.Equal(t, extender.AdmitRouteReflector, ans.Role, "after the hold: %+v", ans)
}

// TestLedgerConcurrentAdmissionsAndCommits (run with -race): admissions and commits interleave
// freely; every admitted node is in the state the last commit published.
func TestLedgerConcurrentAdmissionsAndCommits(t *testing.T) {
	f := newAdmitFixture(t, 12)
	const joiners = 200
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			for i := g; i < joiners; i += 2 {
				ans := f.join(fmt.Sprintf("join-%03d", i), fmt.Sprintf("zone-%c", 'a'+i%3))
				assert.Equal(t, extender.AdmitClient, ans.Role, "join-%03d: %+v", i, ans)
			}
		})
	}
	stop := make(chan struct{})
	commits := make(chan int)
	go func() {
		n := 0
		defer func() { commits <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, _, ok := f.l.Plan(f.pols.Valid(), f.cache, f.m, tNow, nil); ok {
				n++
			}
		}
	}()
	wg.Wait()
	close(stop)
	require.Positive(t, <-commits, "no commit")
	for i := range joiners {
		_, ok := f.known(fmt.Sprintf("join-%03d", i))
		require.True(t, ok, "join-%03d: not in the published state", i)
	}
}

// TestLedgerPlanReadsCalicoAddresses: with the etcd datastore the Kubernetes Nodes carry no Calico
// address; the ledger's plan reads each node's families from CalicoAddresses (the Calico Nodes'
// spec.bgp addresses) as KDD's annotations: in a dual-stack cluster whose oldest nodes are
// IPv4-only, the route reflectors are dual-stack; the cache's nodes are not changed.
func TestLedgerPlanReadsCalicoAddresses(t *testing.T) {
	p := policy.Default("default")
	p.UID, p.Generation = types.UID("uid-default"), 1
	idx := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
	require.NoError(t, idx.Add(p))
	pols := NewPolicies(idx)
	m, _ := pols.Get("default")
	var cache []*extender.Node
	addrs := map[string]extender.CalicoAddresses{}
	for i := range 12 {
		n := mkNode(fmt.Sprintf("node-%02d", i), fmt.Sprintf("zone-%c", 'a'+i%3))
		n.CreationTimestamp.Time = tNow.Add(time.Duration(i-100) * time.Hour) // node-00 the oldest
		cache = append(cache, n)
		a := extender.CalicoAddresses{IPv4: fmt.Sprintf("10.1.0.%d/24", i+1)}
		if i >= 6 {
			a.IPv6 = fmt.Sprintf("fd00::%x/64", i+1)
		}
		addrs[n.Name] = a
	}
	rrs := func(l *Ledger) []string {
		l.SetLeader(true)
		_, res, ok := l.Plan(pols.Valid(), cache, m, tNow, nil)
		require.True(t, ok)
		var out []string
		for _, rr := range res.RouteReflectors {
			out = append(out, rr.Node)
		}
		return out
	}
	assert.Contains(t, rrs(NewLedger(0, func() time.Time { return tNow })), "node-00", "without the addresses: every node IPv4, the oldest taken")
	l := NewLedger(0, func() time.Time { return tNow })
	l.CalicoAddresses = func() map[string]extender.CalicoAddresses { return addrs }
	got := rrs(l)
	require.NotEmpty(t, got)
	for _, rr := range got {
		assert.GreaterOrEqual(t, rr, "node-06", "route reflector %s has no IPv6 address in etcd", rr)
	}
	for _, n := range cache {
		assert.NotContains(t, n.Annotations, extender.AnnotationCalicoIPv4, "the cache's node %s was changed", n.Name)
	}
}

// TestLedgerPromotionOfANodeTheCacheLacks: a node's first update (its Ready status through
// nodes/status) is admitted before the cache holds the node at all (the watch lags its create). A
// promotion decided then is what every later plan and admission must see until the cache shows
// it: the node's absence from the cache is the cache's lag, not a deletion. Seen live
// (TestTwoReplicasBurst, 2026-12-02): the entry was dropped as "the node is gone", and a later
// promotion took the same cluster ID.
func TestLedgerPromotionOfANodeTheCacheLacks(t *testing.T) {
	f := newAdmitFixtureSpec(t, 0, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.Topology = &v1alpha1.Topology{Type: v1alpha1.MultiCluster, ClusterIDs: v1alpha1.PerRouteReflector}
	})
	f.l.Cached = func(string) bool { return false } // the cache holds none of the joining nodes yet
	update := func(name, zone string) extender.AdmitAnswer {
		old := mkNode(name, zone)
		_, ans, _ := f.l.AdmitNode(f.pols, NodeAdmission{Node: mkNode(name, zone), Old: old, Now: tNow})
		return ans
	}
	first := update("late-1", "zone-a")
	require.Equal(t, extender.AdmitRouteReflector, first.Role, "late-1, the cluster's first node: %+v", first)

	nodes, _ := f.l.Overlay(f.cache) // the cache still lacks late-1
	require.Len(t, nodes, 1, "the plan's input shows late-1 as admitted")
	require.Equal(t, first.ClusterID, nodes[0].Annotations[extender.AnnotationClusterID])

	_, _, ok := f.l.Plan(f.pols.Valid(), f.cache, f.m, tNow, nil) // the reconciler plans meanwhile
	require.True(t, ok)
	second := update("late-2", "zone-b")
	require.Equal(t, extender.AdmitRouteReflector, second.Role, "late-2, the first node of zone-b: %+v", second)
	require.NotEqual(t, first.ClusterID, second.ClusterID, "late-2 takes late-1's cluster ID")
}
