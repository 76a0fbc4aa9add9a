package policy

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// Defaults of every optional field, as documented on the API types.
const (
	DefaultMinRouteReflectors = 3
	DefaultMaxRouteReflectors = 25
	DefaultRatio              = "0.005"
	DefaultTopology           = v1alpha1.DualPlane
	DefaultClusterID          = "224.0.0.1"
	DefaultClusterIDMode      = v1alpha1.Grouped
	DefaultClusterIDGroups    = 3
	DefaultRedundancy         = 3
	DefaultMaxRackSize        = 500
	// DualPlane's own defaults: two planes, no fixed cap on the count (it follows from the racks),
	// 500 clients per route reflector at most.
	DefaultDualPlaneRedundancy         = 2
	DefaultDualPlaneMinRouteReflectors = 2
	DefaultMaxClientsPerRouteReflector = 500
	// NoMaxRouteReflectors is the resolved maximum when there is no cap.
	NoMaxRouteReflectors          = 1 << 20
	DefaultRouteReflectorLabelKey = "calico-route-reflector"
	DefaultZoneLabel              = corev1.LabelTopologyZone
	DefaultRemovalDelay           = 5 * time.Minute
	// DefaultMaxMeshNodes is the largest cluster on which deleting a policy turns the node-to-node
	// mesh back on (spec.release.maxMeshNodes): Calico's documentation recommends route
	// reflectors beyond about 100 nodes (the full mesh suits "100 nodes or less").
	DefaultMaxMeshNodes         = 100
	DefaultNotReadyGracePeriod  = 2 * time.Minute
	DefaultBGPHealthGracePeriod = 2 * time.Minute
	DefaultStabilizationWindow  = 300 * time.Second
	DefaultHandover             = v1alpha1.HandoverDelay
)

// DefaultTolerations tolerate every taint, as calico-node does.
func DefaultTolerations() []corev1.Toleration {
	return []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
}

// Default returns a policy named name with an empty spec: every field takes its default.
func Default(name string) *v1alpha1.RouteReflectorPolicy {
	p := &v1alpha1.RouteReflectorPolicy{}
	p.APIVersion = v1alpha1.GroupVersion.String()
	p.Kind = "RouteReflectorPolicy"
	p.Name = name
	return p
}

// countDefaults returns the defaults of minRouteReflectors, maxRouteReflectors, redundancy and
// maxClientsPerRouteReflector (0: no bound) for a spec: DualPlane's differ from the others'.
func countDefaults(s *v1alpha1.RouteReflectorPolicySpec) (minRR, maxRR, redundancy, maxClients int32) {
	if topologyOf(s) == v1alpha1.DualPlane {
		return DefaultDualPlaneMinRouteReflectors, NoMaxRouteReflectors, DefaultDualPlaneRedundancy, DefaultMaxClientsPerRouteReflector
	}
	return DefaultMinRouteReflectors, DefaultMaxRouteReflectors, DefaultRedundancy, 0
}

// topologyOf returns the spec's topology. A spec that names none gets the default, unless it sets
// fields only one explicit topology reads (written for an older default): clusterIDs or
// clusterIDGroups mean MultiCluster, rackLabel means Hierarchical.
func topologyOf(s *v1alpha1.RouteReflectorPolicySpec) v1alpha1.TopologyType {
	t := s.Topology
	switch {
	case t == nil:
		return DefaultTopology
	case t.Type != "":
		return t.Type
	case t.ClusterIDs != "" || t.ClusterIDGroups != nil:
		return v1alpha1.MultiCluster
	case t.RackLabel != "":
		return v1alpha1.Hierarchical
	}
	return DefaultTopology
}
