package reconciler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	kptr "k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/releaseplan"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// Policy deletion.
const (
	// Finalizer keeps a deleted policy until its roles, labels and BGPPeers are taken back.
	Finalizer = "routereflector.io/cleanup"
	// AnnotationMeshDisabledBy marks the BGPConfiguration whose node-to-node mesh policies turned
	// off (migrateFromNodeMesh), with their names, comma-separated (see meshowners.go): the mesh
	// comes back on when the last of them is deleted.
	AnnotationMeshDisabledBy = "routereflector.io/mesh-disabled-by"
	// AnnotationMeshRestoredAt marks a deleted policy, and the BGPConfiguration, with when the mesh
	// came back on: roles go removalDelay later.
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
//  1. If policies turned Calico's node-to-node mesh off (migrateFromNodeMesh, meshowners.go) and
//     no live one still asks for it: above spec.release.maxMeshNodes (or with Keep) the layout
//     stays, no longer the product's (release.go: keepLayout); otherwise the release goes through
//     one route reflector, the keeper (release.go: boundedRelease), the others released one at a
//     time, then the mesh comes back on, and every policy being deleted waits removalDelay, so
//     that every node has its mesh sessions before the keeper goes.
//  2. If live policies keep the mesh off, the policy leaves the mesh's owners and releases its
//     nodes once that loses no route: the graph model of the cluster without its roles and
//     BGPPeers (the other policies' top-level route reflectors take the nodes no live policy
//     selects) finds every pair; until then its nodes keep their roles.
//  3. If the mesh is off and no policy turned it off (a person did), the nodes have no other
//     routes: the roles, labels and BGPPeers stay (a Warning Event says so) and only the
//     finalizer goes.
//  4. With the mesh on, the release goes through a keeper too (never turned off by a policy, or
//     back on). Then the remaining route reflectors lose their role first (a node without a
//     cluster ID joins the mesh), then the clients their peering sets (in etcd too, in that order), then the policy's
//     BGPPeers go once the graph model finds every pair without them (other policies being
//     deleted may still have route reflectors that only they reach), then the finalizer.
func (r *Reconciler) cleanup(ctx context.Context, st *State) error {
	pol := st.Policy
	if !slices.Contains(pol.Finalizers, Finalizer) {
		return nil
	}
	if released, err := r.releasedAlready(ctx, pol); released || err != nil {
		return err
	}
	delay := st.Managed.Resolved.RemovalDelay
	cfg, err := r.configs().Get(ctx, "default")
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading BGPConfiguration default: %w", err)
	}
	if err != nil {
		cfg = nil
	}
	meshOff := cfg != nil && cfg.Spec.NodeToNodeMeshEnabled != nil && !*cfg.Spec.NodeToNodeMeshEnabled
	owners, ours := meshOwners(cfg)
	switch {
	case meshOff && ours && len(meshKeepers(r.Policies.Valid(), pol.Name)) == 0:
		// No live policy keeps the mesh off any more. Above spec.release.maxMeshNodes (or with
		// Keep) the mesh stays off and the layout stays, no longer ours. Otherwise the release
		// goes through one route reflector (release.go): the release BGPPeer to it, the others
		// released one at a time, then the mesh comes back on, and every policy being deleted
		// waits removalDelay for the mesh sessions before the rest goes.
		if _, why := releaseplan.RestoresMesh(st.Managed.Resolved, len(r.Nodes.List())); why != "" {
			return r.keepLayout(ctx, st, cfg, why)
		}
		if done, err := r.boundedRelease(ctx, st, cfg, false); !done || err != nil {
			return err
		}
		now := state.CeilSecond(st.Now).Format(time.RFC3339)
		orig := cfg.DeepCopy()
		cfg.Spec.NodeToNodeMeshEnabled = kptr.To(true)
		delete(cfg.Annotations, AnnotationMeshDisabledBy)
		cfg.Annotations[AnnotationMeshRestoredAt] = now
		if err := r.configs().Patch(ctx, orig, cfg); err != nil {
			return fmt.Errorf("turning the node-to-node mesh back on: %w", err)
		}
		if err := r.markPolicy(ctx, pol, AnnotationMeshRestoredAt, now); err != nil {
			return err
		}
		r.Recorder.Eventf(pol, corev1.EventTypeNormal, EventMeshRestored,
			"node-to-node mesh turned back on in BGPConfiguration default; the route reflectors go in %s", delay)
		st.requeue(delay + 100*time.Millisecond)
		return nil
	case meshOff && ours:
		// Other policies keep the mesh off: this one leaves its owners and releases its nodes
		// once the others' top-level route reflectors give them routes (they take the nodes no
		// live policy selects as clients).
		if slices.Contains(owners, pol.Name) {
			orig := cfg.DeepCopy()
			setMeshOwners(cfg, slices.DeleteFunc(slices.Clone(owners), func(o string) bool { return o == pol.Name }))
			if err := r.configs().Patch(ctx, orig, cfg); err != nil {
				return fmt.Errorf("leaving the node-to-node mesh's owners: %w", err)
			}
		}
		if wait, err := r.waitWhileReleaseLoses(ctx, st, false, false, "its nodes keep their roles until other policies' route reflectors take them"); wait || err != nil {
			return err
		}
	case meshOff:
		r.Recorder.Eventf(pol, corev1.EventTypeWarning, EventRouteReflectorsKept,
			"the node-to-node mesh is off and no policy turned it off: its route reflectors, labels and BGPPeers stay, or its nodes would lose their routes; remove them by hand once the nodes have other peers")
		return r.dropFinalizer(ctx, pol)
	}
	// The mesh is on: each role goes removalDelay after it came back, so that the mesh sessions
	// are up first.
	for _, mark := range []string{pol.Annotations[AnnotationMeshRestoredAt], cfgAnnotation(cfg, AnnotationMeshRestoredAt)} {
		if at, err := time.Parse(time.RFC3339, mark); err == nil && !meshOff {
			if wait := at.Add(delay).Sub(st.Now); wait > 0 {
				st.requeue(wait + 100*time.Millisecond)
				return nil
			}
		}
	}
	if !meshOff {
		// Every node that is not a route reflector peers with one route reflector of this policy
		// (the keeper) before the others are released, one at a time, each when that loses no
		// route; then the keeper goes with the clients. Another policy being deleted may not have
		// its own bridge yet: none is released while that loses a route.
		if done, err := r.boundedRelease(ctx, st, cfg, true); !done || err != nil {
			return err
		}
		if wait, err := r.waitWhileReleaseLoses(ctx, st, true, true, "its route reflectors keep their role until every node reaches the others without them"); wait || err != nil {
			return err
		}
	}
	// Route reflectors first, then clients: each phase finishes before the next.
	var rrs, clients []nodePatch
	sel := st.Managed.Resolved.NodeSelector
	matching := map[string]*extender.Node{} // the policy's nodes, for their Calico Nodes in etcd
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
	st.View = map[string]*extender.Node{}
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
		if err := r.releaseCalicoRoles(ctx, release); err != nil {
			return err
		}
		if release.Requeue > 0 {
			// A Calico Node not written yet keeps its role: the BGPPeers stay until it is.
			st.requeue(release.Requeue)
			return nil
		}
	}
	// The BGPPeers go last, once that loses no route: another policy being deleted may still have
	// route reflectors (with a cluster ID a node is out of the mesh) that reach this policy's
	// nodes only through them; they release their roles without waiting, so this ends.
	if wait, err := r.waitWhileReleaseLoses(ctx, st, !meshOff, false, "its BGPPeers stay until other policies' route reflectors are released"); wait || err != nil {
		return err
	}
	peers, err := r.livePeers(ctx, managedPeers(pol.Name))
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

// releasedAlready reports whether the API server no longer holds pol with the finalizer: the
// cache may still show a policy an earlier pass released (finalizer dropped, object gone), and a
// pass on it would write the release BGPPeer again with nobody left to delete it.
func (r *Reconciler) releasedAlready(ctx context.Context, pol *v1alpha1.RouteReflectorPolicy) (bool, error) {
	live := &v1alpha1.RouteReflectorPolicy{}
	if err := r.reader().Get(ctx, client.ObjectKey{Name: pol.Name}, live); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("reading policy %s: %w", pol.Name, err)
	}
	return live.UID != pol.UID || !slices.Contains(live.Finalizers, Finalizer), nil
}

// livePeers lists BGPPeers from the datastore itself, not the cache: the release BGPPeer a pass
// just wrote may not be in the cache yet when the same pass deletes the policy's BGPPeers.
func (r *Reconciler) livePeers(ctx context.Context, match map[string]string) ([]*apiv3.BGPPeer, error) {
	if r.Peers != nil { // etcd: read directly
		return r.Peers.List(ctx, match)
	}
	return calico.ListPeers(ctx, r.reader(), match)
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

// dropFinalizer ends a deleted policy's release: its CalicoNodeStatuses go (each costs its node's
// calico-node a query of BIRD every period, and nobody reads them any more), then the finalizer.
func (r *Reconciler) dropFinalizer(ctx context.Context, pol *v1alpha1.RouteReflectorPolicy) error {
	if err := r.statuses().DeleteAll(ctx, pol.Name); err != nil {
		return err
	}
	orig := pol.DeepCopy()
	p := pol.DeepCopy()
	p.Finalizers = slices.DeleteFunc(p.Finalizers, func(f string) bool { return f == Finalizer })
	if err := r.Client.Patch(ctx, p, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing finalizer: %w", err)
	}
	return nil
}

func cfgAnnotation(cfg *apiv3.BGPConfiguration, key string) string {
	if cfg == nil {
		return ""
	}
	return cfg.Annotations[key]
}

// ensureReleaseBridge writes the policy's release BGPPeer to keeper (extender.ReleaseBGPPeer) as applyPeers
// writes a plan's: created when missing, reverted when changed.
func (r *Reconciler) ensureReleaseBridge(ctx context.Context, st *State, keeper string) error {
	bridge := &State{Name: st.Name, Policy: st.Policy, Managed: st.Managed,
		Result: &extender.Result{BGPPeers: []extender.BGPPeer{extender.ReleaseBGPPeer(st.Managed.Resolved, keeper)}}}
	if err := r.applyPeers(ctx, bridge); err != nil {
		return fmt.Errorf("writing the release BGPPeer: %w", err)
	}
	if bridge.Requeue > 0 {
		st.requeue(bridge.Requeue)
	}
	return nil
}

// waitWhileReleaseLoses says whether the next step of a deleted policy's release must wait: the
// graph model of the cluster as it would be without the policy's roles and labels (releaseplan.Sim),
// and without its BGPPeers unless keepPeers (the release BGPPeer kept then, to the policy's
// keeper), with the mesh on or off, finds pairs it would lose (logged with what, and requeued).
func (r *Reconciler) waitWhileReleaseLoses(ctx context.Context, st *State, mesh, keepPeers bool, what string) (bool, error) {
	sim, err := r.newReleaseSim(ctx, st)
	if err != nil {
		return false, err
	}
	keeper := ""
	if keepPeers {
		keeper = st.Policy.Annotations[AnnotationReleaseKeeper]
	}
	m, err := sim.Model(nil, true, keeper, !keepPeers, mesh)
	if err != nil || m.Summary.MissingPairs == 0 {
		return false, err
	}
	r.Log.Info("policy deleted: "+what, "policy", st.Name, "missing", fmt.Sprintf("%d node pairs, e.g. %v", m.Summary.MissingPairs, m.MissingPairs(2)))
	st.requeue(handoverRetry)
	return true, nil
}
