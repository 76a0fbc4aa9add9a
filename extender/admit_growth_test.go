package extender_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// growth is a DualPlane cluster growing as kubelets register: each node is created NotReady and
// readied, each step admitted on the shared state as the node webhooks admit it, and every batch
// joins the reconciler plans the whole cluster. It records which of the two last changed each
// node's role label (the route reflector label, or the client's peering set).
type growth struct {
	t      *testing.T
	p      *policy.Resolved
	nodes  []*extender.Node
	byName map[string]*extender.Node
	st     *extender.AdmitState
	now    time.Time
	setBy  map[string]string // node -> "admission" or "plan"
	plans  int
}

func roleLabel(p *policy.Resolved, n *extender.Node) string {
	if p.IsRouteReflectorLabel(n.Labels) {
		return "rr"
	}
	return n.Labels[extender.LabelPeeringSet]
}

func (g *growth) replan() {
	in := extender.Input{Policy: g.p, Nodes: g.nodes, Now: g.now}
	res := extender.Plan(in)
	for _, s := range res.Nodes {
		n := g.byName[s.Name]
		before := roleLabel(g.p, n)
		applyState(g.p, n, s)
		if after := roleLabel(g.p, n); after != before && after != "" {
			g.setBy[n.Name] = "plan"
		}
	}
	g.st = extender.NewAdmitState(in, res)
	g.plans++
}

func (g *growth) admit(n *extender.Node) {
	g.st.Now = g.now
	a := g.st.Admit(n)
	before := roleLabel(g.p, n)
	if a.Role != extender.AdmitNone {
		applyState(g.p, n, a.State(g.p))
	}
	if after := roleLabel(g.p, n); after != before && after != "" {
		g.setBy[n.Name] = "admission"
	}
	g.st.Record(&a)
}

// join registers node i of zone: created NotReady, then Ready.
func (g *growth) join(i int, zone string) {
	n := g.register(i, zone)
	g.admit(n)
	g.readied(n, i, zone)
	g.admit(n)
}

// register adds node i of zone, NotReady and created a second after the last node, to the
// cluster; the caller admits it.
func (g *growth) register(i int, zone string) *extender.Node {
	g.now = g.now.Add(time.Second)
	n := admitNode(i, zone, false)
	n.CreationTimestamp.Time = g.now
	g.byName[n.Name] = n
	g.nodes = append(g.nodes, n)
	return n
}

// readied makes n, node i of zone, Ready (its kubelet's first status), keeping its creation time,
// labels and annotations; the caller admits it.
func (g *growth) readied(n *extender.Node, i int, zone string) {
	ready := admitNode(i, zone, true)
	ready.CreationTimestamp = n.CreationTimestamp
	ready.Labels, ready.Annotations = n.Labels, n.Annotations
	*n = *ready
}

// TestAdmitDualPlaneGrowthLabelsByAdmission: a default-policy cluster of 3,000 nodes joins as make
// load joins it (a plan every 150 joins): 95% or more of the role labels are the ones admission
// set, route reflectors included; the plans only repair. What the plans label: in one zone, the
// nodes that join after the one rack is full and before the plan that splits it (they wait in the
// zone's first rack, which the split leaves full: the plan moves them to the second); with the
// peering sets named after their route reflectors (before RackSetName), 80% in 3 zones.
func TestAdmitDualPlaneGrowthLabelsByAdmission(t *testing.T) {
	for _, tt := range []struct{ nodes, zones, batch int }{{3000, 3, 150}, {3000, 1, 150}, {3000, 5, 150}} {
		t.Run(fmt.Sprintf("%d nodes in %d zones", tt.nodes, tt.zones), func(t *testing.T) {
			g := &growth{t: t, p: policy.MustResolve(policy.Default("default")), byName: map[string]*extender.Node{},
				now: admitT0, setBy: map[string]string{}}
			g.replan()
			for i := range tt.nodes {
				g.join(i, fmt.Sprintf("zone-%c", 'a'+i%tt.zones))
				if i%tt.batch == tt.batch-1 {
					g.replan()
				}
			}
			for range 3 {
				g.now = g.now.Add(time.Minute)
				g.replan()
			}
			counts := map[string]int{}
			byPlan := map[string]int{} // rack annotation -> nodes the plans labelled
			for _, n := range g.nodes {
				if roleLabel(g.p, n) == "" {
					t.Fatalf("%s has no role", n.Name)
				}
				counts[g.setBy[n.Name]]++
				if g.setBy[n.Name] == "plan" {
					byPlan[n.Annotations[extender.AnnotationRack]]++
				}
			}
			frac := float64(counts["admission"]) / float64(len(g.nodes))
			t.Logf("role labels by admission %.1f%% (%v; labelled by plans, by rack: %v) over %d plans", 100*frac, counts, byPlan, g.plans)
			if frac < 0.95 {
				t.Errorf("%.1f%% of the role labels set by admission, want 95%% or more", 100*frac)
			}
		})
	}
}
