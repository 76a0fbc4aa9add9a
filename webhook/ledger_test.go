package webhook

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

func strp(s string) *string { return &s }

// TestLedgerCommitReplaysLaterPromotion: a promotion admitted after the plan's input was read, into
// a gap the plan left, stands in the committed state (the plan is not computed again), and the next
// plan, which sees it, keeps it.
func TestLedgerCommitReplaysLaterPromotion(t *testing.T) {
	f := newFixture(t, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, nil)
	f.ledger.SetLeader(true)
	f.commit(t)
	m, _ := f.policies.Get("default")

	// The reconciler reads its input, then a promotion is admitted.
	nodes, seq := f.ledger.Overlay(nil)
	n := mkNode("node-1", "zone-a")
	first, admitted := f.admit(m, n, state.Change{Object: state.StripNode(n.DeepCopy()), Create: true})
	require.True(t, admitted, "admit: %+v", first)
	require.Equal(t, extender.AdmitRouteReflector, first.Role, "admit: %+v", first)
	in := extender.Input{Policy: m.Resolved, Nodes: nodes, Now: tNow}
	require.True(t, f.ledger.Commit(1, in, extender.Plan(in), seq), "commit of a plan that left the promotion's gap")
	// Later decisions count it: zone-b and zone-c nodes are promoted, then a zone-a node is a client.
	b, _ := f.admit(m, mkNode("node-2", "zone-b"), state.Change{})
	c, _ := f.admit(m, mkNode("node-3", "zone-c"), state.Change{})
	a, _ := f.admit(m, mkNode("node-4", "zone-a"), state.Change{})
	assert.Equal(t, "224.0.0.2", b.ClusterID, "after commit, node-2: %+v", b)
	assert.Equal(t, "224.0.0.3", c.ClusterID, "after commit, node-3: %+v", c)
	assert.Equal(t, extender.AdmitClient, a.Role, "after commit, node-4: %+v", a)
	assert.Len(t, a.RouteReflectors, 3, "after commit, node-4: %+v", a)
	// The next plan sees the promotion (the created node from the overlay) and keeps it.
	nodes, seq = f.ledger.Overlay(nil)
	in.Nodes = nodes
	res := extender.Plan(in)
	require.True(t, f.ledger.Commit(1, in, res, seq), "commit, plan %+v", res.Summary)
	require.Len(t, nodes, 1, "overlay nodes (the others were admitted without an object)")
	require.Equal(t, 1, res.Summary.RouteReflectors, "plan %+v", res.Summary)
	require.Equal(t, "node-1", res.RouteReflectors[0].Node, "plan %+v", res.Summary)
}

func TestLedgerDecisionsSurviveCommit(t *testing.T) {
	// Decisions admitted after the plan's input count on top of the committed plan.
	f := newFixture(t, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, nil)
	f.ledger.SetLeader(true)
	m, _ := f.policies.Get("default")
	nodes, seq := f.ledger.Overlay(nil)
	in := extender.Input{Policy: m.Resolved, Nodes: nodes, Now: tNow}
	res := extender.Plan(in)
	require.True(t, f.ledger.Commit(1, in, res, seq), "commit")
	for i := range 3 {
		a, _ := f.admit(m, mkNode(fmt.Sprint("node-", i), fmt.Sprintf("zone-%c", 'a'+i)), state.Change{})
		require.Equal(t, extender.AdmitRouteReflector, a.Role, "node %d: %+v", i, a)
	}
	// A commit of a plan computed before them conflicts; computed with them (their changes are
	// only in the ledger, the cache is empty) it carries them.
	require.False(t, f.ledger.Commit(1, in, res, seq), "stale commit succeeded")
	a, _ := f.admit(m, mkNode("node-9", "zone-a"), state.Change{})
	assert.Equal(t, extender.AdmitClient, a.Role, "fourth joiner: %+v", a)
	assert.Len(t, a.RouteReflectors, 3, "fourth joiner: %+v", a)
}

func TestLedgerNotLeader(t *testing.T) {
	f := newFixture(t, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, nil)
	f.ledger.SetLeader(true)
	f.commit(t)
	f.ledger.SetLeader(false)
	m, _ := f.policies.Get("default")
	_, ok := f.admit(m, mkNode("node-1", "zone-a"), state.Change{})
	require.False(t, ok, "a non-leader decided")
	// Regaining the lease needs a new commit.
	f.ledger.SetLeader(true)
	_, ok = f.admit(m, mkNode("node-1", "zone-a"), state.Change{})
	require.False(t, ok, "decided without a committed plan")
}

func TestLedgerOverlayShowsAdmittedFacts(t *testing.T) {
	// A node created NotReady, then promoted when Ready arrived through nodes/status: until the
	// cache shows the Ready version, the planner sees the admitted one (Ready, with its role), not
	// the cached NotReady one with a role pasted on (which it would drain).
	f := newFixture(t, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, nil)
	f.ledger.SetLeader(true)
	f.commit(t)
	m, _ := f.policies.Get("default")
	n := mkNode("node-1", "zone-a", notReady)
	n.ResourceVersion = ""
	f.admit(m, n, state.Change{Object: extender.FromNode(n.DeepCopy()), Create: true})
	cached := n.DeepCopy()
	cached.ResourceVersion = "10"
	ready := cached.DeepCopy()
	ready.Status.Conditions[0].Status = corev1.ConditionTrue
	a, ok := f.admit(m, ready, state.Change{Object: extender.FromNode(ready.DeepCopy()), BaseRV: "10"})
	require.True(t, ok, "%+v", a)
	require.Equal(t, extender.AdmitRouteReflector, a.Role, "%+v", a)
	out, _ := f.ledger.Overlay([]*extender.Node{extender.FromNode(cached)})
	require.Len(t, out, 1, "overlay")
	require.True(t, extender.IsReady(out[0]), "overlay: %+v", out[0])
	require.NotEmpty(t, out[0].Annotations[extender.AnnotationClusterID], "overlay: %+v", out[0])
	// The node is deleted: its changes go.
	out, _ = f.ledger.Overlay(nil)
	assert.Empty(t, out, "deleted node still overlaid")
	assert.Equal(t, 0, f.ledger.Pending(), "deleted node still overlaid: pending")
}

func TestLedgerCountsAwaitedJoiners(t *testing.T) {
	// Nodes of zones a and b are created NotReady (no role yet: nobody to peer with), then zone-c
	// nodes turn Ready first. Zone-c is promoted up to its share only: the joiners of a and b are
	// recorded (and shown to the planner) though their admissions changed nothing.
	f := newFixture(t, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, nil)
	f.ledger.SetLeader(true)
	f.commit(t)
	m, _ := f.policies.Get("default")
	created := func(n *corev1.Node) { n.CreationTimestamp = metav1.NewTime(tNow.Add(-10 * time.Second)) }
	for _, name := range []string{"a-1", "b-1"} {
		n := mkNode(name, "zone-"+name[:1], notReady, created)
		n.ResourceVersion = ""
		a, ok := f.admit(m, n, state.Change{Object: extender.FromNode(n.DeepCopy()), Create: true})
		require.False(t, ok, "%s: %+v, want no decision on an awaited node", name, a)
		require.True(t, a.Awaited, "%s: %+v, want no decision on an awaited node", name, a)
	}
	require.Equal(t, 2, f.ledger.Pending(), "entries, want the two awaited joiners")
	create := func(n *corev1.Node) state.Change {
		return state.Change{Object: extender.FromNode(n.DeepCopy()), Create: true}
	}
	c1 := mkNode("c-1", "zone-c")
	a, ok := f.admit(m, c1, create(c1))
	require.True(t, ok, "c-1: %+v", a)
	require.Equal(t, extender.AdmitRouteReflector, a.Role, "c-1: %+v", a)
	c2 := mkNode("c-2", "zone-c")
	a, _ = f.admit(m, c2, create(c2))
	require.Equal(t, extender.AdmitClient, a.Role, "c-2: %+v, want a client: zones a and b keep their share", a)
	// The reconciler's plan sees the joiners from the overlay and keeps their zones' shares too.
	f.commit(t)
	a, _ = f.admit(m, mkNode("c-3", "zone-c"), state.Change{})
	require.Equal(t, extender.AdmitClient, a.Role, "c-3 after a commit: %+v", a)
	ready := mkNode("a-1", "zone-a", created)
	a, ok = f.admit(m, ready, state.Change{})
	require.True(t, ok, "a-1 Ready: %+v, want promoted", a)
	require.Equal(t, extender.AdmitRouteReflector, a.Role, "a-1 Ready: %+v, want promoted", a)
}
