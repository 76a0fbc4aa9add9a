package calico

import (
	"context"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PeerStore is where Calico reads the BGPPeers: the Kubernetes API (KubePeers, the default) or
// etcd (calicoetcd.Peers). Errors are the Kubernetes API's (apierrors.IsNotFound, IsAlreadyExists,
// IsConflict) for both.
type PeerStore interface {
	// List returns the BGPPeers that carry every label of match (all of them when it is empty).
	List(ctx context.Context, match map[string]string) ([]*apiv3.BGPPeer, error)
	Create(ctx context.Context, p *apiv3.BGPPeer) error
	// Update writes p at its resource version.
	Update(ctx context.Context, p *apiv3.BGPPeer) error
	// Delete deletes p if it is still at its resource version.
	Delete(ctx context.Context, p *apiv3.BGPPeer) error
}

// KubePeers is the Kubernetes datastore's BGPPeers (CRD or v3 API), read from the cache (Client);
// Deletes, when set, deletes them through crd.projectcalico.org (see Reconciler.CRDPeerDeletes).
type KubePeers struct{ Client, Deletes client.Client }

func (k KubePeers) List(ctx context.Context, match map[string]string) ([]*apiv3.BGPPeer, error) {
	return ListPeers(ctx, k.Client, match)
}

// ListPeers lists the BGPPeers labelled match through rd (the cache or the API server).
func ListPeers(ctx context.Context, rd client.Reader, match map[string]string) ([]*apiv3.BGPPeer, error) {
	list := &apiv3.BGPPeerList{}
	if err := rd.List(ctx, list, client.MatchingLabels(match)); err != nil {
		return nil, err
	}
	out := make([]*apiv3.BGPPeer, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}

func (k KubePeers) Create(ctx context.Context, p *apiv3.BGPPeer) error {
	return k.Client.Create(ctx, p)
}

func (k KubePeers) Update(ctx context.Context, p *apiv3.BGPPeer) error {
	return k.Client.Update(ctx, p)
}

func (k KubePeers) Delete(ctx context.Context, p *apiv3.BGPPeer) error {
	if k.Deletes != nil {
		// The same object in the group the Calico API server stores it in (same name and
		// resourceVersion).
		crd := &apiv3.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: p.Name}}
		return k.Deletes.Delete(ctx, crd, client.Preconditions{ResourceVersion: &p.ResourceVersion})
	}
	return k.Client.Delete(ctx, p, client.Preconditions{ResourceVersion: &p.ResourceVersion})
}

// ConfigStore is where Calico reads its BGPConfigurations (the node-to-node mesh): the Kubernetes
// API (KubeConfigs, the default) or etcd (calicoetcd.Configs). Errors are the Kubernetes API's.
type ConfigStore interface {
	// Get returns the named BGPConfiguration, or a NotFound error.
	Get(ctx context.Context, name string) (*apiv3.BGPConfiguration, error)
	Create(ctx context.Context, c *apiv3.BGPConfiguration) error
	// Patch writes the changes from orig to c.
	Patch(ctx context.Context, orig, c *apiv3.BGPConfiguration) error
}

// KubeConfigs is the Kubernetes datastore's BGPConfigurations, read without the cache (Reader)
// and written through Writer.
type KubeConfigs struct {
	Reader client.Reader
	Writer client.Writer
}

func (k KubeConfigs) Get(ctx context.Context, name string) (*apiv3.BGPConfiguration, error) {
	c := &apiv3.BGPConfiguration{}
	if err := k.Reader.Get(ctx, client.ObjectKey{Name: name}, c); err != nil {
		return nil, err
	}
	return c, nil
}

func (k KubeConfigs) Create(ctx context.Context, c *apiv3.BGPConfiguration) error {
	return k.Writer.Create(ctx, c)
}

func (k KubeConfigs) Patch(ctx context.Context, orig, c *apiv3.BGPConfiguration) error {
	return k.Writer.Patch(ctx, c, client.MergeFrom(orig))
}
