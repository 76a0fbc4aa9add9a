package extender

import (
	"slices"
	"strings"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// Labels and annotations this product owns on nodes and BGPPeers.
const (
	// AnnotationClusterID is Calico's route reflector cluster ID of a node (KDD mode).
	AnnotationClusterID = "projectcalico.org/RouteReflectorClusterID"
	// AnnotationCalicoLabels holds Calico-only node labels as JSON (KDD mode).
	AnnotationCalicoLabels = "projectcalico.org/labels"
	// AnnotationCalicoIPv4 is Calico's BGP IPv4 address of a node with its prefix length (KDD
	// mode, written by calico-node): the address its BGP peers see.
	AnnotationCalicoIPv4 = "projectcalico.org/IPv4Address"
	// AnnotationCalicoIPv6 is the IPv6 counterpart of AnnotationCalicoIPv4.
	AnnotationCalicoIPv6 = "projectcalico.org/IPv6Address"
	// LabelRouteReflectorID names a route reflector in BGPPeer peer selectors.
	LabelRouteReflectorID = "routereflector.io/rr-id"
	// LabelPeeringSet names the set of route reflectors a node peers with; one BGPPeer per set.
	LabelPeeringSet = "routereflector.io/peering-set"
	// AnnotationRouteReflectors lists, comma-separated, the route reflectors a client peers with.
	AnnotationRouteReflectors = "routereflector.io/route-reflectors"
	// AnnotationDrainingSince marks a route reflector whose clients are being handed over (RFC 3339).
	AnnotationDrainingSince = "routereflector.io/draining-since"
	// AnnotationDrainingReason says why a route reflector is draining when the cause may go away by
	// itself: DrainingReasonNotReady. A route reflector Ready again before its removalDelay ends
	// takes its role back (and its plane in DualPlane) and loses the mark.
	AnnotationDrainingReason = "routereflector.io/draining-reason"
	// DrainingReasonNotReady: drained because it was NotReady past notReadyGracePeriod.
	DrainingReasonNotReady = "NotReady"
	// AnnotationRack is a node's rack in the Hierarchical and DualPlane topologies (kept while the
	// node stays).
	AnnotationRack = "routereflector.io/rack"
	// AnnotationPlane is a DualPlane route reflector's plane, 1 to redundancy (kept while it is one).
	AnnotationPlane = "routereflector.io/plane"
	// AnnotationStandbyFor marks a DualPlane spine route reflector promoted while its plane's
	// member (named in the value) is NotReady within its grace period: it is released when the
	// member is Ready again, and takes the member's place when the member is drained.
	AnnotationStandbyFor = "routereflector.io/standby-for"
	// AnnotationProtection lists, comma-separated, the protection annotations
	// (policy.ProtectionAnnotations: karpenter.sh/do-not-disrupt and
	// cluster-autoscaler.kubernetes.io/scale-down-disabled) the product set on a route reflector:
	// only those are the product's, removed after its demotion. One the node carried as "true"
	// before is its owner's: never listed, never removed (see protect).
	AnnotationProtection = "routereflector.io/protection"
	// LabelUplinkSet names the spine route reflectors a DualPlane rack route reflector peers with
	// (its plane's); one BGPPeer per set, named UplinkBGPPeerPrefix and the set.
	LabelUplinkSet = "routereflector.io/uplink-set"
	// LabelTopLevel marks the route reflectors that peer with every other policy's and with the
	// nodes outside every policy (when there are such): every active one in SingleCluster and
	// MultiCluster, the spine in DualPlane and Hierarchical (all of them when a plan has no spine).
	LabelTopLevel = "routereflector.io/top-level"

	// LabelManagedBy marks the BGPPeers this product writes.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of LabelManagedBy.
	ManagedByValue = "calico-rr-autoscaler"
	// LabelPolicy names the policy a BGPPeer belongs to.
	LabelPolicy = "routereflector.io/policy"
	// BGPPeerPrefix starts the name of every BGPPeer this product writes.
	BGPPeerPrefix = "rr-autoscaler-"
	// UplinkBGPPeerPrefix starts the name of the BGPPeer of an uplink set.
	UplinkBGPPeerPrefix = BGPPeerPrefix + "up-"
)

// OwnedLabelKeys returns the node label keys this product writes for a policy whose route
// reflector label key is rrLabelKey.
func OwnedLabelKeys(rrLabelKey string) []string {
	return []string{rrLabelKey, LabelRouteReflectorID, LabelPeeringSet, LabelUplinkSet, LabelTopLevel}
}

// ApplyOwned returns a node's labels or annotations (base) once a plan's state for the node is
// applied: without the keys the product owns, with the plan's (set) on top. base is not changed.
func ApplyOwned(base map[string]string, owned []string, set map[string]string) map[string]string {
	out := make(map[string]string, len(base)+len(set))
	for k, v := range base {
		if !slices.Contains(owned, k) {
			out[k] = v
		}
	}
	for k, v := range set {
		out[k] = v
	}
	return out
}

// SetLabelOf returns the node label a managed BGPPeer's nodeSelector reads (LabelPeeringSet or
// LabelUplinkSet) and the set's name, from the BGPPeer's name; ok is false for the BGPPeers that
// select no set (the route reflector mesh).
func SetLabelOf(bgpPeerName string) (key, set string, ok bool) {
	if set, ok := strings.CutPrefix(bgpPeerName, UplinkBGPPeerPrefix); ok {
		return LabelUplinkSet, set, true
	}
	set, ok = strings.CutPrefix(bgpPeerName, BGPPeerPrefix)
	if !ok || strings.HasPrefix(set, "mesh-") || strings.HasPrefix(set, "mesh.") {
		return "", "", false
	}
	return LabelPeeringSet, set, true
}

// WatchedAnnotationKeys are the node annotations whose change the node webhooks must see: the
// owned ones (the cluster ID among them) and Calico's labels annotation, which the product reads. The
// chart's node matchConditions list the same keys (a chart test compares them).
func WatchedAnnotationKeys() []string {
	return append([]string{AnnotationCalicoLabels}, OwnedAnnotationKeys()...)
}

// OwnedAnnotationKeys returns the node annotation keys this product writes.
func OwnedAnnotationKeys() []string {
	return []string{AnnotationClusterID, AnnotationRouteReflectors, AnnotationDrainingSince, AnnotationDrainingReason, AnnotationRack, AnnotationPlane, AnnotationStandbyFor, AnnotationProtection}
}

// OwnedAnnotationKeysOf returns the annotation keys the product owns on a node that carries cur
// and is planned want: OwnedAnnotationKeys, and the protection annotations that either's
// AnnotationProtection lists (a protection annotation nobody listed is not the product's).
func OwnedAnnotationKeysOf(cur, want map[string]string) []string {
	if cur[AnnotationProtection] == "" && want[AnnotationProtection] == "" {
		return ownedAnnotationKeys
	}
	keys := slices.Clone(ownedAnnotationKeys)
	for _, k := range policy.ProtectionAnnotations() {
		if listsProtection(cur, k) || listsProtection(want, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

var ownedAnnotationKeys = OwnedAnnotationKeys()

// listsProtection reports whether annotations' AnnotationProtection lists key.
func listsProtection(ann map[string]string, key string) bool {
	s := ann[AnnotationProtection]
	return s != "" && slices.Contains(strings.Split(s, ","), key)
}

// protect puts the protection annotations on a route reflector's planned annotations (want) when
// the policy protects route reflectors: each "true", listed in AnnotationProtection, but for one
// the node (cur) carries as "true" without the product having listed it: that one is the node
// owner's, left as it is and never removed.
func protect(p *policy.Resolved, cur, want map[string]string) {
	if !p.Protect {
		return
	}
	var set []string
	for _, k := range policy.ProtectionAnnotations() {
		if cur[k] == "true" && !listsProtection(cur, k) {
			continue
		}
		want[k] = "true"
		set = append(set, k)
	}
	if len(set) > 0 {
		want[AnnotationProtection] = strings.Join(set, ",")
	}
}
