package serve_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	libapiv3 "github.com/projectcalico/calico/libcalico-go/lib/apis/v3"
	"github.com/projectcalico/calico/libcalico-go/lib/options"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoetcd"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/reconciler"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// etcdCalicoNode plays calico-node on etcd for every CalicoNodeStatus there: it writes an
// Established IPv4 session, by the peer's Calico BGP address, with every node whose route
// reflectors list the status's node, and
// remembers the nodes it reported for.
type etcdCalicoNode struct {
	mu   sync.Mutex
	seen map[string]bool
	// ipv6: it also writes an Established IPv6 session (peersV6) with every such node that has an
	// IPv6 BGP address (BIRD6 up); off, dual-stack nodes have IPv4 sessions only.
	ipv6 atomic.Bool
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
		var peers, peers6 []apiv3.CalicoNodePeer
		for _, n := range nodes.Items {
			if !slices.Contains(strings.Split(n.Annotations[extender.AnnotationRouteReflectors], ","), o.Spec.Node) {
				continue
			}
			for _, a := range addrs[n.Name] {
				peer := apiv3.CalicoNodePeer{PeerIP: a, Type: apiv3.BGPPeerTypeNodePeer, State: apiv3.BGPSessionStateEstablished, Since: "09:00:00"}
				switch ip := net.ParseIP(a); {
				case ip.To4() != nil:
					peers = append(peers, peer)
				case e.ipv6.Load():
					peers6 = append(peers6, peer)
				}
			}
		}
		o.Status.LastUpdated = metav1.Now()
		o.Status.BGP = apiv3.CalicoNodeBGPStatus{NumberEstablishedV4: len(peers), PeersV4: peers, NumberEstablishedV6: len(peers6), PeersV6: peers6}
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

// TestEtcdDualStackOnRealAPIServerLarge: with the etcd datastore the Kubernetes Nodes carry no Calico
// address; a node's address families are its Calico Node's spec.bgp.ipv4Address and ipv6Address.
// Three IPv4-only nodes (one per zone) join first and become route reflectors; nine dual-stack ones
// join: the cluster is dual-stack, the IPv4-only route reflectors lack IPv6
// (missing-address-family) and are handed over (BGPSessions) to dual-stack nodes, only once each
// moving dual-stack client is Established with them in IPv6 as well as IPv4.
//
// In make test-all: make test proves its parts apart at less cost, the dual-stack handover on
// the Kubernetes datastore (TestDualStackBGPFamiliesOnRealAPIServer) and the handover by sessions
// on etcd (TestEtcdHandoverBGPSessionsOnRealAPIServer).
func TestEtcdDualStackOnRealAPIServerLarge(t *testing.T) {
	testenv.SlowProof(t)
	t.Parallel() // its own API server and product: beside the other live tests, mostly waiting
	w, calicoctl := newEtcdWorld(t)
	w.applyDefaultPolicy(`
  topology: {type: MultiCluster}
  removalDelay: 10m
  handover: BGPSessions
  bgpHealth: {enabled: false}
  behavior: {scaleDown: {stabilizationWindowSeconds: 0}}
`)
	name := func(i int) string { return fmt.Sprintf("node-%02d", i) }
	zone := func(i int) string { return fmt.Sprintf("zone-%c", 'a'+i%3) }
	dual := func(name string) bool { return name >= "node-03" }
	for i := range 12 {
		n := libapiv3.NewNode()
		n.Name = name(i)
		n.Labels = map[string]string{corev1.LabelTopologyZone: zone(i), corev1.LabelHostname: n.Name}
		n.Spec.BGP = &libapiv3.NodeBGPSpec{IPv4Address: fmt.Sprintf("10.1.0.%d/24", i+1)}
		if dual(n.Name) {
			n.Spec.BGP.IPv6Address = fmt.Sprintf("fd00::%x/64", i+1)
		}
		_, err := calicoctl.Client().Nodes().Create(t.Context(), n, options.SetOptions{})
		require.NoError(t, err)
	}
	cn := startEtcdCalicoNode(w, calicoctl)
	for i := range 3 {
		w.joinIP(name(i), zone(i), fmt.Sprintf("10.0.0.%d", i+1))
	}
	w.eventually("the IPv4-only nodes are the route reflectors in etcd", 60*time.Second, func() error {
		s, err := w.etcdState(calicoctl)
		if err != nil {
			return err
		}
		if got := slices.Sorted(maps.Keys(s.rrs)); !slices.Equal(got, []string{name(0), name(1), name(2)}) {
			return fmt.Errorf("route reflectors in etcd %v", got)
		}
		return nil
	})
	var wg sync.WaitGroup
	for i := 3; i < 12; i++ {
		wg.Go(func() { w.joinIP(name(i), zone(i), fmt.Sprintf("10.0.0.%d", i+1)) })
	}
	wg.Wait()
	start := time.Now()
	// The IPv4-only route reflectors drain; their dual-stack clients' IPv6 sessions with the
	// replacements are not up: they keep their role.
	w.eventually("the IPv4-only route reflectors draining", 60*time.Second, func() error {
		snap := w.snapshot()
		for i := range 3 {
			if snap.nodes[name(i)].Annotations[extender.AnnotationDrainingSince] == "" {
				return fmt.Errorf("%s not draining", name(i))
			}
		}
		return nil
	})
	drained := time.Now()
	time.Sleep(6 * time.Second)
	s, err := w.etcdState(calicoctl)
	require.NoError(t, err)
	for i := range 3 {
		require.Contains(t, s.rrs, name(i), "%s handed over while its dual-stack clients had no IPv6 session with the replacements", name(i))
	}
	cn.ipv6.Store(true)
	up := time.Now()
	w.eventually("handed over to dual-stack route reflectors in etcd", 60*time.Second, func() error {
		s, err := w.etcdState(calicoctl)
		if err != nil {
			return err
		}
		for rr := range s.rrs {
			if !dual(rr) {
				return fmt.Errorf("IPv4-only %s still a route reflector in etcd", rr)
			}
		}
		return s.settled(3)
	})
	t.Logf("drained %s after the dual-stack nodes joined; handed over %s after their IPv6 sessions came up (removalDelay 10m)",
		drained.Sub(start).Round(10*time.Millisecond), time.Since(up).Round(10*time.Millisecond))
	for i := range 3 {
		if n := w.snapshot().nodes[name(i)]; n.Labels[extender.LabelPeeringSet] == "" {
			require.Fail(t, fmt.Sprintf("%s is no client: %v", name(i), n.Labels))
		}
	}
}
