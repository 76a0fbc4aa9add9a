package extender

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// TestProtectionAnnotations: route reflectors carry karpenter.sh/do-not-disrupt and
// cluster-autoscaler.kubernetes.io/scale-down-disabled while they are route reflectors (draining
// ones too) and lose them after their demotion; a node's own annotation, on a client or on a node
// promoted later, is never the product's (not listed in routereflector.io/protection, never
// removed); protectRouteReflectors: false sets none and removes those the product set. The
// protection does not hold the product's own handover back (TestGoingDrainsLikeACordon drains
// protected route reflectors).
func TestProtectionAnnotations(t *testing.T) {
	dnd, sdd := policy.AnnotationDoNotDisrupt, policy.AnnotationScaleDownOff
	now := t0.Add(24 * time.Hour)
	state := func(r *Result, name string) NodeState {
		for _, s := range r.Nodes {
			if s.Name == name {
				return s
			}
		}
		t.Fatalf("no state for %s", name)
		return NodeState{}
	}
	byName := func(nodes []*Node, name string) *Node {
		for _, n := range nodes {
			if n.Name == name {
				return n
			}
		}
		return nil
	}
	p := resolve(t, v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{Type: v1alpha1.DualPlane}})

	t.Run("route reflectors only, clients' own kept", func(t *testing.T) {
		nodes := cluster(30, 3)
		client := nodes[29]
		with(client, annot(dnd, "true"))
		r := Plan(Input{Policy: p, Nodes: nodes, Now: now})
		require.NotEmpty(t, r.RouteReflectors)
		for _, rr := range r.RouteReflectors {
			a := state(r, rr.Node).Annotations
			assert.Equal(t, "true", a[dnd], rr.Node)
			assert.Equal(t, "true", a[sdd], rr.Node)
			assert.Equal(t, dnd+","+sdd, a[AnnotationProtection], rr.Node)
		}
		for _, c := range r.Clients {
			a := state(r, c.Node).Annotations
			assert.NotContains(t, a, dnd, c.Node)
			assert.NotContains(t, a, AnnotationProtection, c.Node)
		}
		_, ann := OwnedChanges(p.RRLabelKey, client, state(r, client.Name))
		assert.NotContains(t, ann, dnd, "the client's own do-not-disrupt is not the product's")
	})

	t.Run("a node's own annotation survives its role", func(t *testing.T) {
		nodes := cluster(30, 3)
		first := Plan(Input{Policy: p, Nodes: nodes, Now: now})
		victim := byName(nodes, first.RouteReflectors[0].Node)
		with(victim, annot(dnd, "true")) // the owner's, before the product makes it a route reflector
		first = Plan(Input{Policy: p, Nodes: nodes, Now: now})
		a := state(first, victim.Name).Annotations
		assert.Equal(t, sdd, a[AnnotationProtection], "only what the product sets is listed")
		assert.Equal(t, "true", a[sdd])
		apply(p, nodes, first)
		require.Equal(t, "true", victim.Annotations[dnd])

		// Cordoned: it drains (protected still), then loses its role after removalDelay.
		with(victim, cordoned)
		mid := Plan(Input{Policy: p, Nodes: nodes, Now: now})
		require.True(t, rrNames(mid)[victim.Name].Draining)
		assert.Equal(t, "true", state(mid, victim.Name).Annotations[sdd], "protected while it still serves")
		apply(p, nodes, mid)
		last := Plan(Input{Policy: p, Nodes: nodes, Now: now.Add(p.RemovalDelay + time.Minute)})
		require.NotContains(t, rrNames(last), victim.Name, "demoted")
		_, ann := OwnedChanges(p.RRLabelKey, victim, state(last, victim.Name))
		require.Contains(t, ann, sdd)
		assert.Nil(t, ann[sdd], "the product's scale-down-disabled goes")
		assert.Nil(t, ann[AnnotationProtection])
		assert.NotContains(t, ann, dnd, "the owner's do-not-disrupt stays")
		apply(p, nodes, last)
		assert.Equal(t, "true", victim.Annotations[dnd])
		assert.NotContains(t, victim.Annotations, sdd)
	})

	t.Run("protectRouteReflectors false", func(t *testing.T) {
		off := false
		q := resolve(t, v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{Type: v1alpha1.DualPlane}, ProtectRouteReflectors: &off})
		nodes := cluster(30, 3)
		r := Plan(Input{Policy: p, Nodes: nodes, Now: now})
		apply(p, nodes, r)
		rr := byName(nodes, r.RouteReflectors[0].Node)
		require.Equal(t, "true", rr.Annotations[dnd])
		r = Plan(Input{Policy: q, Nodes: nodes, Now: now})
		assert.NotContains(t, state(r, rr.Name).Annotations, dnd)
		_, ann := OwnedChanges(q.RRLabelKey, rr, state(r, rr.Name))
		assert.Equal(t, map[string]*string{dnd: nil, sdd: nil, AnnotationProtection: nil}, ann, "the product's protection goes")
	})
}
