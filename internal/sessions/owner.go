package sessions

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// The CalicoNodeStatus objects the product keeps.
const (
	// Period is the updatePeriodSeconds of the CalicoNodeStatus objects.
	Period = 10
	// Prefix starts the names of the CalicoNodeStatus objects (then the node's name).
	Prefix = extender.BGPPeerPrefix + "handover-"
)

// Owner owns every CalicoNodeStatus the product keeps: one per node it reads (class BGP, updated
// every Period seconds), carrying the managed-by and policy labels, for BGP health, the handover's
// and the other transitions' waits and the release's keeper alike.
type Owner struct {
	Store Store
	// APIVersion is the group version the objects are written in (that of Calico's BGPPeers).
	APIVersion string
}

// List lists the CalicoNodeStatuses the product keeps for policy.
func (o Owner) List(ctx context.Context, policy string) ([]*apiv3.CalicoNodeStatus, error) {
	return o.Store.List(ctx, map[string]string{extender.LabelManagedBy: extender.ManagedByValue, extender.LabelPolicy: policy})
}

// Object is policy's CalicoNodeStatus of node, as written.
func (o Owner) Object(policy, node string) *apiv3.CalicoNodeStatus {
	period := uint32(Period)
	return &apiv3.CalicoNodeStatus{
		TypeMeta: metav1.TypeMeta{APIVersion: o.APIVersion, Kind: apiv3.KindCalicoNodeStatus},
		ObjectMeta: metav1.ObjectMeta{Name: Name(node),
			Labels: map[string]string{extender.LabelManagedBy: extender.ManagedByValue, extender.LabelPolicy: policy}},
		Spec: apiv3.CalicoNodeStatusSpec{Node: node, Classes: []apiv3.NodeStatusClassType{apiv3.NodeStatusClassTypeBGP}, UpdatePeriodSeconds: &period},
	}
}

// Create creates policy's CalicoNodeStatus of node; one already there is no error.
func (o Owner) Create(ctx context.Context, policy, node string) error {
	if err := o.Store.Create(ctx, o.Object(policy, node)); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// Sync keeps one CalicoNodeStatus per node of want, at most bound at once (the first in name
// order; the rest wait), deletes the others of list (policy's, as List returns them) but those of
// the nodes of outside, which stay outside the bound, and returns the present ones by node (those
// of outside included). On an error it returns what is present so far.
func (o Owner) Sync(ctx context.Context, policy string, list []*apiv3.CalicoNodeStatus, want []string, outside map[string]bool, bound int) (map[string]*apiv3.CalicoNodeStatus, error) {
	have := map[string]*apiv3.CalicoNodeStatus{}
	var haveNodes []string
	for _, s := range list {
		have[s.Spec.Node] = s
		haveNodes = append(haveNodes, s.Spec.Node)
	}
	want = slices.DeleteFunc(slices.Clone(want), func(n string) bool { return outside[n] })
	haveNodes = slices.DeleteFunc(haveNodes, func(n string) bool { return outside[n] })
	create, del := Plan(want, haveNodes, bound)
	for _, n := range del {
		if err := o.Store.Delete(ctx, have[n]); err != nil && !apierrors.IsNotFound(err) {
			return have, fmt.Errorf("deleting CalicoNodeStatus %s: %w", have[n].Name, err)
		}
		delete(have, n)
	}
	for _, n := range create {
		obj := o.Object(policy, n)
		if err := o.Store.Create(ctx, obj); err != nil {
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			return have, fmt.Errorf("creating CalicoNodeStatus %s: %w", obj.Name, err)
		}
		have[n] = obj
	}
	return have, nil
}

// DeleteAll deletes the CalicoNodeStatuses the product keeps for policy (BGP health's, the
// handover's, the keeper's). Without the CalicoNodeStatus API there is none.
func (o Owner) DeleteAll(ctx context.Context, policy string) error {
	list, err := o.List(ctx, policy)
	if err != nil {
		if Unavailable(err) {
			return nil
		}
		return fmt.Errorf("listing CalicoNodeStatuses: %w", err)
	}
	for _, s := range list {
		if err := o.Store.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting CalicoNodeStatus %s: %w", s.Name, err)
		}
	}
	return nil
}

// Name is Prefix and the node's name, shortened with a hash when too long.
func Name(node string) string {
	name := Prefix + node
	if len(name) <= 253 {
		return name
	}
	h := fnv.New64a()
	h.Write([]byte(node))
	return fmt.Sprintf("%s-%016x", name[:253-17], h.Sum64())
}

// Plan decides which CalicoNodeStatus objects to create and delete: those of nodes no
// longer wanted go, those wanted and present stay, and new ones fill the free places up to bound,
// in name order.
func Plan(want, have []string, bound int) (create, del []string) {
	want = slices.Sorted(slices.Values(want))
	kept := 0
	for _, n := range slices.Sorted(slices.Values(have)) {
		if slices.Contains(want, n) && kept < bound {
			kept++
			continue
		}
		del = append(del, n)
	}
	for _, n := range want {
		if kept >= bound {
			break
		}
		if !slices.Contains(have, n) {
			create = append(create, n)
			kept++
		}
	}
	return create, del
}
