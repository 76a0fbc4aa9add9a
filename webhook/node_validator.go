package webhook

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// NodeValidator is /validate-v1-node (Node UPDATE on nodes and nodes/status, and DELETE). For any
// user but the product's service account and kubelets, it denies removing a route reflector's
// label or cluster ID below minRouteReflectors or so that a client keeps no route reflector (or,
// when all route reflectors share one cluster ID, so that two clients no longer share one);
// labelling a node the planner's filters reject, or beyond maxRouteReflectors; and a cluster ID
// that is not IPv4 or, with one cluster ID per route reflector, another's. It never denies a
// DELETE: it warns instead. It decides from the informer cache (NodeStore's indexes).
type NodeValidator struct {
	Policies *state.Policies
	Nodes    *state.NodeStore
	// ServiceAccount is the product's identity, never denied.
	ServiceAccount string
}

var nodeGK = corev1.SchemeGroupVersion.WithKind("Node").GroupKind()

// Handle implements Handler.
func (v *NodeValidator) Handle(_ context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	switch req.Operation {
	case admissionv1.Delete:
		return v.delete(req)
	case admissionv1.Update:
	default:
		return Allowed(), nil
	}
	node, err := decodeNode(req.Object.Raw, "request.object")
	if err != nil {
		return nil, err
	}
	old, err := decodeNode(req.OldObject.Raw, "request.oldObject")
	if err != nil {
		return nil, err
	}
	if exempt(req.UserInfo, v.ServiceAccount) {
		return Allowed(), nil
	}
	if node.Name == "" {
		node.Name = req.Name
	}
	var errs Denials
	var warnings []string
	check := func(mp state.Managed, found Denials) {
		if mp.Resolved.Mode != v1alpha1.Observe {
			errs = append(errs, found...)
			return
		}
		// Observe never refuses: it says what Enforce would refuse.
		for _, e := range found {
			warnings = append(warnings, fmt.Sprintf("policy %q is in Observe mode: Enforce would refuse this change: %s", mp.Resolved.Name, e.Err.Error()))
		}
	}
	if mp, ok := v.Policies.ForNode(node.Labels); ok {
		check(mp, v.addition(mp, old, node))
	}
	if mp, ok := v.Policies.ForNode(old.Labels); ok {
		check(mp, v.removal(mp, old, node))
	}
	if len(errs) > 0 {
		return Denied(nodeGK, node.Name, errs), nil
	}
	return Allowed(warnings...), nil
}

// exempt: the product itself, and kubelets (a node must always be able to report its status).
func exempt(u authenticationv1.UserInfo, serviceAccount string) bool {
	return u.Username == serviceAccount && serviceAccount != "" || slices.Contains(u.Groups, "system:nodes")
}

var (
	labelsPath      = field.NewPath("metadata", "labels")
	annotationsPath = field.NewPath("metadata", "annotations")
	clusterIDPath   = annotationsPath.Key(extender.AnnotationClusterID)
)

type rrInfo struct {
	id       uint32
	draining bool
	fam      extender.Families // the address families it peers in (its Calico addresses)
}

// routeReflectors returns the policy's working route reflectors in the cache, but skip.
func (v *NodeValidator) routeReflectors(mp state.Managed, skip string) map[string]rrInfo {
	out := map[string]rrInfo{}
	for _, n := range v.Nodes.RouteReflectors() {
		if n.Name == skip {
			continue
		}
		if id, ok := extender.RouteReflectorClusterID(n, mp.Resolved); ok && mp.Resolved.NodeSelector.Matches(labels.Set(n.Labels)) {
			out[n.Name] = rrInfo{id: id, draining: extender.IsDraining(n), fam: extender.NodeFamilies(n)}
		}
	}
	return out
}

func (v *NodeValidator) removal(mp state.Managed, old, node *extender.Node) Denials {
	p := mp.Resolved
	if _, was := extender.RouteReflectorClusterID(old, p); !was {
		return nil
	}
	if _, is := extender.RouteReflectorClusterID(node, p); is {
		return nil
	}
	path, what := clusterIDPath, "the cluster ID"
	if !p.IsRouteReflectorLabel(node.Labels) {
		path, what = labelsPath.Key(p.RRLabelKey), "the route reflector label"
	}
	others := v.routeReflectors(mp, node.Name)
	active := 0
	for _, r := range others {
		if !r.draining {
			active++
		}
	}
	var errs Denials
	if !extender.IsDraining(old) && active < p.Min {
		errs = append(errs, deny(path, RuleMinRouteReflectors,
			"removing %s from %s would leave %d route reflectors; policy %q requires at least %d", what, node.Name, active, p.Name, p.Min))
	}
	// Quorum: every client keeps a route reflector, in each address family the removed one served
	// it; with one shared cluster ID, every two clients share one (projectcalico/calico#2735).
	ids := distinctIDs(others)
	shared := len(ids) == 1 && len(others) > 1
	removedFam := extender.NodeFamilies(old)
	var orphans, famOrphans []string
	var lostFam extender.Families
	sets := map[string][]string{}
	// The clients share few route-reflector lists (one per peering set, interned by the cache):
	// each list is parsed once, however many clients carry it.
	type kept struct {
		n   int
		fam extender.Families // the families the list's other route reflectors peer in
	}
	left := map[string]kept{}
	for _, c := range v.Nodes.ClientsOf(node.Name) {
		list := c.Annotations[extender.AnnotationRouteReflectors]
		k, parsed := left[list]
		if !parsed {
			for rest := list; rest != ""; {
				var r string
				r, rest, _ = strings.Cut(rest, ",")
				if info, ok := others[r]; ok {
					k.n++
					k.fam |= info.fam
				}
			}
			left[list] = k
		}
		if k.n == 0 {
			orphans = append(orphans, c.Name)
			continue
		}
		// The client's families are read only when the list lost one (never in an IPv4 cluster).
		if lost := removedFam &^ k.fam; lost != 0 {
			if lost &= extender.NodeFamilies(c); lost != 0 {
				famOrphans = append(famOrphans, c.Name)
				lostFam |= lost
				continue
			}
		}
		if shared && sets[list] == nil {
			var l []string
			for _, r := range strings.Split(list, ",") {
				if _, ok := others[r]; ok {
					l = append(l, r)
				}
			}
			sets[list] = l
		}
	}
	if len(orphans) > 0 {
		slices.Sort(orphans)
		errs = append(errs, deny(path, RuleQuorum, "removing %s from %s would leave %s without a route reflector",
			what, node.Name, countedNames(orphans, "client", "clients")))
		return errs
	}
	if len(famOrphans) > 0 {
		slices.Sort(famOrphans)
		errs = append(errs, deny(path, RuleQuorum, "removing %s from %s would leave %s without a route reflector in %s",
			what, node.Name, countedNames(famOrphans, "client", "clients"), lostFam))
		return errs
	}
	keys := slices.Sorted(maps.Keys(sets))
	for i := range keys {
		for j := i + 1; j < len(keys); j++ {
			a, b := sets[keys[i]], sets[keys[j]]
			if !intersect(a, b) {
				return append(errs, deny(path, RuleQuorum,
					"removing %s from %s would leave clients of %s and clients of %s without a common route reflector, and all route reflectors share cluster ID %s (projectcalico/calico#2735)",
					what, node.Name, strings.Join(a, ","), strings.Join(b, ","), policy.ClusterIDString(ids[0])))
			}
		}
	}
	return errs
}

func distinctIDs(m map[string]rrInfo) []uint32 {
	var ids []uint32
	for _, r := range m {
		if !slices.Contains(ids, r.id) {
			ids = append(ids, r.id)
		}
	}
	return ids
}

func intersect(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

func countedNames(names []string, one, many string) string {
	const show = 3
	if len(names) == 1 {
		return one + " " + names[0]
	}
	if len(names) <= show {
		return fmt.Sprintf("%d %s (%s)", len(names), many, strings.Join(names, ", "))
	}
	return fmt.Sprintf("%d %s (%s, ...)", len(names), many, strings.Join(names[:show], ", "))
}

func (v *NodeValidator) addition(mp state.Managed, old, node *extender.Node) Denials {
	p := mp.Resolved
	var errs Denials
	oldID, hadID := old.Annotations[extender.AnnotationClusterID]
	newID, hasID := node.Annotations[extender.AnnotationClusterID]
	labelAdded := !p.IsRouteReflectorLabel(old.Labels) && p.IsRouteReflectorLabel(node.Labels)
	idAdded := hasID && !hadID
	if hasID && (!hadID || newID != oldID) {
		id, ok := policy.ParseClusterID(newID)
		switch {
		case !ok:
			errs = append(errs, deny(clusterIDPath, RuleClusterID, "%q is not an IPv4 address", newID))
		case p.Topology == v1alpha1.MultiCluster && p.ClusterIDMode == v1alpha1.PerRouteReflector:
			for _, o := range v.Nodes.RouteReflectors() {
				if o.Name == node.Name || !p.NodeSelector.Matches(labels.Set(o.Labels)) {
					continue
				}
				if oid, ok := policy.ParseClusterID(o.Annotations[extender.AnnotationClusterID]); ok && oid == id {
					errs = append(errs, deny(clusterIDPath, RuleClusterIDCollision,
						"cluster ID %s of %s is already held by %s; policy %q gives each route reflector its own (clusterIDs: PerRouteReflector)",
						newID, node.Name, o.Name, p.Name))
					break
				}
			}
		}
	}
	if !labelAdded && !idAdded {
		return errs
	}
	path, what := labelsPath.Key(p.RRLabelKey), "the route reflector label"
	if !labelAdded {
		path, what = clusterIDPath, "a cluster ID"
	}
	ni := extender.NewNodeInfo(node, p)
	// The filters' exemptions for a route reflector keeping its role (pressure conditions, the
	// NotReady grace) hold for a node that was one, not for one this change makes one.
	ni.CurrentRR = extender.NewNodeInfo(old, p).CurrentRR
	for _, f := range extender.DefaultFilters() {
		if reason := f.Filter(p, ni); reason != "" {
			errs = append(errs, deny(path, Rule(f.Rule()),
				"%s may not be a route reflector of policy %q: %s", node.Name, p.Name, reason))
			return errs
		}
	}
	if _, was := extender.RouteReflectorClusterID(old, p); !was {
		if n := len(v.routeReflectors(mp, node.Name)) + 1; n > p.Max {
			errs = append(errs, deny(path, RuleMaxRouteReflectors,
				"adding %s to %s would make %d route reflectors; policy %q allows at most %d", what, node.Name, n, p.Name, p.Max))
		}
	}
	return errs
}

// delete never denies: a cloud controller must be able to remove a dead VM. It warns when the node
// is a route reflector.
func (v *NodeValidator) delete(req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	if len(req.OldObject.Raw) == 0 {
		return Allowed(), nil
	}
	old, err := decodeNode(req.OldObject.Raw, "request.oldObject")
	if err != nil {
		return nil, err
	}
	mp, ok := v.Policies.ForNode(old.Labels)
	if !ok {
		return Allowed(), nil
	}
	if _, rr := extender.RouteReflectorClusterID(old, mp.Resolved); !rr {
		return Allowed(), nil
	}
	if old.Name == "" {
		old.Name = req.Name
	}
	clients := len(v.Nodes.ClientsOf(old.Name))
	others := len(v.routeReflectors(mp, old.Name))
	return Allowed(fmt.Sprintf("node %s is a route reflector of policy %q with %d clients; %d route reflectors remain (minimum %d); the reconciler promotes a replacement and moves its clients",
		old.Name, mp.Resolved.Name, clients, others, mp.Resolved.Min)), nil
}
