package reconciler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		st.trans = m.trans
		return
	}
	src := st.Policy
	fresh := &v1alpha1.RouteReflectorPolicy{}
	if err := r.reader().Get(ctx, client.ObjectKey{Name: st.Name}, fresh); err == nil {
		src = fresh
	}
	m.trans = transitions.FromAPI(src.Status.Transitions, st.Now)
	if seen := src.Status.SessionReportsSeen; seen != nil {
		m.trans.ReportsSeen = seen.Time
	}
	m.persisted, m.persistedSeen = src.Status.Transitions, m.trans.ReportsSeen
	m.loaded, st.trans = true, m.trans
	if n := m.trans.Len(); n > 0 {
		r.Log.Info("transitions resumed from the policy's status", "policy", st.Name, "records", n)
	}
}

// persistTransitions writes the policy's records to its status when they differ from what it
// holds. An error stops the reconcile before the move the records gate.
func (r *Reconciler) persistTransitions(ctx context.Context, st *State) error {
	m := r.memo(st.Name)
	want, seen := st.trans.API(), st.trans.ReportsSeen
	if equality.Semantic.DeepEqual(want, m.persisted) && seen.Equal(m.persistedSeen) {
		return nil
	}
	body, err := json.Marshal(map[string]any{"status": map[string]any{"transitions": want, "sessionReportsSeen": reportsSeen(seen)}})
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
	m.persisted, m.persistedSeen = want, seen
	return nil
}

// confirm confirms the records started at began (Restamp) once their moves' writes are made, or
// failed (err): a call that failed may have landed (a timeout after the API server wrote it), so
// they count from now either way and no wait is shortened; a move not made is made, and started,
// again by a later reconcile. It writes them to the status and returns err joined with that
// write's error.
func (r *Reconciler) confirm(ctx context.Context, st *State, began time.Time, err error) error {
	st.trans.Restamp(began, r.now())
	return errors.Join(err, r.persistTransitions(ctx, st))
}

// reportsSeen is the policy's status.sessionReportsSeen of the records' ReportsSeen (nil: never).
func reportsSeen(at time.Time) *metav1.Time {
	if at.IsZero() {
		return nil
	}
	t := metav1.NewTime(at)
	return &t
}

// expireTransitions drops the records that have run their course and those of nodes that are
// gone (with an Event: a new leader can find such a record in a status written before the node
// was deleted), and comes back when the next runs its course: a settled cluster has nothing else
// to reconcile for, and its status would keep the records.
func (r *Reconciler) expireTransitions(st *State) {
	for _, rec := range st.trans.Expire(st.Now, func(node string) bool { return r.Nodes.Get(node) != nil }) {
		r.Recorder.Eventf(st.Policy, corev1.EventTypeNormal, EventTransitionDropped,
			"%s record of %s (started %s) dropped: the node is gone", rec.Kind, rec.Node, rec.Started.UTC().Format("15:04:05.000"))
	}
	if next := st.trans.NextExpiry(); !next.IsZero() {
		st.requeue(next.Sub(st.Now) + 100*time.Millisecond)
	}
}

// unrecordedRenumber gives a leader that finds cluster-ID changes held and no Renumber record the
// start of the last renumbering from the API: the latest write of this product's field manager to a
// route reflector of the view that keeps its role (its Node's managedFields, read from the API
// server once per leader), when it is less than transitions.DefaultSettle old. A leader of a
// release before the records (0.2.0 staged them in memory) may have renumbered one just before a
// `helm upgrade` took its lease; without this, the new leader's first renumbering went at once. The
// start is kept as that node's Renumber record, persisted with the others, so a leader after this
// one does not read it again.
func (r *Reconciler) unrecordedRenumber(ctx context.Context, st *State, held []nodePatch) {
	m := r.memo(st.Name)
	if m.writesRead || st.trans.Latest(transitions.Renumber) != nil {
		return
	}
	m.writesRead = true
	var node string
	var at time.Time
	for _, name := range slices.Sorted(maps.Keys(st.View)) {
		if !isCurrentRR(st.Managed.Resolved, st.View[name]) || slices.ContainsFunc(held, func(np nodePatch) bool { return np.name == name }) {
			continue
		}
		n := &corev1.Node{}
		if err := r.reader().Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			continue
		}
		if t := productWrite(n.ManagedFields, st.Now); t.After(at) {
			node, at = name, t
		}
	}
	if node == "" {
		return
	}
	// managedFields keep whole seconds: the write was made within the second after at.
	if at = at.Add(time.Second); at.After(st.Now) {
		at = st.Now
	}
	if st.Now.Sub(at) < transitions.DefaultSettle {
		st.trans.Hold(transitions.Renumber, node, at, transitions.DefaultWaits)
		r.Log.Info("a cluster-ID change no record holds: the next waits for it", "policy", st.Name, "node", node, "written", at.UTC().Format(time.RFC3339))
	}
}

// productWrite is the latest time not after now at which a field manager of this product
// (calico-rr-autoscaler, its full build included) updated the object's own fields (not a
// subresource); zero: none.
func productWrite(fields []metav1.ManagedFieldsEntry, now time.Time) time.Time {
	var out time.Time
	for _, f := range fields {
		if !strings.HasPrefix(f.Manager, fieldManagerPrefix) || f.Subresource != "" || f.Time == nil || f.Time.Time.After(now) {
			continue
		}
		if f.Time.Time.After(out) {
			out = f.Time.Time
		}
	}
	return out
}

// fieldManagerPrefix starts the field manager of this product's writes (client-go's default: the
// binary's name).
const fieldManagerPrefix = "calico-rr-autoscaler"
