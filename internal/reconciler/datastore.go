package reconciler

import (
	"context"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoetcd"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/sessions"
)

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
func (r *Reconciler) peers() calico.PeerStore {
	if r.Peers != nil {
		return r.Peers
	}
	return calico.KubePeers{Client: r.Client, Deletes: r.CRDPeerDeletes}
}

// configs returns the BGPConfiguration store in use.
func (r *Reconciler) configs() calico.ConfigStore {
	if r.Configs != nil {
		return r.Configs
	}
	return calico.KubeConfigs{Reader: r.reader(), Writer: r.Client}
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
