package serve_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/reconciler"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// TestLabelKeyRefillOnRealAPIServer: the node cache keeps only the label keys the product reads,
// and refills a key a policy starts to read. Nodes join labelled pool=a or pool=b before any
// policy names pool: the cache drops pool (and the hostname) but keeps the zone. A policy over
// pool=a is then applied: the cache lists the nodes again, the reconciler plans nothing until it
// holds pool on every node (an Event CacheRefilling says so), and the plan then manages exactly
// the pool-a nodes (a selector on a dropped key never matches nothing silently). A second policy
// on another dropped key (team) that selects a pool-a node is refused as an overlap: the policy
// webhook asks the API server, not the cache, for a key the cache does not hold yet.
func TestLabelKeyRefillOnRealAPIServer(t *testing.T) {
	w := newWorld(t)
	srv := w.rep.srv
	for i := range 12 {
		pool := string(rune('a' + i%2))
		w.join(fmt.Sprintf("%s-%02d", pool, i), fmt.Sprintf("zone-%c", 'a'+i%3), map[string]string{"pool": pool, "team": "t" + pool})
	}
	w.eventually("12 nodes cached", 30*time.Second, func() error {
		if n := len(srv.Nodes.List()); n != 12 {
			return fmt.Errorf("%d nodes cached", n)
		}
		return nil
	})
	n := srv.Nodes.Get("a-00")
	require.NotNil(t, n)
	require.Equal(t, "zone-a", n.Labels[corev1.LabelTopologyZone], "the zone label is kept")
	for _, k := range []string{"pool", "team", corev1.LabelHostname} {
		require.NotContains(t, n.Labels, k, "a label no policy reads is dropped")
	}
	gen := srv.LabelKeys.Generation()

	w.applyPolicy(`apiVersion: routereflector.io/v1alpha1
kind: RouteReflectorPolicy
metadata: {name: default}
spec:
  nodeSelector: {matchLabels: {pool: a}}
`)
	w.eventually("pool=a's 6 nodes planned", 60*time.Second, func() error {
		if got := w.policyField("{.status.nodes}"); got != "6" {
			return fmt.Errorf("status.nodes %q, Ready %s", got, w.policyField(`{.status.conditions[?(@.type=="Ready")].reason}`))
		}
		return nil
	})
	require.Greater(t, srv.LabelKeys.Generation(), gen, "the label key set grew")
	for _, c := range srv.Nodes.List() {
		require.Equal(t, c.Name[:1], c.Labels["pool"], "%s: the cache holds pool after the refill", c.Name)
	}
	require.NotEmpty(t, w.events("RouteReflectorPolicy", "default", reconciler.EventCacheRefilling),
		"the reconciler said it waited for the refill")
	w.eventually("route reflectors in pool a only", 30*time.Second, func() error {
		list, err := w.admin.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		rrs := 0
		for _, n := range list.Items {
			if _, rr := n.Annotations[extender.AnnotationClusterID]; rr {
				if n.Labels["pool"] != "a" {
					return fmt.Errorf("%s (pool %s) is a route reflector", n.Name, n.Labels["pool"])
				}
				rrs++
			}
		}
		if rrs == 0 {
			return fmt.Errorf("no route reflector")
		}
		return nil
	})

	_, stderr, err := w.env.KubectlStdin(t, testenv.UserAdmin, `apiVersion: routereflector.io/v1alpha1
kind: RouteReflectorPolicy
metadata: {name: team}
spec:
  nodeSelector: {matchLabels: {team: ta}}
`, "apply", "-f", "-")
	require.Error(t, err, "a policy over team=ta selects pool-a nodes: an overlap")
	require.True(t, strings.Contains(stderr, "matches both"), "refused for the node it shares: %s", stderr)
}
