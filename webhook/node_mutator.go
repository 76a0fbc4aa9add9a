package webhook

import (
	"context"
	"fmt"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

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

// Handle implements Handler. One admission is one walk through three packages: webhook (decode),
// state (state.Ledger.AdmitNode: the node's policy, the plan's admission state, the record),
// extender (extender.AdmitNodeRequest: the node read once, the decision), back to state (the
// record), back to webhook (the patch). See the README's architecture section.
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
	var old *extender.Node
	if req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		if old, err = decodeNode(req.OldObject.Raw, "request.oldObject"); err != nil {
			return nil, err
		}
	}
	// A dry run gets the same answer and leaves no trace: nothing assumed, nothing recorded.
	dryRun := req.DryRun != nil && *req.DryRun
	mp, ans, ok := m.Ledger.AdmitNode(m.Policies, state.NodeAdmission{Node: node, Old: old, Now: m.now(), DryRun: dryRun, DeferRoles: m.DeferRoles})
	if !ok {
		return Allowed(), nil
	}
	if mp.Resolved.Mode != v1alpha1.Enforce {
		return Allowed(wouldDo(mp, node, &ans)...), nil
	}
	switch ans.Action {
	case extender.AdmitPass:
		return Allowed(), nil
	case extender.AdmitDeferred:
		decisionsTotal.WithLabelValues("deferred").Inc()
		return Allowed(), nil
	case extender.AdmitDrain:
		if !dryRun {
			decisionsTotal.WithLabelValues("draining").Inc()
		}
	case extender.AdmitDecide:
		if !ans.Decided {
			if !dryRun {
				decisionsTotal.WithLabelValues(noRoleLabel(ans.Held)).Inc()
			}
			return Allowed(), nil
		}
		if len(ans.Labels)+len(ans.Annotations) > 0 && !dryRun {
			decisionsTotal.WithLabelValues(roleLabel(ans.Role)).Inc()
		}
	}
	return Patched(metadataPatch(node.Labels, node.Annotations, ans.Labels, ans.Annotations))
}

// roleLabel is a decision's metric label (AdmitRole's String, spelled here: the walk does not
// go back to the extender for it).
func roleLabel(r extender.AdmitRole) string {
	switch r {
	case extender.AdmitClient:
		return "client"
	case extender.AdmitRouteReflector:
		return "route-reflector"
	}
	return "none"
}

// noRoleLabel is the metric label of a decision that gives no role: "none-held" when promotions
// were held for a plan (extender.Decision.Held), "none" otherwise.
func noRoleLabel(held bool) string {
	if held {
		return "none-held"
	}
	return "none"
}

func (m *NodeMutator) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// wouldDo says what Enforce would do to the node, for a policy in Observe or Paused mode: the
// webhook changes nothing then, and answers with a warning instead.
func wouldDo(mp state.Managed, node *extender.Node, ans *extender.AdmitAnswer) []string {
	p := mp.Resolved
	prefix := fmt.Sprintf("policy %q is in %s mode: Enforce would ", p.Name, p.Mode)
	switch {
	case ans.Action == extender.AdmitDrain:
		return []string{prefix + "hand route reflector " + node.Name + " over (" + ans.DrainReason + ")"}
	case ans.Action != extender.AdmitDecide:
	case ans.Role == extender.AdmitRouteReflector:
		return []string{prefix + "make " + node.Name + " a route reflector (cluster ID " + ans.ClusterID + "): " + ans.Reason}
	case ans.Role == extender.AdmitClient:
		return []string{prefix + "make " + node.Name + " a client of " + strings.Join(ans.RouteReflectors, ", ")}
	}
	return nil
}
