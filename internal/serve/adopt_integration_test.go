package serve_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/reconciler"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// handBuiltPeers are BGPPeers as operators write them for hand-picked route reflectors: a full
// mesh among the route reflectors and every other node peering with all of them.
const handBuiltPeers = `apiVersion: crd.projectcalico.org/v1
kind: BGPPeer
metadata: {name: rr-mesh}
spec: {nodeSelector: has(calico-route-reflector), peerSelector: has(calico-route-reflector)}
---
apiVersion: crd.projectcalico.org/v1
kind: BGPPeer
metadata: {name: peer-to-rrs}
spec: {nodeSelector: "!has(calico-route-reflector)", peerSelector: has(calico-route-reflector)}
`

// handRRs are the route reflectors picked by hand, one per zone.
var handRRs = []string{"node-03", "node-04", "node-05"}

// clusterObjects returns every Node's labels and annotations and every BGPPeer's labels and spec,
// as JSON by name: what the product may write.
func (w *world) clusterObjects() map[string]string {
	w.t.Helper()
	ctx := w.t.Context()
	out := map[string]string{}
	nodes, err := w.admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(w.t, err)
	for _, n := range nodes.Items {
		b, _ := json.Marshal([]any{n.Labels, n.Annotations})
		out["node/"+n.Name] = string(b)
	}
	peers, err := w.dyn.Resource(bgpPeersGVR).List(ctx, metav1.ListOptions{})
	require.NoError(w.t, err)
	for _, p := range peers.Items {
		b, _ := json.Marshal([]any{p.GetLabels(), p.Object["spec"]})
		out["bgppeer/"+p.GetName()] = string(b)
	}
	return out
}

func diffObjects(before, after map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(before)) {
		if after[k] != before[k] {
			out = append(out, fmt.Sprintf("%s: %s -> %s", k, before[k], after[k]))
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			out = append(out, "new "+k+": "+after[k])
		}
	}
	return out
}

// reconcileCounter counts the reconciles and, when check is set, feeds the cluster's nodes and
// BGPPeers to the graph model after each one.
type reconcileCounter struct {
	mu      sync.Mutex
	n       int
	check   bool
	missing []string // failures: "reconcile 12: 40 missing pairs"
	// readMesh: the model follows the default BGPConfiguration's nodeToNodeMeshEnabled (else off).
	readMesh bool
}

func (w *world) countReconciles(readMesh bool) *reconcileCounter {
	c := &reconcileCounter{readMesh: readMesh}
	w.rep.srv.Reconciler.SetAfterReconcile(func(string) {
		c.mu.Lock()
		c.n++
		n, check := c.n, c.check
		c.mu.Unlock()
		if !check {
			return
		}
		opts := bgpmodel.Options{}
		var err error
		if c.readMesh {
			opts.NodeToNodeMesh, err = w.meshEnabled()
		}
		var missing int64
		if err == nil {
			missing, _, _, err = w.routingStateWith(opts)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		switch {
		case err != nil:
			c.missing = append(c.missing, fmt.Sprintf("reconcile %d: reading the cluster: %v", n, err))
		case missing > 0:
			c.missing = append(c.missing, fmt.Sprintf("reconcile %d: %d node pairs miss each other's routes", n, missing))
		}
	})
	w.t.Cleanup(func() { w.rep.srv.Reconciler.SetAfterReconcile(nil) })
	return c
}

func (c *reconcileCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// checkModel turns the graph model check after every reconcile on; it returns the failures so far.
func (c *reconcileCounter) checkModel(on bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.check = on
	return slices.Clone(c.missing)
}

// waitReconciles waits for n more reconciles.
func (w *world) waitReconciles(c *reconcileCounter, n int) {
	w.t.Helper()
	start := c.count()
	// What the callers check is what the reconciles do, not how soon they come: under a loaded
	// make test (its API server took 9 s to start) 30 s once passed with none (2026-11-27; alone
	// the whole test takes 13-15 s).
	w.eventually(fmt.Sprintf("%d reconciles", n), 90*time.Second, func() error {
		if got := c.count() - start; got < n {
			return fmt.Errorf("%d reconciles", got)
		}
		return nil
	})
}

func (w *world) policyField(jsonpath string) string {
	w.t.Helper()
	out, err := w.policyPath("default", jsonpath)
	require.NoErrorf(w.t, err, "get rrp default")
	return out
}

// policyPath prints the named policy as `kubectl get rrp <name> -o jsonpath=<template>` does,
// read through the API without a kubectl process (testenv.Env.JSONPath): for polls.
func (w *world) policyPath(name, template string) (string, error) {
	return w.env.JSONPath(w.t.Context(), v1alpha1.GroupVersion.WithResource("routereflectorpolicies"), "", name, template)
}

// TestAdoptHandBuiltClusterOnRealAPIServer: a 100-node cluster with 3 hand-labelled route
// reflectors and hand-written BGPPeers (the mesh off). In Observe nothing but the policy status,
// Events and admission warnings change; in Enforce the hand-picked route reflectors keep their
// role and, with adoptBGPPeers, the hand-written BGPPeers go once the product's cover them, with 0
// missing pairs in the graph model after every reconcile; Paused keeps a cordoned route reflector
// and still refuses a label removal below the minimum.
func TestAdoptHandBuiltClusterOnRealAPIServer(t *testing.T) {
	t.Parallel() // its own API server and product: beside the other live tests, mostly waiting
	w := newWorld(t)
	w.createBGPConfiguration(false)
	w.joinCluster(100)
	for _, rr := range handRRs {
		if _, stderr, err := w.kubectl(testenv.UserAdmin, "label", "node", rr, "calico-route-reflector="); err != nil {
			require.Fail(t, fmt.Sprintf("label %s: %v %s", rr, err, stderr))
		}
		if _, stderr, err := w.kubectl(testenv.UserAdmin, "annotate", "node", rr, extender.AnnotationClusterID+"=244.0.0.1"); err != nil {
			require.Fail(t, fmt.Sprintf("annotate %s: %v %s", rr, err, stderr))
		}
	}
	if out, stderr, err := w.env.KubectlStdin(t, testenv.UserAdmin, handBuiltPeers, "apply", "-f", "-"); err != nil {
		require.Fail(t, fmt.Sprintf("apply BGPPeers: %v\n%s%s", err, out, stderr))
	}
	if missing, _, _, err := w.routingState(); err != nil || missing != 0 {
		require.Fail(t, fmt.Sprintf("the hand-built cluster: %d missing pairs, %v", missing, err))
	}
	policy := func(mode string) string {
		return `apiVersion: routereflector.io/v1alpha1
kind: RouteReflectorPolicy
metadata: {name: default}
spec:
  mode: ` + mode + `
  topology: {type: MultiCluster}
  removalDelay: 2s
  adoptBGPPeers: true
  behavior: {scaleDown: {stabilizationWindowSeconds: 0}}
`
	}
	rc := w.countReconciles(false)

	t.Run("Observe: only the status, Events and warnings change", func(t *testing.T) {
		before := w.clusterObjects()
		first := rc.count()
		w.applyPolicy(policy("Observe"))
		w.eventually("status in Observe", 30*time.Second, func() error {
			if got := w.policyField(`{.status.mode}/{.status.conditions[?(@.type=="ForeignBGPPeers")].message}`); got != "Observe/2 BGPPeers not written by calico-rr-autoscaler, left as they are: peer-to-rrs, rr-mesh" {
				return fmt.Errorf("status %q", got)
			}
			return nil
		})
		// A label removal Enforce would refuse: kubectl prints the warning, the change is made.
		want := `policy "default" is in Observe mode: Enforce would refuse this change: metadata.labels[calico-route-reflector]: Invalid value: [min-route-reflectors] removing the route reflector label from node-03 would leave 2 route reflectors`
		// The validator counts the route reflectors in the product's node cache: a server-side dry
		// run first waits until it holds the hand-made ones (once, under a loaded make test, it had
		// not yet and counted 0).
		w.eventually("the webhook's cache holds the hand-made route reflectors", 30*time.Second, func() error {
			_, stderr, err := w.kubectl(testenv.UserAlice, "label", "--dry-run=server", "node", "node-03", "calico-route-reflector-")
			if err != nil || !strings.Contains(stderr, "Warning: "+want) {
				return fmt.Errorf("dry run: %v %s", err, stderr)
			}
			return nil
		})
		_, stderr, err := w.kubectl(testenv.UserAlice, "label", "node", "node-03", "calico-route-reflector-")
		require.NoError(t, err, "kubectl label in Observe")
		require.Contains(t, stderr, "Warning: "+want, "kubectl label in Observe")
		if _, stderr, err := w.kubectl(testenv.UserAlice, "label", "node", "node-03", "calico-route-reflector="); err != nil {
			require.Fail(t, fmt.Sprintf("label back: %v %s", err, stderr))
		}
		// More reconciles: a client cordoned and uncordoned (Enforce would keep it a client).
		for _, verb := range []string{"cordon", "uncordon"} {
			if _, stderr, err := w.kubectl(testenv.UserAdmin, verb, "node-50"); err != nil {
				require.Fail(t, fmt.Sprintf("%s: %v %s", verb, err, stderr))
			}
			w.waitReconciles(rc, 1)
		}
		if n := rc.count() - first; n < 3 {
			require.Fail(t, fmt.Sprintf("%d reconciles in Observe", n))
		}
		if d := diffObjects(before, w.clusterObjects()); len(d) > 0 {
			require.Fail(t, fmt.Sprintf("Observe changed the cluster:\n%s", strings.Join(d, "\n")))
		}
		if got := w.policyField(`{.status.pendingChanges}`); !strings.Contains(got, "BGPPeers\"") ||
			!strings.Contains(got, "delete hand-written BGPPeer peer-to-rrs once calico-rr-autoscaler's BGPPeers cover it") {
			require.Fail(t, fmt.Sprintf("pendingChanges %s", got))
		}
		out, _, _ := w.kubectl(testenv.UserAdmin, "get", "events", "-n", "default", "--field-selector", "reason="+reconciler.EventWouldChange, "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
		require.Truef(t, strings.Contains(out, "Observe: Enforce would "), "WouldChange events: %q", out)
		t.Logf("Observe: %d reconciles, %d Nodes and BGPPeers unchanged; Events:\n%s", rc.count()-first, len(before), out)
	})

	t.Run("Enforce: the hand-picked RRs stay, the hand-written BGPPeers go once covered, 0 missing pairs after every reconcile", func(t *testing.T) {
		rc.checkModel(true)
		start := time.Now()
		w.applyPolicy(policy("Enforce"))
		var goneAt time.Time
		w.eventually("hand-written BGPPeers adopted and settled", 60*time.Second, func() error {
			s := w.snapshot()
			if s.peers["rr-mesh"] || s.peers["peer-to-rrs"] {
				return fmt.Errorf("hand-written BGPPeers still there: %v", slices.Sorted(maps.Keys(s.peers)))
			}
			if goneAt.IsZero() {
				goneAt = time.Now()
			}
			return s.settled(3)
		})
		failures := rc.checkModel(false)
		if len(failures) > 0 {
			require.Fail(t, fmt.Sprintf("graph model after reconciles:\n%s", strings.Join(failures, "\n")))
		}
		if d := goneAt.Sub(start); d < 2*time.Second {
			require.Fail(t, fmt.Sprintf("hand-written BGPPeers gone %s after Enforce, before removalDelay (2s)", d))
		}
		s := w.snapshot()
		if got := slices.Sorted(maps.Keys(s.rrs)); !slices.Equal(got, handRRs) {
			require.Fail(t, fmt.Sprintf("route reflectors %v, want the hand-picked %v", got, handRRs))
		}
		for _, rr := range handRRs {
			out, _, _ := w.kubectl(testenv.UserAdmin, "get", "events", "-n", "default", "--field-selector", "involvedObject.name="+rr, "-o", "jsonpath={range .items[*]}{.reason} {end}")
			for _, role := range []string{reconciler.EventPromoted, reconciler.EventDraining, reconciler.EventDemoted} {
				require.Falsef(t, strings.Contains(out, role), "%s: role change Event %s: %s", rr, role, out)
			}
		}
		out, _, _ := w.kubectl(testenv.UserAdmin, "get", "events", "-n", "default", "--field-selector", "reason="+reconciler.EventBGPPeerAdopted, "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
		for _, name := range []string{"peer-to-rrs", "rr-mesh"} {
			require.Truef(t, strings.Contains(out, "deleted hand-written BGPPeer "+name+": calico-rr-autoscaler's BGPPeers cover"), "no BGPPeerAdopted Event for %s: %q", name, out)
		}
		t.Logf("Enforce: hand-written BGPPeers gone %s after the switch, %d reconciles with 0 missing pairs; route reflectors %v\n%s",
			goneAt.Sub(start).Round(10*time.Millisecond), rc.count(), s.rrs, out)
	})

	t.Run("Paused: a cordoned RR keeps its role, a label removal below the minimum is refused", func(t *testing.T) {
		w.applyPolicy(policy("Paused"))
		w.eventually("status Paused", 20*time.Second, func() error {
			if got := w.policyField(`{.status.mode}`); got != "Paused" {
				return fmt.Errorf("mode %q", got)
			}
			return nil
		})
		before := w.clusterObjects()
		w.cordon("node-03")
		w.waitReconciles(rc, 1)
		w.eventually("the pending handover in the status", 20*time.Second, func() error {
			if got := w.policyField(`{.status.pendingChanges}`); !strings.Contains(got, "hand node-03 over (cordoned)") {
				return fmt.Errorf("pendingChanges %s", got)
			}
			return nil
		})
		if d := diffObjects(before, w.clusterObjects()); len(d) > 0 {
			require.Fail(t, fmt.Sprintf("Paused changed the cluster after a cordon:\n%s", strings.Join(d, "\n")))
		}
		_, stderr, err := w.kubectl(testenv.UserAlice, "label", "node", "node-04", "calico-route-reflector-")
		want := `[min-route-reflectors] removing the route reflector label from node-04 would leave 2 route reflectors; policy "default" requires at least 3`
		require.Error(t, err, "kubectl label in Paused was not refused")
		require.Contains(t, stderr, want, "kubectl label in Paused")
		t.Logf("Paused: kubectl: %s", strings.TrimSpace(stderr))
	})
}
