package serve_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico/libcalico-go/lib/options"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoetcd"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/reconciler"
)

// etcdCalicoNode plays calico-node on etcd for every CalicoNodeStatus there: it writes an
// Established IPv4 session, by the peer's Calico BGP address, with every node whose route
// reflectors list the status's node, and
// remembers the nodes it reported for.
type etcdCalicoNode struct {
	mu   sync.Mutex
	seen map[string]bool
}

func startEtcdCalicoNode(w *world, c *calicoetcd.Store) *etcdCalicoNode {
	e := &etcdCalicoNode{seen: map[string]bool{}}
	ctx, cancel := context.WithCancel(w.t.Context())
	w.t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			e.report(ctx, w, c)
			time.Sleep(200 * time.Millisecond)
		}
	}()
	return e
}

func (e *etcdCalicoNode) report(ctx context.Context, w *world, c *calicoetcd.Store) {
	list, err := c.Client().CalicoNodeStatus().List(ctx, options.ListOptions{})
	if err != nil {
		return
	}
	nodes, err := w.admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	addrs, err := c.BGPAddresses(ctx) // the peers' BGP addresses, as calico-node sees them
	if err != nil {
		return
	}
	for i := range list.Items {
		o := &list.Items[i]
		var peers []apiv3.CalicoNodePeer
		for _, n := range nodes.Items {
			if !slices.Contains(strings.Split(n.Annotations[extender.AnnotationRouteReflectors], ","), o.Spec.Node) {
				continue
			}
			for _, a := range addrs[n.Name] {
				if ip := net.ParseIP(a); ip.To4() != nil {
					peers = append(peers, apiv3.CalicoNodePeer{PeerIP: a, Type: apiv3.BGPPeerTypeNodePeer, State: apiv3.BGPSessionStateEstablished, Since: "09:00:00"})
				}
			}
		}
		o.Status.LastUpdated = metav1.Now()
		o.Status.BGP = apiv3.CalicoNodeBGPStatus{NumberEstablishedV4: len(peers), PeersV4: peers}
		if _, err := c.Client().CalicoNodeStatus().Update(ctx, o, options.SetOptions{}); err == nil {
			e.mu.Lock()
			e.seen[o.Spec.Node] = true
			e.mu.Unlock()
		}
	}
}

// TestEtcdHandoverBGPSessionsOnRealAPIServer: with the etcd datastore and handover BGPSessions,
// the CalicoNodeStatus of a cordoned route reflector's replacement is created in etcd, where
// calico-node reports sessions by the Calico Nodes' BGP addresses (not the Kubernetes Nodes'
// InternalIPs); the role moves on them, long before removalDelay (10m), and the CalicoNodeStatus
// goes. Nothing of it reaches the Kubernetes API.
func TestEtcdHandoverBGPSessionsOnRealAPIServer(t *testing.T) {
	t.Parallel() // its own API server and product: beside the other live tests, mostly waiting
	w, calicoctl := newEtcdWorld(t)
	w.applyDefaultPolicy(`
  topology: {type: MultiCluster}
  removalDelay: 10m
  handover: BGPSessions
  bgpHealth: {enabled: false}
  behavior: {scaleDown: {stabilizationWindowSeconds: 0}}
`)
	for i := range 18 {
		// Calico's BGP addresses (10.1.0.x) are not the Kubernetes Nodes' InternalIPs (10.0.0.x).
		registerCalicoNode(t, calicoctl, fmt.Sprintf("node-%02d", i), fmt.Sprintf("zone-%c", 'a'+i%3), fmt.Sprintf("10.1.0.%d", i+1))
	}
	cn := startEtcdCalicoNode(w, calicoctl)
	w.joinCluster(18)
	var s *etcdState
	var err error
	w.eventually("settled in etcd", 90*time.Second, func() error {
		if s, err = w.etcdState(calicoctl); err != nil {
			return err
		}
		return s.settled(3)
	})
	victim := slices.Sorted(maps.Keys(s.rrs))[0]
	start := time.Now()
	w.cordon(victim)
	w.awaitHandedOverInEtcd(calicoctl, victim, 60*time.Second)
	w.eventually("no CalicoNodeStatus left in etcd", 20*time.Second, func() error {
		l, err := calicoctl.NodeStatuses().List(t.Context(), nil)
		if err != nil || len(l) > 0 {
			return fmt.Errorf("%d CalicoNodeStatuses %v", len(l), err)
		}
		return nil
	})
	cn.mu.Lock()
	seen := slices.Sorted(maps.Keys(cn.seen))
	cn.mu.Unlock()
	t.Logf("handed over in %s (removalDelay 10m); CalicoNodeStatus in etcd for %v", time.Since(start).Round(10*time.Millisecond), seen)
	require.NotEmpty(t, seen, "no CalicoNodeStatus was used")
	if ev := w.events("RouteReflectorPolicy", "default", reconciler.EventHandedOver); len(ev) == 0 {
		require.Fail(t, "no HandedOver Event")
	}
	if l, err := w.dyn.Resource(nodeStatusGVR).List(t.Context(), metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
		require.Fail(t, fmt.Sprintf("CalicoNodeStatuses in the Kubernetes API: %v %v", l, err))
	}
}
