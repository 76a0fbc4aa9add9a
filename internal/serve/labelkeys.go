package serve

import (
	"context"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoetcd"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// seedLabelKeys reads the policies and the BGPPeers from the API server (or etcd) before the cache
// starts, so that the first list of the nodes keeps the label keys they read. A failure is only
// logged: the informers' handlers (wantLabelKeys) add the keys once they deliver the objects, and
// the cache lists the nodes again.
func seedLabelKeys(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, etcd *calicoetcd.Store, keys *state.LabelKeys) {
	log := ctrl.Log.WithName("serve")
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		log.Info("node label keys: no client to read the policies; keys are added as the cache reads them", "error", err.Error())
		return
	}
	pols := &v1alpha1.RouteReflectorPolicyList{}
	if err := c.List(ctx, pols); err != nil {
		log.Info("node label keys: policies not read; keys are added as the cache reads them", "error", err.Error())
	}
	for i := range pols.Items {
		wantPolicy(keys, &pols.Items[i])
	}
	var peers []*apiv3.BGPPeer
	if etcd != nil {
		peers, err = etcd.Peers().List(ctx, nil)
	} else {
		list := &apiv3.BGPPeerList{}
		err = c.List(ctx, list)
		for i := range list.Items {
			peers = append(peers, &list.Items[i])
		}
	}
	if err != nil {
		log.Info("node label keys: BGPPeers not read; keys are added as the cache reads them", "error", err.Error())
	}
	for _, p := range peers {
		keys.WantSelectors(p.Spec.NodeSelector, p.Spec.PeerSelector)
	}
	kept, all := keys.Keys()
	log.Info("node label keys the cache keeps", "keys", kept, "all", all, "policies", len(pols.Items), "bgppeers", len(peers))
}

// wantPolicy adds the label keys a valid policy reads.
func wantPolicy(keys *state.LabelKeys, p *v1alpha1.RouteReflectorPolicy) {
	if r, errs := policy.Resolve(p); len(errs) == 0 {
		keys.Want(r.LabelKeys()...)
	}
}

// wantLabelKeys adds the keys of every policy (and, with peers, BGPPeer) the cache delivers, on
// every replica: the policy webhook of a replica without the lease reads node labels too.
func wantLabelKeys(ctx context.Context, c cache.Cache, pols *state.Policies, keys *state.LabelKeys, peers bool) error {
	log := ctrl.Log.WithName("serve")
	noted := func(kind, name string, added []string) {
		if len(added) > 0 {
			log.Info("node label keys added: the node cache lists the nodes again", "kind", kind, "name", name, "keys", added)
		}
	}
	onPolicy := func(obj any) {
		if p, ok := obj.(*v1alpha1.RouteReflectorPolicy); ok {
			if r, errs := pols.Resolve(p); len(errs) == 0 {
				noted("RouteReflectorPolicy", p.Name, keys.Want(r.LabelKeys()...))
			}
		}
	}
	inf, err := c.GetInformer(ctx, &v1alpha1.RouteReflectorPolicy{})
	if err != nil {
		return err
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    onPolicy,
		UpdateFunc: func(_, cur any) { onPolicy(cur) },
	}); err != nil {
		return err
	}
	if !peers {
		return nil // etcd: the reconciler adds the BGPPeers' keys as it reads them
	}
	onPeer := func(obj any) {
		if p, ok := obj.(*apiv3.BGPPeer); ok {
			noted("BGPPeer", p.Name, keys.WantSelectors(p.Spec.NodeSelector, p.Spec.PeerSelector))
		}
	}
	pinf, err := c.GetInformer(ctx, &apiv3.BGPPeer{})
	if err != nil {
		return err
	}
	_, err = pinf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    onPeer,
		UpdateFunc: func(_, cur any) { onPeer(cur) },
	})
	return err
}
