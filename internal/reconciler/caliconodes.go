package reconciler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoetcd"
)

// EventDriftReverted: a hand change to a Calico Node or a managed BGPPeer in etcd (which no
// admission webhook sees) was reverted. On the Kubernetes Node, or on the policy for a BGPPeer.
const EventDriftReverted = "CalicoDriftReverted"

// syncCalicoNodes (the etcd datastore) writes the role each of the policy's nodes carries on its
// Kubernetes Node, as the nodes and demote steps left it, to its Calico Node: route reflectors
// first, then clients, then the nodes that lose the role, each phase finished before the next (the
// order patchNodes keeps). A Calico Node that differs from what was last written or seen there in
// sync was changed by hand: it is reverted, with an Event on the Kubernetes Node naming the
// change. A node Calico has not registered yet is skipped and retried; the product never creates a
// Calico Node.
func (r *Reconciler) syncCalicoNodes(ctx context.Context, st *State) error {
	if r.CalicoNodes == nil {
		return nil
	}
	return r.writeCalicoRoles(ctx, st, true, false)
}

// releaseCalicoRoles (a deleted policy, the mesh back on) takes the roles off the policy's Calico
// Nodes: route reflectors first (without a cluster ID a node joins the mesh), then clients, as the
// cleanup does on the Kubernetes Nodes. The plan's order (clients before demotions) would leave
// clients with neither their peering set nor mesh sessions to the route reflectors meanwhile.
func (r *Reconciler) releaseCalicoRoles(ctx context.Context, st *State) error {
	return r.writeCalicoRoles(ctx, st, false, true)
}

type calicoWrite struct {
	name       string
	have, want calicoetcd.Role
	drift      bool
}

// writeCalicoRoles writes the view's roles to the Calico Nodes (report: a difference from what was
// last written is drift, reported; demoteFirst: the nodes losing the role go with the route
// reflectors, before the clients).
func (r *Reconciler) writeCalicoRoles(ctx context.Context, st *State, report, demoteFirst bool) error {
	owned := extender.OwnedLabelKeys(st.Managed.Resolved.RRLabelKey)
	have, err := r.CalicoNodes.Roles(ctx, owned)
	if err != nil {
		return fmt.Errorf("reading Calico Nodes: %w", err)
	}
	var phases [3][]calicoWrite
	missing := 0
	for _, name := range slices.Sorted(maps.Keys(st.View)) {
		want := calicoetcd.RoleOfNode(owned, st.View[name])
		cur, ok := have[name]
		if !ok {
			missing++
			continue
		}
		if cur.Equal(want) {
			r.calicoSynced(name, &want)
			continue
		}
		w := calicoWrite{name: name, have: cur, want: want}
		if last, ok := r.calicoLast(name); ok && report && last.Equal(want) {
			w.drift = true
		}
		phase := 1
		switch {
		case want.ClusterID != "":
			phase = 0
		case cur.ClusterID != "" && demoteFirst:
			phase = 0
		case cur.ClusterID != "":
			phase = 2
		}
		phases[phase] = append(phases[phase], w)
	}
	if missing > 0 {
		st.requeue(r.resync()) // calico-node registers them: retried at the next resync
	}
	for _, phase := range phases {
		if err := r.applyCalicoWrites(ctx, st, owned, phase); err != nil {
			return err
		}
	}
	return nil
}

// applyCalicoWrites writes a phase with a few workers.
func (r *Reconciler) applyCalicoWrites(ctx context.Context, st *State, owned []string, ws []calicoWrite) error {
	var mu sync.Mutex // st
	return inParallel(ws, func(w calicoWrite) error {
		err := r.CalicoNodes.SetRole(ctx, w.name, owned, w.want)
		switch {
		case errors.Is(err, calicoetcd.ErrNoCalicoNode):
			mu.Lock()
			st.requeue(r.resync())
			mu.Unlock()
			return nil
		case err != nil:
			return err
		}
		r.calicoSynced(w.name, &w.want)
		calicoNodeWrites.WithLabelValues(st.Name).Inc()
		if w.drift {
			driftReverted.WithLabelValues(st.Name, "Node").Inc()
			mu.Lock()
			ref := nodeRef(w.name, st.View[w.name])
			mu.Unlock()
			r.Recorder.Event(ref, corev1.EventTypeWarning, EventDriftReverted,
				"Calico Node in etcd changed by hand, reverted: "+strings.Join(calicoetcd.Diff(w.have, w.want), "; "))
		}
		return nil
	})
}

// calicoSynced records the role a Calico Node was last written with or seen in sync with (nil
// forgets it).
func (r *Reconciler) calicoSynced(name string, role *calicoetcd.Role) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calicoRoles == nil {
		r.calicoRoles = map[string]calicoetcd.Role{}
	}
	if role == nil {
		delete(r.calicoRoles, name)
		return
	}
	r.calicoRoles[name] = *role
}

func (r *Reconciler) calicoLast(name string) (calicoetcd.Role, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	role, ok := r.calicoRoles[name]
	return role, ok
}

// peerSynced records the BGPPeer this reconciler last wrote or saw as planned (nil forgets it).
func (r *Reconciler) peerSynced(name string, p *apiv3.BGPPeer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calicoPeers == nil {
		r.calicoPeers = map[string]*apiv3.BGPPeer{}
	}
	if p == nil {
		delete(r.calicoPeers, name)
		return
	}
	r.calicoPeers[name] = p
}

// peerDrift says how a managed BGPPeer was changed by hand: it differs from want (or is gone)
// while want is what was last written or seen there; "" when it is not drift. In the Kubernetes
// API the guard refuses such changes, but not all of them (its failurePolicy Ignore, the webhook
// down, or a write it never sees); there the BGPPeers are read from the cache, which may lag the
// product's own write: the Event is reported only after the revert was written, which a stale
// read makes fail (a conflict or AlreadyExists).
func (r *Reconciler) peerDrift(have, want *apiv3.BGPPeer) string {
	r.mu.Lock()
	last := r.calicoPeers[want.Name]
	r.mu.Unlock()
	if last == nil || calico.Differs(last, want) {
		return ""
	}
	if r.Peers == nil {
		if have == nil {
			return fmt.Sprintf("BGPPeer %s deleted by hand, recreated", want.Name)
		}
		return fmt.Sprintf("BGPPeer %s changed by hand, reverted: %s", want.Name, strings.Join(calico.Diff(have, want), "; "))
	}
	if have == nil {
		return fmt.Sprintf("BGPPeer %s deleted from etcd by hand, recreated", want.Name)
	}
	return fmt.Sprintf("BGPPeer %s in etcd changed by hand, reverted: %s", want.Name, strings.Join(calico.Diff(have, want), "; "))
}
