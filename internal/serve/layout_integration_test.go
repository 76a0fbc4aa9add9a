package serve_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// routingState reads the cluster's nodes and BGPPeers consistently (the BGPPeers did not change
// while the nodes were read) and returns the graph model's missing node pairs, the route
// reflectors with a draining mark, and the nodes without a route reflector role or peering set.
// It may run off the test's goroutine (in the reconciler), so it returns errors rather than failing.
func (w *world) routingState() (missing int64, draining, unwired int, err error) {
	return w.routingStateWith(bgpmodel.Options{})
}

// routingStateWith is routingState with the graph model's options (Calico's node-to-node mesh).
func (w *world) routingStateWith(opts bgpmodel.Options) (missing int64, draining, unwired int, err error) {
	topo, draining, unwired, err := w.clusterTopology(opts)
	if err != nil {
		return 0, 0, 0, err
	}
	m, err := topo.Propagate(nil)
	if err != nil {
		return 0, 0, 0, err
	}
	if m.Summary.MissingPairs > 0 {
		w.t.Logf("missing pairs, e.g. %v", m.MissingPairs(5))
	}
	return m.Summary.MissingPairs, draining, unwired, nil
}

// clusterTopology reads the cluster's nodes and BGPPeers consistently (see routingState) into the
// graph model's topology, with the route reflectors that carry a draining mark and the nodes
// without a role or peering set.
func (w *world) clusterTopology(opts bgpmodel.Options) (topo *bgpmodel.Topology, draining, unwired int, err error) {
	ctx := w.t.Context()
	for {
		before, err := w.dyn.Resource(bgpPeersGVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, 0, 0, err
		}
		nodes, err := w.admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, 0, 0, err
		}
		after, err := w.dyn.Resource(bgpPeersGVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, 0, 0, err
		}
		if before.GetResourceVersion() != after.GetResourceVersion() {
			continue // a BGPPeer changed while the nodes were read
		}
		peers := make([]apiv3.BGPPeer, len(after.Items))
		for i := range after.Items {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(after.Items[i].Object, &peers[i]); err != nil {
				return nil, 0, 0, err
			}
		}
		ptrs := make([]*corev1.Node, len(nodes.Items))
		for i := range nodes.Items {
			n := &nodes.Items[i]
			ptrs[i] = n
			_, id := n.Annotations[extender.AnnotationClusterID]
			switch {
			case n.Annotations[extender.AnnotationDrainingSince] != "":
				draining++
			case !id && n.Labels[extender.LabelPeeringSet] == "":
				unwired++
			}
		}
		topo, err := bgpmodel.FromCluster(extender.FromNodes(ptrs), peers, corev1.LabelTopologyZone, opts)
		return topo, draining, unwired, err
	}
}

// TestLayoutSwitchOnRealAPIServer: a 300-node cluster on the old default (MultiCluster) switches to
// the new one (DualPlane) and back, through kubectl apply. The cluster's own nodes and BGPPeers are
// fed to the graph model after every reconcile, from the edit until the new layout has settled (no
// draining route reflector left, Ready): 0 missing node pairs after each.
func TestLayoutSwitchOnRealAPIServer(t *testing.T) {
	t.Parallel() // its own API server and product: beside the other live tests, mostly waiting
	if testing.Short() {
		t.Skip("-short: needs the real API server")
	}
	w := newWorld(t)
	policy := func(topo string) string {
		return `apiVersion: routereflector.io/v1alpha1
kind: RouteReflectorPolicy
metadata: {name: default}
spec:
  topology: ` + topo + `
  removalDelay: 3s
  behavior: {scaleDown: {stabilizationWindowSeconds: 0}}
`
	}
	w.applyPolicy(policy("{type: MultiCluster}"))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 20)
	for i := range 300 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			w.joinIP(fmt.Sprintf("node-%03d", i), fmt.Sprintf("zone-%c", 'a'+i%3), fmt.Sprintf("10.0.%d.%d", i/250, i%250+1))
		}()
	}
	wg.Wait()
	w.eventually("MultiCluster settles", 60*time.Second, func() error {
		missing, draining, unwired, err := w.routingState()
		if err == nil && missing+int64(draining+unwired) > 0 {
			err = fmt.Errorf("%d missing pairs, %d draining, %d nodes without a role", missing, draining, unwired)
		}
		return err
	})
	// From here on, the cluster's state is read after every reconcile (the reconciler waits).
	type sample struct {
		missing           int64
		draining, unwired int
		err               error
	}
	samples := make(chan sample, 1000)
	w.rep.srv.Reconciler.SetAfterReconcile(func(string) {
		missing, draining, unwired, err := w.routingState()
		samples <- sample{missing, draining, unwired, err}
	})
	t.Cleanup(func() { w.rep.srv.Reconciler.SetAfterReconcile(nil) })
	for _, step := range []struct{ topo, wantStatus string }{
		{"{type: DualPlane, maxRackSize: 60}", "DualPlane"},
		{"{type: MultiCluster}", "MultiCluster"},
	} {
		for len(samples) > 0 {
			<-samples
		}
		w.applyPolicy(policy(step.topo))
		start := time.Now()
		reconciles, maxDraining := 0, 0
		for settled := false; !settled; {
			select {
			case s := <-samples:
				reconciles++
				require.Falsef(t, s.err != nil, "reading the cluster after reconcile %d: %v", reconciles, s.err)
				if s.missing > 0 {
					require.Fail(t, fmt.Sprintf("switch to %s, reconcile %d (%v after the edit): %d node pairs miss each other's routes", step.wantStatus, reconciles, time.Since(start), s.missing))
				}
				maxDraining = max(maxDraining, s.draining)
				ready, _ := w.policyPath("default", `{.metadata.generation}/{.status.observedGeneration}/{.status.conditions[?(@.type=="Ready")].status}`)
				gen, rest, _ := strings.Cut(ready, "/")
				settled = strings.HasPrefix(rest, gen+"/") && strings.HasSuffix(rest, "/True") && s.draining == 0 && s.unwired == 0
			case <-time.After(90 * time.Second):
				require.Fail(t, fmt.Sprintf("switch to %s: not settled after %d reconciles", step.wantStatus, reconciles))
			}
		}
		out, _, err := w.kubectl(testenv.UserAdmin, "get", "rrp", "default", "-o", "jsonpath={.spec.topology.type} {.status.routes.meanPathsPerPrefix}")
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(out, step.wantStatus), "policy %q, want %q first", out, step.wantStatus)
		t.Logf("switch to %s settled in %v, %d reconciles (up to %d route reflectors draining), 0 missing pairs after each; status: %s",
			step.wantStatus, time.Since(start).Round(time.Millisecond), reconciles, maxDraining, out)
	}
}
