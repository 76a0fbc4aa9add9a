package reconciler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	kptr "k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// Policy deletion.
const (
	// Finalizer keeps a deleted policy until its roles, labels and BGPPeers are taken back.
	Finalizer = "routereflector.io/cleanup"
	// AnnotationMeshDisabledBy marks the BGPConfiguration whose node-to-node mesh a policy turned
	// off (migrateFromNodeMesh), with the policy's name: deleting that policy turns it back on.
	AnnotationMeshDisabledBy = "routereflector.io/mesh-disabled-by"
	// AnnotationMeshRestoredAt marks a deleted policy with when it turned the mesh back on.
	AnnotationMeshRestoredAt = "routereflector.io/mesh-restored-at"

	EventMeshRestored        = "NodeToNodeMeshRestored"
	EventCleanedUp           = "RouteReflectorsRemoved"
	EventRouteReflectorsKept = "RouteReflectorsKept"
)

// ensureFinalizer adds the finalizer to a live policy.
func (r *Reconciler) ensureFinalizer(ctx context.Context, pol *v1alpha1.RouteReflectorPolicy) error {
	if slices.Contains(pol.Finalizers, Finalizer) {
		return nil
	}
	orig := pol.DeepCopy()
	pol = pol.DeepCopy()
	pol.Finalizers = append(pol.Finalizers, Finalizer)
	if err := r.Client.Patch(ctx, pol, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("adding finalizer: %w", err)
	}
	return nil
}

// cleanup takes a deleted policy's work back without leaving a node without routes:
//
//  1. If the policy turned Calico's node-to-node mesh off, it turns it back on and waits
//     removalDelay, so that every node has its mesh sessions before it loses its route reflectors.
//  2. If the mesh is off and the policy did not turn it off, the nodes have no other routes: the
//     roles, labels and BGPPeers stay (a Warning Event says so) and only the finalizer goes.
//  3. Otherwise the route reflectors lose their role first (a node without a cluster ID joins the
//     mesh), then the clients their peering sets, then the policy's BGPPeers go, then the finalizer.
func (r *Reconciler) cleanup(ctx context.Context, st *State) error {
	pol := st.Policy
	if !slices.Contains(pol.Finalizers, Finalizer) {
		return nil
	}
	delay := st.Managed.Resolved.RemovalDelay
	cfg, err := r.configs().Get(ctx, "default")
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading BGPConfiguration default: %w", err)
	}
	meshOff := err == nil && cfg.Spec.NodeToNodeMeshEnabled != nil && !*cfg.Spec.NodeToNodeMeshEnabled
	switch {
	case meshOff && cfg.Annotations[AnnotationMeshDisabledBy] == pol.Name:
		orig := cfg.DeepCopy()
		cfg.Spec.NodeToNodeMeshEnabled = kptr.To(true)
		delete(cfg.Annotations, AnnotationMeshDisabledBy)
		if err := r.configs().Patch(ctx, orig, cfg); err != nil {
			return fmt.Errorf("turning the node-to-node mesh back on: %w", err)
		}
		if err := r.markPolicy(ctx, pol, AnnotationMeshRestoredAt, state.CeilSecond(st.Now).Format(time.RFC3339)); err != nil {
			return err
		}
		r.Recorder.Eventf(pol, corev1.EventTypeNormal, EventMeshRestored,
			"node-to-node mesh turned back on in BGPConfiguration default; the route reflectors go in %s", delay)
		st.requeue(delay + 100*time.Millisecond)
		return nil
	case meshOff:
		r.Recorder.Eventf(pol, corev1.EventTypeWarning, EventRouteReflectorsKept,
			"the node-to-node mesh is off and this policy did not turn it off: its route reflectors, labels and BGPPeers stay, or its nodes would lose their routes; remove them by hand once the nodes have other peers")
		return r.dropFinalizer(ctx, pol)
	}
	if at, err := time.Parse(time.RFC3339, pol.Annotations[AnnotationMeshRestoredAt]); err == nil {
		if wait := at.Add(delay).Sub(st.Now); wait > 0 {
			st.requeue(wait + 100*time.Millisecond)
			return nil
		}
	}
	// Route reflectors first, then clients: each phase finishes before the next.
	var rrs, clients []nodePatch
	sel := st.Managed.Resolved.NodeSelector
	matching := map[string]*corev1.Node{} // the policy's nodes, for their Calico Nodes in etcd
	for _, n := range r.Nodes.List() {
		if !sel.Matches(labels.Set(n.Labels)) {
			continue
		}
		matching[n.Name] = n
		lbl, ann := state.OwnedChanges(st.Managed.Resolved.RRLabelKey, n, extender.NodeState{})
		if len(lbl)+len(ann) == 0 {
			continue
		}
		np := nodePatch{name: n.Name, lbl: lbl, ann: ann}
		if extender.NewNodeInfo(n, st.Managed.Resolved).CurrentRR {
			rrs = append(rrs, np)
		} else {
			clients = append(clients, np)
		}
	}
	st.View = map[string]*corev1.Node{}
	for _, phase := range [][]nodePatch{rrs, clients} {
		if err := r.applyPatches(ctx, st, phase); err != nil {
			return err
		}
	}
	if r.CalicoNodes != nil {
		// The policy's Calico Nodes in etcd lose the role too (route reflectors first), also
		// those whose Kubernetes Node an earlier attempt already released.
		maps.Copy(matching, st.View)
		release := &State{Name: st.Name, Managed: st.Managed, View: matching}
		if err := r.writeCalicoRoles(ctx, release, false); err != nil {
			return err
		}
		if release.Requeue > 0 {
			st.requeue(release.Requeue)
		}
	}
	peers, err := r.peers().List(ctx, managedPeers(pol.Name))
	if err != nil {
		return fmt.Errorf("listing BGPPeers: %w", err)
	}
	for _, p := range peers {
		if err := r.peers().Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting BGPPeer %s: %w", p.Name, err)
		}
		r.peerSynced(p.Name, nil)
	}
	r.Recorder.Eventf(pol, corev1.EventTypeNormal, EventCleanedUp,
		"policy deleted: %d route reflectors and %d clients released, %d BGPPeers deleted", len(rrs), len(clients), len(peers))
	return r.dropFinalizer(ctx, pol)
}

func (r *Reconciler) markPolicy(ctx context.Context, pol *v1alpha1.RouteReflectorPolicy, key, value string) error {
	orig := pol.DeepCopy()
	p := pol.DeepCopy()
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[key] = value
	if err := r.Client.Patch(ctx, p, client.MergeFrom(orig)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("annotating policy: %w", err)
	}
	return nil
}

func (r *Reconciler) dropFinalizer(ctx context.Context, pol *v1alpha1.RouteReflectorPolicy) error {
	orig := pol.DeepCopy()
	p := pol.DeepCopy()
	p.Finalizers = slices.DeleteFunc(p.Finalizers, func(f string) bool { return f == Finalizer })
	if err := r.Client.Patch(ctx, p, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing finalizer: %w", err)
	}
	return nil
}
