package reconciler

import (
	"context"
	"fmt"
	"strings"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
)

// EventTransition names a plan whose application restarts BGP sessions (a cluster ID set,
// changed or removed): how many, on which nodes, and the node pairs the graph model finds at risk
// while they restart.
const EventTransition = "RouteReflectorTransition"

// EventClusterIDStaged names a cluster-ID change made while others of the same plan wait for
// its BGP sessions (stages.go).
const EventClusterIDStaged = "ClusterIDChangeStaged"

// transitionMaxNodes bounds the policies whose transitions the reconciler models on every plan
// that changes a cluster ID (1.4 s at 65,000 nodes: BENCHMARKS.md); `plan --bgppeers` and
// `verify --from` model larger ones.
const transitionMaxNodes = 5000

var (
	transitionSessions = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "calico_rr_autoscaler_transition_sessions",
		Help: "BGP sessions the last plan that changed a cluster ID added, removed and restarted (change), by the graph model.",
	}, []string{"policy", "change"})
	transitionAtRisk = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "calico_rr_autoscaler_transition_pairs_at_risk",
		Help: "Node pairs the graph model finds without a route while the last plan that changed a cluster ID is applied (scope all, or kept: between nodes that keep their role).",
	}, []string{"policy", "scope"})
	transitionHeld = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "calico_rr_autoscaler_transition_held_cluster_id_changes",
		Help: "Cluster-ID changes of route reflectors that keep their role, planned but held until the last one's BGP sessions are back (one at a time).",
	}, []string{"policy"})
)

// transition models what applying the plan does to the BGP sessions of the cluster as it is (the
// policy's nodes as the reconcile knows them and its BGPPeers as applyPeers listed them before its
// writes), when the plan sets, changes or
// removes a cluster ID: BIRD restarts every session whose rendered `rr client` / `rr cluster id`
// changes. It exports the figures and says them in an Event; it changes nothing.
func (r *Reconciler) transition(_ context.Context, st *State) error {
	if st.Result == nil || len(st.View) == 0 || len(st.View) > transitionMaxNodes {
		return nil
	}
	changed := 0
	for _, ns := range st.Result.Nodes {
		if n := st.View[ns.Name]; n != nil && n.Annotations[extender.AnnotationClusterID] != ns.Annotations[extender.AnnotationClusterID] {
			changed++
		}
	}
	if changed == 0 {
		return nil
	}
	nodes := make([]*extender.Node, 0, len(st.View))
	for _, n := range st.View {
		nodes = append(nodes, n)
	}
	peers := make([]apiv3.BGPPeer, 0, len(st.Peers))
	for _, p := range st.Peers {
		peers = append(peers, *p)
	}
	tr, err := bgpmodel.ClusterTransition(st.Input, st.Result, nodes, peers)
	if err != nil {
		return nil // the model cannot read this cluster: no figures; the plan goes on
	}
	transitionSessions.WithLabelValues(st.Name, "added").Set(float64(tr.Added))
	transitionSessions.WithLabelValues(st.Name, "removed").Set(float64(tr.Removed))
	transitionSessions.WithLabelValues(st.Name, "restarted").Set(float64(tr.Restarted))
	transitionAtRisk.WithLabelValues(st.Name, "all").Set(float64(tr.PairsAtRisk))
	transitionAtRisk.WithLabelValues(st.Name, "kept").Set(float64(tr.KeptRolesAtRisk))
	if tr.Restarted == 0 {
		return nil
	}
	var on []string
	for _, nc := range tr.RestartsByNode[:min(5, len(tr.RestartsByNode))] {
		on = append(on, fmt.Sprintf("%s %d", nc.Node, nc.Count))
	}
	kind := corev1.EventTypeNormal
	if tr.KeptRolesAtRisk > 0 {
		kind = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(st.Policy, kind, EventTransition,
		"%d cluster IDs change: %d BGP sessions restart (%s), %d added, %d removed; %d node pairs at risk while they restart, %d between nodes that keep their role",
		changed, tr.Restarted, strings.Join(on, ", "), tr.Added, tr.Removed, tr.PairsAtRisk, tr.KeptRolesAtRisk)
	return nil
}
