package serve

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// LeaderMetric is 1 on the replica that holds the leader lease and runs the reconciler (after its
// catch-up: see catchUp), 0 on every other replica. The chart's alert pages when no replica has
// had 1 for 2 minutes.
const LeaderMetric = "calico_rr_autoscaler_leader"

var leaderGauge = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: LeaderMetric,
	Help: "1 when this replica holds the leader lease and runs the reconciler, else 0.",
})

func init() { metrics.Registry.MustRegister(leaderGauge) }

// setLeader records this replica's role in the ledger and the leader gauge.
func (s *Server) setLeader(v bool) {
	s.Ledger.SetLeader(v)
	if v {
		leaderGauge.Set(1)
	} else {
		leaderGauge.Set(0)
	}
}
