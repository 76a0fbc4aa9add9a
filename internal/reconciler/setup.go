package reconciler

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// Name is the controller's name (in logs and controller-runtime's metrics).
const Name = "routereflectorpolicy"

type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// SetupWithManager registers the reconciler as a leader-elected controller watching policies,
// nodes (relevant changes only) and, with the Kubernetes datastore, the managed BGPPeers.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	r.init()
	c, err := controller.New(Name, mgr, controller.Options{
		Reconciler:              r,
		MaxConcurrentReconciles: 1,
		RateLimiter: workqueue.NewTypedMaxOfRateLimiter(
			workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](100*time.Millisecond, 30*time.Second),
		),
	})
	if err != nil {
		return err
	}
	if err := c.Watch(source.Kind[client.Object](mgr.GetCache(), &v1alpha1.RouteReflectorPolicy{}, handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q queue) {
			r.markFull(e.Object.GetName())
			q.Add(request(e.Object.GetName()))
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q queue) {
			// Status writes come back as events: only spec changes (generation) matter, and the
			// other policies' share of nodes may change with this one's selector.
			if e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() {
				r.enqueueAll(q, 0)
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q queue) {
			r.enqueueAll(q, 0)
			q.Add(request(e.Object.GetName()))
		},
	})); err != nil {
		return err
	}
	if err := c.Watch(source.Kind[client.Object](mgr.GetCache(), &corev1.Node{}, handler.Funcs{
		CreateFunc: func(_ context.Context, _ event.CreateEvent, q queue) { r.enqueueAll(q, r.coalesce()) },
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q queue) {
			// The cache holds records (state.LabelKeys.Transform); anything else is not a node of it.
			old, ok := e.ObjectOld.(*extender.Node)
			cur, ok2 := e.ObjectNew.(*extender.Node)
			if !ok || !ok2 {
				r.enqueue(q, r.coalesce())
				return
			}
			if NodeChanged(old, cur, r.labelRead) {
				r.NodeUpdated(old)
				r.enqueue(q, r.coalesce())
			}
		},
		DeleteFunc: func(_ context.Context, _ event.DeleteEvent, q queue) { r.enqueueAll(q, r.coalesce()) },
	})); err != nil {
		return err
	}
	if err := c.Watch(source.Func(func(ctx context.Context, q queue) error {
		go r.watchBGPHealth(ctx, q)
		return nil
	})); err != nil {
		return err
	}
	if r.Peers != nil {
		// The BGPPeers are not in the Kubernetes API (etcd): a change there (a hand edit, which
		// no admission webhook sees) replans every policy, and the resync catches what a watch
		// missed.
		if r.Changes != nil {
			return c.Watch(source.Func(func(ctx context.Context, q queue) error {
				go r.Changes.WatchChanges(ctx, func() { r.enqueueAll(q, r.coalesce()) })
				return nil
			}))
		}
		return nil
	}
	peer := func(o client.Object, q queue) {
		if l := o.GetLabels(); l[extender.LabelManagedBy] == extender.ManagedByValue && l[extender.LabelPolicy] != "" {
			r.markFull(l[extender.LabelPolicy])
			q.AddAfter(request(l[extender.LabelPolicy]), r.coalesce())
		}
	}
	return c.Watch(source.Kind[client.Object](mgr.GetCache(), &apiv3.BGPPeer{}, handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q queue) { peer(e.Object, q) },
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q queue) { peer(e.ObjectNew, q) },
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q queue) { peer(e.Object, q) },
	}))
}

func request(name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Name: name}}
}

// enqueueAll adds every policy after delay, for a full plan. A key already waiting keeps its
// earlier time, so a burst of node events becomes one reconcile per policy per delay.
func (r *Reconciler) enqueueAll(q queue, delay time.Duration) {
	r.markFull("")
	r.enqueue(q, delay)
}

// enqueue adds every policy after delay.
func (r *Reconciler) enqueue(q queue, delay time.Duration) {
	for _, p := range r.Policies.List() {
		if delay <= 0 {
			q.Add(request(p.Name))
		} else {
			q.AddAfter(request(p.Name), delay)
		}
	}
}

// coalesce is how long a node event waits before its policy is planned: Coalesce, or four times
// the last reconcile's duration when that is longer (at most maxCoalesce). Under an event storm at
// scale the reconciler then takes at most about a fifth of a core and leaves the rest to the
// webhooks and the API server.
func (r *Reconciler) coalesce() time.Duration {
	d := r.Coalesce
	if d <= 0 {
		d = DefaultCoalesce
	}
	busy := min(4*time.Duration(r.lastTook.Load()), maxCoalesce)
	return max(d, busy)
}

// NodeChanged reports whether a node changed in a way a plan reads: a label for which read is
// true, the annotations the cache keeps, unschedulable, taints, the Ready condition (and a graceful
// node shutdown), deletion. A
// kubelet heartbeat is not, nor is a label no policy reads.
func NodeChanged(old, cur *extender.Node, read func(key string) bool) bool {
	return labelsChanged(old.Labels, cur.Labels, read) ||
		!maps.Equal(old.Annotations, cur.Annotations) ||
		old.Spec.Unschedulable != cur.Spec.Unschedulable ||
		!equality.Semantic.DeepEqual(old.Spec.Taints, cur.Spec.Taints) ||
		extender.IsReady(old) != extender.IsReady(cur) || extender.NodeShuttingDown(old) != extender.NodeShuttingDown(cur) ||
		extender.PressureCondition(old) != extender.PressureCondition(cur) ||
		(old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil)
}

// labelsChanged reports whether a label key that read accepts was added, removed or changed.
func labelsChanged(old, cur map[string]string, read func(key string) bool) bool {
	if maps.Equal(old, cur) {
		return false
	}
	for k, v := range cur {
		if ov, ok := old[k]; (!ok || ov != v) && read(k) {
			return true
		}
	}
	for k := range old {
		if _, ok := cur[k]; !ok && read(k) {
			return true
		}
	}
	return false
}

// labelRead reports whether a node label key can change a plan: a key this product owns or one
// a valid policy reads (see policy.Resolved.LabelKeys). A policy's spec change reconciles every
// policy from the cache, so a key a policy starts to read later is not missed.
func (r *Reconciler) labelRead(key string) bool {
	if strings.HasPrefix(key, ownedLabelPrefix) {
		return true
	}
	for _, m := range r.Policies.Valid() {
		if slices.Contains(m.Resolved.LabelKeys(), key) {
			return true
		}
	}
	return false
}

// ownedLabelPrefix starts the node labels this product writes besides a policy's route reflector
// label (extender.LabelRouteReflectorID, extender.LabelPeeringSet).
const ownedLabelPrefix = "routereflector.io/"
