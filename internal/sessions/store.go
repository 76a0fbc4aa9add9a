package sessions

import (
	"context"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Store is where calico-node reports BGP sessions (CalicoNodeStatus): the Kubernetes API (Kube,
// the default) or etcd (calicoetcd.NodeStatuses). Errors are the Kubernetes API's.
type Store interface {
	// List returns the CalicoNodeStatuses that carry every label of match, with their status.
	List(ctx context.Context, match map[string]string) ([]*apiv3.CalicoNodeStatus, error)
	Create(ctx context.Context, s *apiv3.CalicoNodeStatus) error
	Delete(ctx context.Context, s *apiv3.CalicoNodeStatus) error
}

// Unavailable reports whether err says the CalicoNodeStatus API cannot be used here (not
// served, or no right to it), as opposed to a failure worth retrying.
func Unavailable(err error) bool {
	return meta.IsNoMatchError(err) || apierrors.IsNotFound(err) || apierrors.IsForbidden(err)
}

// Kube is the Kubernetes datastore's CalicoNodeStatuses, read without the cache (Reader) and
// written through Writer.
type Kube struct {
	Reader client.Reader
	Writer client.Writer
}

func (k Kube) List(ctx context.Context, match map[string]string) ([]*apiv3.CalicoNodeStatus, error) {
	list := &apiv3.CalicoNodeStatusList{}
	if err := k.Reader.List(ctx, list, client.MatchingLabels(match)); err != nil {
		return nil, err
	}
	out := make([]*apiv3.CalicoNodeStatus, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}

func (k Kube) Create(ctx context.Context, s *apiv3.CalicoNodeStatus) error {
	return k.Writer.Create(ctx, s)
}

func (k Kube) Delete(ctx context.Context, s *apiv3.CalicoNodeStatus) error {
	return k.Writer.Delete(ctx, s)
}
