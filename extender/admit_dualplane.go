package extender

import (
	"fmt"
	"maps"
	"slices"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// DualPlane admission: a joining node's rack and, when the rack is short of route reflectors, its
// role as one of them. The planner's rules (dualplane.go) written for one node at a time: a node
// goes to the emptiest rack of its zone with room (the one rack of a cluster that fits in one), a
// zone without racks or with full ones opens a new rack, and a rack's first `redundancy` eligible
// nodes are its route reflectors, one per plane, with the rack's cluster ID.

// roomyZoneRack returns the emptiest rack of zone with room (the rack with the lowest index on a
// tie), or the one rack of a cluster planned as one rack across its zones.
func (s *AdmitState) roomyZoneRack(zone string) (string, bool) {
	if _, one := s.racks[ZoneRackName("", 1)]; one && len(s.racks) == 1 {
		zone = ""
	}
	var idx []int
	for name, rk := range s.racks {
		if j, ok := zoneRackIndex(zone, name); ok && rk.members < s.Policy.MaxRackSize {
			idx = append(idx, j)
		}
	}
	if len(idx) == 0 {
		return "", false
	}
	slices.Sort(idx)
	fill := make([]int, len(idx))
	for k, j := range idx {
		fill[k] = s.racks[ZoneRackName(zone, j)].members
	}
	return ZoneRackName(zone, idx[emptiestRack(fill)]), true
}

// newRackFor returns the rack a node of zone opens when the state has no rack with room for it: the
// one rack of a new cluster, or the lowest free rack index of a zone that has no racks or whose
// racks are full. A cluster planned as one rack that is full must be split by the reconciler.
func (s *AdmitState) newRackFor(zone string) (string, bool) {
	if len(s.racks) == 0 {
		if s.active > 0 {
			return "", false
		}
		return ZoneRackName("", 1), true
	}
	if s.oneRack {
		return "", false
	}
	for j := 1; ; j++ {
		if _, taken := s.racks[ZoneRackName(zone, j)]; !taken {
			return ZoneRackName(zone, j), true
		}
	}
}

// knownRack is the rack of the state that a node's admission reads it in: onNode (the rack on its
// Node) when the state has it, else the rack the plan put the node in when the node is still in
// that zone: it is counted there already (the plan's writes may not have reached the Node yet);
// else "". Without it, a node the plan placed in a full rack while it was NotReady, turning Ready
// before its rack annotation landed, found every rack of its zone full and opened a new one as its
// route reflector.
func (s *AdmitState) knownRack(node, zone, onNode string) string {
	if onNode != "" && s.racks[onNode] != nil {
		return onNode
	}
	if prev, ok := s.node(node); ok && prev.zone == zone && prev.rack != "" && s.racks[prev.rack] != nil {
		return prev.rack
	}
	return ""
}

// promoteRackRR makes an eligible joining node a route reflector of its rack when the rack has
// fewer than `redundancy` of them: the lowest free plane, the rack's cluster ID (a new rack takes the
// lowest free one above the spine's), the rack's peering set with it (and, for the planes the rack
// lacks, the spine's members, as the planner wires it) and its plane's uplink to the spine. A rack
// across zones takes a second route reflector only from another zone (or while the cluster has
// one zone). It reports whether it promoted.
func (s *AdmitState) promoteRackRR(a *Admission, ni *NodeInfo) bool {
	rack := s.knownRack(a.Node, a.Zone, ni.Rack)
	if rack == "" {
		var ok bool
		if rack, ok = s.roomyZoneRack(a.Zone); !ok {
			if rack, ok = s.newRackFor(a.Zone); !ok {
				return false
			}
		}
	}
	if s.oneRack && rack != ZoneRackName("", 1) {
		return false // a zone's first rack before the reconciler splits the one rack: no route reflector yet
	}
	rk := s.racks[rack]
	planes := s.Policy.Redundancy
	plane := 0
	for k := 1; k <= planes; k++ {
		if rk == nil || rk.rrs[k] == "" {
			plane = k
			break
		}
	}
	if plane == 0 {
		return false
	}
	id := s.freeRackID()
	var set []string
	if rk != nil && len(rk.rrs) > 0 {
		id = rk.id
		if rack == ZoneRackName("", 1) && len(s.zones) > 1 {
			for _, name := range rk.rrs {
				if rr := s.rrs[name]; rr != nil && rr.zone == a.Zone {
					return false
				}
			}
		}
	}
	spine := s.spineMembers()
	for k := 1; k <= planes; k++ {
		switch {
		case k == plane:
			set = append(set, a.Node)
		case rk != nil && rk.rrs[k] != "":
			set = append(set, rk.rrs[k])
		case spine[k] != "":
			set = append(set, spine[k])
		}
	}
	slices.Sort(set)
	a.Role, a.Rack, a.Plane, a.ClusterID = AdmitRouteReflector, rack, plane, policy.ClusterIDString(id)
	a.PeeringSet, a.RouteReflectors = rackSetName(s.Policy.Name, a.Zone, rack), set
	if len(spine) > 0 {
		up := []string{spine[plane]}
		if spine[plane] == "" {
			up = slices.Sorted(maps.Values(spine))
		}
		a.UplinkSet = peeringSetName(up)
	} else {
		a.topLevel = s.crossPolicy
	}
	a.Reason = fmt.Sprintf("rack %s has no route reflector in plane %d", rack, plane)
	return true
}

// spineMembers returns the active spine route reflectors by plane.
func (s *AdmitState) spineMembers() map[int]string {
	out := map[int]string{}
	for name, f := range s.eachNode {
		if f.role == AdmitRouteReflector && f.id == s.spineID && f.plane > 0 {
			if cur, ok := out[f.plane]; !ok || name < cur {
				out[f.plane] = name
			}
		}
	}
	return out
}

// freeRackID is the lowest cluster ID above the spine's that no route reflector holds, none is
// handing over and no other policy's node carries: where the planner puts a new rack.
func (s *AdmitState) freeRackID() uint32 {
	id := s.spineID
	for id == s.spineID || s.ids[id] > 0 || s.draining[id] > 0 || s.releasing[id] > 0 || s.reserved[id] {
		id++
	}
	return id
}
