package webhook

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

func strp(s string) *string { return &s }

func TestLedgerCommitConflictsWithLaterPromotion(t *testing.T) {
	f := newFixture(t, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, nil)
	f.ledger.SetLeader(true)
	f.commit(t)
	m, _ := f.policies.Get("default")

	// The reconciler reads its input, then a promotion is admitted.
	nodes, seq := f.ledger.Overlay(nil)
	n := mkNode("node-1", "zone-a")
	if a, ok := f.ledger.Admit(m, n, state.Change{Object: state.StripNode(n.DeepCopy()), Create: true}); !ok || a.Role != extender.AdmitRouteReflector {
		t.Fatalf("admit: %+v %v", a, ok)
	}
	in := extender.Input{Policy: m.Resolved, Nodes: nodes, Now: tNow}
	if f.ledger.Commit(1, in, extender.Plan(in), seq) {
		t.Fatal("commit of a plan that missed a promotion succeeded")
	}
	// With decisions blocked, the plan sees the promotion (the created node from the overlay).
	unblock := f.ledger.BlockDecisions()
	nodes, seq = f.ledger.Overlay(nil)
	in.Nodes = nodes
	res := extender.Plan(in)
	ok := f.ledger.Commit(1, in, res, seq)
	unblock()
	if !ok || len(nodes) != 1 || res.Summary.RouteReflectors != 1 || res.RouteReflectors[0].Node != "node-1" {
		t.Fatalf("commit %v, plan %+v", ok, res.Summary)
	}
	// Later decisions count it: zone-b and zone-c nodes are promoted, then a zone-a node is a client.
	b, _ := f.ledger.Admit(m, mkNode("node-2", "zone-b"), state.Change{})
	c, _ := f.ledger.Admit(m, mkNode("node-3", "zone-c"), state.Change{})
	a, _ := f.ledger.Admit(m, mkNode("node-4", "zone-a"), state.Change{})
	if b.ClusterID != "224.0.0.2" || c.ClusterID != "224.0.0.3" || a.Role != extender.AdmitClient || len(a.RouteReflectors) != 3 {
		t.Fatalf("after commit: %+v / %+v / %+v", b, c, a)
	}
}

func TestLedgerDecisionsSurviveCommit(t *testing.T) {
	// Decisions admitted after the plan's input count on top of the committed plan.
	f := newFixture(t, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, nil)
	f.ledger.SetLeader(true)
	m, _ := f.policies.Get("default")
	nodes, seq := f.ledger.Overlay(nil)
	in := extender.Input{Policy: m.Resolved, Nodes: nodes, Now: tNow}
	res := extender.Plan(in)
	if !f.ledger.Commit(1, in, res, seq) {
		t.Fatal("commit")
	}
	for i := range 3 {
		if a, _ := f.ledger.Admit(m, mkNode(fmt.Sprint("node-", i), fmt.Sprintf("zone-%c", 'a'+i)), state.Change{}); a.Role != extender.AdmitRouteReflector {
			t.Fatalf("node %d: %+v", i, a)
		}
	}
	// A commit of a plan computed before them conflicts; computed with them (their changes are
	// only in the ledger, the cache is empty) it carries them.
	if f.ledger.Commit(1, in, res, seq) {
		t.Fatal("stale commit succeeded")
	}
	if a, _ := f.ledger.Admit(m, mkNode("node-9", "zone-a"), state.Change{}); a.Role != extender.AdmitClient || len(a.RouteReflectors) != 3 {
		t.Fatalf("fourth joiner: %+v", a)
	}
}

func TestLedgerNotLeader(t *testing.T) {
	f := newFixture(t, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, nil)
	f.ledger.SetLeader(true)
	f.commit(t)
	f.ledger.SetLeader(false)
	m, _ := f.policies.Get("default")
	if _, ok := f.ledger.Admit(m, mkNode("node-1", "zone-a"), state.Change{}); ok {
		t.Fatal("a non-leader decided")
	}
	// Regaining the lease needs a new commit.
	f.ledger.SetLeader(true)
	if _, ok := f.ledger.Admit(m, mkNode("node-1", "zone-a"), state.Change{}); ok {
		t.Fatal("decided without a committed plan")
	}
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
	f.ledger.Admit(m, n, state.Change{Object: n.DeepCopy(), Create: true})
	cached := n.DeepCopy()
	cached.ResourceVersion = "10"
	ready := cached.DeepCopy()
	ready.Status.Conditions[0].Status = corev1.ConditionTrue
	if a, ok := f.ledger.Admit(m, ready, state.Change{Object: ready.DeepCopy(), BaseRV: "10"}); !ok || a.Role != extender.AdmitRouteReflector {
		t.Fatalf("%+v", a)
	}
	out, _ := f.ledger.Overlay([]*corev1.Node{cached})
	if len(out) != 1 || !extender.IsReady(out[0]) || out[0].Annotations[extender.AnnotationClusterID] == "" {
		t.Fatalf("overlay: %+v", out[0])
	}
	// The node is deleted: its changes go.
	if out, _ = f.ledger.Overlay(nil); len(out) != 0 || f.ledger.Pending() != 0 {
		t.Fatalf("deleted node still overlaid: %d nodes, %d pending", len(out), f.ledger.Pending())
	}
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
		if a, ok := f.ledger.Admit(m, n, state.Change{Object: n.DeepCopy(), Create: true}); ok || !a.Awaited {
			t.Fatalf("%s: %+v %v, want no decision on an awaited node", name, a, ok)
		}
	}
	if f.ledger.Pending() != 2 {
		t.Fatalf("%d entries, want the two awaited joiners", f.ledger.Pending())
	}
	create := func(n *corev1.Node) state.Change { return state.Change{Object: n.DeepCopy(), Create: true} }
	c1 := mkNode("c-1", "zone-c")
	if a, ok := f.ledger.Admit(m, c1, create(c1)); !ok || a.Role != extender.AdmitRouteReflector {
		t.Fatalf("c-1: %+v", a)
	}
	c2 := mkNode("c-2", "zone-c")
	if a, _ := f.ledger.Admit(m, c2, create(c2)); a.Role != extender.AdmitClient {
		t.Fatalf("c-2: %+v, want a client: zones a and b keep their share", a)
	}
	// The reconciler's plan sees the joiners from the overlay and keeps their zones' shares too.
	f.commit(t)
	if a, _ := f.ledger.Admit(m, mkNode("c-3", "zone-c"), state.Change{}); a.Role != extender.AdmitClient {
		t.Fatalf("c-3 after a commit: %+v", a)
	}
	ready := mkNode("a-1", "zone-a", created)
	if a, ok := f.ledger.Admit(m, ready, state.Change{}); !ok || a.Role != extender.AdmitRouteReflector {
		t.Fatalf("a-1 Ready: %+v, want promoted", a)
	}
}
