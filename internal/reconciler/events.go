package reconciler

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Event reasons on nodes.
const (
	EventPromoted = "RouteReflectorPromoted"
	EventDraining = "RouteReflectorDraining"
	EventDemoted  = "RouteReflectorDemoted"
	// EventClusterIDChanged: a route reflector's cluster ID was rewritten, most often a duplicate
	// repaired.
	EventClusterIDChanged = "RouteReflectorClusterIDChanged"
)

// KindClusterIDChanged is the RoleChange kind of a cluster ID rewrite.
const KindClusterIDChanged = "ClusterIDChanged"

// events records an Event on the node and on the policy for every role change of this reconcile
// ("Promoted to route reflector: zone zone-b below desired 4", "Demoted: cordoned; clients moved
// to node-12"), and counts them. Promotions the mutating webhook admitted are reported when the
// plan first holds them.
func (r *Reconciler) events(_ context.Context, st *State) error {
	done := map[string]bool{}
	for _, c := range st.Changes {
		done[c.Kind+"/"+c.Node] = true
	}
	// Role changes the webhook admitted show up as differences from the previous plan.
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
			case !rr.Draining && !was[rr.Node] && !done["Promoted/"+rr.Node]:
				st.Changes = append(st.Changes, RoleChange{Node: rr.Node, Kind: "Promoted",
					Message: "Promoted to route reflector: " + promotionReason(st, n) + " (at admission)"})
			case rr.Draining && was[rr.Node] && !wasDraining[rr.Node] && !done["Draining/"+rr.Node]:
				st.Changes = append(st.Changes, RoleChange{Node: rr.Node, Kind: "Draining",
					Message: "Draining: " + roleLossReason(st, rr.Node) + "; clients moving to " + strings.Join(replacements(st, rr.Node), ", ")})
			}
		}
	}
	for _, c := range st.Changes {
		reason := map[string]string{"Promoted": EventPromoted, "Draining": EventDraining, "Demoted": EventDemoted,
			KindClusterIDChanged: EventClusterIDChanged}[c.Kind]
		ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: c.Node}
		if n := st.View[c.Node]; n != nil {
			ref.UID = n.UID
		}
		r.Recorder.Event(ref, corev1.EventTypeNormal, reason, c.Message)
		r.Recorder.Eventf(st.Policy, corev1.EventTypeNormal, reason, "%s: %s", c.Node, c.Message)
		roleChanges.WithLabelValues(st.Name, c.Kind).Inc()
	}
	return nil
}
