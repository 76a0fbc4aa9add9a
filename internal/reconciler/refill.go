package reconciler

import (
	"context"
	"fmt"
	"strings"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	corev1 "k8s.io/api/core/v1"
)

// EventCacheRefilling: the node cache lists the nodes again for a label key it dropped.
const EventCacheRefilling = "CacheRefilling"

// refillRetry is how often a policy waiting for the node cache's refill is looked at again.
const refillRetry = 500 * time.Millisecond

// waitRefill ends the reconcile when the node cache does not hold every label key the policies
// and the BGPPeers read on every node (state.LabelKeys): the cache keeps only the keys the product
// reads, so a key a policy starts to read (a new nodeSelector, preferredNodeSelector, zone or rack
// label) is missing from the cached nodes until the cache has listed them again. A plan on them
// would see a selector match nothing, and release or demote nodes that only seem unselected; so
// nothing is planned, released or cleaned up while the cache refills (a few seconds: the time of a
// list of the nodes). The policy's Ready condition says so (CacheRefilling), with a log line and
// an Event once per refill.
func (r *Reconciler) waitRefill(ctx context.Context, st *State) bool {
	if r.LabelKeys == nil {
		return false
	}
	for _, p := range r.Policies.List() {
		if res, errs := r.Policies.Resolve(p); len(errs) == 0 {
			r.LabelKeys.Want(res.LabelKeys()...)
		}
	}
	pending := r.LabelKeys.Refilling()
	if len(pending) == 0 {
		return false
	}
	st.Done, st.Refilling = true, pending
	st.requeue(refillRetry)
	gen := r.LabelKeys.Generation()
	r.mu.Lock()
	first := r.refillNoted != gen
	r.refillNoted = gen
	r.mu.Unlock()
	if first {
		r.Log.Info("node cache refilling: no plan until it holds the label keys on every node", "policy", st.Name, "keys", pending)
		r.Recorder.Eventf(st.Policy, corev1.EventTypeNormal, EventCacheRefilling, "%s", refillMessage(pending))
	}
	if st.Policy.DeletionTimestamp != nil {
		return true
	}
	if err := r.status(ctx, st); err != nil {
		r.Log.Error(err, "status while the node cache refills", "policy", st.Name)
	}
	return true
}

func refillMessage(keys []string) string {
	return fmt.Sprintf("the node cache is listing the nodes again to keep the label keys %s, which a policy or a BGPPeer started to read; nothing is planned until it holds them on every node",
		strings.Join(keys, ", "))
}

// wantPeerKeys adds the label keys the BGPPeers' selectors name to the cache's (the etcd
// datastore's BGPPeers reach the cache's set here only; an informer adds the Kubernetes API's).
func (r *Reconciler) wantPeerKeys(peers []*apiv3.BGPPeer) {
	if r.LabelKeys == nil {
		return
	}
	for _, p := range peers {
		if added := r.LabelKeys.WantSelectors(p.Spec.NodeSelector, p.Spec.PeerSelector); len(added) > 0 {
			r.Log.Info("node label keys added: the node cache lists the nodes again", "bgppeer", p.Name, "keys", added)
		}
	}
}
