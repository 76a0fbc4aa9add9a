package reconciler

import (
	"context"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
)

// applyPeers creates the plan's missing BGPPeers and updates those that differ (compared before
// any write), before any node is labelled with the peering set a BGPPeer selects.
func (r *Reconciler) applyPeers(ctx context.Context, st *State) error {
	list := &apiv3.BGPPeerList{}
	if err := r.Client.List(ctx, list, client.MatchingLabels{extender.LabelManagedBy: extender.ManagedByValue, extender.LabelPolicy: st.Name}); err != nil {
		return err
	}
	cur := map[string]*apiv3.BGPPeer{}
	for i := range list.Items {
		p := &list.Items[i]
		st.Peers = append(st.Peers, p)
		cur[p.Name] = p
	}
	for _, want := range st.Result.BGPPeers {
		obj := calico.BGPPeer(r.PeerAPI, want)
		have, ok := cur[want.Name]
		if !ok {
			err := r.Client.Create(ctx, obj)
			if apierrors.IsAlreadyExists(err) {
				st.requeue(handoverRetry) // the cache is behind: compare on the next pass
				continue
			}
			if err != nil {
				return err
			}
			peerWrites.WithLabelValues(st.Name, "create").Inc()
			continue
		}
		if upd, changed := calico.NeedsUpdate(have, obj); changed {
			if err := r.Client.Update(ctx, upd); err != nil {
				if apierrors.IsConflict(err) {
					st.requeue(handoverRetry)
					continue
				}
				return err
			}
			peerWrites.WithLabelValues(st.Name, "update").Inc()
		}
	}
	return nil
}

// prunePeers deletes the policy's managed BGPPeers the plan no longer has, once no node is
// labelled with the peering set they select.
func (r *Reconciler) prunePeers(ctx context.Context, st *State) error {
	want := map[string]bool{}
	for _, p := range st.Result.BGPPeers {
		want[p.Name] = true
	}
	var inUse map[[2]string]bool // the (set label, set) nodes still carry, read only when a BGPPeer is obsolete
	for _, p := range st.Peers {
		if want[p.Name] {
			continue
		}
		if inUse == nil {
			inUse = map[[2]string]bool{}
			for _, n := range st.View {
				for _, k := range [...]string{extender.LabelPeeringSet, extender.LabelUplinkSet} {
					if s := n.Labels[k]; s != "" {
						inUse[[2]string{k, s}] = true
					}
				}
			}
		}
		if key, set, ok := extender.SetLabelOf(p.Name); ok && inUse[[2]string{key, set}] {
			st.requeue(handoverRetry)
			continue
		}
		if err := r.Client.Delete(ctx, p, client.Preconditions{ResourceVersion: &p.ResourceVersion}); err != nil && !apierrors.IsNotFound(err) {
			if apierrors.IsConflict(err) {
				st.requeue(handoverRetry)
				continue
			}
			return err
		}
		peerWrites.WithLabelValues(st.Name, "delete").Inc()
	}
	return nil
}
