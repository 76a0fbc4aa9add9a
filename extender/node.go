package extender

import (
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// NodeInfo is what the pipeline knows of one node: its facts and the state this product wrote on it.
type NodeInfo struct {
	Node *Node
	Name string
	Zone string
	// Created is the creation time in Unix seconds.
	Created int64

	Ready         bool
	Unschedulable bool
	Deleting      bool
	// NotReadySince is when the Ready condition last left True (zero while Ready, or unknown).
	NotReadySince time.Time
	// Condition is the first pressure or network condition that is True (MemoryPressure,
	// DiskPressure, PIDPressure, NetworkUnavailable), "" when none.
	Condition corev1.NodeConditionType
	// Now is the time of the decision, for the NotReady grace period (zero: no grace).
	Now time.Time

	// Current state, read back from the node.
	CurrentRR     bool   // carries the route reflector label or a cluster ID
	ClusterID     uint32 // valid when HasClusterID
	HasClusterID  bool
	DrainingSince time.Time // zero when not draining
	CurrentRRs    []string  // a client's route reflectors
	Rack          string
	Plane         int // a DualPlane route reflector's plane (1..), 0 when none
	// StandbyFor: a DualPlane spine route reflector standing in for its plane's NotReady member
	// (AnnotationStandbyFor), "" otherwise.
	StandbyFor string
	// BGP is what the leader saw of the node's BGP sessions (Input.BGPHealth; zero: nothing wrong).
	BGP BGPHealth
	// Families are the address families the node peers in (NodeFamilies: its Calico addresses).
	Families Families

	// Filled by the pipeline.
	Eligible  bool
	Reason    string // why the node is not eligible
	Rule      string // the rule of the filter that rejected it (FilterPlugin.Rule), "" when eligible
	Preferred bool
	// Awaited: the node fails NodeReady only, and has been NotReady (or not Ready yet since it was
	// created) for less than the policy's notReadyGracePeriod. The multi-zone planners keep its
	// zone's share of route reflectors for it rather than spill the share into other zones, so
	// the order in which nodes turn Ready moves no role (see zoneQuotas).
	Awaited bool

	rank  int // position in the ranking of eligible nodes
	index int // position in the planner's node list
}

// NewNodeInfo reads a node under a policy.
func NewNodeInfo(n *Node, p *policy.Resolved) *NodeInfo {
	ni := &NodeInfo{
		Node:          n,
		Name:          n.Name,
		Zone:          n.Labels[p.ZoneLabel],
		Created:       n.CreationTimestamp.Unix(),
		Ready:         IsReady(n),
		NotReadySince: notReadySince(n),
		Condition:     PressureCondition(n),
		Unschedulable: n.Spec.Unschedulable,
		Deleting:      n.DeletionTimestamp != nil,
		Families:      NodeFamilies(n),
	}
	if s, ok := n.Annotations[AnnotationClusterID]; ok {
		ni.ClusterID, ni.HasClusterID = policy.ParseClusterID(s)
	}
	ni.CurrentRR = ni.HasClusterID || p.IsRouteReflectorLabel(n.Labels)
	if s := n.Annotations[AnnotationDrainingSince]; s != "" && ni.CurrentRR {
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			ni.DrainingSince = t
		}
	}
	if s := n.Annotations[AnnotationRouteReflectors]; s != "" && !ni.CurrentRR {
		ni.CurrentRRs = strings.Split(s, ",")
	}
	ni.Rack = n.Annotations[AnnotationRack]
	if s := n.Annotations[AnnotationPlane]; s != "" && ni.CurrentRR {
		if k, err := strconv.Atoi(s); err == nil && k > 0 {
			ni.Plane = k
		}
		ni.StandbyFor = n.Annotations[AnnotationStandbyFor]
	}
	return ni
}

// RouteReflectorClusterID returns the cluster ID of a node that is a route reflector of p: it
// carries the policy's route reflector label and a valid cluster ID (draining or not). The
// webhooks, the reconciler's status and metrics all read a node's role through it.
func RouteReflectorClusterID(n *Node, p *policy.Resolved) (uint32, bool) {
	if !p.IsRouteReflectorLabel(n.Labels) {
		return 0, false
	}
	return policy.ParseClusterID(n.Annotations[AnnotationClusterID])
}

// IsDraining reports whether a node carries the draining mark (its role is being handed over).
func IsDraining(n *Node) bool { return n.Annotations[AnnotationDrainingSince] != "" }

// IsActiveRouteReflector reports whether n is a route reflector of p that is not being handed over.
func IsActiveRouteReflector(n *Node, p *policy.Resolved) bool {
	_, ok := RouteReflectorClusterID(n, p)
	return ok && !IsDraining(n)
}

// Healthy reports whether a node counts toward the desired route reflector count: Ready and not being deleted.
func (n *NodeInfo) Healthy() bool { return n.Ready && !n.Deleting }

// Draining reports whether the node is a route reflector being handed over.
func (n *NodeInfo) Draining() bool { return !n.DrainingSince.IsZero() }

// DrainedWhileNotReady reports whether n is a route reflector being handed over because it was
// NotReady, or its BGP sessions were down (DrainingReasonBGPDown): when it is eligible again it
// takes its role back.
func (n *NodeInfo) DrainedWhileNotReady() bool {
	r := n.Node.Annotations[AnnotationDrainingReason]
	return n.Draining() && (r == DrainingReasonNotReady || r == DrainingReasonBGPDown)
}

// WithinNotReadyGrace reports whether n is a route reflector that has been NotReady for less than
// the policy's grace period at n.Now: it keeps its role. One whose BGP sessions are down while
// every other route reflector of one of its clients is down too (BGPHealth.Orphaning) has no grace.
func (n *NodeInfo) WithinNotReadyGrace(p *policy.Resolved) bool {
	return !n.Ready && n.CurrentRR && !n.Draining() && !n.Now.IsZero() && !n.NotReadySince.IsZero() && len(n.BGP.Orphaning) == 0 &&
		n.Now.Before(n.NotReadySince.Add(p.NotReadyGrace))
}

// AwaitedUntil is when an awaited node stops being awaited: notReadyGracePeriod after it went
// NotReady, or after it was created when it never reported Ready (a node being created counts
// from n.Now).
func (n *NodeInfo) AwaitedUntil(p *policy.Resolved) time.Time {
	start := n.NotReadySince
	if start.IsZero() {
		start = n.Node.CreationTimestamp.Time
	}
	if start.IsZero() || start.After(n.Now) {
		start = n.Now
	}
	return start.Add(p.NotReadyGrace)
}

// awaitable reports whether a node that fails NodeReady only is awaited at n.Now.
func (n *NodeInfo) awaitable(p *policy.Resolved) bool {
	return !n.Ready && !n.Deleting && !n.Now.IsZero() && len(n.BGP.Orphaning) == 0 && n.Now.Before(n.AwaitedUntil(p))
}

func notReadySince(n *Node) time.Time {
	for i := range n.Status.Conditions {
		if c := &n.Status.Conditions[i]; c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// badConditions are the node conditions under which a node is not made a route reflector.
var badConditions = []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeNetworkUnavailable}

// PressureCondition returns the first of MemoryPressure, DiskPressure, PIDPressure and
// NetworkUnavailable that is True on n, "" when none is.
func PressureCondition(n *Node) corev1.NodeConditionType {
	for i := range n.Status.Conditions {
		c := &n.Status.Conditions[i]
		if c.Status == corev1.ConditionTrue && slices.Contains(badConditions, c.Type) {
			return c.Type
		}
	}
	return ""
}

// SlimConditions returns the conditions the planner reads, and only the fields it reads: Ready
// (status and lastTransitionTime, for the NotReady grace period; reason and message only when they
// say the kubelet's graceful node shutdown, IsShuttingDown) and the pressure conditions that are
// True (type and status). Heartbeat times and messages go, so a kubelet heartbeat changes none
// of them. The webhooks' decoder and the cache's transform share it.
func SlimConditions(conds []corev1.NodeCondition) []corev1.NodeCondition {
	var out []corev1.NodeCondition
	for _, c := range conds {
		switch {
		case c.Type == corev1.NodeReady && IsShuttingDown(&c):
			// The kubelet's graceful node shutdown (NodeGoing): its reason and message, as constants.
			out = append(out, corev1.NodeCondition{Type: c.Type, Status: c.Status, LastTransitionTime: c.LastTransitionTime,
				Reason: ReadyReasonKubeletNotReady, Message: MessageNodeShuttingDown})
		case c.Type == corev1.NodeReady:
			out = append(out, corev1.NodeCondition{Type: c.Type, Status: c.Status, LastTransitionTime: c.LastTransitionTime})
		case c.Status == corev1.ConditionTrue && slices.Contains(badConditions, c.Type):
			out = append(out, corev1.NodeCondition{Type: c.Type, Status: c.Status})
		}
	}
	return out
}

// IsReady reports whether a node's Ready condition is True.
func IsReady(n *Node) bool {
	for i := range n.Status.Conditions {
		if c := &n.Status.Conditions[i]; c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// RouteReflectorID is the value of LabelRouteReflectorID for a node: its name when that is a valid
// label value, a stable hash otherwise.
func RouteReflectorID(name string) string {
	if len(validation.IsValidLabelValue(name)) == 0 {
		return name
	}
	return "h-" + shortHash(name)
}
