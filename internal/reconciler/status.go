package reconciler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// Condition types and reasons of the policy status.
const (
	ConditionReady    = "Ready"
	ConditionDegraded = "Degraded"
	// ConditionOverlappingNodes is True when nodes this policy selects are selected by another
	// policy too: neither manages them (they keep the roles they have); the message names them.
	ConditionOverlappingNodes = "OverlappingNodes"
	// ConditionForeignBGPPeers is True when BGPPeers this product did not write exist (hand-written
	// peerings it leaves alone); the message names them.
	ConditionForeignBGPPeers = "ForeignBGPPeers"

	// EventOverlappingNodes: nodes this policy selects are selected by another policy too.
	EventOverlappingNodes = "OverlappingNodes"

	ReasonAsPlanned     = "AsPlanned"
	ReasonConverging    = "Converging"
	ReasonInvalidPolicy = "InvalidPolicy"
	// ReasonCacheRefilling: the node cache is listing the nodes again to keep a label key a policy
	// or a BGPPeer started to read; nothing is planned until it holds the key on every node.
	ReasonCacheRefilling = "CacheRefilling"
)

// status writes the policy status when it changed: counts (nodes, healthy nodes, desired and
// current route reflectors, per zone), the Ready and Degraded conditions and lastScaleTime.
func (r *Reconciler) status(ctx context.Context, st *State) error {
	pol := st.Policy.DeepCopy()
	s := &pol.Status
	s.ObservedGeneration = pol.Generation
	// The moves in flight, as persistTransitions wrote them before each move; in Observe and
	// Paused the ones an earlier Enforce left, dropped as they run their course.
	r.expireTransitions(st)
	s.Transitions = st.trans.API()
	s.SessionReportsSeen = reportsSeen(st.trans.ReportsSeen)
	if st.Invalid != nil {
		msg := st.Invalid.ToAggregate().Error()
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonInvalidPolicy, Message: msg, ObservedGeneration: pol.Generation})
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: ConditionDegraded, Status: metav1.ConditionTrue, Reason: ReasonInvalidPolicy, Message: msg, ObservedGeneration: pol.Generation})
		return r.writeStatus(ctx, st, pol)
	}
	if st.Refilling != nil {
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonCacheRefilling,
			Message: refillMessage(st.Refilling), ObservedGeneration: pol.Generation})
		return r.writeStatus(ctx, st, pol)
	}
	res, p := st.Result, st.Managed.Resolved
	s.Mode = p.Mode
	s.PendingChanges = st.Pending[:min(len(st.Pending), maxPendingChanges)]
	s.Nodes = int32(res.Summary.Nodes)
	s.HealthyNodes = int32(res.Summary.HealthyNodes)
	s.DesiredRouteReflectors = int32(res.Summary.DesiredRouteReflectors)
	current, total := st.currentRouteReflectors()
	if s.RouteReflectors != total {
		now := metav1.NewTime(st.Now)
		s.LastScaleTime = &now
	}
	s.RouteReflectors = total
	s.Zones = nil
	for _, z := range res.Zones {
		s.Zones = append(s.Zones, v1alpha1.ZoneStatus{Zone: z.Zone, Nodes: int32(z.Nodes), DesiredRouteReflectors: int32(z.Desired), RouteReflectors: current[z.Zone]})
	}
	if d := res.Degraded(); d != nil {
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: ConditionDegraded, Status: metav1.ConditionTrue, Reason: d.Reason, Message: d.Message, ObservedGeneration: pol.Generation})
	} else if c := degradedCondition(st, s); c != nil {
		meta.RemoveStatusCondition(&s.Conditions, ConditionDegraded) // its time is the timeout's
		meta.SetStatusCondition(&s.Conditions, *c)
	} else {
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: ConditionDegraded, Status: metav1.ConditionFalse, Reason: ReasonAsPlanned, Message: "the plan meets the policy", ObservedGeneration: pol.Generation})
	}
	planned := int32(res.Summary.RouteReflectors)
	ready := metav1.Condition{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonAsPlanned, ObservedGeneration: pol.Generation,
		Message: fmt.Sprintf("%d route reflectors as planned", total)}
	switch {
	case total != planned || res.Summary.DrainingRouteReflectors > 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, ReasonConverging
		ready.Message = fmt.Sprintf("%d route reflectors, %d planned, %d being handed over", total, planned, res.Summary.DrainingRouteReflectors)
	case total < int32(p.Min):
		ready.Status, ready.Reason = metav1.ConditionFalse, extender.ReasonNotEnoughEligibleNodes
		ready.Message = fmt.Sprintf("%d route reflectors; the policy requires at least %d", total, p.Min)
	}
	if p.Mode != v1alpha1.Enforce {
		// Ready says whether the cluster is as the plan wants it; in Observe and Paused that is
		// reported, not made so.
		ready.Reason = string(p.Mode)
		if len(st.Pending) > 0 {
			ready.Status = metav1.ConditionFalse
			ready.Message = fmt.Sprintf("%s: %d changes pending (status.pendingChanges); %d route reflectors", p.Mode, len(st.Pending), total)
		} else {
			ready.Status = metav1.ConditionTrue
			ready.Message = fmt.Sprintf("%s: the cluster is as the plan wants it; %d route reflectors", p.Mode, total)
		}
	}
	meta.SetStatusCondition(&s.Conditions, ready)
	r.setCost(st, s, pol.Generation)
	if err := r.setForeignPeers(ctx, st, s, pol.Generation); err != nil {
		return err
	}
	r.setOverlaps(st, s, pol)
	slices.SortFunc(s.Conditions, func(a, b metav1.Condition) int {
		if a.Type < b.Type {
			return 1
		}
		return -1
	})
	if prev := st.Policy.Status.RouteReflectors; prev != total && st.Policy.Status.ObservedGeneration > 0 {
		kind := "ScaledUp"
		if total < prev {
			kind = "ScaledDown"
		}
		r.Recorder.Eventf(st.Policy, "Normal", kind, "Route reflectors %d -> %d (desired %d)", prev, total, res.Summary.DesiredRouteReflectors)
	}
	return r.writeStatus(ctx, st, pol)
}

// writeStatus patches the policy status when it changed, and exports its conditions.
func (r *Reconciler) writeStatus(ctx context.Context, st *State, pol *v1alpha1.RouteReflectorPolicy) error {
	conditionMetrics(st.Name, pol.Status.Conditions)
	if equality.Semantic.DeepEqual(st.Policy.Status, pol.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, pol, client.MergeFrom(st.Policy)); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			st.requeue(handoverRetry)
			return nil
		}
		return err
	}
	return nil
}

// setForeignPeers sets the ForeignBGPPeers condition: the BGPPeers of the cluster this product did
// not write, which it never touches but with adoptBGPPeers in Enforce (then each with why it is
// still there).
func (r *Reconciler) setForeignPeers(ctx context.Context, st *State, s *v1alpha1.RouteReflectorPolicyStatus, gen int64) error {
	list, err := r.peers().List(ctx, nil)
	if err != nil {
		return fmt.Errorf("listing BGPPeers: %w", err)
	}
	r.wantPeerKeys(list)
	var foreign []string
	for _, p := range list {
		if p.Labels[extender.LabelManagedBy] != extender.ManagedByValue {
			foreign = append(foreign, p.Name)
		}
	}
	slices.Sort(foreign)
	c := metav1.Condition{Type: ConditionForeignBGPPeers, Status: metav1.ConditionFalse, Reason: "None", ObservedGeneration: gen,
		Message: "every BGPPeer is calico-rr-autoscaler's"}
	if len(foreign) > 0 {
		shown := foreign[:min(len(foreign), 20)]
		c.Status, c.Reason = metav1.ConditionTrue, "HandWritten"
		c.Message = fmt.Sprintf("%d BGPPeers not written by calico-rr-autoscaler, left as they are: %s", len(foreign), strings.Join(shown, ", "))
		if p := st.Managed.Resolved; p.AdoptBGPPeers && p.Mode == v1alpha1.Enforce {
			why := st.adoptWhy
			for i, n := range shown {
				if why[n] != "" {
					shown[i] = n + " (" + why[n] + ")"
				}
			}
			c.Reason = "Adopting"
			c.Message = fmt.Sprintf("%d BGPPeers not written by calico-rr-autoscaler; adoptBGPPeers deletes each once calico-rr-autoscaler's cover it: %s",
				len(foreign), strings.Join(shown, ", "))
		}
		if len(foreign) > len(shown) {
			c.Message += ", ..."
		}
	}
	meta.SetStatusCondition(&s.Conditions, c)
	return nil
}

// setOverlaps sets the OverlappingNodes condition, and records a Warning Event on the policy when
// the set of such nodes changes (each policy of the overlap gets its own).
func (r *Reconciler) setOverlaps(st *State, s *v1alpha1.RouteReflectorPolicyStatus, pol *v1alpha1.RouteReflectorPolicy) {
	c := metav1.Condition{Type: ConditionOverlappingNodes, Status: metav1.ConditionFalse, Reason: "None", ObservedGeneration: pol.Generation,
		Message: "no node is selected by another policy too"}
	if len(st.Overlaps) > 0 {
		names := slices.Sorted(maps.Keys(st.Overlaps))
		shown := make([]string, 0, min(len(names), 20))
		for _, n := range names[:cap(shown)] {
			shown = append(shown, fmt.Sprintf("%s (also %s)", n, strings.Join(st.Overlaps[n], ", ")))
		}
		c.Status, c.Reason = metav1.ConditionTrue, "SelectedByTwoPolicies"
		c.Message = fmt.Sprintf("%d nodes are selected by this policy and another: neither manages them until one policy's nodeSelector leaves them out: %s",
			len(names), strings.Join(shown, ", "))
		if len(names) > len(shown) {
			c.Message += ", ..."
		}
	}
	if old := meta.FindStatusCondition(st.Policy.Status.Conditions, ConditionOverlappingNodes); c.Status == metav1.ConditionTrue && (old == nil || old.Message != c.Message) {
		r.Recorder.Eventf(pol, corev1.EventTypeWarning, EventOverlappingNodes, "%s", c.Message)
	}
	meta.SetStatusCondition(&s.Conditions, c)
}
