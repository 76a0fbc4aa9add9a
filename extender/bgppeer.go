package extender

import (
	"fmt"
	"slices"
	"strings"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// BGPPeer is a Calico BGPPeer (projectcalico.org/v3) the plan needs.
type BGPPeer struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
	Spec   apiv3.BGPPeerSpec `json:"spec"`
}

// bgpPeers returns one BGPPeer per distinct peering set (the nodes labelled with the set peer with
// its route reflectors), one per uplink set (DualPlane rack route reflectors and their spine
// members) and, where route reflectors mesh, one BGPPeer that meshes them.
func (pl *planner) bgpPeers(sets, uplinks map[string][]int, mesh bool) []BGPPeer {
	labels := func() map[string]string {
		return map[string]string{LabelManagedBy: ManagedByValue, LabelPolicy: pl.p.Name}
	}
	var out []BGPPeer
	if mesh {
		sel := RouteReflectorSelector(pl.p.RRLabelKey, pl.p.RRLabelValue)
		out = append(out, BGPPeer{Name: MeshBGPPeerName(pl.p.Name), Labels: labels(),
			Spec: apiv3.BGPPeerSpec{NodeSelector: sel, PeerSelector: sel}})
	}
	if len(pl.topLevel) > 0 && pl.in.CrossPolicy {
		out = append(out, BGPPeer{Name: CrossPolicyBGPPeerName(pl.p.Name), Labels: labels(),
			Spec: apiv3.BGPPeerSpec{NodeSelector: CrossPolicySelector, PeerSelector: CrossPolicySelector}})
	}
	if len(pl.topLevel) > 0 && pl.in.OutsideSelector != "" {
		out = append(out, BGPPeer{Name: OutsideBGPPeerName(pl.p.Name), Labels: labels(),
			Spec: apiv3.BGPPeerSpec{NodeSelector: pl.in.OutsideSelector, PeerSelector: CrossPolicySelector}})
	}
	for _, kind := range [...]struct {
		sets   map[string][]int
		prefix string
		label  string
	}{{sets, BGPPeerPrefix, LabelPeeringSet}, {uplinks, UplinkBGPPeerPrefix, LabelUplinkSet}} {
		for _, set := range sortedKeys(kind.sets) {
			ids := make([]string, len(kind.sets[set]))
			for k, j := range kind.sets[set] {
				ids[k] = RouteReflectorID(pl.nodes[j].Name)
			}
			out = append(out, BGPPeer{Name: kind.prefix + set, Labels: labels(), Spec: apiv3.BGPPeerSpec{
				NodeSelector: fmt.Sprintf("%s == '%s'", kind.label, set),
				PeerSelector: routeReflectorIDSelector(ids),
			}})
		}
	}
	for i := range out {
		out[i].Spec = WithSettings(pl.p, out[i].Spec)
	}
	return out
}

// WithSettings returns spec with the policy's BGPPeer settings (spec.bgpPeer: password,
// maxRestartTime, ttlSecurity, filters, sourceAddress, reachableBy) in place of its own, as
// copies: every BGPPeer a policy writes carries them (none when the policy sets none).
func WithSettings(p *policy.Resolved, spec apiv3.BGPPeerSpec) apiv3.BGPPeerSpec {
	s := p.BGPPeer.DeepCopy()
	spec.Password, spec.MaxRestartTime, spec.TTLSecurity = s.Password, s.MaxRestartTime, s.TTLSecurity
	spec.Filters, spec.SourceAddress, spec.ReachableBy = s.Filters, s.SourceAddress, s.ReachableBy
	return spec
}

// CrossPolicySelector selects the top-level route reflectors of every policy.
var CrossPolicySelector = fmt.Sprintf("has(%s)", LabelTopLevel)

// CrossPolicyBGPPeerName names a policy's BGPPeer that peers the top-level route reflectors of
// every policy (each policy writes the same one under its own name; Calico makes one session per
// pair).
func CrossPolicyBGPPeerName(policyName string) string { return meshName("mesh.all.", policyName) }

// ReleaseBGPPeer is the BGPPeer a deleted policy writes before its route reflectors lose their
// role: every node that is no route reflector (of any policy) peers with one route reflector of the policy, the
// keeper (its name), which the release goes through (internal/reconciler/release.go). A route
// reflector keeps its cluster ID until released, and with it is out of the node-to-node mesh:
// through the keeper, every node keeps every route while the others are released. Route
// reflectors are not selected on either side but the keeper: peering every node with every route
// reflector meshed route reflectors of distinct cluster IDs, and with ADD-PATH every node stored
// a path per chain of them (117,111 routes on the busiest of 24 nodes). It goes with the policy's
// other BGPPeers.
func ReleaseBGPPeer(p *policy.Resolved, keeper string) BGPPeer {
	return BGPPeer{Name: meshName("release.", p.Name),
		Labels: map[string]string{LabelManagedBy: ManagedByValue, LabelPolicy: p.Name},
		Spec: WithSettings(p, apiv3.BGPPeerSpec{NodeSelector: ReleaseNodeSelector,
			PeerSelector: routeReflectorIDSelector([]string{RouteReflectorID(keeper)})})}
}

// ReleaseNodeSelector selects the nodes that are no route reflector of any policy (every route
// reflector the product makes carries LabelRouteReflectorID, whatever its policy's label).
var ReleaseNodeSelector = fmt.Sprintf("!has(%s)", LabelRouteReflectorID)

// OutsideBGPPeerName names a policy's BGPPeer that makes the nodes outside every policy clients of
// the top-level route reflectors.
func OutsideBGPPeerName(policyName string) string { return meshName("mesh.outside.", policyName) }

// OutsideSelector is the Calico selector of the nodes no policy selects, from every valid
// policy's nodeSelector in Calico's syntax (policy.Resolved.CalicoNodeSelector); "" when one of
// them selects every node. The same for every policy (sorted).
func OutsideSelector(policySelectors []string) string {
	sels := slices.Sorted(slices.Values(policySelectors))
	parts := make([]string, 0, len(sels))
	for _, s := range slices.Compact(sels) {
		if s == "all()" {
			return ""
		}
		parts = append(parts, "!("+s+")")
	}
	return strings.Join(parts, " && ")
}

// meshName is BGPPeerPrefix, kind and the policy's name (a hash of it when too long); the dots
// keep it apart from any policy's MeshBGPPeerName and from the peering sets' names.
func meshName(kind, policyName string) string {
	name := BGPPeerPrefix + kind + policyName
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		name = BGPPeerPrefix + kind + shortHash(policyName)
	}
	return name
}

// RouteReflectorSelector is the Calico selector of nodes carrying the route reflector label.
func RouteReflectorSelector(key, value string) string {
	if value == "" {
		return fmt.Sprintf("has(%s)", key)
	}
	return fmt.Sprintf("%s == '%s'", key, value)
}

// MeshBGPPeerName names the BGPPeer that meshes a policy's route reflectors.
func MeshBGPPeerName(policyName string) string {
	name := BGPPeerPrefix + "mesh-" + policyName
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		name = BGPPeerPrefix + "mesh-" + shortHash(policyName)
	}
	return name
}

// routeReflectorIDSelector selects the route reflectors of the given IDs (LabelRouteReflectorID),
// in the given order.
func routeReflectorIDSelector(ids []string) string {
	quoted := make([]string, len(ids))
	for k, id := range ids {
		quoted[k] = "'" + id + "'"
	}
	return fmt.Sprintf("%s in {%s}", LabelRouteReflectorID, strings.Join(quoted, ", "))
}

// routeReflectorIDs reads the IDs of a selector routeReflectorIDSelector wrote; ok is false for any
// other selector.
func routeReflectorIDs(sel string) (ids []string, ok bool) {
	body, ok := strings.CutPrefix(sel, LabelRouteReflectorID+" in {")
	if body, ok = strings.CutSuffix(body, "}"); !ok {
		return nil, false
	}
	for _, q := range strings.Split(body, ", ") {
		id, ok := strings.CutPrefix(q, "'")
		if id, ok = strings.CutSuffix(id, "'"); !ok || id == "" {
			return nil, false
		}
		ids = append(ids, id)
	}
	return ids, true
}

// TransitionalSetPrefix starts the name of a transitional peering or uplink set
// (TransitionalBGPPeer).
const TransitionalSetPrefix = "move."

// IsTransitionalSet reports whether a peering or uplink set is a transitional one
// (TransitionalBGPPeer).
func IsTransitionalSet(set string) bool { return strings.HasPrefix(set, TransitionalSetPrefix) }

// SetBGPPeerName is the name of the BGPPeer of set, a set of the node label key (LabelPeeringSet
// or LabelUplinkSet): SetLabelOf reads it back.
func SetBGPPeerName(key, set string) string {
	if key == LabelUplinkSet {
		return UplinkBGPPeerPrefix + set
	}
	return BGPPeerPrefix + set
}

// PeerRouteReflectorIDs returns the route reflector IDs (LabelRouteReflectorID) a peering or
// uplink set's BGPPeer selects, from its peer selector; ok is false for any other selector.
func PeerRouteReflectorIDs(peerSelector string) (ids []string, ok bool) {
	return routeReflectorIDs(peerSelector)
}

// TransitionalBGPPeer is the BGPPeer of a transitional set of the node label key (LabelPeeringSet:
// a client's peering set; LabelUplinkSet: a DualPlane rack route reflector's uplink set): its nodes
// peer with the route reflectors ids. A node moving to a set that shares no settled route reflector
// with its own is first labelled with a set of its old route reflectors and one new one, then with
// sets that take the other new ones one at a time, each in place of an old one once a new one of
// its plane is up, and with its new set once every new one's sessions are up
// (internal/reconciler/moves.go): Calico renders one
// BIRD protocol per peer address with the same settings whichever BGPPeer selects it, so no write
// restarts a session the node keeps. The set is named after its route reflectors
// (TransitionalSetPrefix and a hash): nodes making the same move share it.
func TransitionalBGPPeer(p *policy.Resolved, key string, ids []string) BGPPeer {
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	set := TransitionalSetPrefix + shortHash(strings.Join(ids, ","))
	return BGPPeer{Name: SetBGPPeerName(key, set),
		Labels: map[string]string{LabelManagedBy: ManagedByValue, LabelPolicy: p.Name},
		Spec: WithSettings(p, apiv3.BGPPeerSpec{NodeSelector: fmt.Sprintf("%s == '%s'", key, set),
			PeerSelector: routeReflectorIDSelector(ids)})}
}

// MakeBeforeBreak returns the BGPPeer to write in place of have when a plan changes a set's route
// reflectors (a DualPlane rack's set, which keeps its name as its route reflectors change): while
// a route reflector the plan adds is not labelled as one yet (labelled reports whether a node
// carries the route reflector ID), the set keeps those of have that still are, so its nodes are
// never left with fewer route reflectors than either plan gives them. wait is true when the
// result is such a union: the caller writes it and comes back once the labels are written.
func MakeBeforeBreak(want BGPPeer, haveSelector string, labelled func(id string) bool) (out BGPPeer, wait bool) {
	add, ok := routeReflectorIDs(want.Spec.PeerSelector)
	old, ok2 := routeReflectorIDs(haveSelector)
	if !ok || !ok2 || slices.IndexFunc(add, func(id string) bool { return !labelled(id) }) < 0 {
		return want, false
	}
	ids := slices.Clone(add)
	for _, id := range old {
		if !slices.Contains(ids, id) && labelled(id) {
			ids = append(ids, id)
			wait = true
		}
	}
	if !wait {
		return want, false
	}
	slices.Sort(ids)
	out = want
	out.Spec.PeerSelector = routeReflectorIDSelector(ids)
	return out, true
}
