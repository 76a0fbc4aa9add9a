package bgpverify

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// ReportStatuses plays calico-node's status reporter for every CalicoNodeStatus (resource gvr)
// of a node of the Lab (but those Silence stopped): status.bgp from the node's BIRD protocol table (empty when BIRD does not
// answer), lastUpdated now. A conflict or a status deleted meanwhile is skipped (the next round
// writes it); other write errors are returned, one per node.
func (l *Lab) ReportStatuses(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource) []error {
	list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []error{fmt.Errorf("listing CalicoNodeStatuses: %w", err)}
	}
	var errs []error
	for _, o := range list.Items {
		node, _, _ := unstructured.NestedString(o.Object, "spec", "node")
		if _, silent := l.silent.Load(node); l.Index(node) < 0 || silent {
			continue
		}
		var peers []any
		var up int64
		for _, p := range l.Peers(node) {
			peers = append(peers, map[string]any{"peerIP": p.PeerIP, "type": string(p.Type), "state": string(p.State), "since": p.Since})
			if p.State == "Established" {
				up++
			}
		}
		// As calico-node serializes apiv3.CalicoNodeBGPStatus: the four counts always.
		bgp := map[string]any{"numberEstablishedV4": up, "numberNotEstablishedV4": int64(len(peers)) - up,
			"numberEstablishedV6": int64(0), "numberNotEstablishedV6": int64(0)}
		if len(peers) > 0 {
			bgp["peersV4"] = peers
		}
		o.Object["status"] = map[string]any{"lastUpdated": time.Now().UTC().Format(time.RFC3339), "bgp": bgp}
		if _, err := dyn.Resource(gvr).Update(ctx, &o, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("writing the CalicoNodeStatus of %s: %w", node, err))
		}
	}
	return errs
}
