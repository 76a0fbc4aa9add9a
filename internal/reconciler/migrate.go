package reconciler

import (
	"context"
	"fmt"
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
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// EventMeshDisabled is recorded on the policy when it turns Calico's node-to-node mesh off.
const EventMeshDisabled = "NodeToNodeMeshDisabled"

// meshPending: migrateFromNodeMesh is on, the mesh is not known to be off, and every client has
// its route reflectors in place (the condition the sessions are then checked for).
func (r *Reconciler) meshPending(st *State, m *handoverMemo) bool {
	if !st.Managed.Resolved.MigrateFromNodeMesh || m.meshOff {
		return false
	}
	ok, _ := meshReady(st.Managed.Resolved, st.View, r.Nodes.List())
	return ok
}

// migrateMesh sets nodeToNodeMeshEnabled: false in the default BGPConfiguration (created when
// missing), with the policy among its owners (AnnotationMeshDisabledBy, see meshowners.go: the
// mesh comes back on when the last owner is deleted), once every client has its route reflector sessions: with BGPSessions, every Ready
// client seen Established by each of its route reflectors; else removalDelay after every client
// was first seen with its peering set and route reflectors in place. Any moment a client lacks
// route reflectors starts that wait again; the mesh is never turned off before.
func (r *Reconciler) migrateMesh(ctx context.Context, st *State) error {
	p := st.Managed.Resolved
	m := r.memo(st.Name)
	if !p.MigrateFromNodeMesh {
		m.meshSince, m.meshOff = time.Time{}, false
		return nil
	}
	if m.meshOff {
		return nil
	}
	if ok, why := meshReady(p, st.View, r.Nodes.List()); !ok {
		r.Log.V(1).Info("node-to-node mesh kept", "policy", st.Name, "reason", why)
		m.meshSince = time.Time{}
		return nil
	}
	if m.meshSince.IsZero() {
		m.meshSince = st.Now
	}
	if p.Handover == v1alpha1.HandoverBGPSessions {
		clients := clientsByRR(st)
		if rest := unverified(m, clients, slices.Collect(maps.Keys(clients))); len(rest) > 0 {
			st.requeue(handoverRetry)
			return nil
		}
	} else if wait := m.meshSince.Add(p.RemovalDelay).Sub(st.Now); wait > 0 {
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
	r.Recorder.Eventf(st.Policy, corev1.EventTypeNormal, EventMeshDisabled,
		"node-to-node mesh turned off in BGPConfiguration default: every client has its route reflector sessions (%s)", p.Handover)
	return nil
}

// meshReady reports whether every node has route reflectors: in the policy's view, every node is
// a route reflector or a client with a peering set whose every listed route reflector carries its
// role; any other node of the cluster is a route reflector or lists route reflectors (another
// policy's). It returns why not.
func meshReady(p *policy.Resolved, view map[string]*corev1.Node, all []*corev1.Node) (bool, string) {
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
		list := n.Annotations[extender.AnnotationRouteReflectors]
		if list == "" || n.Labels[extender.LabelPeeringSet] == "" {
			return false, "client " + name + " has no route reflectors"
		}
		for _, rr := range strings.Split(list, ",") {
			if v := view[rr]; v == nil || !isCurrentRR(p, v) {
				return false, "client " + name + ": " + rr + " is not a route reflector yet"
			}
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
