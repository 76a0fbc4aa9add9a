package serve_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/reconciler"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

var (
	nodeStatusGVR = schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: "caliconodestatuses"}
	bgpConfigGVR  = schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: "bgpconfigurations"}
)

// joinIP registers a Ready node with an InternalIP, as a kubelet does.
func (w *world) joinIP(name, zone, ip string) {
	w.t.Helper()
	ctx := w.t.Context()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelTopologyZone: zone, corev1.LabelHostname: name}}}
	created, err := w.kubelet.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	require.NoErrorf(w.t, err, "creating %s", name)
	for {
		now := metav1.Now()
		created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
		created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}
		_, err = w.kubelet.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			break
		}
		created, err = w.kubelet.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		require.NoError(w.t, err)
	}
	require.NoError(w.t, err)
}

// calicoNode plays calico-node for every CalicoNodeStatus: it writes status.bgp.peersV4 with an
// Established session to every node whose route reflectors list the status's node (Active for the
// nodes in down), and tracks how many CalicoNodeStatus objects exist at once (from a watch).
type calicoNode struct {
	w    *world
	mu   sync.Mutex
	down map[string]bool
	// down6: status nodes whose IPv6 sessions are all Active (BIRD6 down, IPv4 up); client6: nodes
	// whose IPv6 sessions are Active on every status.
	down6, client6 map[string]bool
	live           map[string]bool // object name -> exists
	max            int
	seen           map[string]bool // nodes that had one
}

func (w *world) startCalicoNode(down ...string) *calicoNode {
	c := &calicoNode{w: w, down: map[string]bool{}, down6: map[string]bool{}, client6: map[string]bool{}, live: map[string]bool{}, seen: map[string]bool{}}
	for _, d := range down {
		c.down[d] = true
	}
	ctx, cancel := context.WithCancel(w.t.Context())
	w.t.Cleanup(cancel)
	wi, err := w.dyn.Resource(nodeStatusGVR).Watch(ctx, metav1.ListOptions{})
	require.NoError(w.t, err)
	go func() {
		for ev := range wi.ResultChan() {
			o, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			c.mu.Lock()
			switch ev.Type {
			case watch.Added:
				c.live[o.GetName()] = true
				node, _, _ := unstructured.NestedString(o.Object, "spec", "node")
				c.seen[node] = true
			case watch.Deleted:
				delete(c.live, o.GetName())
			}
			c.max = max(c.max, len(c.live))
			c.mu.Unlock()
		}
	}()
	go func() {
		for ctx.Err() == nil {
			c.report(ctx)
			time.Sleep(200 * time.Millisecond)
		}
	}()
	return c
}

func (c *calicoNode) report(ctx context.Context) {
	list, err := c.w.dyn.Resource(nodeStatusGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	nodes, err := c.w.admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, o := range list.Items {
		node, _, _ := unstructured.NestedString(o.Object, "spec", "node")
		// One session per address family of the client, listed as calico-node lists them.
		peers := map[bool][]any{} // IPv4? -> peers
		established := map[bool]int64{}
		for _, n := range nodes.Items {
			if !slices.Contains(strings.Split(n.Annotations[extender.AnnotationRouteReflectors], ","), node) {
				continue
			}
			c.mu.Lock()
			down := c.down[n.Name]
			down6 := c.down6[node] || c.client6[n.Name]
			c.mu.Unlock()
			for _, a := range n.Status.Addresses {
				ip := net.ParseIP(a.Address)
				if a.Type != corev1.NodeInternalIP || ip == nil {
					continue
				}
				v4 := ip.To4() != nil
				state := "Established"
				if down || !v4 && down6 {
					state = "Active"
				} else {
					established[v4]++
				}
				peers[v4] = append(peers[v4], map[string]any{"peerIP": a.Address, "type": "NodePeer", "state": state, "since": "09:00:00"})
			}
		}
		bgp := map[string]any{
			"numberEstablishedV4": established[true], "numberNotEstablishedV4": int64(len(peers[true])) - established[true],
			"numberEstablishedV6": established[false], "numberNotEstablishedV6": int64(len(peers[false])) - established[false],
		}
		if len(peers[true]) > 0 {
			bgp["peersV4"] = peers[true]
		}
		if len(peers[false]) > 0 {
			bgp["peersV6"] = peers[false]
		}
		o.Object["status"] = map[string]any{"lastUpdated": time.Now().UTC().Format(time.RFC3339), "bgp": bgp}
		_, _ = c.w.dyn.Resource(nodeStatusGVR).Update(ctx, &o, metav1.UpdateOptions{})
	}
}

// setIPv6Down sets the IPv6 sessions of a route reflector's status (rr) or of a client on every
// status (client) down or back up; IPv4 stays as it is.
func (c *calicoNode) setIPv6Down(rr, client string, down bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rr != "" {
		c.down6[rr] = down
	}
	if client != "" {
		c.client6[client] = down
	}
}

func (c *calicoNode) stats() (live, maxLive int, seen []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for n := range c.seen {
		seen = append(seen, n)
	}
	slices.Sort(seen)
	return len(c.live), c.max, seen
}

// liveNames are the CalicoNodeStatuses that exist, sorted.
func (c *calicoNode) liveNames() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.live))
}

// reset forgets the nodes seen so far and the maximum (the objects that exist stay counted).
func (c *calicoNode) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.seen)
	c.max = len(c.live)
}

// createBGPConfiguration creates Calico's default BGPConfiguration with the node-to-node mesh on
// or off (AS 64512).
func (w *world) createBGPConfiguration(mesh bool) {
	w.t.Helper()
	cfg := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "crd.projectcalico.org/v1", "kind": "BGPConfiguration",
		"metadata": map[string]any{"name": "default"},
		"spec":     map[string]any{"nodeToNodeMeshEnabled": mesh, "asNumber": int64(64512)},
	}}
	_, err := w.dyn.Resource(bgpConfigGVR).Create(w.t.Context(), cfg, metav1.CreateOptions{})
	require.NoError(w.t, err)
}

func (w *world) applyPolicy(yaml string) {
	w.t.Helper()
	out, stderr, err := w.env.KubectlStdin(w.t, testenv.UserAdmin, yaml, "apply", "-f", "-")
	require.NoError(w.t, err, "apply policy\n%s%s", out, stderr)
}

// applyDefaultPolicy applies the policy named default with the given spec (the YAML lines under
// "spec:", each indented by two spaces).
func (w *world) applyDefaultPolicy(spec string) {
	w.t.Helper()
	w.applyPolicy("apiVersion: routereflector.io/v1alpha1\nkind: RouteReflectorPolicy\nmetadata: {name: default}\nspec:" + spec)
}

func (w *world) joinCluster(n int) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.joinIP(fmt.Sprintf("node-%02d", i), fmt.Sprintf("zone-%c", 'a'+i%3), fmt.Sprintf("10.0.0.%d", i+1))
		}()
	}
	wg.Wait()
}

// waitHandedOver waits until victim is no route reflector and no client is left without one.
func (w *world) waitHandedOver(what, victim string) {
	w.t.Helper()
	w.eventually(what, 60*time.Second, func() error {
		s := w.snapshot()
		if _, ok := s.rrs[victim]; ok {
			return fmt.Errorf("%s still a route reflector", victim)
		}
		if o := s.orphans(); len(o) > 0 {
			return fmt.Errorf("orphans %v", o)
		}
		return nil
	})
}

func (w *world) cordon(names ...string) {
	w.t.Helper()
	for _, n := range names {
		_, stderr, err := w.kubectl(testenv.UserAdmin, "cordon", n)
		require.NoError(w.t, err, "cordon %s %s", n, stderr)
	}
}

func TestHandoverBGPSessionsOnRealAPIServer(t *testing.T) {
	t.Parallel() // its own API server and product: beside the other live tests, mostly waiting
	w := newWorld(t)
	// removalDelay is long: a role can only move by the sessions.
	w.applyDefaultPolicy(`
  topology: {type: MultiCluster}
  minRouteReflectors: 9
  removalDelay: 10m
  handover: BGPSessions
  bgpHealth: {enabled: false}
  behavior: {scaleDown: {stabilizationWindowSeconds: 0}}
`)
	// calico-node reports from the start: nodes turn Ready in any order and the first plans
	// rebalance, which hands route reflectors over too.
	cn := w.startCalicoNode()
	w.joinCluster(30)
	w.eventually("settled on 9 route reflectors", 60*time.Second, func() error { return w.snapshot().settled(9) })

	t.Run("sessions established: the role moves early and the status object is gone", func(t *testing.T) {
		cn.reset()
		victim := slices.Sorted(maps.Keys(w.snapshot().rrs))[0]
		start := time.Now()
		w.cordon(victim)
		w.waitHandedOver("handed over", victim)
		// The cordon rebalances clients across the other route reflectors too, each move
		// make-before-break: held until its new route reflector's sessions are read Established,
		// at most MaxNodeStatuses objects at once. About 20 s on a quiet machine.
		w.eventually("no CalicoNodeStatus left", time.Minute, func() error {
			if live := cn.liveNames(); len(live) > 0 {
				return fmt.Errorf("CalicoNodeStatuses %v", live)
			}
			return nil
		})
		_, maxLive, seen := cn.stats()
		t.Logf("handed over in %s (removalDelay 10m); CalicoNodeStatus for %v, at most %d at once", time.Since(start).Round(10*time.Millisecond), seen, maxLive)
		require.NotEmpty(t, seen, "no CalicoNodeStatus was used")
		// The node's Event: the policy's share one spam-filter budget (25 Events, then one per
		// 5 min), which this cluster's first rebalancing can spend. Events are recorded
		// asynchronously.
		w.eventually("the HandedOver Event on "+victim, 10*time.Second, func() error {
			for _, msg := range w.events("Node", victim, reconciler.EventHandedOver) {
				if strings.Contains(msg, "every moving client has an Established BGP session") {
					return nil
				}
			}
			out, _, _ := w.kubectl(testenv.UserAdmin, "get", "events", "-n", "default", "-o", "jsonpath={range .items[*]}{.reason} {.message}{\"\\n\"}{end}")
			return fmt.Errorf("no HandedOver Event on %s; events: %s", victim, out)
		})
		// Handed over by its sessions, then demoted by the mark moved back: no timeout, whatever
		// route reflectors its clients were rebalanced onto meanwhile.
		require.Empty(t, w.events("Node", victim, reconciler.EventHandoverTimeout), "a HandoverTimeout Event on %s", victim)
	})

	t.Run("four route reflectors handed over at once: at most 3 CalicoNodeStatuses", func(t *testing.T) {
		cn.reset()
		rrs := slices.Sorted(maps.Keys(w.snapshot().rrs))
		victims := rrs[len(rrs)-4:]
		w.cordon(victims...)
		w.eventually("handed over", 90*time.Second, func() error {
			s := w.snapshot()
			for _, v := range victims {
				if _, ok := s.rrs[v]; ok {
					return fmt.Errorf("%s still a route reflector", v)
				}
			}
			return nil
		})
		w.eventually("no CalicoNodeStatus left", time.Minute, func() error {
			if live := cn.liveNames(); len(live) > 0 {
				return fmt.Errorf("CalicoNodeStatuses %v", live)
			}
			return nil
		})
		_, maxLive, seen := cn.stats()
		t.Logf("CalicoNodeStatus for %d nodes %v, at most %d at once", len(seen), seen, maxLive)
		require.Falsef(t, maxLive > reconciler.MaxNodeStatuses, "%d CalicoNodeStatuses at once, bound %d", maxLive, reconciler.MaxNodeStatuses)
		require.Falsef(t, len(seen) <= reconciler.MaxNodeStatuses, "only %d replacements checked: the bound was not exercised", len(seen))
	})
}

// TestHandoverBGPSessionsIPv6OnRealAPIServerLarge: with IPv6-only nodes (calico-node reports peersV6
// only), a cordoned route reflector hands over by its sessions, long before removalDelay (10m).
// In make test-all: make test's TestDualStackBGPFamiliesOnRealAPIServer holds a handover to
// the IPv6 sessions (peersV6) as well as the IPv4 ones.
func TestHandoverBGPSessionsIPv6OnRealAPIServerLarge(t *testing.T) {
	testenv.SlowProof(t)
	t.Parallel() // its own API server and product: beside the other live tests, mostly waiting
	w := newWorld(t)
	w.applyDefaultPolicy(`
  topology: {type: MultiCluster}
  removalDelay: 10m
  handover: BGPSessions
  bgpHealth: {enabled: false}
  behavior: {scaleDown: {stabilizationWindowSeconds: 0}}
`)
	cn := w.startCalicoNode()
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.joinIP(fmt.Sprintf("node-%02d", i), fmt.Sprintf("zone-%c", 'a'+i%3), fmt.Sprintf("fd00::%x", i+1))
		}()
	}
	wg.Wait()
	w.eventually("settled on 3 route reflectors", 60*time.Second, func() error { return w.snapshot().settled(3) })
	victim := slices.Sorted(maps.Keys(w.snapshot().rrs))[0]
	start := time.Now()
	w.cordon(victim)
	w.waitHandedOver("handed over by IPv6 sessions", victim)
	_, _, seen := cn.stats()
	t.Logf("handed over in %s over IPv6 sessions (removalDelay 10m); CalicoNodeStatus for %v", time.Since(start).Round(10*time.Millisecond), seen)
	require.NotEmpty(t, seen, "no CalicoNodeStatus was used")
}

// joinDual registers a dual-stack Ready node (InternalIPs 10.0.0.i and fd00::i) and writes Calico's
// address annotations of both families on it, as calico-node does.
func (w *world) joinDual(i int) string {
	w.t.Helper()
	name := fmt.Sprintf("node-%02d", i)
	w.joinIP(name, fmt.Sprintf("zone-%c", 'a'+i%3), fmt.Sprintf("10.0.0.%d", i+1))
	v6 := fmt.Sprintf("fd00::%x", i+1)
	w.updateStatus(name, func(n *corev1.Node) {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: v6})
	})
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"10.0.0.%d/24",%q:"%s/64"}}}`, extender.AnnotationCalicoIPv4, i+1, extender.AnnotationCalicoIPv6, v6)
	_, err := w.admin.CoreV1().Nodes().Patch(w.t.Context(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(w.t, err)
	return name
}

// TestDualStackBGPFamiliesOnRealAPIServer: a dual-stack cluster joins (12 nodes, Calico addresses
// of both families); calico-node reports peersV4 and peersV6 per route reflector.
//   - A route reflector's IPv6 sessions go down in its CalicoNodeStatus while IPv4 stays up: past
//     bgpHealth.gracePeriod it is replaced (draining, reason BGPDown, Event "IPv6 sessions down")
//     and handed over.
//   - A cordoned route reflector whose moving client has its IPv4 session Established with the
//     replacement but not its IPv6 one keeps its role (removalDelay is 10m); the IPv6 session up,
//     the handover completes.
func TestDualStackBGPFamiliesOnRealAPIServer(t *testing.T) {
	t.Parallel() // its own API server and product: beside the other live tests, mostly waiting
	w := newWorld(t)
	w.applyDefaultPolicy(`
  topology: {type: MultiCluster}
  removalDelay: 10m
  handover: BGPSessions
  bgpHealth: {enabled: true, gracePeriod: 3s}
  behavior: {scaleDown: {stabilizationWindowSeconds: 0}}
`)
	cn := w.startCalicoNode()
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.joinDual(i)
		}()
	}
	wg.Wait()
	w.eventually("settled on 3 route reflectors", 60*time.Second, func() error { return w.snapshot().settled(3) })

	t.Run("IPv6 sessions down, IPv4 up: replaced for its IPv6 clients", func(t *testing.T) {
		victim := slices.Sorted(maps.Keys(w.snapshot().rrs))[0]
		start := time.Now()
		cn.setIPv6Down(victim, "", true)
		var drained time.Duration
		w.eventually("draining with reason BGPDown", 30*time.Second, func() error {
			n := w.snapshot().nodes[victim]
			if r := n.Annotations[extender.AnnotationDrainingReason]; r != extender.DrainingReasonBGPDown {
				return fmt.Errorf("%s draining reason %q", victim, r)
			}
			drained = time.Since(start)
			return nil
		})
		w.waitHandedOver("handed over", victim)
		t.Logf("IPv6 down on %s: draining (BGPDown) after %s, handed over after %s (gracePeriod 3s)", victim,
			drained.Round(10*time.Millisecond), time.Since(start).Round(10*time.Millisecond))
		if drained < 3*time.Second {
			require.Fail(t, fmt.Sprintf("drained after %s, within gracePeriod", drained))
		}
		w.eventually("the RouteReflectorBGPDown Event names IPv6", 10*time.Second, func() error {
			for _, msg := range w.events("Node", victim, reconciler.EventBGPDown) {
				if strings.Contains(msg, "IPv4 sessions Established but IPv6 sessions down since") {
					t.Logf("Event: %s", msg)
					return nil
				}
			}
			return fmt.Errorf("no RouteReflectorBGPDown Event naming IPv6 on %s: %v", victim, w.events("Node", victim, reconciler.EventBGPDown))
		})
		cn.setIPv6Down(victim, "", false)
		w.eventually("settled on 3 route reflectors", 60*time.Second, func() error { return w.snapshot().settled(3) })
	})

	t.Run("a cordon handover waits for both families' sessions", func(t *testing.T) {
		s := w.snapshot()
		victim := slices.Sorted(maps.Keys(s.rrs))[0]
		zone := s.nodes[victim].Labels[corev1.LabelTopologyZone]
		// The victim's clients move to its replacement, one of its zone-mates: the zone-mates' IPv6
		// sessions are down (on every status: the other route reflectors' other IPv6 sessions stay
		// up, so none is BGP-down), so whichever is promoted has lagging clients.
		var lagging []string
		for _, name := range slices.Sorted(maps.Keys(s.nodes)) {
			if _, rr := s.rrs[name]; !rr && s.nodes[name].Labels[corev1.LabelTopologyZone] == zone {
				lagging = append(lagging, name)
			}
		}
		require.GreaterOrEqual(t, len(lagging), 2, "zone-mates of %s", victim)
		for _, l := range lagging {
			cn.setIPv6Down("", l, true)
		}
		start := time.Now()
		w.cordon(victim)
		// The replacement's status shows every IPv4 session and the other IPv6 ones Established: the
		// handover (removalDelay 10m) waits.
		w.eventually("replacement in place", 30*time.Second, func() error {
			s := w.snapshot()
			if len(s.rrs) < 4 {
				return fmt.Errorf("route reflectors %v", s.rrs)
			}
			return nil
		})
		time.Sleep(8 * time.Second)
		if _, ok := w.snapshot().rrs[victim]; !ok {
			require.Fail(t, fmt.Sprintf("%s handed over with %s's IPv6 session down", victim, lagging))
		}
		up := time.Now()
		for _, l := range lagging {
			cn.setIPv6Down("", l, false)
		}
		w.waitHandedOver("handed over once IPv6 is up", victim)
		t.Logf("cordoned %s: still a route reflector %s later with %s's IPv6 session down; handed over %s after it came up",
			victim, up.Sub(start).Round(10*time.Millisecond), lagging, time.Since(up).Round(10*time.Millisecond))
	})
}

func TestHandoverBGPSessionsTimeoutOnRealAPIServer(t *testing.T) {
	t.Parallel() // its own API server and product: beside the other live tests, mostly waiting
	w := newWorld(t)
	w.applyDefaultPolicy(`
  topology: {type: MultiCluster}
  removalDelay: 4s
  handover: BGPSessions
  bgpHealth: {enabled: false}
  behavior: {scaleDown: {stabilizationWindowSeconds: 0}}
`)
	w.joinCluster(12)
	w.eventually("settled on 3 route reflectors", 60*time.Second, func() error { return w.snapshot().settled(3) })
	s := w.snapshot()
	var victim string
	for rr := range s.rrs {
		if s.nodes[rr].Labels[corev1.LabelTopologyZone] == "zone-a" {
			victim = rr
		}
	}
	// Every client but the victim's zone-mates is up: those never establish with the replacement.
	var down []string
	for name, n := range s.nodes {
		if _, rr := s.rrs[name]; !rr && n.Labels[corev1.LabelTopologyZone] == "zone-a" && n.Labels["routereflector.io/rr-id"] == "" {
			down = append(down, name)
		}
	}
	slices.Sort(down)
	cn := w.startCalicoNode(down...)
	start := time.Now()
	w.cordon(victim)
	w.eventually("demoted at the timeout", 30*time.Second, func() error {
		if _, ok := w.snapshot().rrs[victim]; ok {
			return fmt.Errorf("%s still a route reflector", victim)
		}
		return nil
	})
	if d := time.Since(start); d < 4*time.Second {
		require.Fail(t, fmt.Sprintf("demoted after %s, before the timeout", d))
	}
	w.eventually("Degraded HandoverTimeout", 10*time.Second, func() error {
		out, err := w.policyPath("default", "{.status.conditions[?(@.type==\"Degraded\")].reason}")
		if err != nil || out != reconciler.ReasonHandoverTimeout {
			return fmt.Errorf("Degraded reason %q %v", out, err)
		}
		return nil
	})
	out, _, _ := w.kubectl(testenv.UserAdmin, "get", "events", "-n", "default", "--field-selector", "reason=HandoverTimeout", "-o", "jsonpath={range .items[*]}{.type} {.message}{\"\\n\"}{end}")
	t.Logf("events: %s", out)
	var named []string
	for _, d := range down {
		if strings.Contains(out, d) {
			named = append(named, d)
		}
	}
	if !strings.Contains(out, "Warning "+victim+": handover timed out after 4s; clients that never established") || len(named) == 0 {
		require.Fail(t, fmt.Sprintf("events %q do not name the clients that never established (down: %v)", out, down))
	}
	w.eventually("no CalicoNodeStatus left", 20*time.Second, func() error {
		if live, _, _ := cn.stats(); live > 0 {
			return fmt.Errorf("%d CalicoNodeStatuses", live)
		}
		return nil
	})
}

func TestMigrateFromNodeMeshOnRealAPIServer(t *testing.T) {
	t.Parallel() // its own API server and product: beside the other live tests, mostly waiting
	for _, mode := range []string{"Delay", "BGPSessions"} {
		t.Run(mode, func(t *testing.T) { testMigrateFromNodeMesh(t, mode) })
	}
}

// testMigrateFromNodeMesh: installed with migrateFromNodeMesh in Observe on a meshed cluster
// (nothing changes), switched to Enforce: route reflectors, BGPPeers, then the mesh off, with 0
// missing pairs in the graph model (fed the cluster's nodes, BGPPeers and mesh setting) after every
// reconcile.
func testMigrateFromNodeMesh(t *testing.T, handover string) {
	w := newWorld(t)
	ctx := t.Context()
	w.createBGPConfiguration(true)
	meshOn := func() bool {
		o, err := w.dyn.Resource(bgpConfigGVR).Get(ctx, "default", metav1.GetOptions{})
		require.NoError(t, err)
		on, found, _ := unstructured.NestedBool(o.Object, "spec", "nodeToNodeMeshEnabled")
		if asn, _, _ := unstructured.NestedInt64(o.Object, "spec", "asNumber"); asn != 64512 {
			require.Fail(t, fmt.Sprintf("asNumber lost: %v", o.Object["spec"]))
		}
		return !found || on
	}
	var cn *calicoNode
	if handover == "BGPSessions" {
		cn = w.startCalicoNode()
	}
	w.joinCluster(12)
	policy := func(mode string) string {
		return `apiVersion: routereflector.io/v1alpha1
kind: RouteReflectorPolicy
metadata: {name: default}
spec:
  bgpHealth: {enabled: false}
  mode: ` + mode + `
  topology: {type: MultiCluster}
  removalDelay: 3s
  handover: ` + handover + `
  migrateFromNodeMesh: true
`
	}
	// The cluster's nodes and BGPPeers (and the mesh setting) are fed to the graph model after
	// every reconcile, from the install in Observe to the mesh off.
	rc := w.countReconciles(true)
	rc.checkModel(true)
	before := w.clusterObjects()
	first := rc.count()
	w.applyPolicy(policy("Observe"))
	w.eventually("status in Observe", 30*time.Second, func() error {
		if got := w.policyField(`{.status.mode}/{.status.conditions[?(@.type=="Ready")].reason}`); got != "Observe/Observe" {
			return fmt.Errorf("status %q", got)
		}
		return nil
	})
	// The status is written inside the reconcile, before its end counts it: wait for the count.
	w.eventually("a reconcile in Observe", 10*time.Second, func() error {
		if rc.count() == first {
			return errors.New("no reconcile in Observe")
		}
		return nil
	})
	if d := diffObjects(before, w.clusterObjects()); len(d) > 0 || !meshOn() {
		require.Fail(t, fmt.Sprintf("Observe changed the cluster (mesh on %v):\n%s", meshOn(), strings.Join(d, "\n")))
	}
	// Enforce: route reflectors, BGPPeers and the migration in one go.
	w.applyPolicy(policy("Enforce"))
	// Sampled until the mesh is off: at that moment every node is a route reflector or a client of one.
	start := time.Now()
	var offAt time.Time
	w.eventually("mesh turned off", 40*time.Second, func() error {
		s := w.snapshot()
		on := meshOn()
		if !on {
			offAt = time.Now()
			if o := s.orphans(); len(o) > 0 || len(s.clients)+len(s.rrs) != len(s.nodes) {
				require.Fail(t, fmt.Sprintf("mesh off while clients lack route reflectors: orphans %v, %d clients + %d RRs of %d nodes", o, len(s.clients), len(s.rrs), len(s.nodes)))
			}
			return nil
		}
		return fmt.Errorf("mesh on")
	})
	if d := offAt.Sub(start); d < 3*time.Second && handover == "Delay" {
		require.Fail(t, fmt.Sprintf("mesh off %s after the switch to Enforce, before removalDelay", d))
	}
	t.Logf("%s: mesh off %s after the switch to Enforce", handover, offAt.Sub(start).Round(10*time.Millisecond))
	time.Sleep(300 * time.Millisecond) // the hook of the reconcile that turned the mesh off
	if failures := rc.checkModel(false); len(failures) > 0 {
		require.Fail(t, fmt.Sprintf("graph model after reconciles:\n%s", strings.Join(failures, "\n")))
	}
	t.Logf("%s: %d reconciles from Observe to the mesh off, 0 missing pairs after each", handover, rc.count()-first)
	if cn != nil {
		w.eventually("no CalicoNodeStatus left", time.Minute, func() error {
			if live := cn.liveNames(); len(live) > 0 {
				return fmt.Errorf("CalicoNodeStatuses %v", live)
			}
			return nil
		})
		if _, maxLive, seen := cn.stats(); maxLive > reconciler.MaxNodeStatuses || len(seen) == 0 {
			require.Fail(t, fmt.Sprintf("CalicoNodeStatuses: at most %d at once, for %v", maxLive, seen))
		}
	}
}
