package policy

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// Defaults of every optional field, as documented on the API types.
const (
	DefaultMinRouteReflectors     = 3
	DefaultMaxRouteReflectors     = 25
	DefaultRatio                  = "0.005"
	DefaultTopology               = v1alpha1.MultiCluster
	DefaultClusterID              = "224.0.0.1"
	DefaultClusterIDMode          = v1alpha1.Grouped
	DefaultClusterIDGroups        = 3
	DefaultRedundancy             = 3
	DefaultMaxRackSize            = 500
	DefaultRouteReflectorLabelKey = "calico-route-reflector"
	DefaultZoneLabel              = corev1.LabelTopologyZone
	DefaultRemovalDelay           = 5 * time.Minute
	DefaultStabilizationWindow    = 300 * time.Second
	DefaultHandover               = v1alpha1.HandoverDelay
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
