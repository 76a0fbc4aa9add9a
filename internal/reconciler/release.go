package reconciler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/sessions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// A deleted policy's release without explosion (issue 36).
//
// The release BGPPeer once peered every node with every route reflector of the policy: the route
// reflectors, of distinct cluster IDs and with `add paths on`, then pass every route along every
// loop-free chain of them (117,111 routes on the busiest node of 24 where the layout holds 47).
// Now the release keeps every node within twice its steady state, where a node's steady state is
// the larger of what it holds in the layout before the release and in the layout after it (the
// mesh, or the layout kept): its routes, and for a route reflector its sessions.
//
//   - Above spec.release.maxMeshNodes (Auto) or with Keep, a policy that turned the mesh off does
//     not turn it back on: its roles, labels and BGPPeers stay, no longer the product's (the
//     finalizer goes, a Warning Event says how to go back by hand). Peak = steady.
//   - Otherwise the release goes through one route reflector of the policy, the keeper: the
//     release BGPPeer peers every node that is not a route reflector with the keeper alone
//     (ReleaseBGPPeer), then the policy's other route reflectors lose their role one at a time,
//     each only when the graph model finds every pair without it, then the mesh comes back on
//     (when the policy turned it off), then the keeper and the clients go. The keeper is the one
//     whose whole sequence the graph model finds within the bound, every step without a lost pair;
//     when none is, the layout is kept as above.

// Annotations on a deleted policy.
const (
	// AnnotationReleaseKeeper names the route reflector the release goes through.
	AnnotationReleaseKeeper = "routereflector.io/release-keeper"
	// AnnotationReleaseBridgedAt is when the release BGPPeer to the keeper was written: the other
	// route reflectors go removalDelay later.
	AnnotationReleaseBridgedAt = "routereflector.io/release-bridged-at"

	EventLayoutKept = "RouteReflectorLayoutKept"

	// releaseBound is how many times its steady state a node may hold during a release.
	releaseBound = 2.0
	// releaseStep is the wait between two route reflectors' releases (at most removalDelay).
	releaseStep = 5 * time.Second
	// keeperCandidates bounds the route reflectors tried as the keeper.
	keeperCandidates = 4
	// NoKeeper (AnnotationReleaseKeeper) is a release without a release BGPPeer of its own: every
	// route reflector goes one at a time, each when the graph model finds every pair without it
	// (another policy's keeper being released may peer with every node already).
	NoKeeper = "-"
)

// restoresMesh says whether deleting the policy may turn the node-to-node mesh back on, with
// clusterNodes nodes in the cluster, and why not.
func restoresMesh(p *policy.Resolved, clusterNodes int) (bool, string) {
	switch p.ReleaseMesh {
	case v1alpha1.ReleaseMeshRestore:
		return true, ""
	case v1alpha1.ReleaseMeshKeep:
		return false, "spec.release.nodeToNodeMesh is Keep"
	}
	if clusterNodes > p.MaxMeshNodes {
		return false, fmt.Sprintf("the cluster has %d nodes, more than spec.release.maxMeshNodes (%d): a node-to-node mesh there would hold %d sessions per node",
			clusterNodes, p.MaxMeshNodes, clusterNodes-1)
	}
	return true, ""
}

// keepLayout ends a deleted policy's release without touching its layout: the route reflectors,
// labels and BGPPeers stay, no longer the product's; the policy leaves the mesh's owners (the
// annotation goes with the last of them: the mesh is then off as a person's) and the finalizer
// goes.
func (r *Reconciler) keepLayout(ctx context.Context, st *State, cfg *apiv3.BGPConfiguration, why string) error {
	pol := st.Policy
	if err := r.deleteReleaseBridge(ctx, st); err != nil {
		return err
	}
	if owners, ours := meshOwners(cfg); ours {
		orig := cfg.DeepCopy()
		rest := slices.DeleteFunc(slices.Clone(owners), func(o string) bool { return o == pol.Name })
		if len(rest) == 0 {
			delete(cfg.Annotations, AnnotationMeshDisabledBy)
		} else {
			setMeshOwners(cfg, rest)
		}
		if err := r.configs().Patch(ctx, orig, cfg); err != nil {
			return fmt.Errorf("leaving the node-to-node mesh's owners: %w", err)
		}
	}
	mesh := "the node-to-node mesh stays off"
	if cfg == nil || cfg.Spec.NodeToNodeMeshEnabled == nil || *cfg.Spec.NodeToNodeMeshEnabled {
		mesh = "the node-to-node mesh is left as it is"
	}
	r.Recorder.Eventf(pol, corev1.EventTypeWarning, EventLayoutKept,
		"%s: %s and the route reflectors, their labels and BGPPeers (label %s=%s) stay, no longer managed; to go back to the mesh by hand: set nodeToNodeMeshEnabled: true in BGPConfiguration default, wait for the sessions, remove the annotation %s and the labels %s from the nodes, then delete the BGPPeers",
		why, mesh, extender.LabelPolicy, pol.Name, extender.AnnotationClusterID, strings.Join(extender.OwnedLabelKeys(st.Managed.Resolved.RRLabelKey), ", "))
	return r.dropFinalizer(ctx, pol)
}

// boundedRelease runs the release through the keeper up to the point where only the keeper is
// left of the policy's route reflectors: it picks the keeper (once; kept on the policy), writes
// the release BGPPeer, waits removalDelay, then releases one other route reflector per pass. It
// returns done when only the keeper is left; when no release stays within the bound, the layout
// is kept (keepLayout, cfg the default BGPConfiguration).
func (r *Reconciler) boundedRelease(ctx context.Context, st *State, cfg *apiv3.BGPConfiguration, mesh bool) (done bool, err error) {
	pol, p := st.Policy, st.Managed.Resolved
	keeper := pol.Annotations[AnnotationReleaseKeeper]
	if other := r.releaseTurn(pol, keeper != "", mesh); other != "" {
		r.Log.V(1).Info("policy deleted: waiting for another policy's release", "policy", st.Name, "other", other)
		st.requeue(handoverRetry)
		return false, nil
	}
	if keeper == "" {
		sim, err := r.newReleaseSim(ctx, st)
		if err != nil {
			return false, err
		}
		plan := sim.plan(mesh)
		if plan.keeper == "" {
			if len(sim.policyRRs()) == 0 {
				return true, nil // nothing to go through
			}
			return false, r.keepLayout(ctx, st, cfg, "no release through one route reflector stays within twice the steady state without losing a pair ("+plan.why+")")
		}
		r.Log.Info("policy deleted: releasing through one route reflector", "policy", st.Name, "keeper", plan.keeper,
			"peakRoutes", plan.peakRoutes, "peakSessions", plan.peakSessions)
		now := state.CeilSecond(st.Now).Format(time.RFC3339)
		if err := r.markPolicy(ctx, pol, AnnotationReleaseKeeper, plan.keeper); err != nil {
			return false, err
		}
		if err := r.markPolicy(ctx, pol, AnnotationReleaseBridgedAt, now); err != nil {
			return false, err
		}
		if plan.keeper == NoKeeper {
			st.requeue(handoverRetry)
			return false, nil
		}
		if err := r.ensureReleaseBridge(ctx, st, plan.keeper); err != nil {
			return false, err
		}
		// The keeper's CalicoNodeStatus with the release BGPPeer, so that calico-node reports it by
		// the time the first route reflector may go (without the API the release waits
		// removalDelay only).
		if err := r.statuses().Create(ctx, st.Name, plan.keeper); err != nil && !sessions.Unavailable(err) {
			return false, fmt.Errorf("creating the keeper's CalicoNodeStatus: %w", err)
		}
		st.requeue(p.RemovalDelay + 100*time.Millisecond)
		return false, nil
	}
	if keeper != NoKeeper {
		if err := r.ensureReleaseBridge(ctx, st, keeper); err != nil {
			return false, err
		}
	}
	// The keeper's sessions are waited for from the release's last change: the last route
	// reflector released (its ReleaseStep record), or the bridge (a record of it, its Max
	// transitions.DefaultMax after its removalDelay).
	change := &transitions.Record{Kind: transitions.ReleaseStep, Node: keeper, Started: st.Now, Waits: transitions.DefaultWaits}
	if at, err := time.Parse(time.RFC3339, pol.Annotations[AnnotationReleaseBridgedAt]); err == nil {
		if wait := at.Add(p.RemovalDelay).Sub(st.Now); wait > 0 {
			st.requeue(wait + 100*time.Millisecond)
			return false, nil
		}
		change.Started, change.Max = at, p.RemovalDelay+transitions.DefaultMax
	}
	m := r.memo(st.Name)
	r.expireTransitions(st)
	if last := m.trans.Latest(transitions.ReleaseStep); last != nil && last.Started.After(change.Started) {
		change = last
	}
	sim, err := r.newReleaseSim(ctx, st)
	if err != nil {
		return false, err
	}
	next, left, err := sim.next(keeper, mesh)
	if err != nil {
		return false, err
	}
	if left == 0 {
		return true, nil
	}
	if next == "" {
		r.Log.Info("policy deleted: its route reflectors keep their role until one can go without losing a pair", "policy", st.Name, "left", left)
		st.requeue(handoverRetry)
		return false, nil
	}
	if keeper != NoKeeper {
		if wait, err := r.keeperSessionsWait(ctx, st, keeper, change); wait || err != nil {
			return false, err
		}
	}
	n := sim.node(next)
	lbl, ann := state.OwnedChanges(p.RRLabelKey, n, extender.NodeState{})
	if st.View == nil {
		st.View = map[string]*extender.Node{}
	}
	// The next one goes once this one's sessions are back (a cluster ID change restarts them
	// all; about 2 s in BIRD), at most removalDelay later, and once the keeper's sessions,
	// this one's among them, are seen Established (keeperSessionsWait). The record is in the
	// policy's status before the release it records.
	began := r.now()
	m.trans.Start(transitions.ReleaseStep, began, next)
	if err := r.persistTransitions(ctx, st); err != nil {
		return false, err
	}
	if err := r.applyPatches(ctx, st, []nodePatch{{name: next, lbl: lbl, ann: ann}}); err != nil {
		return false, err
	}
	if r.CalicoNodes != nil {
		view := map[string]*extender.Node{next: n}
		if v := st.View[next]; v != nil {
			view[next] = v
		}
		release := &State{Name: st.Name, Managed: st.Managed, View: view}
		if err := r.releaseCalicoRoles(ctx, release); err != nil {
			return false, err
		}
	}
	m.trans.Restamp(began, r.now())
	if err := r.persistTransitions(ctx, st); err != nil {
		return false, err
	}
	st.requeue(max(handoverRetry, min(p.RemovalDelay, releaseStep)))
	return false, nil
}

// releaseTurn returns another deleted policy whose release goes first ("" when none): deleted at
// once (the chart's uninstall), policies release one at a time, each through its keeper, so that
// the bound each one's plan checks holds for the cluster. One goes first while it releases its
// route reflectors other than its keeper (and, with the mesh off, until it turns the mesh back
// on), and one not started yet waits for those before it by name.
func (r *Reconciler) releaseTurn(pol *v1alpha1.RouteReflectorPolicy, started, mesh bool) string {
	for _, q := range r.Policies.List() {
		if q.Name == pol.Name || q.DeletionTimestamp == nil || !slices.Contains(q.Finalizers, Finalizer) {
			continue
		}
		qk := q.Annotations[AnnotationReleaseKeeper]
		if qk == "" {
			if !started && q.Name < pol.Name {
				return q.Name
			}
			continue
		}
		if !started && !mesh {
			return q.Name // it turns the mesh back on once only its keeper is left
		}
		rq, errs := r.Policies.Resolve(q)
		if len(errs) > 0 {
			continue
		}
		for _, n := range r.Nodes.List() {
			if n.Name == qk || !rq.NodeSelector.Matches(labels.Set(n.Labels)) {
				continue
			}
			if _, ok := policy.ParseClusterID(n.Annotations[extender.AnnotationClusterID]); ok {
				return q.Name
			}
		}
	}
	return ""
}

// releaseSim is the cluster as the graph model sees it during a policy's release.
type releaseSim struct {
	p      *policy.Resolved
	name   string
	nodes  []*extender.Node
	peers  []apiv3.BGPPeer // every BGPPeer but the policy's release BGPPeer
	bridge string          // the release BGPPeer's name
}

func (r *Reconciler) newReleaseSim(ctx context.Context, st *State) (*releaseSim, error) {
	all, err := r.peers().List(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("listing BGPPeers: %w", err)
	}
	s := &releaseSim{p: st.Managed.Resolved, name: st.Name, nodes: r.Nodes.List(), bridge: extender.ReleaseBGPPeer(st.Managed.Resolved, "").Name}
	for _, b := range all {
		if b.Name != s.bridge {
			s.peers = append(s.peers, *b)
		}
	}
	slices.SortFunc(s.nodes, func(a, b *extender.Node) int { return strings.Compare(a.Name, b.Name) })
	return s, nil
}

func (s *releaseSim) node(name string) *extender.Node {
	i, ok := slices.BinarySearchFunc(s.nodes, name, func(n *extender.Node, name string) int { return strings.Compare(n.Name, name) })
	if !ok {
		return nil
	}
	return s.nodes[i]
}

// policyRRs are the policy's nodes that carry a cluster ID, by name.
func (s *releaseSim) policyRRs() []string {
	var out []string
	for _, n := range s.nodes {
		if s.p.NodeSelector.Matches(labels.Set(n.Labels)) {
			if _, ok := policy.ParseClusterID(n.Annotations[extender.AnnotationClusterID]); ok {
				out = append(out, n.Name)
			}
		}
	}
	return out
}

// model propagates the cluster with the released nodes (or every node of the policy when all)
// stripped of the policy's labels and annotations, the release BGPPeer to keeper ("" none), the
// policy's other BGPPeers unless dropPeers, and the mesh on or off; with the node down gone (none
// when not given): its sessions down, its block not expected.
func (s *releaseSim) model(released map[string]bool, all bool, keeper string, dropPeers, mesh bool, down ...string) (*bgpmodel.Model, error) {
	nodes := make([]*extender.Node, len(s.nodes))
	for i, n := range s.nodes {
		if (all || released[n.Name]) && s.p.NodeSelector.Matches(labels.Set(n.Labels)) {
			c := n.DeepCopy()
			for _, k := range extender.OwnedLabelKeys(s.p.RRLabelKey) {
				delete(c.Labels, k)
			}
			for _, k := range extender.OwnedAnnotationKeys() {
				delete(c.Annotations, k)
			}
			n = c
		}
		nodes[i] = n
	}
	var peers []apiv3.BGPPeer
	for _, b := range s.peers {
		if dropPeers && b.Labels[extender.LabelManagedBy] == extender.ManagedByValue && b.Labels[extender.LabelPolicy] == s.name {
			continue
		}
		peers = append(peers, b)
	}
	if keeper != "" && keeper != NoKeeper {
		b := extender.ReleaseBGPPeer(s.p, keeper)
		peers = append(peers, apiv3.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: b.Name, Labels: b.Labels}, Spec: b.Spec})
	}
	topo, err := bgpmodel.FromCluster(nodes, peers, s.p.ZoneLabel, bgpmodel.Options{NodeToNodeMesh: mesh})
	if err != nil {
		return nil, fmt.Errorf("graph model of policy %s's release: %w", s.name, err)
	}
	var mask []bool
	if len(down) > 0 {
		if mask, err = topo.NamesDown(down...); err != nil {
			return nil, fmt.Errorf("graph model of policy %s's release: %w", s.name, err)
		}
	}
	m, err := topo.Propagate(mask)
	if err != nil {
		return nil, fmt.Errorf("graph model of policy %s's release: %w", s.name, err)
	}
	return m, nil
}

// canGo says whether route reflector rr may lose its role on top of released: the graph model
// finds every pair both while its sessions restart (rr down in the state before: its cluster ID
// changes, so every session of it restarts) and after (rr released). It returns the state after.
func (s *releaseSim) canGo(released map[string]bool, rr, keeper string, mesh bool) (*bgpmodel.Model, bool, error) {
	m, err := s.model(released, false, keeper, false, mesh, rr)
	if err != nil || m.Summary.MissingPairs > 0 {
		return nil, false, err
	}
	with := maps.Clone(released)
	if with == nil {
		with = map[string]bool{}
	}
	with[rr] = true
	if m, err = s.model(with, false, keeper, false, mesh); err != nil || m.Summary.MissingPairs > 0 {
		return nil, false, err
	}
	return m, true, nil
}

// next is the first route reflector of the policy other than keeper (by name) whose release, on
// top of the current state, loses no pair; "" when none can go yet; left counts those to go.
func (s *releaseSim) next(keeper string, mesh bool) (string, int, error) {
	var todo []string
	for _, rr := range s.policyRRs() {
		if rr != keeper {
			todo = append(todo, rr)
		}
	}
	for _, rr := range todo {
		_, ok, err := s.canGo(nil, rr, keeper, mesh)
		if err != nil {
			return "", 0, err
		}
		if ok {
			return rr, len(todo), nil
		}
	}
	return "", len(todo), nil
}

// releasePlan is a keeper and the peak of its release, as multiples of the steady state.
type releasePlan struct {
	keeper                   string
	peakRoutes, peakSessions float64
	steps                    int
	why                      string // when no keeper fits: the best candidate's failure
}

// steady holds every node's steady state: the larger of the layout before and after the release.
type steady struct {
	routes   []float64
	sessions []int
	rr       []bool // a route reflector before the release (the sessions bound applies to these)
}

func (st *steady) peak(m *bgpmodel.Model) (routes, sessions float64) {
	for i, n := range m.Nodes {
		if st.routes[i] > 0 {
			routes = max(routes, n.Routes/st.routes[i])
		}
		if st.rr[i] && st.sessions[i] > 0 {
			sessions = max(sessions, float64(n.Sessions)/float64(st.sessions[i]))
		}
	}
	return routes, sessions
}

// plan simulates the release through each candidate keeper, from the state the cluster is in
// (the mesh on or off) to every node of the policy released with the mesh on: the release BGPPeer
// written, the other route reflectors released one at a time (each the first whose release loses
// no pair), then the mesh on (when off), then the keeper. It returns the candidate with the lowest
// peak within the bound, or none (with why).
func (s *releaseSim) plan(mesh bool) releasePlan {
	before, err := s.model(nil, false, "", false, mesh)
	if err != nil {
		return releasePlan{why: err.Error()}
	}
	after, err := s.model(nil, true, "", true, true)
	if err != nil {
		return releasePlan{why: err.Error()}
	}
	sd := steady{routes: make([]float64, len(before.Nodes)), sessions: make([]int, len(before.Nodes)), rr: make([]bool, len(before.Nodes))}
	for i := range before.Nodes {
		sd.routes[i] = max(before.Nodes[i].Routes, after.Nodes[i].Routes)
		sd.sessions[i] = max(before.Nodes[i].Sessions, after.Nodes[i].Sessions)
		sd.rr[i] = before.Nodes[i].ClusterID != ""
	}
	rrs := s.policyRRs()
	// Candidates: the route reflectors with the fewest sessions to other route reflectors (the
	// fewest chains through the keeper), then by name.
	topo := before.Topology()
	rrPeers := func(name string) int {
		i, c := topo.Index(name), 0
		for _, j := range topo.Peers(i) {
			if topo.IsRR(int(j)) {
				c++
			}
		}
		return c
	}
	// The top-level route reflectors are tried too: only they reach other policies' route
	// reflectors (the cross-policy BGPPeer), which may need the policy's nodes through the keeper.
	cands := slices.Clone(rrs)
	slices.SortStableFunc(cands, func(a, b string) int { return rrPeers(a) - rrPeers(b) })
	cands = cands[:min(len(cands), keeperCandidates)]
	for _, rr := range rrs {
		if _, top := s.node(rr).Labels[extender.LabelTopLevel]; top && !slices.Contains(cands, rr) {
			cands = append(cands, rr)
		}
	}
	cands = append([]string{NoKeeper}, cands...)
	best := releasePlan{}
	for _, k := range cands {
		pl := releasePlan{keeper: k}
		fail := ""
		released := map[string]bool{}
		check := func(m *bgpmodel.Model, what string) bool {
			if m.Summary.MissingPairs > 0 && m != after {
				fail = fmt.Sprintf("through %s: %s loses %d pairs", k, what, m.Summary.MissingPairs)
				return false
			}
			r, ss := sd.peak(m)
			pl.peakRoutes, pl.peakSessions = max(pl.peakRoutes, r), max(pl.peakSessions, ss)
			pl.steps++
			if pl.peakRoutes > releaseBound || pl.peakSessions > releaseBound {
				fail = fmt.Sprintf("through %s: %s holds %.2f times the steady routes, %.2f the sessions", k, what, pl.peakRoutes, pl.peakSessions)
				return false
			}
			return true
		}
		ok := func() bool {
			m, err := s.model(released, false, k, false, mesh)
			if err != nil || !check(m, "the release BGPPeer") {
				return false
			}
			last := len(rrs) - 1 // the keeper goes with the clients
			if k == NoKeeper {
				last = len(rrs)
			}
			for len(released) < last {
				moved := false
				for _, rr := range rrs {
					if rr == k || released[rr] {
						continue
					}
					m, ok, err := s.canGo(released, rr, k, mesh)
					if err == nil && ok {
						released[rr] = true
						if !check(m, "releasing "+rr) {
							return false
						}
						moved = true
						break
					}
				}
				if !moved {
					fail = fmt.Sprintf("through %s: no route reflector can go without losing a pair", k)
					return false
				}
			}
			if !mesh {
				m, err := s.model(released, false, k, false, true)
				if err != nil || !check(m, "the mesh back on") {
					return false
				}
			}
			// The keeper goes when the graph model finds every pair without it (cleanup's
			// waitWhileReleaseLoses): other policies being deleted may still have route
			// reflectors that reach this policy's nodes only through it.
			return check(after, "the keeper released")
		}()
		if !ok {
			if best.keeper == "" {
				best.why = strings.TrimPrefix(best.why+"; "+fail, "; ")
			}
			continue
		}
		if best.keeper == "" || pl.peakRoutes < best.peakRoutes {
			best = pl
		}
	}
	return best
}

// deleteReleaseBridge removes a release BGPPeer left by an earlier pass (none when missing).
func (r *Reconciler) deleteReleaseBridge(ctx context.Context, st *State) error {
	peers, err := r.livePeers(ctx, managedPeers(st.Name))
	if err != nil {
		return fmt.Errorf("listing BGPPeers: %w", err)
	}
	name := extender.ReleaseBGPPeer(st.Managed.Resolved, "").Name
	for _, p := range peers {
		if p.Name == name {
			if err := r.peers().Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting BGPPeer %s: %w", p.Name, err)
			}
			r.peerSynced(p.Name, nil)
		}
	}
	return nil
}
