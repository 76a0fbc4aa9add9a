package extender

import (
	"fmt"
	"time"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// BGP health (the policy's bgpHealth): a route reflector whose Node is Ready can still be useless
// to its clients, when its BIRD died or its sessions stay down. The leader reads the sessions
// calico-node reports in a CalicoNodeStatus per route reflector and passes what it saw in
// Input.BGPHealth; the planner reads it through NodeInfo.BGP. Rules, written once here:
//
//   - a route reflector seen with no Established session keeps its role for bgpHealth.gracePeriod
//     (a BIRD restart or a reconfiguration is shorter than that); past it, the BGPSessions filter
//     rejects it: the plan promotes its replacement (a DualPlane spine member gets a standby
//     already while its sessions are down, as a NotReady one does) and it drains, with the draining
//     reason BGPDown;
//   - a route reflector whose sessions come back within its grace period was never failed: the
//     record goes at once;
//   - a failed one counts healthy again once its sessions have been Established for BGPHold (the
//     scale-down stabilization window, at most gracePeriod), so that a BIRD that crashes in a loop
//     does not move the role back and forth; still draining then, it takes its role (and its
//     plane) back, as a route reflector Ready again after NotReady does.

// BGPHealth is what the leader saw of a route reflector's BGP sessions (zero: healthy).
type BGPHealth struct {
	// DownSince is when it was first seen with no Established session.
	DownSince time.Time
	// UpSince is when a failed route reflector was first seen with its sessions back (zero while
	// they are down).
	UpSince time.Time
	// Sessions names the sessions that were down at the last observation (for Events).
	Sessions []string
	// Families are the address families whose sessions were down at the last observation: the
	// leader judges each family of the route reflector on its own (a dual-stack route reflector
	// whose IPv6 sessions are all down while IPv4 is up is down for its IPv6 clients, and replaced
	// as a whole). 0: not said (every family).
	Families Families
}

// DrainingReasonBGPDown: drained because its BGP sessions were down past bgpHealth.gracePeriod
// while its Node was Ready.
const DrainingReasonBGPDown = "BGPDown"

// Filter names and reasons of BGP health.
const (
	BGPSessionsName = "BGPSessions"
	RuleBGPDownNode = "bgp-down-node"
	ReasonBGPDown   = "node's BGP sessions have been down for longer than bgpHealth.gracePeriod (its Node is Ready)"
	// reasonBGPDownFamily: only some of the node's families are down (%s: those down, then those up).
	reasonBGPDownFamily = "node's %s BGP sessions have been down for longer than bgpHealth.gracePeriod (its Node is Ready, %s up): its %s clients have no routes through it"
)

// BGPDownReason is the BGPSessions filter's reason for a node failed by its sessions: ReasonBGPDown
// when every family of the node is down (or the record does not say), else the families down.
func BGPDownReason(h BGPHealth, node Families) string {
	up := node &^ h.Families
	if h.Families == 0 || up == 0 {
		return ReasonBGPDown
	}
	return fmt.Sprintf(reasonBGPDownFamily, h.Families, up, h.Families)
}

// BGPHold is how long a failed route reflector's sessions must stay Established before it counts
// healthy again: the scale-down stabilization window, at most gracePeriod.
func BGPHold(p *policy.Resolved) time.Duration { return min(p.ScaleDownWindow, p.BGPGrace) }

// Observe returns the record after an observation at now (down: no Established session), and
// false when the route reflector is healthy again (the record goes).
func (h BGPHealth) Observe(down bool, sessions []string, now time.Time, p *policy.Resolved) (BGPHealth, bool) {
	failed := !h.DownSince.IsZero() && !now.Before(h.DownSince.Add(p.BGPGrace))
	switch {
	case down && h.DownSince.IsZero():
		return BGPHealth{DownSince: now, Sessions: sessions}, true
	case down:
		h.UpSince, h.Sessions = time.Time{}, sessions
		return h, true
	case h.DownSince.IsZero() || !failed:
		return BGPHealth{}, false // up, or back within its grace period
	case h.UpSince.IsZero():
		h.UpSince, h.Sessions = now, nil
		return h, now.Before(h.UpSince.Add(BGPHold(p)))
	default:
		return h, now.Before(h.UpSince.Add(BGPHold(p)))
	}
}

// Failed reports whether the record makes its route reflector failed at now: down for
// gracePeriod, and not back for BGPHold yet.
func (h BGPHealth) Failed(now time.Time, p *policy.Resolved) bool {
	if h.DownSince.IsZero() || now.IsZero() || now.Before(h.DownSince.Add(p.BGPGrace)) {
		return false
	}
	return h.UpSince.IsZero() || now.Before(h.UpSince.Add(BGPHold(p)))
}

// Suspect reports whether the sessions are down now (within the grace period or past it).
func (h BGPHealth) Suspect() bool { return !h.DownSince.IsZero() && h.UpSince.IsZero() }

// BGPFailed reports whether n's BGP sessions make it a failed route reflector at n.Now.
func (n *NodeInfo) BGPFailed(p *policy.Resolved) bool { return n.BGP.Failed(n.Now, p) }

// BGPSessions rejects a node whose BGP sessions have been down for longer than
// bgpHealth.gracePeriod while its Node is Ready (see BGPHealth). It passes every node the leader
// has no record of: webhooks, the plan command and a policy with bgpHealth off pass no record.
type BGPSessions struct{}

var _ FilterPlugin = &BGPSessions{}

// NewBGPSessions returns the BGPSessions filter.
func NewBGPSessions() *BGPSessions { return &BGPSessions{} }

// Name implements FilterPlugin.
func (*BGPSessions) Name() string { return BGPSessionsName }

// Rule implements FilterPlugin.
func (*BGPSessions) Rule() string { return RuleBGPDownNode }

// Filter implements FilterPlugin.
func (*BGPSessions) Filter(p *policy.Resolved, n *NodeInfo) string {
	if n.Ready && n.BGPFailed(p) {
		return BGPDownReason(n.BGP, n.Families)
	}
	return ""
}

// drainingReason is the reason a draining route reflector carries when its cause may go away by
// itself ("" for none): NotReady, BGPDown, or the one it carries already.
func (n *NodeInfo) drainingReason(p *policy.Resolved) string {
	switch {
	case !n.Ready:
		return DrainingReasonNotReady
	case n.BGPFailed(p):
		return DrainingReasonBGPDown
	case n.DrainedWhileNotReady():
		return n.Node.Annotations[AnnotationDrainingReason]
	}
	return ""
}
