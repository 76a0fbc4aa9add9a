package extender

// Labels and annotations this product owns on nodes and BGPPeers.
const (
	// AnnotationClusterID is Calico's route reflector cluster ID of a node (KDD mode).
	AnnotationClusterID = "projectcalico.org/RouteReflectorClusterID"
	// AnnotationCalicoLabels holds Calico-only node labels as JSON (KDD mode).
	AnnotationCalicoLabels = "projectcalico.org/labels"
	// AnnotationCalicoIPv4 is Calico's BGP IPv4 address of a node with its prefix length (KDD
	// mode, written by calico-node): the address its BGP peers see.
	AnnotationCalicoIPv4 = "projectcalico.org/IPv4Address"
	// LabelRouteReflectorID names a route reflector in BGPPeer peer selectors.
	LabelRouteReflectorID = "routereflector.io/rr-id"
	// LabelPeeringSet names the set of route reflectors a node peers with; one BGPPeer per set.
	LabelPeeringSet = "routereflector.io/peering-set"
	// AnnotationRouteReflectors lists, comma-separated, the route reflectors a client peers with.
	AnnotationRouteReflectors = "routereflector.io/route-reflectors"
	// AnnotationDrainingSince marks a route reflector whose clients are being handed over (RFC 3339).
	AnnotationDrainingSince = "routereflector.io/draining-since"
	// AnnotationRack is a node's rack in the Hierarchical topology (kept while the node stays).
	AnnotationRack = "routereflector.io/rack"

	// LabelManagedBy marks the BGPPeers this product writes.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of LabelManagedBy.
	ManagedByValue = "calico-rr-autoscaler"
	// LabelPolicy names the policy a BGPPeer belongs to.
	LabelPolicy = "routereflector.io/policy"
	// BGPPeerPrefix starts the name of every BGPPeer this product writes.
	BGPPeerPrefix = "rr-autoscaler-"
)

// OwnedLabelKeys returns the node label keys this product writes for a policy whose route
// reflector label key is rrLabelKey.
func OwnedLabelKeys(rrLabelKey string) []string {
	return []string{rrLabelKey, LabelRouteReflectorID, LabelPeeringSet}
}

// OwnedAnnotationKeys returns the node annotation keys this product writes.
func OwnedAnnotationKeys() []string {
	return []string{AnnotationClusterID, AnnotationRouteReflectors, AnnotationDrainingSince, AnnotationRack}
}
