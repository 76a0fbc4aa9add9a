package serve_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoetcd"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/uninstall"
)

// etcdRouting is the graph model's missing pairs on etcd's own state (Calico Nodes, BGPPeers and the
// mesh setting as confd reads them), and whether the mesh is on there.
func etcdRouting(t *testing.T, c *calicoetcd.Store) (missing int64, mesh bool, st *calicoetcd.State) {
	t.Helper()
	st, err := c.ReadState(t.Context())
	require.NoError(t, err)
	mesh = st.NodeToNodeMesh()
	topo, err := bgpmodel.FromCluster(extender.FromNodes(st.Nodes), st.Peers, corev1.LabelTopologyZone, bgpmodel.Options{NodeToNodeMesh: mesh})
	require.NoError(t, err)
	m, err := topo.Propagate(nil)
	require.NoError(t, err)
	return m.Summary.MissingPairs, mesh, st
}

// TestEtcdPoliciesUninstallOnRealAPIServerLarge: the two-policy uninstall of
// TestPoliciesDeletionOnRealAPIServer in the etcd datastore, where the mesh setting, the roles
// and the BGPPeers live in etcd: two pools, both migrating off the node-to-node mesh, deleted at
// once by `calico-rr-autoscaler uninstall` (the chart's pre-delete hook). The graph model on
// etcd's state misses no pair at any step (sampled every 100 ms), and at the end the mesh is on in
// etcd, no Calico Node keeps an owned label or a cluster ID, and no BGPPeer is left there.
//
// In make test-all: make test proves the two-policy release on the Kubernetes datastore
// (TestPoliciesDeletionOnRealAPIServer, TestUninstallOnRealAPIServer) and the product's writes to
// etcd (TestEtcdDatastoreOnRealAPIServer).
func TestEtcdPoliciesUninstallOnRealAPIServerLarge(t *testing.T) {
	testenv.SlowProof(t)
	t.Parallel() // its own API server and product: beside the other live tests, mostly waiting
	w, calicoctl := newEtcdWorld(t)
	var err error
	const pools, n = "ab", 24
	for i := range n {
		name := fmt.Sprintf("%c-%02d", pools[i%2], i/2)
		registerCalicoNode(t, calicoctl, name, fmt.Sprintf("zone-%c", 'a'+i%3), fmt.Sprintf("10.0.1.%d", i+1))
	}
	w.applyPoolPolicies(pools, pools)
	w.joinPools(pools, n, 0)
	w.eventually("mesh off in etcd and every pool routed", 90*time.Second, func() error {
		missing, mesh, st := etcdRouting(t, calicoctl)
		switch {
		case mesh:
			return fmt.Errorf("the mesh is on in etcd")
		case missing > 0:
			return fmt.Errorf("%d missing pairs on etcd's state", missing)
		case len(st.Peers) == 0:
			return fmt.Errorf("no BGPPeer in etcd")
		}
		return nil
	})

	var out bytes.Buffer
	errc := make(chan error, 1)
	go func() { errc <- uninstall.Run(t.Context(), w.env.ConfigFor(testenv.UserAdmin), 90*time.Second, &out) }()
	for done := false; !done; {
		select {
		case err = <-errc:
			done = true
		case <-time.After(100 * time.Millisecond):
		}
		missing, mesh, _ := etcdRouting(t, calicoctl)
		require.Zerof(t, missing, "missing pairs on etcd's state with the mesh %v during the uninstall", mesh)
	}
	require.NoError(t, err, out.String())

	missing, mesh, st := etcdRouting(t, calicoctl)
	require.True(t, mesh, "the mesh is back on in etcd")
	require.Zero(t, missing)
	require.Empty(t, st.Peers, "BGPPeers left in etcd")
	nodes, err := calicoctl.ListNodes(t.Context())
	require.NoError(t, err)
	for name, cn := range nodes {
		for _, pool := range pools {
			for _, k := range extender.OwnedLabelKeys("rr-" + string(pool)) {
				require.NotContains(t, cn.Labels, k, "Calico Node %s keeps label %s", name, k)
			}
		}
		if cn.Spec.BGP != nil {
			require.Emptyf(t, cn.Spec.BGP.RouteReflectorClusterID, "Calico Node %s keeps its cluster ID", name)
		}
	}
}
