package reconciler

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// ChangeKind is a kind of role change: the label of the role_changes_total metric and, through
// Reason, the reason of the Events on the node and the policy.
type ChangeKind string

// The role changes.
const (
	KindPromoted ChangeKind = "Promoted"
	KindDraining ChangeKind = "Draining"
	KindDemoted  ChangeKind = "Demoted"
	// KindClusterIDChanged: a route reflector's cluster ID was rewritten, most often a duplicate
	// repaired.
	KindClusterIDChanged ChangeKind = "ClusterIDChanged"
)

// Event reasons on nodes, one per ChangeKind.
const (
	EventPromoted         = "RouteReflectorPromoted"
	EventDraining         = "RouteReflectorDraining"
	EventDemoted          = "RouteReflectorDemoted"
	EventClusterIDChanged = "RouteReflectorClusterIDChanged"
)

// Reason is the Event reason of a role change of kind k.
func (k ChangeKind) Reason() string {
	switch k {
	case KindPromoted:
		return EventPromoted
	case KindDraining:
		return EventDraining
	case KindDemoted:
		return EventDemoted
	case KindClusterIDChanged:
		return EventClusterIDChanged
	}
	return string(k)
}

// events records an Event on the node and on the policy for every role change of this reconcile
// ("Promoted to route reflector: zone zone-b below desired 4", "Demoted: cordoned; clients moved
// to node-12"), and counts them. Promotions the mutating webhook admitted are reported when the
// plan first holds them, before this reconcile's own changes: also when the plan drains such a
// route reflector at once (an admission promoted it on a later count of the nodes than the plan's),
// so that every Draining has its Promoted.
func (r *Reconciler) events(_ context.Context, st *State) error {
	done := map[string]bool{}
	for _, c := range st.Changes {
		done[string(c.Kind)+"/"+c.Node] = true
	}
	// Role changes the webhook admitted show up as differences from the previous plan.
	var admitted []RoleChange
	if st.Previous != nil {
		was := map[string]bool{}
		wasDraining := map[string]bool{}
		for _, rr := range st.Previous.RouteReflectors {
			was[rr.Node] = true
			wasDraining[rr.Node] = rr.Draining
		}
		for _, rr := range st.Result.RouteReflectors {
			n := st.View[rr.Node]
			switch {
			case n == nil:
			case !was[rr.Node] && !done[string(KindPromoted)+"/"+rr.Node]:
				if !rr.Draining {
					admitted = append(admitted, *promoted(st, n, " (at admission)"))
					break
				}
				// The plan does not want it: its reason for a promotion would not be the admission's.
				admitted = append(admitted, RoleChange{Node: rr.Node, Kind: KindPromoted, Message: "Promoted to route reflector (at admission)"})
				if !done[string(KindDraining)+"/"+rr.Node] {
					admitted = append(admitted, *draining(st, rr.Node))
				}
			case rr.Draining && !wasDraining[rr.Node] && !done[string(KindDraining)+"/"+rr.Node]:
				admitted = append(admitted, *draining(st, rr.Node))
			}
		}
	}
	st.Changes = append(admitted, st.Changes...)
	for _, c := range st.Changes {
		reason := c.Kind.Reason()
		r.Recorder.Event(nodeRef(c.Node, st.View[c.Node]), corev1.EventTypeNormal, reason, c.Message)
		r.Recorder.Eventf(st.Policy, corev1.EventTypeNormal, reason, "%s: %s", c.Node, c.Message)
		roleChanges.WithLabelValues(st.Name, string(c.Kind)).Inc()
	}
	return nil
}

// nodeRef is the reference of an Event on node name; n, the node as the reconcile sees it (nil
// when it does not), gives its UID.
func nodeRef(name string, n *extender.Node) *corev1.ObjectReference {
	ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: name}
	if n != nil {
		ref.UID = n.UID
	}
	return ref
}

// promoted: "Promoted to route reflector: zone zone-b below desired 4" and suffix.
func promoted(st *State, n *extender.Node, suffix string) *RoleChange {
	return &RoleChange{Node: n.Name, Kind: KindPromoted, Message: "Promoted to route reflector: " + promotionReason(st, n) + suffix}
}

// draining: "Draining: cordoned; clients moving to node-3, node-7".
func draining(st *State, name string) *RoleChange {
	return &RoleChange{Node: name, Kind: KindDraining,
		Message: "Draining: " + roleLossReason(st, name) + "; clients moving to " + strings.Join(replacements(st, name), ", ")}
}

// demoted: "Demoted: not needed (4 route reflectors desired); clients moved to node-3".
func demoted(st *State, name string, moved []string) *RoleChange {
	to := "no clients to move"
	if len(moved) > 0 {
		to = "clients moved to " + strings.Join(moved, ", ")
	}
	return &RoleChange{Node: name, Kind: KindDemoted, Message: "Demoted: " + roleLossReason(st, name) + "; " + to}
}

// clusterIDChanged says why a route reflector's cluster ID changes: a duplicate repaired (another
// route reflector holds the same ID, with one ID per route reflector: a manual edit, a restore) or
// a move to another cluster-ID group (or a zone's or rack's ID).
func clusterIDChanged(st *State, cur *extender.Node, want extender.NodeState) *RoleChange {
	return &RoleChange{Node: cur.Name, Kind: KindClusterIDChanged, Message: clusterIDChangeReason(st, cur, want)}
}

func clusterIDChangeReason(st *State, cur *extender.Node, want extender.NodeState) string {
	from, to := cur.Annotations[extender.AnnotationClusterID], want.Annotations[extender.AnnotationClusterID]
	p := st.Managed.Resolved
	if p.Topology == v1alpha1.MultiCluster && p.ClusterIDMode == v1alpha1.PerRouteReflector {
		var others []string
		for _, rr := range st.Result.RouteReflectors {
			if rr.Node != cur.Name && rr.ClusterID == from {
				others = append(others, rr.Node)
			}
		}
		if len(others) > 0 {
			slices.Sort(others)
			return fmt.Sprintf("Cluster ID %s repaired to %s: %s is also held by %s, and clusterIDs: PerRouteReflector gives each route reflector its own",
				from, to, from, strings.Join(others, ", "))
		}
	}
	return fmt.Sprintf("Cluster ID changed from %s to %s: the plan gives its cluster-ID group, zone or rack that ID", from, to)
}

// replacements are the planned active route reflectors of a node's zone, else of its cluster ID,
// else all of them (at most three named).
func replacements(st *State, name string) []string {
	out := replacementsAll(st, name)
	if len(out) > 3 {
		out = append(out[:3:3], "...")
	}
	return out
}

// promotionReason: "zone zone-b below desired 4".
func promotionReason(st *State, n *extender.Node) string {
	zone := n.Labels[st.Managed.Resolved.ZoneLabel]
	for _, z := range st.Result.Zones {
		if z.Zone == zone {
			return fmt.Sprintf("zone %s below desired %d", extender.ZoneName(zone), z.Desired)
		}
	}
	return fmt.Sprintf("%d route reflectors desired", st.Result.Summary.DesiredRouteReflectors)
}

// roleLossReason says why a route reflector loses its role: its ineligibility, or that it is not
// needed.
func roleLossReason(st *State, name string) string {
	for _, in := range st.Result.Ineligible {
		if in.Node == name {
			return shortReason(in)
		}
	}
	if n := st.View[name]; n != nil && n.Annotations[extender.AnnotationClusterID] != "" {
		if _, ok := policy.ParseClusterID(n.Annotations[extender.AnnotationClusterID]); !ok {
			return "invalid cluster ID"
		}
	}
	return fmt.Sprintf("not needed (%d route reflectors desired)", st.Result.Summary.DesiredRouteReflectors)
}

// shortReason names an ineligibility in a few words by its rule, else gives the filter's reason.
func shortReason(in extender.Ineligible) string {
	switch in.Rule {
	case extender.RuleCordonedNode:
		return "cordoned"
	case extender.RuleNotReadyNode:
		return "not Ready"
	case extender.RuleDeletingNode:
		return "being deleted"
	case extender.RuleForbiddenNode:
		return "forbidden by the policy"
	}
	return in.Reason
}
