package reconciler

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// A route reflector that keeps its role but changes its cluster ID restarts every BGP session it
// has: confd renders `rr client` / `rr cluster id` anew on each of them and BIRD restarts every
// protocol whose configuration changed, with a Cease its peers act on at once. Two such changes at
// once (a layout switch, a rack split, a relabel) can restart both route reflectors a client has.
// So the nodes step changes one kept route reflector's cluster ID at a time, each once the last
// one's sessions are back: seen Established with all its clients in a CalicoNodeStatus reported
// after the change settled (handover BGPSessions), or after transitions.DefaultSettle (otherwise,
// and at the latest after transitions.DefaultMax). Promotions and demotions are not held: a new
// route reflector has no sessions to lose, and an old one is released by the handover.

// stageClusterIDs takes the kept route reflectors' cluster-ID changes out of the phases and puts
// back at most one, once the previous one has settled; the others wait for a later reconcile
// (requeued). A held change must not cost a route: the graph model checks the state the
// reconcile leaves (the view with the patches written, the plan's BGPPeers beside the old ones,
// the NotReady nodes down) against the plan applied whole. When the policy has top-level route
// reflectors, the model holds the cluster's other nodes and BGPPeers too (stageOutside): a held
// change can take the top-level label's last holder away from them. The change to make is the
// first, in name order, whose state passes, with the other patches or alone (they then wait).
// While one settles, the other patches go only if holding the changes passes, else nothing goes
// (when the cluster as it is passes). Where no staged state passes (or the model would hold more
// than transitionMaxNodes nodes, beyond its budget per reconcile), everything goes at once, as
// before staging.
func (r *Reconciler) stageClusterIDs(ctx context.Context, st *State, phases *[3][]nodePatch) {
	var held []nodePatch
	for i := range phases {
		phases[i] = slices.DeleteFunc(phases[i], func(np nodePatch) bool {
			if np.change != nil && np.change.Kind == KindClusterIDChanged {
				held = append(held, np)
				return true
			}
			return false
		})
	}
	if len(held) == 0 {
		transitionHeld.DeleteLabelValues(st.Name)
		return
	}
	slices.SortFunc(held, func(a, b nodePatch) int { return strings.Compare(a.name, b.name) })
	putBack := func(nps ...nodePatch) {
		for _, np := range nps {
			phases[np.phase] = append(phases[np.phase], np)
		}
	}
	if len(st.View) > transitionMaxNodes {
		putBack(held...)
		return
	}
	outside, others, err := r.stageOutside(ctx, st)
	if err == nil && len(st.View)+len(outside) > transitionMaxNodes {
		putBack(held...)
		return
	}
	var chk *stageCheck
	if err == nil {
		chk, err = newStageCheck(st, phases, held, outside, others)
	}
	if err != nil {
		r.Log.V(1).Info("cluster-ID changes not staged: the graph model cannot read the cluster", "policy", st.Name, "error", err.Error())
		putBack(held...)
		return
	}
	// hold keeps every held change for a later reconcile when the state without them passes (the
	// other patches, or none), else puts them back.
	hold := func(wait time.Duration, why ...any) {
		switch {
		case chk.safe():
			st.requeue(wait)
		case chk.safeOnly():
			st.requeue(wait)
			*phases = [3][]nodePatch{}
		default:
			putBack(held...)
			return
		}
		transitionHeld.WithLabelValues(st.Name).Set(float64(len(held)))
		r.Log.V(1).Info("cluster-ID change held", append([]any{"policy", st.Name, "node", held[0].name, "reason", "ClusterIDChangeStaged"}, why...)...)
	}
	r.unrecordedRenumber(ctx, st, held)
	// The last renumbering's record: the next one waits for its sessions.
	if last := st.trans.Latest(transitions.Renumber); last != nil && st.View[last.Node] != nil {
		if wait := last.Wait(st.Now, sessionWaits(st)); wait > 0 {
			hold(wait, "until the sessions of", last.Node)
			return
		}
	}
	var leaving []string
	for i, np := range held[:min(len(held), stageCandidates)] {
		if uplinkLeaving(st, np.name) {
			// The rack route reflectors leave it first (moves.go): with its new ID it would
			// reflect between them as a member of another rack or tier.
			leaving = append(leaving, np.name)
			continue
		}
		switch {
		case chk.safe(np):
		case chk.safeOnly(np):
			// The others wait: they need this change first (a rack split gives this route
			// reflector's old ID to another rack).
			*phases = [3][]nodePatch{}
		default:
			continue
		}
		putBack(np)
		st.trans.Start(transitions.Renumber, st.Now, np.name)
		transitionHeld.WithLabelValues(st.Name).Set(float64(len(held) - 1))
		if len(held) > 1 {
			st.requeue(transitions.DefaultMin)
			r.Log.Info("cluster-ID changes staged", "policy", st.Name, "node", np.name, "waiting", len(held)-1, "tried", i+1, "reason", EventClusterIDStaged)
			r.Recorder.Eventf(st.Policy, corev1.EventTypeNormal, EventClusterIDStaged,
				"%s's cluster ID changes first: its BGP sessions restart; %d more route reflectors keeping their role wait for them (%s)",
				np.name, len(held)-1, joinCapped(heldNames(held, np.name), 5))
		}
		return
	}
	if len(leaving) > 0 {
		hold(transitions.DefaultMin, "until no uplink set selects", leaving)
		return
	}
	transitionHeld.WithLabelValues(st.Name).Set(0)
	putBack(held...)
}

// uplinkLeaving: an uplink set some node carries selects route reflector rr, and none of the
// plan's does (a spine member leaving the spine, renumbered as a rack route reflector).
func uplinkLeaving(st *State, rr string) bool {
	if len(uplinkHolders(st, rr)) == 0 {
		return false
	}
	id := extender.RouteReflectorID(rr)
	for _, bp := range st.Result.BGPPeers {
		if key, _, ok := extender.SetLabelOf(bp.Name); ok && key == extender.LabelUplinkSet {
			if ids, ok := extender.PeerRouteReflectorIDs(bp.Spec.PeerSelector); ok && slices.Contains(ids, id) {
				return false
			}
		}
	}
	return true
}

func heldNames(held []nodePatch, except string) []string {
	var out []string
	for _, np := range held {
		if np.name != except {
			out = append(out, np.name)
		}
	}
	return out
}

// stageCandidates bounds the cluster-ID changes the model tries one by one in a reconcile.
const stageCandidates = 4

// stageOutside returns the cluster's nodes outside the policy's view, by name, and every BGPPeer
// of the cluster, when the policy has top-level route reflectors (in the view or the plan); nil
// and nil otherwise. The top-level route reflectors are the only peers of the nodes outside every
// policy (OutsideBGPPeerName) and other policies' only way to the policy's nodes
// (CrossPolicyBGPPeerName), so a state in which the policy's own nodes miss no route can still
// cut those off: a held change that makes a route reflector top-level, while the other patches
// drain the old top-level ones, left no node with the label, and with the mesh off every node
// outside the policy without a route until the change was made. It reads them once per
// reconcile (the cluster-ID staging and the moves' staging both model them before either writes).
func (r *Reconciler) stageOutside(ctx context.Context, st *State) ([]*extender.Node, []*apiv3.BGPPeer, error) {
	if st.outside == nil {
		o := &outsideRead{}
		o.nodes, o.peers, o.err = r.readOutside(ctx, st)
		st.outside = o
	}
	return st.outside.nodes, st.outside.peers, st.outside.err
}

// outsideRead is stageOutside's reading of the cluster in one reconcile.
type outsideRead struct {
	nodes []*extender.Node
	peers []*apiv3.BGPPeer
	err   error
}

// readOutside reads what stageOutside returns.
func (r *Reconciler) readOutside(ctx context.Context, st *State) ([]*extender.Node, []*apiv3.BGPPeer, error) {
	top := slices.ContainsFunc(st.Result.Nodes, func(ns extender.NodeState) bool { _, ok := ns.Labels[extender.LabelTopLevel]; return ok })
	for _, n := range st.View {
		if _, ok := n.Labels[extender.LabelTopLevel]; ok {
			top = true
			break
		}
	}
	if !top {
		return nil, nil, nil
	}
	var outside []*extender.Node
	for _, n := range r.Nodes.List() {
		if st.View[n.Name] == nil {
			outside = append(outside, n)
		}
	}
	slices.SortFunc(outside, func(a, b *extender.Node) int { return strings.Compare(a.Name, b.Name) })
	peers, err := r.peers().List(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	return outside, peers, nil
}

// stageCheck evaluates, with the graph model, the states a reconcile can leave.
type stageCheck struct {
	st      *State
	outside []*extender.Node // the cluster's other nodes, as they are (stageOutside)
	others  []nodePatch      // every patch but the held ones
	peers   []extender.BGPPeer
	down    map[string]bool
	target  int64 // missing pairs with every patch written
}

// newStageCheck: outside and allPeers are stageOutside's (nil: the policy's nodes and BGPPeers
// alone).
func newStageCheck(st *State, phases *[3][]nodePatch, held []nodePatch, outside []*extender.Node, allPeers []*apiv3.BGPPeer) (*stageCheck, error) {
	c := newModelView(st, outside, allPeers)
	for _, ps := range phases {
		c.others = append(c.others, ps...)
	}
	var err error
	c.target, err = c.missing(append(slices.Clone(c.others), held...))
	return c, err
}

// newModelView is the cluster as the graph model sees it while a reconcile writes: the plan's
// BGPPeers beside the old ones (and the transitional ones), NotReady nodes down. outside and
// allPeers are stageOutside's (nil: the policy's nodes and BGPPeers alone).
func newModelView(st *State, outside []*extender.Node, allPeers []*apiv3.BGPPeer) *stageCheck {
	c := &stageCheck{st: st, outside: outside, down: map[string]bool{}}
	planned := map[string]bool{}
	for _, p := range st.Result.BGPPeers {
		planned[p.Name] = true
		c.peers = append(c.peers, p)
	}
	cur := st.Peers
	if outside != nil {
		cur = allPeers
	}
	for _, p := range cur {
		if !planned[p.Name] {
			c.peers = append(c.peers, extender.BGPPeer{Name: p.Name, Labels: p.Labels, Spec: p.Spec})
		}
	}
	for name, n := range st.View {
		if !extender.IsReady(n) {
			c.down[name] = true
		}
	}
	for _, n := range outside {
		if !extender.IsReady(n) {
			c.down[n.Name] = true
		}
	}
	return c
}

// safe: the state with the other patches and these written loses no pair the full plan keeps.
func (c *stageCheck) safe(extra ...nodePatch) bool {
	return c.safeOnly(append(slices.Clone(c.others), extra...)...)
}

// safeOnly: the state with only these patches written (none: only the BGPPeers) loses no pair the
// full plan keeps.
func (c *stageCheck) safeOnly(patches ...nodePatch) bool {
	got, err := c.missing(patches)
	return err == nil && got <= c.target
}

// missing is the graph model's missing pairs between Ready nodes with the patches written.
func (c *stageCheck) missing(patches []nodePatch) (int64, error) {
	byName := make(map[string]nodePatch, len(patches))
	for _, np := range patches {
		byName[np.name] = np
	}
	names := slices.Sorted(maps.Keys(c.st.View))
	nodes := make([]bgpmodel.Node, 0, len(names)+len(c.outside))
	down := make([]bool, 0, len(names)+len(c.outside))
	zone := c.st.Managed.Resolved.ZoneLabel
	for _, name := range names {
		n := c.st.View[name]
		lbl, ann := n.Labels, n.Annotations
		if np, ok := byName[name]; ok {
			lbl, ann = withPatch(lbl, np.lbl), withPatch(ann, np.ann)
		}
		nodes = append(nodes, bgpmodel.NodeFromObject(name, lbl, ann, zone))
		down = append(down, c.down[name])
	}
	for _, n := range c.outside {
		nodes = append(nodes, bgpmodel.NodeFromObject(n.Name, n.Labels, n.Annotations, zone))
		down = append(down, c.down[n.Name])
	}
	topo, err := bgpmodel.Build(nodes, c.peers, bgpmodel.Options{})
	if err != nil {
		return 0, err
	}
	m, err := topo.Propagate(down)
	if err != nil {
		return 0, err
	}
	return m.Summary.MissingPairs, nil
}

// withPatch is m with a merge patch's keys set (nil: removed), m unchanged.
func withPatch(m map[string]string, patch map[string]*string) map[string]string {
	if len(patch) == 0 {
		return m
	}
	out := maps.Clone(m)
	if out == nil {
		out = map[string]string{}
	}
	for k, v := range patch {
		if v == nil {
			delete(out, k)
		} else {
			out[k] = *v
		}
	}
	return out
}

// verifies: the policy's handover reads the BGP sessions (CalicoNodeStatus), so a transition's
// wait, a handover, the mesh's wait and an adoption end when reports show them Established.
func verifies(st *State) bool { return st.Managed.Resolved.Handover == v1alpha1.HandoverBGPSessions }

// sessionWaits is what a transition's wait reads of the sessions (transitions.Verify): nothing
// without verifies; else the reports, and once calico-node is known to fill them in (the policy's
// status.sessionReportsSeen: a record's report, or BGP health's), nothing but a fresh report or
// Max ends a wait.
func sessionWaits(st *State) transitions.Verify {
	switch {
	case !verifies(st):
		return transitions.Timed
	case st.trans.Reported():
		return transitions.Reporting
	}
	return transitions.Reports
}
