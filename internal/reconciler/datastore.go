package reconciler

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoetcd"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/sessions"
)

// PeerStore is where Calico reads the BGPPeers: the Kubernetes API (kubePeers, the default) or
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

// CalicoNodes is where Calico reads the route reflector role when it is not the Kubernetes Node
// (the etcd datastore: Calico's Node resources, see calicoetcd.Store).
type CalicoNodes interface {
	// Roles returns the role each Calico Node carries, by node name; a node Calico has not
	// registered is absent.
	Roles(ctx context.Context, owned []string) (map[string]calicoetcd.Role, error)
	// SetRole writes a node's role (only the owned labels and the cluster ID change).
	SetRole(ctx context.Context, name string, owned []string, want calicoetcd.Role) error
	// BGPAddresses returns each Calico Node's BGP addresses (IPv4 first), by node name: the
	// addresses its peers see, which the Kubernetes Node does not carry with this datastore.
	BGPAddresses(ctx context.Context) (map[string][]string, error)
}

// calicoBGPAddresses returns the Calico Nodes' BGP addresses when they are not on the Kubernetes
// Nodes (the etcd datastore) and needed; nil otherwise, or when they cannot be read (the
// Kubernetes Nodes' addresses are used then).
func (r *Reconciler) calicoBGPAddresses(ctx context.Context, needed bool) map[string][]string {
	if r.CalicoNodes == nil || !needed {
		return nil
	}
	a, err := r.CalicoNodes.BGPAddresses(ctx)
	if err != nil {
		r.Log.Error(err, "reading the Calico Nodes' BGP addresses")
		return nil
	}
	return a
}

// peers returns the BGPPeer store in use.
func (r *Reconciler) peers() PeerStore {
	if r.Peers != nil {
		return r.Peers
	}
	return kubePeers{r.Client, r.CRDPeerDeletes}
}

// kubePeers is the Kubernetes datastore's BGPPeers (CRD or v3 API), read from the cache; del,
// when set, deletes them through crd.projectcalico.org (see Reconciler.CRDPeerDeletes).
type kubePeers struct{ c, del client.Client }

func (k kubePeers) List(ctx context.Context, match map[string]string) ([]*apiv3.BGPPeer, error) {
	return listPeers(ctx, k.c, match)
}

// listPeers lists the BGPPeers labelled match through rd (the cache or the API server).
func listPeers(ctx context.Context, rd client.Reader, match map[string]string) ([]*apiv3.BGPPeer, error) {
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

func (k kubePeers) Create(ctx context.Context, p *apiv3.BGPPeer) error { return k.c.Create(ctx, p) }

func (k kubePeers) Update(ctx context.Context, p *apiv3.BGPPeer) error { return k.c.Update(ctx, p) }

func (k kubePeers) Delete(ctx context.Context, p *apiv3.BGPPeer) error {
	if k.del != nil {
		// The same object in the group the Calico API server stores it in (same name and
		// resourceVersion).
		crd := &apiv3.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: p.Name}}
		return k.del.Delete(ctx, crd, client.Preconditions{ResourceVersion: &p.ResourceVersion})
	}
	return k.c.Delete(ctx, p, client.Preconditions{ResourceVersion: &p.ResourceVersion})
}

// ConfigStore is where Calico reads its BGPConfigurations (the node-to-node mesh): the Kubernetes
// API (kubeConfigs, the default) or etcd (calicoetcd.Configs). Errors are the Kubernetes API's.
type ConfigStore interface {
	// Get returns the named BGPConfiguration, or a NotFound error.
	Get(ctx context.Context, name string) (*apiv3.BGPConfiguration, error)
	Create(ctx context.Context, c *apiv3.BGPConfiguration) error
	// Patch writes the changes from orig to c.
	Patch(ctx context.Context, orig, c *apiv3.BGPConfiguration) error
}

// configs returns the BGPConfiguration store in use.
func (r *Reconciler) configs() ConfigStore {
	if r.Configs != nil {
		return r.Configs
	}
	return kubeConfigs{r}
}

// kubeConfigs is the Kubernetes datastore's BGPConfigurations, read without the cache.
type kubeConfigs struct{ r *Reconciler }

func (k kubeConfigs) Get(ctx context.Context, name string) (*apiv3.BGPConfiguration, error) {
	c := &apiv3.BGPConfiguration{}
	if err := k.r.reader().Get(ctx, client.ObjectKey{Name: name}, c); err != nil {
		return nil, err
	}
	return c, nil
}

func (k kubeConfigs) Create(ctx context.Context, c *apiv3.BGPConfiguration) error {
	return k.r.Client.Create(ctx, c)
}

func (k kubeConfigs) Patch(ctx context.Context, orig, c *apiv3.BGPConfiguration) error {
	return k.r.Client.Patch(ctx, c, client.MergeFrom(orig))
}

// statuses returns the owner of the product's CalicoNodeStatuses, in the store in use:
// NodeStatuses, else the Kubernetes API (read without the cache).
func (r *Reconciler) statuses() sessions.Owner {
	store := r.NodeStatuses
	if store == nil {
		store = sessions.Kube{Reader: r.reader(), Writer: r.Client}
	}
	return sessions.Owner{Store: store, APIVersion: r.PeerAPI.String()}
}

// ChangeWatcher is a datastore no informer watches (etcd) that reports its changes: WatchChanges
// calls changed after each until ctx ends.
type ChangeWatcher interface {
	WatchChanges(ctx context.Context, changed func())
}
