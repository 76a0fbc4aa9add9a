package serve

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv/nodetest"
)

// TestCatchUpByWatchOnRealAPIServer: on a real API server, with the product's node informer (its
// ListerWatcher, the relister's watch wrapper and client-go's reflector), a takeover that starts
// right after a burst of node writes takes the lead by the watch while the read of every node's
// version is held back, and its cache then holds every node at least at the version a consistent
// list taken before the takeover shows: what the read would have proven.
func TestCatchUpByWatchOnRealAPIServer(t *testing.T) {
	env := testenv.Start(t)
	admin := kubernetes.NewForConfigOrDie(env.Config)
	const nodes = 40
	for i := range nodes {
		_, err := admin.CoreV1().Nodes().Create(t.Context(), nodetest.New(fmt.Sprintf("node-%02d", i), nodetest.Zone("zone-a")), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	rc, err := nodeClient(env.Config, nil)
	require.NoError(t, err)
	relist := newRelister(nodeListWatch(rc))
	// Each node takes a while to enter the cache (an index that is slow to compute, as a busy
	// process is): the watch and the informer's queue run ahead of the cache, which is what the
	// takeover must not mistake for caught up.
	indexers := state.NodeIndexers()
	indexers["slow"] = func(any) ([]string, error) {
		time.Sleep(2 * time.Millisecond)
		return nil, nil
	}
	inf := relist.newInformer(nil, &corev1.Node{}, 0, indexers)
	require.NoError(t, inf.SetTransform(state.TransformStrip)) // the cache holds records, as serve's
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go inf.Run(ctx.Done())
	require.True(t, toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced))
	s := &Server{Nodes: state.NewNodeStore(inf.GetIndexer())}
	relist.progress.setCache(s.Nodes.Get) // as serve does

	// The nodes keep changing (as a cluster's kubelets make them), in bursts that leave the
	// informer events to apply when the takeover starts.
	var writes atomic.Int64
	writer, stopWriter := context.WithCancel(ctx)
	defer stopWriter()
	burst := func(ctx context.Context) error {
		for i := range nodes {
			patch := fmt.Appendf(nil, `{"metadata":{"labels":{"example.com/beat":"%d"}}}`, writes.Add(1))
			if _, err := admin.CoreV1().Nodes().Patch(ctx, fmt.Sprintf("node-%02d", i), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return err
			}
		}
		return nil
	}
	go func() {
		for writer.Err() == nil {
			_ = burst(writer)
		}
	}()
	require.NoError(t, burst(ctx))
	before, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)

	held := make(chan struct{}, 1)
	pages := func(ctx context.Context, o metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
		if o.Limit != 1 {
			held <- struct{}{}
			<-ctx.Done() // the read of every node's version never decides here
			return nil, ctx.Err()
		}
		return nodeMetadataPages(rc)(ctx, o)
	}
	start := time.Now()
	require.NoError(t, s.catchUp(ctx, pages, relist.progress, 0))
	cached := map[string]string{} // the cache as the takeover left it
	for i := range before.Items {
		if n := s.Nodes.Get(before.Items[i].Name); n != nil {
			cached[n.Name] = n.ResourceVersion
		}
	}
	t.Logf("caught up by the watch in %s, %d node writes so far", time.Since(start).Round(time.Millisecond), writes.Load())
	<-held
	stopWriter()
	for i := range before.Items {
		name := before.Items[i].Name
		want, _ := strconv.ParseUint(before.Items[i].ResourceVersion, 10, 64)
		require.Contains(t, cached, name)
		have, _ := strconv.ParseUint(cached[name], 10, 64)
		require.GreaterOrEqual(t, have, want, "%s: the cache is behind the list taken before the takeover", name)
	}
}
