package reconciler

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kptr "k8s.io/utils/ptr"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// EventMeshDisabled is recorded on the policy when it turns Calico's node-to-node mesh off.
const EventMeshDisabled = "NodeToNodeMeshDisabled"

// meshPending: migrateFromNodeMesh is on, the mesh is not known to be off, and every client has
// its route reflectors in place (the condition the sessions are then checked for).
func (r *Reconciler) meshPending(st *State) bool {
	if !st.Managed.Resolved.MigrateFromNodeMesh || r.memo(st.Name).meshOff {
		return false
	}
	ok, _ := meshReady(st.Managed.Resolved, st.View, r.Nodes.List())
	return ok
}

// migrateMesh sets nodeToNodeMeshEnabled: false in the default BGPConfiguration (created when
// missing), with the policy among its owners (AnnotationMeshDisabledBy, see meshowners.go: the mesh
// comes back on when the last owner is deleted), once every client has its route reflector
// sessions: with BGPSessions, every Ready client seen Established by each of its route reflectors
// (on a session of its own: a mesh session is none, see sessions.Missing); else removalDelay, and at
// least transitions.DefaultSettle, after the layout was last seen changing (every client with its
// peering set and route reflectors in place, the same route reflectors and cluster IDs). In both
// modes every route reflector's sessions must have settled (its transitions records: promoted,
// renumbered or given clients by a move). Until then every client keeps its mesh sessions: turned
// off in the confd render that brings a client's first sessions to its route reflectors, the mesh
// left the clients without a route to each other until those were up (15-27 s on the live lab, as
// BGP health then replaced the route reflectors whose sessions were not up yet). Any moment a
// client lacks route reflectors, or the layout changes, starts that wait again; the mesh is never
// turned off before.
func (r *Reconciler) migrateMesh(ctx context.Context, st *State) error {
	p := st.Managed.Resolved
	m := r.memo(st.Name)
	m.meshOff = m.meshOff && p.MigrateFromNodeMesh
	if !p.MigrateFromNodeMesh || m.meshOff {
		st.trans.Drop(transitions.MeshOff)
		return nil
	}
	if ok, why := meshReady(p, st.View, r.Nodes.List()); !ok {
		r.Log.V(1).Info("node-to-node mesh kept", "policy", st.Name, "reason", why)
		st.trans.Drop(transitions.MeshOff)
		return nil
	}
	// The wait is the layout's MeshOff record (a new leader resumes it), started now, once this
	// reconcile's writes (in the view) are made; with handover Delay its sessions are waited for
	// transitions.DefaultMax at most.
	layout := meshLayout(st.View)
	st.trans.Drop(transitions.MeshOff, layout)
	d := max(p.RemovalDelay, transitions.DefaultSettle)
	rec := st.trans.Hold(transitions.MeshOff, layout, r.now(), transitions.Waits{Min: d, Settle: d, Max: max(d, transitions.DefaultMax)})
	var rrs []string
	for _, name := range slices.Sorted(maps.Keys(st.View)) {
		if isCurrentRR(p, st.View[name]) {
			rrs = append(rrs, name)
		}
	}
	if wait, on := settlingWait(st, rrs); wait > 0 {
		r.Log.V(1).Info("node-to-node mesh kept", "policy", st.Name, "reason", "route reflector sessions settling", "nodes", on)
		st.requeue(wait)
		return nil
	}
	sessions := verifies(st)
	if meshReads(st) && (sessions || st.Now.Sub(rec.Started) < rec.Max) {
		clients := clientsByRR(st)
		if rest := unverified(st, clients, meshRRs(st, clients)); len(rest) > 0 {
			r.Log.V(1).Info("node-to-node mesh kept", "policy", st.Name, "reason", "sessions not seen Established", "nodes", joinCapped(rest, 5))
			st.requeue(handoverRetry)
			return nil
		}
	}
	if wait := rec.Wait(st.Now, transitions.Timed); !sessions && wait > 0 {
		st.requeue(wait + 100*time.Millisecond)
		return nil
	}
	cfg, err := r.configs().Get(ctx, "default")
	switch {
	case apierrors.IsNotFound(err):
		cfg = &apiv3.BGPConfiguration{
			TypeMeta:   metav1.TypeMeta{APIVersion: r.PeerAPI.String(), Kind: apiv3.KindBGPConfiguration},
			ObjectMeta: metav1.ObjectMeta{Name: "default", Annotations: map[string]string{AnnotationMeshDisabledBy: st.Name}},
			Spec:       apiv3.BGPConfigurationSpec{NodeToNodeMeshEnabled: kptr.To(false)},
		}
		if err := r.configs().Create(ctx, cfg); err != nil {
			if apierrors.IsAlreadyExists(err) {
				st.requeue(handoverRetry)
				return nil
			}
			return fmt.Errorf("creating BGPConfiguration default: %w", err)
		}
	case err != nil:
		return fmt.Errorf("reading BGPConfiguration default: %w", err)
	case cfg.Spec.NodeToNodeMeshEnabled != nil && !*cfg.Spec.NodeToNodeMeshEnabled:
		// Off already: by another policy (this one joins its owners, so that the mesh stays off
		// while either asks for it), or by a person (theirs: not claimed).
		if owners, ours := meshOwners(cfg); ours && !slices.Contains(owners, st.Name) {
			orig := cfg.DeepCopy()
			setMeshOwners(cfg, append(owners, st.Name))
			if err := r.configs().Patch(ctx, orig, cfg); err != nil {
				return fmt.Errorf("patching BGPConfiguration default: %w", err)
			}
		}
		m.meshOff = true
		st.trans.Drop(transitions.MeshOff)
		return nil
	default:
		orig := cfg.DeepCopy()
		cfg.Spec.NodeToNodeMeshEnabled = kptr.To(false)
		owners, _ := meshOwners(cfg)
		setMeshOwners(cfg, append(owners, st.Name))
		delete(cfg.Annotations, AnnotationMeshRestoredAt)
		if err := r.configs().Patch(ctx, orig, cfg); err != nil {
			return fmt.Errorf("patching BGPConfiguration default: %w", err)
		}
	}
	m.meshOff = true
	st.trans.Drop(transitions.MeshOff)
	r.Recorder.Eventf(st.Policy, corev1.EventTypeNormal, EventMeshDisabled,
		"node-to-node mesh turned off in BGPConfiguration default: every client has its route reflector sessions (%s)", p.Handover)
	return nil
}

// meshReady reports whether every node has route reflectors: in the policy's view, every node is
// a route reflector or a client with a peering set whose every listed route reflector carries its
// role; any other node of the cluster is a route reflector or lists route reflectors (another
// policy's). It returns why not.
func meshReady(p *policy.Resolved, view map[string]*extender.Node, all []*extender.Node) (bool, string) {
	rrs := 0
	for _, n := range view {
		if isCurrentRR(p, n) {
			rrs++
		}
	}
	if rrs == 0 {
		return false, "no route reflector"
	}
	for _, name := range slices.Sorted(maps.Keys(view)) {
		n := view[name]
		if isCurrentRR(p, n) {
			continue
		}
		if why := clientWired(p, view, name); why != "" {
			return false, why
		}
	}
	for _, n := range all {
		if view[n.Name] != nil {
			continue
		}
		if _, ok := policy.ParseClusterID(n.Annotations[extender.AnnotationClusterID]); !ok && n.Annotations[extender.AnnotationRouteReflectors] == "" {
			return false, "node " + n.Name + " has no route reflectors (in no policy)"
		}
	}
	return true, ""
}

// clientWired returns why client name of the view lacks route reflectors: no peering set or
// route reflectors listed, or one listed not carrying its role ("" when it has them all).
func clientWired(p *policy.Resolved, view map[string]*extender.Node, name string) string {
	n := view[name]
	list := n.Annotations[extender.AnnotationRouteReflectors]
	if list == "" || n.Labels[extender.LabelPeeringSet] == "" {
		return "client " + name + " has no route reflectors"
	}
	for _, rr := range strings.Split(list, ",") {
		if v := view[rr]; v == nil || !isCurrentRR(p, v) {
			return "client " + name + ": " + rr + " is not a route reflector yet"
		}
	}
	return ""
}

// meshLayout fingerprints what the clients' sessions to their route reflectors depend on: every
// node's route reflectors and cluster ID (a change restarts or moves sessions the mesh must wait
// for), as a MeshOff record's subject.
func meshLayout(view map[string]*extender.Node) string {
	h := fnv.New64a()
	for _, name := range slices.Sorted(maps.Keys(view)) {
		n := view[name]
		fmt.Fprintf(h, "%s=%s/%s;", name, n.Annotations[extender.AnnotationClusterID], n.Annotations[extender.AnnotationRouteReflectors])
	}
	return fmt.Sprintf("layout@%016x", h.Sum64())
}

// meshReads: the mesh's wait can read the route reflectors' sessions: handover BGPSessions (the
// handover keeps the CalicoNodeStatuses), or bgpHealth keeps one for every route reflector and
// calico-node has reported into one of them. With handover Delay the sessions are then waited for
// as well, transitions.DefaultMax at most.
func meshReads(st *State) bool {
	if verifies(st) {
		return true
	}
	n, reported := 0, false
	for name, node := range st.View {
		if isCurrentRR(st.Managed.Resolved, node) {
			if !st.HealthStatuses[name] {
				return false
			}
			n++
			reported = reported || st.healthReported(name)
		}
	}
	// Statuses nobody reports into (calico-node without CalicoNodeStatus support, a cluster whose
	// calico-node is not running yet) would hold the mesh for transitions.DefaultMax for nothing.
	return n > 0 && reported
}
