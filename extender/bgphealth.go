package extender

import (
	"fmt"
	"slices"
	"strings"
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
//   - a route reflector down while every other route reflector of one of its clients is down too
//     (Orphaning, computed by BGPOrphaning) is failed at once, without the grace: the client has no
//     route reflector left, so waiting costs its routes (calico-node's shutdown stops BIRD with a
//     Cease, the peers drop the routes at once) or risks them (a crash leaves them to graceful
//     restart, maxRestartTime, Calico's default 120 s, no longer than the default grace). Both
//     are seen down in the same observation, so both are replaced in one plan (calico#9259). A
//     single route reflector's blip, or one session down, never skips the grace. Once failed so,
//     it stays failed while down, and counts healthy again only after BGPHold, as any failed one;
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
	// Orphaning names the clients of the route reflector whose every route reflector was down at
	// an observation while this one was (BGPOrphaning): it is failed without bgpHealth.gracePeriod.
	// Kept while the route reflector stays down (its clients move away once it is replaced).
	Orphaning []string
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
	// reasonBGPDownOrphaning: down together with every other route reflector of some clients (%s).
	reasonBGPDownOrphaning = "node's BGP sessions are down and so are those of every other route reflector of its clients %s: replaced without waiting for bgpHealth.gracePeriod"
	reasonBGPDownFamily    = "node's %s BGP sessions have been down for longer than bgpHealth.gracePeriod (its Node is Ready, %s up): its %s clients have no routes through it"
)

// BGPDownReason is the BGPSessions filter's reason for a node failed by its sessions: ReasonBGPDown
// when every family of the node is down (or the record does not say), else the families down.
func BGPDownReason(h BGPHealth, node Families) string {
	if len(h.Orphaning) > 0 {
		return fmt.Sprintf(reasonBGPDownOrphaning, orphansText(h.Orphaning))
	}
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
	failed := !h.DownSince.IsZero() && (len(h.Orphaning) > 0 || !now.Before(h.DownSince.Add(p.BGPGrace)))
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
// gracePeriod (or down while orphaning a client: at once), and not back for BGPHold yet.
func (h BGPHealth) Failed(now time.Time, p *policy.Resolved) bool {
	if h.DownSince.IsZero() || now.IsZero() || len(h.Orphaning) == 0 && now.Before(h.DownSince.Add(p.BGPGrace)) {
		return false
	}
	return h.UpSince.IsZero() || now.Before(h.UpSince.Add(BGPHold(p)))
}

// BGPOrphaning is the rule for two route reflectors of a client lost at once: given each client's
// route reflectors (rrsOf) and which route reflectors are down now (every session down, BIRD not
// answering, or calico-node no longer reporting), it returns, for each route reflector that is
// down, the clients (sorted) whose every route reflector is down: those route reflectors are
// failed without the grace. It takes two route reflectors down together: a client with one route
// reflector only (a layout of a single one) orphans nothing, so that one BIRD's restart keeps its
// grace; nor does a client with one still up. A route reflector that is up is never named.
func BGPOrphaning(rrsOf map[string][]string, down map[string]bool) map[string][]string {
	var out map[string][]string
	for c, rrs := range rrsOf {
		if len(rrs) < 2 || !allDown(rrs, down) {
			continue
		}
		if out == nil {
			out = map[string][]string{}
		}
		for _, rr := range rrs {
			if !slices.Contains(out[rr], c) {
				out[rr] = append(out[rr], c)
			}
		}
	}
	for _, cs := range out {
		slices.Sort(cs)
	}
	return out
}

func allDown(rrs []string, down map[string]bool) bool {
	for _, rr := range rrs {
		if !down[rr] {
			return false
		}
	}
	return true
}

// orphansText names up to 5 clients and counts the rest.
func orphansText(cs []string) string {
	if len(cs) <= 5 {
		return strings.Join(cs, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(cs[:5], ", "), len(cs)-5)
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
