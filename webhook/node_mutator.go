package webhook

import (
	"context"
	"fmt"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// NodeMutator is /mutate-v1-node (Node CREATE and UPDATE, on nodes and nodes/status). A route
// reflector that is cordoned, becomes forbidden or loses eligibility is marked draining (every
// replica does this: it follows from the node alone). On the leader only, a joining node, or one
// that just became eligible, gets its role from the ledger in the same request: route reflector
// with its cluster ID, or client with its peering set. A replica without the lease answers without
// a patch and leaves the node to the leader's reconciler. Its patches are idempotent.
type NodeMutator struct {
	Policies *state.Policies
	Ledger   *state.Ledger
	// DeferRoles makes every replica answer a joining node as a replica without the lease does
	// (no role in the patch; the reconciler decides). With Calico's etcd datastore the role must
	// reach the Calico Node in etcd, which only the reconciler writes.
	DeferRoles bool
	// Now defaults to time.Now.
	Now func() time.Time
}

// Handle implements Handler.
func (m *NodeMutator) Handle(_ context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return Allowed(), nil
	}
	node, err := decodeNode(req.Object.Raw, "request.object")
	if err != nil {
		return nil, err
	}
	if node.Name == "" {
		node.Name = req.Name
	}
	var old *corev1.Node
	if req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		if old, err = decodeNode(req.OldObject.Raw, "request.oldObject"); err != nil {
			return nil, err
		}
	}
	mp, ok := m.Policies.ForNode(node.Labels)
	if !ok {
		return Allowed(), nil
	}
	p := mp.Resolved
	ni := extender.NewNodeInfo(node, p)
	ni.Now = m.now()
	extender.RunFilters(extender.DefaultFilters(), p, ni)
	// The node before the update, read once: its role here, its eligibility below only when the
	// decision needs it (wasEligible).
	var was *extender.NodeInfo
	if old != nil {
		was = extender.NewNodeInfo(old, p)
	}
	if p.Mode != v1alpha1.Enforce {
		return Allowed(m.wouldDo(mp, node, was, ni)...), nil
	}
	change := state.Change{Node: node.Name, Object: node.DeepCopy(), Create: old == nil}
	if old != nil {
		change.BaseRV = old.ResourceVersion
	}

	// A dry run gets the same answer and leaves no trace: nothing assumed, nothing recorded.
	dryRun := req.DryRun != nil && *req.DryRun
	var lbl, ann map[string]*string
	switch {
	case ni.CurrentRR:
		if !ni.Eligible && !extender.IsDraining(node) {
			ts := state.CeilSecond(m.now()).Format(time.RFC3339)
			ann = map[string]*string{extender.AnnotationDrainingSince: &ts}
			if ni.Rule == extender.RuleNotReadyNode {
				reason := extender.DrainingReasonNotReady
				ann[extender.AnnotationDrainingReason] = &reason
			}
			if !dryRun {
				change.Annotations = ann
				change.Object = state.ApplyChange(change.Object, &change)
				m.Ledger.Assume(p.Name, change)
				decisionsTotal.WithLabelValues("draining").Inc()
			}
		}
	case was != nil && was.CurrentRR:
		// The role is being removed (by the reconciler, or by hand as the validator allows): the
		// reconciler decides what the node becomes.
	default:
		hasSet := node.Labels[extender.LabelPeeringSet] != ""
		becameEligible := ni.Eligible && (was == nil || !wasEligible(was, mp))
		if hasSet && !becameEligible {
			break
		}
		if !m.Ledger.Leader() || m.DeferRoles {
			decisionsTotal.WithLabelValues("deferred").Inc()
			break
		}
		var a extender.Admission
		var ok bool
		if dryRun {
			a, ok = m.Ledger.Decide(mp, ni)
		} else {
			a, ok = m.Ledger.Admit(mp, ni, change)
		}
		if !ok {
			break
		}
		lbl, ann = state.OwnedChanges(p.RRLabelKey, node, a.State(p))
		if len(lbl)+len(ann) > 0 && !dryRun {
			decisionsTotal.WithLabelValues(a.Role.String()).Inc()
		}
	}
	return Patched(metadataPatch(node.Labels, node.Annotations, lbl, ann))
}

func (m *NodeMutator) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// wasEligible runs the planner's filters on the node as it was before the update, without a
// decision time: no grace period and no awaiting apply to what it was.
func wasEligible(was *extender.NodeInfo, mp state.Managed) bool {
	extender.RunFilters(extender.DefaultFilters(), mp.Resolved, was)
	return was.Eligible
}

// wouldDo says what Enforce would do to the node, for a policy in Observe or Paused mode: the
// webhook changes nothing then, and answers with a warning instead.
func (m *NodeMutator) wouldDo(mp state.Managed, node *corev1.Node, was, ni *extender.NodeInfo) []string {
	p := mp.Resolved
	prefix := fmt.Sprintf("policy %q is in %s mode: Enforce would ", p.Name, p.Mode)
	switch {
	case ni.CurrentRR:
		if !ni.Eligible && !extender.IsDraining(node) {
			return []string{prefix + "hand route reflector " + node.Name + " over (" + ni.Reason + ")"}
		}
	case was != nil && was.CurrentRR:
	case node.Labels[extender.LabelPeeringSet] == "":
		a, ok := m.Ledger.Decide(mp, ni)
		switch {
		case !ok:
		case a.Role == extender.AdmitRouteReflector:
			return []string{prefix + "make " + node.Name + " a route reflector (cluster ID " + a.ClusterID + "): " + a.Reason}
		case a.Role == extender.AdmitClient:
			return []string{prefix + "make " + node.Name + " a client of " + strings.Join(a.RouteReflectors, ", ")}
		}
	}
	return nil
}
