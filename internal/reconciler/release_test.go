package reconciler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/releaseplan"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/sessions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// model is the graph model of the fake API server's nodes and BGPPeers, with the mesh on or off.
func (h *harness) model(mesh bool) *bgpmodel.Model {
	h.t.Helper()
	nodes := &corev1.NodeList{}
	require.NoError(h.t, h.client.List(context.Background(), nodes))
	peers := &apiv3.BGPPeerList{}
	require.NoError(h.t, h.client.List(context.Background(), peers))
	ptrs := make([]*extender.Node, len(nodes.Items))
	for i := range nodes.Items {
		ptrs[i] = extender.FromNode(&nodes.Items[i])
	}
	slices.SortFunc(ptrs, func(a, b *extender.Node) int { return strings.Compare(a.Name, b.Name) })
	topo, err := bgpmodel.FromCluster(ptrs, peers.Items, corev1.LabelTopologyZone, bgpmodel.Options{NodeToNodeMesh: mesh})
	require.NoError(h.t, err)
	m, err := topo.Propagate(nil)
	require.NoError(h.t, err)
	return m
}

// releaseRun is what a policy's deletion did, pass by pass, by the graph model.
type releaseRun struct {
	before, after *bgpmodel.Model
	states        []*bgpmodel.Model // after every pass, with the mesh as the BGPConfiguration says
	meshOffRRs    []int             // the route reflectors left after every pass while the mesh was off
	bridges       []string          // the release BGPPeer's selectors whenever one was there
	passes        int
}

// peak is the largest ratio of routes (every node) and sessions (the route reflectors before the
// deletion) to the steady state: per node the larger of before and after.
func (rr *releaseRun) peak() (routes, sessions float64) {
	for _, m := range rr.states {
		for i, n := range m.Nodes {
			if s := max(rr.before.Nodes[i].Routes, rr.after.Nodes[i].Routes); s > 0 {
				routes = max(routes, n.Routes/s)
			}
			if rr.before.Nodes[i].ClusterID != "" {
				s := max(rr.before.Nodes[i].Sessions, rr.after.Nodes[i].Sessions)
				sessions = max(sessions, float64(n.Sessions)/float64(s))
			}
		}
	}
	return routes, sessions
}

// deleteAndRelease deletes the policy and reconciles it until it is gone, the clock moving by what
// each pass asks for; after every pass the graph model (with the mesh as it is) finds every pair.
func (h *harness) deleteAndRelease() *releaseRun {
	h.t.Helper()
	ctx := context.Background()
	run := &releaseRun{before: h.model(!meshOff(h))}
	pol := &v1alpha1.RouteReflectorPolicy{}
	require.NoError(h.t, h.client.Get(ctx, client.ObjectKey{Name: h.policyNm}, pol))
	require.NoError(h.t, h.client.Delete(ctx, pol))
	for run.passes = 1; ; run.passes++ {
		require.Less(h.t, run.passes, 200, "the release does not end")
		h.calicoNodeAllUp()
		wait := h.reconcile()
		off := meshOff(h)
		m := h.model(!off)
		require.Zerof(h.t, m.Summary.MissingPairs, "pass %d (mesh off %v): %d missing pairs, e.g. %v", run.passes, off, m.Summary.MissingPairs, m.MissingPairs(3))
		run.states = append(run.states, m)
		if off {
			run.meshOffRRs = append(run.meshOffRRs, len(h.rrs()))
		}
		list := &apiv3.BGPPeerList{}
		require.NoError(h.t, h.client.List(ctx, list))
		for _, p := range list.Items {
			if p.Name == extender.BGPPeerPrefix+"release."+h.policyNm {
				run.bridges = append(run.bridges, p.Spec.NodeSelector+" -> "+p.Spec.PeerSelector)
			}
		}
		if err := h.client.Get(ctx, client.ObjectKey{Name: h.policyNm}, pol); apierrors.IsNotFound(err) {
			break
		}
		require.Positivef(h.t, wait, "pass %d: the deleted policy is still there and nothing is requeued", run.passes)
		h.now = h.now.Add(wait)
	}
	run.after = h.model(!meshOff(h))
	return run
}

// calicoNodeAllUp reports every CalicoNodeStatus as a calico-node whose BGP sessions with every
// other node are Established (a superset of the sessions any check reads).
func (h *harness) calicoNodeAllUp() {
	h.t.Helper()
	h.reportStatuses(func(cns *apiv3.CalicoNodeStatus, nodes []corev1.Node) {
		cns.Status.BGP.PeersV4, cns.Status.BGP.PeersV6 = nil, nil
		for i := range nodes {
			if nodes[i].Name == cns.Spec.Node {
				continue
			}
			for _, ip := range sessions.NodeIPs(extender.FromNode(&nodes[i])) {
				if sessions.IPFamily(ip) == v6 {
					cns.Status.BGP.PeersV6 = append(cns.Status.BGP.PeersV6, peer(ip, true))
				} else {
					cns.Status.BGP.PeersV4 = append(cns.Status.BGP.PeersV4, peer(ip, true))
				}
			}
		}
	})
}

// migrated is a harness whose policy turned the node-to-node mesh off.
func migrated(t *testing.T, nodes []*corev1.Node, spec func(*v1alpha1.RouteReflectorPolicySpec)) *harness {
	t.Helper()
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.RemovalDelay = &metav1.Duration{Duration: time.Minute}
		s.MigrateFromNodeMesh = true
		if spec != nil {
			spec(s)
		}
	}, nodes)
	h.reconcile()
	h.now = h.now.Add(time.Minute + time.Second)
	h.reconcile()
	require.True(t, meshOff(h), "the policy turned the mesh off")
	require.Zero(t, h.model(false).Summary.MissingPairs)
	return h
}

// twoZoneRacks: n nodes in two zones with InternalIPs, as the 24-node DualPlane case.
func twoZoneRacks(n int) []*corev1.Node {
	var nodes []*corev1.Node
	for i := range n {
		nd := node(fmt.Sprintf("node-%02d", i), fmt.Sprintf("zone-%c", 'a'+i%2), i)
		nd.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.0.0.%d", i+1)}}
		nodes = append(nodes, nd)
	}
	return nodes
}

func dualPlaneRacksOf8(s *v1alpha1.RouteReflectorPolicySpec) {
	s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: ptrTo(int32(8))}
}

// TestPolicyDeletionBoundedRelease: below spec.release.maxMeshNodes the deletion of a policy that
// turned the mesh off goes back to the mesh through one route reflector: the release BGPPeer
// peers the nodes that are not route reflectors with that one alone (never route reflectors of
// distinct cluster IDs with each other), the others go one at a time, the mesh comes back once
// only the keeper is left, then the keeper and the clients go. Every pass loses no pair and no
// node holds more than twice its steady-state routes, no route reflector more than twice its
// sessions: for MultiCluster on 12 nodes and for the DualPlane of 24 nodes in two zones,
// racks of 8 (10 route reflectors, 5 cluster IDs: 117,111 routes on the busiest node with the old
// release BGPPeer).
func TestPolicyDeletionBoundedRelease(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []*corev1.Node
		spec  func(*v1alpha1.RouteReflectorPolicySpec)
		rrs   int
	}{
		{"MultiCluster/12", ipCluster(12), nil, 3},
		{"DualPlane/24 racks of 8", twoZoneRacks(24), dualPlaneRacksOf8, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := migrated(t, tc.nodes, tc.spec)
			require.Len(t, h.rrs(), tc.rrs)
			run := h.deleteAndRelease()
			routes, sessions := run.peak()
			t.Logf("%s: %d passes, busiest node %.0f routes before, %.0f after, peak %.2f times the steady routes, %.2f the route reflectors' sessions",
				tc.name, run.passes, run.before.Summary.MaxRoutesPerNode, run.after.Summary.MaxRoutesPerNode, routes, sessions)
			require.LessOrEqual(t, routes, releaseplan.Bound, "routes")
			require.LessOrEqual(t, sessions, releaseplan.Bound, "sessions")
			require.NotEmpty(t, run.bridges, "a release BGPPeer")
			for _, b := range run.bridges {
				require.Regexp(t, `^!has\(routereflector.io/rr-id\) -> routereflector.io/rr-id in \{'[^',]+'\}$`, b)
			}
			// The mesh came back only once the keeper alone was left; the others went one at a time.
			require.Equal(t, 1, run.meshOffRRs[len(run.meshOffRRs)-1], "route reflectors when the mesh came back: %v", run.meshOffRRs)
			for i := 1; i < len(run.meshOffRRs); i++ {
				require.GreaterOrEqual(t, 1, run.meshOffRRs[i-1]-run.meshOffRRs[i], "route reflectors per pass while the mesh was off: %v", run.meshOffRRs)
			}
			require.False(t, meshOff(h), "the mesh is back on")
			require.Empty(t, h.rrs(), "route reflectors released")
			require.Empty(t, h.peers(), "BGPPeers deleted")
			for _, n := range h.nodes() {
				for _, k := range extender.OwnedLabelKeys("calico-route-reflector") {
					require.NotContains(t, n.Labels, k, n.Name)
				}
				for _, k := range extender.OwnedAnnotationKeys() {
					require.NotContains(t, n.Annotations, k, n.Name)
				}
			}
		})
	}
}

// TestPolicyDeletionKeepsLayout: above spec.release.maxMeshNodes (Auto), or with Keep at any size,
// deleting a policy that turned the mesh off leaves the layout as it is (roles, labels, BGPPeers,
// the mesh off), no longer the product's: the mesh's owners annotation goes, so does the
// finalizer, and a Warning Event says why and how to go back by hand. Peak = steady.
func TestPolicyDeletionKeepsLayout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		release *v1alpha1.Release
		why     string
	}{
		{"above maxMeshNodes", &v1alpha1.Release{MaxMeshNodes: ptrTo(int32(11))},
			"the cluster has 12 nodes, more than spec.release.maxMeshNodes (11): a node-to-node mesh there would hold 11 sessions per node"},
		{"Keep", &v1alpha1.Release{NodeToNodeMesh: v1alpha1.ReleaseMeshKeep}, "spec.release.nodeToNodeMesh is Keep"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := migrated(t, ipCluster(12), func(s *v1alpha1.RouteReflectorPolicySpec) { s.Release = tc.release })
			rrs, peers := h.rrs(), h.peers()
			h.events()
			run := h.deleteAndRelease()
			require.Equal(t, 1, run.passes, "one pass")
			require.True(t, meshOff(h), "the mesh stays off")
			require.Equal(t, rrs, h.rrs(), "the route reflectors stay")
			require.Equal(t, len(peers), len(h.peers()), "the BGPPeers stay")
			routes, sessions := run.peak()
			require.Equal(t, 1.0, routes, "peak routes = steady")
			require.Equal(t, 1.0, sessions, "peak sessions = steady")
			cfg := &apiv3.BGPConfiguration{}
			require.NoError(t, h.client.Get(context.Background(), client.ObjectKey{Name: "default"}, cfg))
			require.NotContains(t, cfg.Annotations, AnnotationMeshDisabledBy, "the mesh is no longer the product's")
			require.Contains(t, h.events(), "Warning "+EventLayoutKept+" "+tc.why+
				": the node-to-node mesh stays off and the route reflectors, their labels and BGPPeers (label routereflector.io/policy=default) stay, no longer managed;"+
				" to go back to the mesh by hand: set nodeToNodeMeshEnabled: true in BGPConfiguration default, wait for the sessions,"+
				" remove the annotation projectcalico.org/RouteReflectorClusterID and the labels calico-route-reflector, routereflector.io/rr-id, routereflector.io/peering-set, routereflector.io/uplink-set, routereflector.io/top-level from the nodes, then delete the BGPPeers")
		})
	}
}

// TestPolicyDeletionThresholdIsTheClusters: spec.release.maxMeshNodes counts the nodes of the
// cluster (the mesh spans them all), and Restore turns the mesh back on above it: with 120 nodes
// (more than the default 100) Auto keeps the layout and Restore goes back to the mesh within the
// bounds.
func TestPolicyDeletionThresholdIsTheClusters(t *testing.T) {
	for _, mode := range []v1alpha1.ReleaseMesh{"", v1alpha1.ReleaseMeshRestore} {
		t.Run(string(mode), func(t *testing.T) {
			h := migrated(t, ipCluster(120), func(s *v1alpha1.RouteReflectorPolicySpec) {
				if mode != "" {
					s.Release = &v1alpha1.Release{NodeToNodeMesh: mode}
				}
			})
			rrs := h.rrs()
			run := h.deleteAndRelease()
			routes, sessions := run.peak()
			t.Logf("%q: %d passes, peak %.2f times the steady routes, %.2f the sessions", mode, run.passes, routes, sessions)
			require.LessOrEqual(t, routes, releaseplan.Bound)
			require.LessOrEqual(t, sessions, releaseplan.Bound)
			if mode == "" {
				require.True(t, meshOff(h), "the mesh stays off above 100 nodes")
				require.Equal(t, rrs, h.rrs())
				return
			}
			require.False(t, meshOff(h), "Restore: the mesh is back on")
			require.Empty(t, h.rrs())
		})
	}
}

// TestRestoresMesh: the decision by size and field.
func TestRestoresMesh(t *testing.T) {
	resolved, errs := policy.Resolve(policy.Default("default"))
	require.NoError(t, errs.ToAggregate())
	require.Equal(t, v1alpha1.ReleaseMeshAuto, resolved.ReleaseMesh)
	require.Equal(t, 100, resolved.MaxMeshNodes)
	p := *resolved
	for _, tc := range []struct {
		mode  v1alpha1.ReleaseMesh
		max   int
		nodes int
		want  bool
	}{
		{v1alpha1.ReleaseMeshAuto, 100, 100, true},
		{v1alpha1.ReleaseMeshAuto, 100, 101, false},
		{v1alpha1.ReleaseMeshAuto, 700, 650, true},
		{v1alpha1.ReleaseMeshRestore, 100, 65000, true},
		{v1alpha1.ReleaseMeshKeep, 100, 3, false},
	} {
		p.ReleaseMesh, p.MaxMeshNodes = tc.mode, tc.max
		got, why := releaseplan.RestoresMesh(&p, tc.nodes)
		require.Equalf(t, tc.want, got, "%s, max %d, %d nodes: %s", tc.mode, tc.max, tc.nodes, why)
		require.Equal(t, got, why == "", why)
	}
}

// TestPoliciesDeletedAtOnceBoundedRelease: two policies over two pools (DualPlane, racks of 10,
// their own route reflector labels), both with migrateFromNodeMesh, deleted at once as the
// chart's uninstall does. Each goes through a keeper (a top-level route reflector: only those
// reach the other policy's); after every pass of either, the graph model finds every pair and no
// node holds more than twice its steady state; both end, with the mesh back on.
func TestPoliciesDeletedAtOnceBoundedRelease(t *testing.T) {
	h := twoPolicies(t, twoPools(12), func(s *v1alpha1.RouteReflectorPolicySpec) {
		pool := "a"
		if s.NodeSelector.MatchLabels["pool-b"] == "true" {
			pool = "b"
		}
		s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: ptrTo(int32(10))}
		s.RouteReflectorLabel = &v1alpha1.Label{Key: "rr-" + pool}
		s.RemovalDelay = &metav1.Duration{Duration: 2 * time.Second}
		s.MigrateFromNodeMesh = true
	})
	// The mesh goes off once the layout has stood transitions.DefaultSettle with its sessions
	// settled (migrate.go).
	for i := 0; i < 20 && !meshOff(h); i++ {
		h.reconcileBoth()
		h.now = h.now.Add(3 * time.Second)
	}
	require.True(t, meshOff(h))
	run := &releaseRun{before: h.model(false)}
	ctx := context.Background()
	for _, n := range []string{"default", "b"} {
		pol := &v1alpha1.RouteReflectorPolicy{}
		require.NoError(t, h.client.Get(ctx, client.ObjectKey{Name: n}, pol))
		require.NoError(t, h.client.Delete(ctx, pol))
	}
	var events []string
	for run.passes = 1; ; run.passes++ {
		events = append(events, h.events()...)
		require.Less(t, run.passes, 100, "the release does not end: %v", events)
		left := 0
		for _, name := range []string{"default", "b"} {
			pol := &v1alpha1.RouteReflectorPolicy{}
			if err := h.client.Get(ctx, client.ObjectKey{Name: name}, pol); apierrors.IsNotFound(err) {
				continue
			}
			left++
			h.policyNm = name
			h.calicoNodeAllUp()
			h.reconcile()
			m := h.model(!meshOff(h))
			require.Zerof(t, m.Summary.MissingPairs, "pass %d of %s (mesh off %v): e.g. %v", run.passes, name, meshOff(h), m.MissingPairs(3))
			run.states = append(run.states, m)
			if testing.Verbose() {
				t.Logf("pass %d %s: mesh off %v, keeper %q, route reflectors %d", run.passes, name, meshOff(h), pol.Annotations[AnnotationReleaseKeeper], m.Summary.RouteReflectors)
			}
		}
		if left == 0 {
			break
		}
		h.now = h.now.Add(time.Second)
	}
	require.False(t, meshOff(h), "the mesh is back on")
	require.Empty(t, h.peers(), "BGPPeers deleted")
	run.after = h.model(true)
	routes, sessions := run.peak()
	t.Logf("%d passes: busiest node %.0f routes before, %.0f after, peak %.2f times the steady routes, %.2f the sessions",
		run.passes, run.before.Summary.MaxRoutesPerNode, run.after.Summary.MaxRoutesPerNode, routes, sessions)
	require.LessOrEqual(t, routes, releaseplan.Bound, "routes")
	require.LessOrEqual(t, sessions, releaseplan.Bound, "sessions")
	require.NotContains(t, strings.Join(append(events, h.events()...), "\n"), EventLayoutKept)
}

// TestPolicyDeletionMeshOnBoundedRelease: a policy that never turned the mesh off (the mesh on all
// along) is released the same way: no route reflector meshes with another of a distinct cluster
// ID through the release BGPPeer, no pair is lost at any pass, and every node stays within twice
// its steady state (the 24-node DualPlane, racks of 8).
func TestPolicyDeletionMeshOnBoundedRelease(t *testing.T) {
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.RemovalDelay = &metav1.Duration{Duration: time.Minute}
		dualPlaneRacksOf8(s)
	}, twoZoneRacks(24))
	h.reconcile()
	require.False(t, meshOff(h))
	require.Len(t, h.rrs(), 10)
	run := h.deleteAndRelease()
	routes, sessions := run.peak()
	t.Logf("%d passes: busiest node %.0f routes before, %.0f after, peak %.2f times the steady routes, %.2f the sessions",
		run.passes, run.before.Summary.MaxRoutesPerNode, run.after.Summary.MaxRoutesPerNode, routes, sessions)
	require.LessOrEqual(t, routes, releaseplan.Bound, "routes")
	require.LessOrEqual(t, sessions, releaseplan.Bound, "sessions")
	for _, b := range run.bridges {
		require.Regexp(t, `^!has\(routereflector.io/rr-id\) -> routereflector.io/rr-id in \{'[^',]+'\}$`, b)
	}
	require.Empty(t, h.rrs())
	require.Empty(t, h.peers())
}

// TestPolicyDeletionWaitsForKeeperSessions: a deleted policy's route reflectors other than the
// keeper lose their role only once calico-node reports the keeper's sessions to every node the
// release BGPPeer gives it Established (releasesessions.go), however long removalDelay was; past
// transitions.DefaultMax the release goes on. On the live lab (TestTransitionsHistoryOnRealBIRD
// (f)) a keeper's session came up 6 s after the release BGPPeer, and the release at removalDelay (3
// s) left a client without any session for 2.6 s.
func TestPolicyDeletionWaitsForKeeperSessions(t *testing.T) {
	h := migrated(t, ipCluster(12), nil)
	rrs := h.rrs()
	ctx := context.Background()
	pol := &v1alpha1.RouteReflectorPolicy{}
	require.NoError(t, h.client.Get(ctx, client.ObjectKey{Name: h.policyNm}, pol))
	require.NoError(t, h.client.Delete(ctx, pol))
	h.reconcile() // the release BGPPeer to the keeper
	require.NoError(t, h.client.Get(ctx, client.ObjectKey{Name: h.policyNm}, pol))
	keeper := pol.Annotations[AnnotationReleaseKeeper]
	require.NotEmpty(t, keeper)
	require.Contains(t, h.nodeStatuses(), keeper, "the keeper's CalicoNodeStatus, written with the release BGPPeer")
	var late string // a client whose session with the keeper is not up yet
	for _, n := range h.nodes() {
		if _, rr := rrs[n.Name]; !rr && late == "" {
			late = n.Name
		}
	}
	lateIP := sessions.NodeIPs(extender.FromNode(h.node(late)))[0]
	start := h.now.Add(time.Minute) // removalDelay
	for h.now = start; h.now.Sub(start) < transitions.DefaultMax-2*time.Second; h.now = h.now.Add(5 * time.Second) {
		h.calicoNodeAllUp()
		h.reportStatuses(func(cns *apiv3.CalicoNodeStatus, _ []corev1.Node) {
			if cns.Spec.Node == keeper {
				for i, p := range cns.Status.BGP.PeersV4 {
					if p.PeerIP == lateIP {
						cns.Status.BGP.PeersV4[i].State = apiv3.BGPSessionStateActive
					}
				}
			}
		})
		require.Positive(t, h.reconcile())
		require.Equalf(t, rrs, h.rrs(), "a route reflector released at %v while the keeper's session to %s is down", h.now.Sub(start), late)
	}
	h.calicoNodeAllUp()
	h.reconcile()
	require.Len(t, h.rrs(), len(rrs)-1, "one route reflector released once every session of the keeper is up")
	for range 40 {
		h.now = h.now.Add(5 * time.Second)
		h.calicoNodeAllUp()
		h.reconcile()
		if err := h.client.Get(ctx, client.ObjectKey{Name: h.policyNm}, pol); apierrors.IsNotFound(err) {
			break
		}
	}
	require.True(t, apierrors.IsNotFound(h.client.Get(ctx, client.ObjectKey{Name: h.policyNm}, pol)), "the release ends")
	require.Empty(t, h.nodeStatuses(), "the deleted policy's CalicoNodeStatuses go with it")
}
