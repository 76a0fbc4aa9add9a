package reconciler

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// The moves in flight (internal/transitions) live in the policy's status, status.transitions: the
// policy's own state, read with it by `kubectl get -o yaml`, gone with it, written with the
// status rights the product has anyway, and present through a deleted policy's release (its
// finalizer holds it). A leader writes a move's record there before the move (persistTransitions,
// a merge patch of that field alone); the load step of a new leader's first reconcile of the
// policy reads them back from the API server, not the cache (loadTransitions), so that no wait is
// shortened by a status the cache has not caught up with.

// EventTransitionDropped names a record dropped because its node is gone.
const EventTransitionDropped = "TransitionDropped"

// loadTransitions seeds the policy's records from its status on this leader's first reconcile of
// it.
func (r *Reconciler) loadTransitions(ctx context.Context, st *State) {
	m := r.memo(st.Name)
	if m.loaded {
		return
	}
	src := st.Policy
	fresh := &v1alpha1.RouteReflectorPolicy{}
	if err := r.reader().Get(ctx, client.ObjectKey{Name: st.Name}, fresh); err == nil {
		src = fresh
	}
	m.trans = transitions.FromAPI(src.Status.Transitions, st.Now)
	m.persisted = src.Status.Transitions
	m.loaded, m.loadedAt = true, st.Now
	if n := m.trans.Len(); n > 0 {
		r.Log.Info("transitions resumed from the policy's status", "policy", st.Name, "records", n)
	}
}

// persistTransitions writes the policy's records to its status when they differ from what it
// holds. An error stops the reconcile before the move the records gate.
func (r *Reconciler) persistTransitions(ctx context.Context, st *State) error {
	m := r.memo(st.Name)
	want := m.trans.API()
	if equality.Semantic.DeepEqual(want, m.persisted) {
		return nil
	}
	body, err := json.Marshal(map[string]any{"status": map[string]any{"transitions": want}})
	if err != nil {
		return err
	}
	pol := st.Policy.DeepCopy()
	if err := r.Client.Status().Patch(ctx, pol, client.RawPatch(types.MergePatchType, body)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // gone: nothing left to gate
		}
		return fmt.Errorf("writing the transitions to the policy's status: %w", err)
	}
	m.persisted = want
	return nil
}

// expireTransitions drops the records that have run their course and those of nodes that are
// gone (with an Event: a new leader can find such a record in a status written before the node
// was deleted).
func (r *Reconciler) expireTransitions(st *State) {
	m := r.memo(st.Name)
	for _, rec := range m.trans.Expire(st.Now, func(node string) bool { return r.Nodes.Get(node) != nil }) {
		r.Recorder.Eventf(st.Policy, corev1.EventTypeNormal, EventTransitionDropped,
			"%s record of %s (started %s) dropped: the node is gone", rec.Kind, rec.Node, rec.Started.UTC().Format("15:04:05.000"))
	}
}
