package extender

import (
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"

	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

var (
	churnEvents = flag.Int("churn.events", 500, "events per topology in TestChurn (TestChurnLarge runs 3000; the long run uses 100000)")
	churnNodes  = flag.Int("churn.nodes", 600, "largest cluster in TestChurn (the long run uses 5000)")
	churnCheck  = flag.Int("churn.check-every", 1, "check the full invariants every N events (the route check is quadratic in the worst case)")
)

// churnStats counts, per event kind, the events and what they cost.
type churnStats struct {
	events, roleChanges, peerWrites, clientMoves, unexpected int
}

// TestChurn replays random traces of joins, deletions, cordons, uncordons, NotReady flips, label
// changes, policy edits, zone outages and recoveries, zone relabels and deletions and cordons of
// spine members through the planner (with the graph model's drills, as the leader plans), applying
// each plan as the reconciler does, and checks the invariants after every event, and that no
// failure drill fails where a fresh plan of the same nodes passes. It reports the role changes and BGPPeer writes per
// event kind, and fails when a client-only event that leaves the desired count alone changes a
// role, or when a lost route reflector costs more than one promotion.
func TestChurn(t *testing.T) { churnAll(t, *churnEvents) }

// TestChurnLarge is TestChurn with 3,000 events per topology (make test-all): six times the
// history, the same invariants; make test's 500 per topology (2,500 in all, about 40 s of CPU on
// two cores where 1,000 took 80) already reach every event kind many times.
func TestChurnLarge(t *testing.T) {
	testenv.SlowProof(t)
	churnAll(t, 6*(*churnEvents))
}

func churnAll(t *testing.T, events int) {
	for _, top := range []*v1alpha1.Topology{nil, perRR, single, hier, dual} {
		name := "MultiCluster-Grouped"
		if top != nil {
			name = string(top.Type) + string(top.ClusterIDs)
		}
		t.Run(name, func(t *testing.T) {
			runChurn(t, top, events, *churnNodes, uint64(len(name)))
		})
	}
}

func runChurn(t *testing.T, top *v1alpha1.Topology, events, maxNodes int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 42))
	spec := v1alpha1.RouteReflectorPolicySpec{
		Topology:              top,
		RemovalDelay:          &metav1.Duration{Duration: time.Minute},
		ForbiddenNodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"no-rr": "true"}},
		PreferredNodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"rr": "preferred"}},
		Behavior:              &v1alpha1.Behavior{ScaleDown: &v1alpha1.ScaleDown{StabilizationWindowSeconds: i32(120)}},
	}
	if top == hier {
		spec.MaxRouteReflectors = i32(200)
		spec.Topology = &v1alpha1.Topology{Type: v1alpha1.Hierarchical, MaxRackSize: i32(100)}
	}
	if top == dual {
		spec.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: i32(100)}
	}
	p := resolve(t, spec)
	nodes := cluster(maxNodes/2, 3)
	now := t0.Add(240 * time.Hour)
	next := len(nodes) + 1
	r := Plan(Input{Policy: p, Nodes: nodes, Now: now})
	apply(p, nodes, r)
	recs := r.Recommendations
	stats := map[string]*churnStats{}
	missing := 0 // events after which the graph model found missing node pairs
	unsafe := 0  // events after which a drill failed that a fresh plan survives
	var unsafeSince time.Time
	transitionRisk := 0 // events whose one-step change puts pairs of nodes keeping their role at risk
	idChanges := 0      // Hierarchical: route reflectors kept in place whose ID a drill-driven handover changed
	for ev := 0; ev < events; ev++ {
		now = now.Add(time.Duration(rng.IntN(30)+1) * time.Second)
		kind, target, isRR := churnEvent(rng, p, &nodes, &next, maxNodes, now)
		if kind == "policy edit" {
			spec2 := spec
			spec2.MinRouteReflectors = i32(int32(rng.IntN(4) + 2))
			p = resolve(t, spec2)
		}
		prev := r
		r = Plan(Input{Policy: p, Nodes: nodes, Now: now, Recommendations: recs, Drills: PlanDrills})
		// No route reflector that keeps its role changes its cluster ID. Hierarchical's
		// drill-driven handovers still re-plan a route reflector the fresh plan puts in the spine
		// without its role, and it may come back to its rack with a new ID: counted and logged
		// there (the transitions issue's closing note), asserted for the other topologies.
		if bad := clusterIDChanges(prev, r); len(bad) > 0 {
			if top == hier {
				idChanges += len(bad)
			} else {
				assert.Fail(t, fmt.Sprintf("event %d (%s %s): %s", ev, kind, target, strings.Join(bad[:min(3, len(bad))], "\n")))
			}
		}
		// The moment between the two plans: applied make-before-break (added sessions first,
		// removed ones last), the change misses no pair between two nodes that keep their role
		// while sessions restart (nodes not Ready are down). Counted and logged, not asserted yet:
		// DualPlane has 1 such event in the 3,000 (a deletion that re-racks the cluster).
		if ModelTransition != nil {
			if bad := ModelTransition(Input{Policy: p, Nodes: nodes}, prev, r); len(bad) > 0 {
				if transitionRisk == 0 {
					t.Logf("first transition with pairs of nodes keeping their role at risk: event %d (%s %s): %s", ev, kind, target, bad[0])
				}
				transitionRisk++
			}
		}
		if ev%*churnCheck == 0 {
			if bad := checkInvariants(p, nodes, r); len(bad) > 0 {
				require.Fail(t, fmt.Sprintf("event %d (%s %s): %s", ev, kind, target, strings.Join(bad[:min(3, len(bad))], "\n")))
			}
			// The failure drills: none fails where a fresh plan of the same nodes passes, once a
			// handover that began for failure safety has had removalDelay (and a minute of events)
			// to complete.
			if failed := FailedDrills(r.Drills); len(failed) > 0 {
				fin := Input{Policy: p, Nodes: withoutRoles(Input{Policy: p, Nodes: nodes}, nil), Now: now}
				fd, err := PlanDrills(fin, Plan(fin))
				require.NoError(t, err)
				if len(FailedDrills(fd)) == 0 {
					if unsafeSince.IsZero() {
						unsafeSince = now
					}
					if now.Sub(unsafeSince) > p.RemovalDelay+time.Minute {
						unsafe++
						// Promised for the default layout (DualPlane); the other topologies report
						// the count in the log (see the layout-life issue's closing note).
						if top == dual {
							assert.Fail(t, fmt.Sprintf("event %d (%s %s): %s since %s, which a fresh plan of the same nodes survives", ev, kind, target, failed[0], unsafeSince))
						}
					}
				} else {
					unsafeSince = time.Time{}
				}
			} else {
				unsafeSince = time.Time{}
			}
			// The graph model on the cluster as this plan leaves it (draining route reflectors
			// included): every node learns every other node's routes.
			if ModelDrills != nil {
				if bad := ModelDrills(Input{Policy: p, Nodes: nodes}, r, false); len(bad) > 0 {
					missing++
					assert.Fail(t, fmt.Sprintf("event %d (%s %s): %s", ev, kind, target, bad[0]))
				}
			}
		}
		roles, writes, moves := planDiff(prev, r)
		if isRR {
			kind += " (route reflector)"
		}
		st := stats[kind]
		if st == nil {
			st = &churnStats{}
			stats[kind] = st
		}
		st.events++
		st.roleChanges += roles
		st.peerWrites += writes
		st.clientMoves += moves
		// A promotion that fills a shortfall of the previous plan (a new DualPlane rack gets its
		// route reflectors from the nodes that join it) is expected.
		// So is a handover for failure safety (HandedOver), a zone's share coming back as its
		// nodes return from an outage (the desired count per zone changes), and a change the
		// previous plan said the clock alone would make (RecheckAt: a NotReady grace ended).
		short := prev.Summary.RouteReflectors < prev.Summary.DesiredRouteReflectors
		clock := !prev.RecheckAt.IsZero() && !now.Before(prev.RecheckAt)
		sameDesired := prev.Summary.DesiredRouteReflectors == r.Summary.DesiredRouteReflectors && !short && r.HandedOver == nil &&
			slices.Equal(zoneDesired(prev), zoneDesired(r)) && !clock
		if !isRR && sameDesired && kind != "policy edit" && promotions(prev, r) > 0 {
			st.unexpected++
			assert.Fail(t, fmt.Sprintf("event %d: %s of client %s promoted %d route reflectors with the desired count unchanged", ev, kind, target, promotions(prev, r)))
		}
		if isRR && sameDesired && promotions(prev, r) > 1 {
			st.unexpected++
			assert.Fail(t, fmt.Sprintf("event %d: %s of route reflector %s promoted %d route reflectors", ev, kind, target, promotions(prev, r)))
		}
		apply(p, nodes, r)
		recs = r.Recommendations
	}
	kinds := make([]string, 0, len(stats))
	for k := range stats {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var b strings.Builder
	fmt.Fprintf(&b, "%d events, up to %d nodes, %d at the end, %d route reflectors, %d events with missing node pairs in the graph model, %d with a failing drill a fresh plan survives, %d cluster-ID changes of kept route reflectors (Hierarchical), %d transitions with pairs of nodes keeping their role at risk\n", events, maxNodes, len(nodes), r.Summary.RouteReflectors, missing, unsafe, idChanges, transitionRisk)
	fmt.Fprintf(&b, "%-34s %7s %14s %16s %14s\n", "event", "count", "roles/event", "BGPPeers/event", "moves/event")
	for _, k := range kinds {
		s := stats[k]
		fmt.Fprintf(&b, "%-34s %7d %14.3f %16.3f %14.2f\n", k, s.events, float64(s.roleChanges)/float64(s.events), float64(s.peerWrites)/float64(s.events), float64(s.clientMoves)/float64(s.events))
	}
	t.Log("\n" + b.String())
}

// churnEvent applies one random event to the cluster and says what it was.
func churnEvent(rng *rand.Rand, p *policy.Resolved, nodes *[]*Node, next *int, maxNodes int, now time.Time) (kind, target string, isRR bool) {
	ns := *nodes
	pick := func() *Node { return ns[rng.IntN(len(ns))] }
	isRRNode := func(n *Node) bool { _, ok := n.Annotations[AnnotationClusterID]; return ok }
	switch k := rng.IntN(100); {
	case k < 20 && len(ns) < maxNodes:
		n := node(fmt.Sprintf("node-%05d", *next), fmt.Sprintf("zone-%c", 'a'+rng.IntN(3)), int(now.Sub(t0).Minutes()))
		*next++
		*nodes = append(ns, n)
		return "join", n.Name, false
	case k < 35 && len(ns) > 10:
		n := pick()
		*nodes = slices.DeleteFunc(ns, func(x *Node) bool { return x == n })
		return "delete", n.Name, isRRNode(n)
	case k < 50:
		n := pick()
		rr := isRRNode(n)
		n.Spec.Unschedulable = !n.Spec.Unschedulable
		if n.Spec.Unschedulable {
			return "cordon", n.Name, rr
		}
		return "uncordon", n.Name, rr
	case k < 65:
		n := pick()
		rr := isRRNode(n)
		if IsReady(n) {
			with(n, notReady)
			return "NotReady", n.Name, rr
		}
		n.Status.Conditions[0].Status = corev1.ConditionTrue
		return "Ready", n.Name, rr
	case k < 75:
		n := pick()
		rr := isRRNode(n)
		if n.Labels["no-rr"] == "true" {
			delete(n.Labels, "no-rr")
			return "unforbid", n.Name, rr
		}
		n.Labels["no-rr"] = "true"
		return "forbid", n.Name, rr
	case k < 85:
		n := pick()
		rr := isRRNode(n)
		n.Labels["team"] = fmt.Sprint(rng.IntN(5))
		return "unrelated label", n.Name, rr
	case k < 87:
		return "policy edit", "", false
	case k < 89:
		z := fmt.Sprintf("zone-%c", 'a'+rng.IntN(3))
		for _, n := range zoneNodes(ns, z) {
			setReady(n, false, now)
		}
		return "zone outage", z, false
	case k < 91:
		z := fmt.Sprintf("zone-%c", 'a'+rng.IntN(3))
		for _, n := range zoneNodes(ns, z) {
			if !IsReady(n) {
				setReady(n, true, now)
			}
		}
		return "zone recovery", z, false
	case k < 92:
		n := pick()
		n.Labels[corev1.LabelTopologyZone] = fmt.Sprintf("zone-%c", 'a'+rng.IntN(3))
		return "zone relabel", n.Name, isRRNode(n)
	case k < 94:
		// A spine member (the holder of the policy's first cluster ID), else any route reflector.
		var rrs []*Node
		for _, n := range ns {
			if isRRNode(n) && n.Annotations[AnnotationClusterID] == policy.ClusterIDString(p.BaseClusterID) {
				rrs = append(rrs, n)
			}
		}
		if len(rrs) == 0 {
			for _, n := range ns {
				if isRRNode(n) {
					rrs = append(rrs, n)
				}
			}
		}
		if len(rrs) == 0 || len(ns) <= 10 {
			return "time passes", "", false
		}
		n := rrs[rng.IntN(len(rrs))]
		if rng.IntN(2) == 0 {
			*nodes = slices.DeleteFunc(ns, func(x *Node) bool { return x == n })
			return "delete spine member", n.Name, true
		}
		n.Spec.Unschedulable = true
		return "cordon spine member", n.Name, true
	default:
		return "time passes", "", false
	}
}

// planDiff counts the role changes (promotions, and demotions of nodes that stay), the BGPPeers created, changed or
// deleted, and the clients whose route reflectors changed between two plans.
func planDiff(a, b *Result) (roles, peerWrites, moves int) {
	ra, rb := rrNames(a), rrNames(b)
	present := map[string]bool{}
	for _, s := range b.Nodes {
		present[s.Name] = true
	}
	for name := range ra {
		if _, ok := rb[name]; !ok && present[name] { // a deleted node is no demotion
			roles++
		}
	}
	for name := range rb {
		if _, ok := ra[name]; !ok {
			roles++
		}
	}
	pa := map[string]string{}
	for _, x := range a.BGPPeers {
		pa[x.Name] = x.Spec.NodeSelector + "|" + x.Spec.PeerSelector
	}
	pb := map[string]bool{}
	for _, x := range b.BGPPeers {
		pb[x.Name] = true
		if old, ok := pa[x.Name]; !ok || old != x.Spec.NodeSelector+"|"+x.Spec.PeerSelector {
			peerWrites++
		}
	}
	for name := range pa {
		if !pb[name] {
			peerWrites++
		}
	}
	ca := clientRRs(a)
	for _, c := range b.Clients {
		if old, ok := ca[c.Node]; ok && !slices.Equal(old, c.RouteReflectors) {
			moves++
		}
	}
	return roles, peerWrites, moves
}

// zoneDesired lists each zone's desired route reflectors.
func zoneDesired(r *Result) []string {
	var out []string
	for _, z := range r.Zones {
		out = append(out, fmt.Sprintf("%s=%d", z.Zone, z.Desired))
	}
	return out
}

// promotions counts the route reflectors of b that a does not have; a standby for a NotReady
// spine member is not counted (it is the promised answer to the member's state, not a choice).
func promotions(a, b *Result) int {
	ra := rrNames(a)
	n := 0
	for name, rr := range rrNames(b) {
		if _, ok := ra[name]; !ok && rr.StandbyFor == "" {
			n++
		}
	}
	return n
}
