package serve_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// applyPoolPolicies applies one policy per pool letter, pool-<l> over the nodes labelled pool=<l>,
// DualPlane in racks of 10 with route reflector label rr-<l>, removalDelay 2s; the pools in
// migrate also migrate from the node-to-node mesh.
func (w *world) applyPoolPolicies(pools, migrate string) {
	w.t.Helper()
	for _, pool := range pools {
		w.applyPolicy(fmt.Sprintf(`apiVersion: routereflector.io/v1alpha1
kind: RouteReflectorPolicy
metadata: {name: pool-%[1]c}
spec:
  nodeSelector: {matchLabels: {pool: %[1]c}}
  topology: {maxRackSize: 10}
  routeReflectorLabel: {key: rr-%[1]c}
  removalDelay: 2s
  migrateFromNodeMesh: %[2]v
`, pool, strings.ContainsRune(migrate, pool)))
	}
}

// joinPools joins n nodes round-robin over the pools (named <pool>-NN) and the three zones, ten at
// a time, then outside nodes in no policy (x-NN).
func (w *world) joinPools(pools string, n, outside int) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 10)
	for i := range n + outside {
		pool := string(pools[i%len(pools)])
		name, labels := fmt.Sprintf("%s-%02d", pool, i/len(pools)), map[string]string{"pool": pool}
		if i >= n {
			name, labels = fmt.Sprintf("x-%02d", i-n), nil
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			w.join(name, fmt.Sprintf("zone-%c", 'a'+i%3), labels)
		}()
	}
	wg.Wait()
}

// TestTwoPoliciesOnRealAPIServer: two policies (the default layout, DualPlane) over two node pools
// with different route reflector labels, Calico's node-to-node mesh off. The cluster's own nodes
// and BGPPeers fed to the graph model show 0 missing pairs, across the pools too; no cluster ID is
// used by both policies; nodes in no policy keep every route too (with the mesh off and on); a
// client relabelled from one pool to the other is handed over to the other policy's route
// reflectors, with 0 missing pairs again.
func TestTwoPoliciesOnRealAPIServer(t *testing.T) {
	t.Parallel() // its own API server and product: beside the other live tests, mostly waiting
	w := newWorld(t)
	w.applyPoolPolicies("ab", "")
	w.joinPools("ab", 60, 4)
	settled := func(what string) {
		w.t.Helper()
		w.eventually(what, 60*time.Second, func() error {
			missing, draining, unwired, err := w.routingState()
			if err == nil && draining > 0 {
				err = fmt.Errorf("%d draining", draining)
			}
			if err == nil && missing == 0 {
				missing, _, _, err = w.routingStateWith(bgpmodel.Options{NodeToNodeMesh: true})
			}
			if err == nil && missing > 0 {
				err = fmt.Errorf("%d missing pairs (%d nodes without a role: the 4 outside every policy have none)", missing, unwired)
			}
			return err
		})
	}
	settled("both pools routed across")

	// Cluster IDs: each policy's route reflectors carry its label; no ID is in both.
	list, err := w.admin.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	idsOf := map[string]map[string]bool{"a": {}, "b": {}}
	for _, n := range list.Items {
		id, ok := n.Annotations[extender.AnnotationClusterID]
		if !ok || n.Annotations[extender.AnnotationDrainingSince] != "" {
			continue
		}
		pool := n.Labels["pool"]
		require.NotEmptyf(t, pool, "%s is in no policy but has a cluster ID", n.Name)
		if _, own := n.Labels["rr-"+pool]; !own {
			require.Fail(t, fmt.Sprintf("%s has a cluster ID but not its policy's route reflector label: %v", n.Name, n.Labels))
		}
		idsOf[pool][id] = true
	}
	for id := range idsOf["a"] {
		if idsOf["b"][id] {
			require.Fail(t, fmt.Sprintf("cluster ID %s used by both policies: a %v, b %v", id, idsOf["a"], idsOf["b"]))
		}
	}
	if len(idsOf["a"]) == 0 || len(idsOf["b"]) == 0 {
		require.Fail(t, fmt.Sprintf("route reflector cluster IDs: a %v, b %v", idsOf["a"], idsOf["b"]))
	}

	// A client moves from pool a to pool b.
	var moved string
	for _, n := range list.Items {
		if _, rr := n.Annotations[extender.AnnotationClusterID]; !rr && n.Labels["pool"] == "a" {
			moved = n.Name
			break
		}
	}
	_, stderr, err := w.kubectl(testenv.UserAdmin, "label", "node", moved, "pool=b", "--overwrite")
	require.NoError(t, err, "relabel %s %s", moved, stderr)
	w.eventually(moved+" peers with pool b's route reflectors", 30*time.Second, func() error {
		n, err := w.admin.CoreV1().Nodes().Get(t.Context(), moved, metav1.GetOptions{})
		if err != nil {
			return err
		}
		rrs := strings.Split(n.Annotations[extender.AnnotationRouteReflectors], ",")
		for _, r := range rrs {
			if !strings.HasPrefix(r, "b-") {
				return fmt.Errorf("%s peers with %v", moved, rrs)
			}
		}
		return nil
	})
	settled("routed after the move")
}
