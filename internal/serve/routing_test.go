package serve_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/tools/bgpverify"
)

// checkRouting checks the cluster's own state on Calico's code: bgpverify.VerifyCluster reads the
// Nodes, BGPPeers and BGPConfigurations the product wrote, Calico's confd renders every node's BIRD
// configuration from them, and one BIRD per node (each in its own network namespace) must
// establish every session confd configured and learn every other node's block, with confd's
// sessions the ones the graph model derives. Where network namespaces cannot be created the check
// is skipped with a message; a missing confd or bird fails it (`make tools`).
func (w *world) checkRouting(t *testing.T, when string) {
	t.Helper()
	if err := bgpverify.NetnsAvailable(); err != nil {
		if errors.Is(err, bgpverify.ErrNoNetns) {
			t.Logf("SKIPPED the confd/BIRD routing check %s: %v", when, err)
			return
		}
		require.Fail(t, fmt.Sprint(err))
	}
	opts := bgpverify.Options{Speaker: bgpverify.SpeakerCalico}
	if os.Getenv("RRA_TEST_VERBOSE") != "" {
		opts.Log = routingLog{t}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	rep, err := bgpverify.VerifyCluster(ctx, w.env.Config, opts)
	require.NoErrorf(t, err, "routing check %s", when)
	s := rep.Summary
	if !s.Converged || s.MissingPairs != 0 || s.EstablishedSessions != s.Sessions || len(rep.ConfigDifferences) > 0 {
		assert.Fail(t, fmt.Sprintf("routing check %s: converged %v, %d/%d sessions established, %d missing pairs (model %d), confd/model differences %v",
			when, s.Converged, s.EstablishedSessions, s.Sessions, s.MissingPairs, s.ModelMissingPairs, rep.ConfigDifferences))
	}
	t.Logf("routing check %s (confd + BIRD, %v): %d nodes, %d sessions established, 0 missing pairs, busiest %d routes (model %.0f), converged in %.1fs",
		when, time.Since(start).Round(100*time.Millisecond), s.Nodes, s.EstablishedSessions, s.MaxRoutesPerNode, s.ModelMaxRoutesPerNode, s.ConvergedSeconds)
}

type routingLog struct{ t *testing.T }

func (l routingLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
