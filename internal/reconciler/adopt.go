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
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoselector"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
)

// EventBGPPeerAdopted is recorded on the policy for every hand-written BGPPeer adoptBGPPeers
// deleted.
const EventBGPPeerAdopted = "BGPPeerAdopted"

// adoptModelRetry is how soon the graph model is run again for a BGPPeer it refused.
const adoptModelRetry = 10 * time.Second

// adoptPeers (adoptBGPPeers: true; Enforce only, see enforcing) deletes a hand-written BGPPeer once
// the product's own BGPPeers cover every session it makes:
//  1. it peers nodes with nodes by selector (peerSelector, no peerIP) and sets nothing else a
//     session depends on (password, AS numbers, next hop, ...): others are never deleted;
//  2. every node of its sessions (its node or nodeSelector, and its peerSelector, evaluated with
//     Calico's selector code on the labels Calico reads) is in this policy and as the plan wants it:
//     a route reflector with its role, or a client whose listed route reflectors all carry theirs;
//  3. the handover has waited since 2 first held: with BGPSessions until every such client is seen
//     Established with its route reflectors, else removalDelay;
//  4. the graph model of the cluster's nodes and BGPPeers without it (and without those deleted
//     before it) leaves none of its nodes missing a route, and no more missing pairs in all.
//
// Any moment 2 does not hold starts the wait again. An Event on the policy names each deleted one.
//
// BGPSessions verifies the clients' sessions with their route reflectors, not those among route
// reflectors: confd emits one peering per node and peer address whichever BGPPeers select it, and
// one without session options (rule 1) is the same peering from either, so a session the product's
// BGPPeers configure too stays up when the hand-written one goes.
func (r *Reconciler) adoptPeers(ctx context.Context, st *State) error {
	p := st.Managed.Resolved
	m := r.memo(st.Name)
	st.adoptWhy = map[string]string{}
	if !p.AdoptBGPPeers {
		st.trans.Drop(transitions.Adopt)
		return nil
	}
	list, err := r.peers().List(ctx, nil)
	if err != nil {
		return fmt.Errorf("listing BGPPeers: %w", err)
	}
	var foreign []*apiv3.BGPPeer
	for _, b := range list {
		if b.Labels[extender.LabelManagedBy] != extender.ManagedByValue {
			foreign = append(foreign, b)
		}
	}
	if len(foreign) == 0 {
		st.trans.Drop(transitions.Adopt)
		return nil
	}
	nodes := clusterNodes(st, r.Nodes.List())
	wanted := map[string]extender.NodeState{}
	for _, n := range st.Result.Nodes {
		wanted[n.Name] = n
	}
	clients := clientsByRR(st)
	var seen []string // the Adopt records kept: a new leader resumes their waits
	var ready []*apiv3.BGPPeer
	scopes := map[string][]string{}
	for _, b := range foreign {
		scope, why := sessionNodes(b, nodes, p.ZoneLabel)
		if why == "" {
			why = wiredByPlan(st, wanted, scope)
		}
		key := b.Name + "@" + b.ResourceVersion
		if why != "" {
			st.adoptWhy[b.Name] = "kept: " + why
			r.Log.V(1).Info("hand-written BGPPeer kept", "policy", st.Name, "bgppeer", b.Name, "reason", why)
			continue
		}
		seen = append(seen, key)
		d := p.RemovalDelay
		rec := st.trans.Hold(transitions.Adopt, key, st.Now, transitions.Waits{Min: d, Settle: d, Max: d})
		if verifies(st) {
			rest := slices.DeleteFunc(unverified(st, clients, slices.Collect(maps.Keys(clients))), func(c string) bool { return !slices.Contains(scope, c) })
			if len(rest) > 0 {
				st.adoptWhy[b.Name] = fmt.Sprintf("waiting for the BGP sessions of %d clients", len(rest))
				st.requeue(handoverRetry)
				continue
			}
		} else if wait := rec.Wait(st.Now, transitions.Timed); wait > 0 {
			st.adoptWhy[b.Name] = "waiting for removalDelay"
			st.requeue(wait + 100*time.Millisecond)
			continue
		}
		if !m.adoptRetry[key].IsZero() && st.Now.Before(m.adoptRetry[key]) {
			st.adoptWhy[b.Name] = "kept: the graph model needs it"
			st.requeue(m.adoptRetry[key].Sub(st.Now))
			continue
		}
		ready = append(ready, b)
		scopes[b.Name] = scope
	}
	st.trans.Drop(transitions.Adopt, seen...)
	for key := range m.adoptRetry {
		if !slices.Contains(seen, key) {
			delete(m.adoptRetry, key)
		}
	}
	if len(ready) == 0 {
		return nil
	}
	mesh, err := r.nodeToNodeMesh(ctx)
	if err != nil {
		return err
	}
	drop := map[string]bool{}
	model := func() (*bgpmodel.Model, error) {
		var peers []apiv3.BGPPeer
		for _, b := range list {
			if !drop[b.Name] {
				peers = append(peers, *b)
			}
		}
		topo, err := bgpmodel.FromCluster(nodes, peers, p.ZoneLabel, bgpmodel.Options{NodeToNodeMesh: mesh})
		if err != nil {
			return nil, err
		}
		return topo.Propagate(nil)
	}
	with, err := model()
	if err != nil {
		return fmt.Errorf("graph model of the cluster: %w", err)
	}
	for _, b := range ready {
		drop[b.Name] = true
		without, err := model()
		if err != nil {
			return fmt.Errorf("graph model without BGPPeer %s: %w", b.Name, err)
		}
		if lost := lostRoutes(without, with, scopes[b.Name]); lost != "" {
			drop[b.Name] = false
			st.adoptWhy[b.Name] = "kept: the graph model needs it"
			key := b.Name + "@" + b.ResourceVersion
			m.adoptRetry[key] = st.Now.Add(adoptModelRetry)
			st.requeue(adoptModelRetry)
			r.Log.Info("hand-written BGPPeer kept: the graph model needs it", "policy", st.Name, "bgppeer", b.Name, "reason", st.adoptWhy[b.Name], "missing", lost)
			continue
		}
		if err := r.peers().Delete(ctx, b); err != nil {
			drop[b.Name] = false
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				st.requeue(handoverRetry)
				continue
			}
			return fmt.Errorf("deleting BGPPeer %s: %w", b.Name, err)
		}
		delete(st.adoptWhy, b.Name)
		peerWrites.WithLabelValues(st.Name, "adopt").Inc()
		r.Recorder.Eventf(st.Policy, corev1.EventTypeNormal, EventBGPPeerAdopted,
			"deleted hand-written BGPPeer %s: calico-rr-autoscaler's BGPPeers cover the sessions of its %d nodes (%s)", b.Name, len(scopes[b.Name]), p.Handover)
	}
	return nil
}

// clusterNodes are the cluster's nodes as this reconcile knows them: the policy's from the view.
func clusterNodes(st *State, all []*extender.Node) []*extender.Node {
	out := make([]*extender.Node, 0, len(all))
	for _, n := range all {
		if v := st.View[n.Name]; v != nil {
			n = v
		}
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b *extender.Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// sessionNodes returns the nodes a node-to-node BGPPeer gives sessions, sorted, or why it is not
// one adoptBGPPeers may delete.
func sessionNodes(b *apiv3.BGPPeer, nodes []*extender.Node, zoneLabel string) ([]string, string) {
	s := b.Spec
	if s.PeerIP != "" || s.PeerSelector == "" {
		return nil, "peers with an address, not with nodes by selector"
	}
	rest := s.DeepCopy()
	rest.Node, rest.NodeSelector, rest.PeerSelector = "", "", ""
	if !equality.Semantic.DeepEqual(*rest, apiv3.BGPPeerSpec{}) {
		return nil, "sets session options besides node, nodeSelector and peerSelector"
	}
	peerSel, err := calicoselector.Parse(s.PeerSelector)
	if err != nil {
		return nil, err.Error()
	}
	var localSel *calicoselector.Selector
	if s.Node == "" {
		if localSel, err = calicoselector.Parse(s.NodeSelector); err != nil {
			return nil, err.Error()
		}
	}
	var local, peers []string
	for _, n := range nodes {
		labels := bgpmodel.NodeFromObject(n.Name, n.Labels, n.Annotations, zoneLabel).Labels
		if s.Node == n.Name || localSel != nil && localSel.Matches(labels) {
			local = append(local, n.Name)
		}
		if peerSel.Matches(labels) {
			peers = append(peers, n.Name)
		}
	}
	sessions := len(local) * len(peers)
	for _, l := range local {
		if slices.Contains(peers, l) {
			sessions-- // no session with itself
		}
	}
	if sessions == 0 {
		return nil, "makes no session"
	}
	scope := slices.Concat(local, peers)
	slices.Sort(scope)
	return slices.Compact(scope), ""
}

// wiredByPlan returns why one of the named nodes is not as the plan wants it with its route
// reflectors in place ("" when all are).
func wiredByPlan(st *State, wanted map[string]extender.NodeState, names []string) string {
	p := st.Managed.Resolved
	for _, name := range names {
		n := st.View[name]
		want, planned := wanted[name]
		if n == nil || !planned {
			return "node " + name + " is not in policy " + st.Name
		}
		if lbl, ann := state.OwnedChanges(p.RRLabelKey, n, want); len(lbl)+len(ann) > 0 {
			return "node " + name + " is not as the plan wants it yet"
		}
		if !isCurrentRR(p, n) {
			if why := clientWired(p, st.View, name); why != "" {
				return why
			}
		}
	}
	return ""
}

// lostRoutes returns, when the model without a BGPPeer is worse than with it, what it loses: a
// node of the BGPPeer's sessions missing a route, or more missing pairs in all ("" when none).
func lostRoutes(without, with *bgpmodel.Model, scope []string) string {
	t := without.Topology()
	for _, name := range scope {
		if i := t.Index(name); i >= 0 && without.Nodes[i].Missing > 0 {
			return fmt.Sprintf("%s would miss the routes of %s", name, joinCapped(without.Missing(i), 5))
		}
	}
	if without.Summary.MissingPairs > with.Summary.MissingPairs {
		return fmt.Sprintf("%d node pairs would miss each other's routes (%d with it)", without.Summary.MissingPairs, with.Summary.MissingPairs)
	}
	return ""
}

// nodeToNodeMesh reads Calico's node-to-node mesh setting (on unless the default BGPConfiguration
// turns it off).
func (r *Reconciler) nodeToNodeMesh(ctx context.Context) (bool, error) {
	cfg, err := r.configs().Get(ctx, "default")
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading BGPConfiguration default: %w", err)
	}
	return cfg.Spec.NodeToNodeMeshEnabled == nil || *cfg.Spec.NodeToNodeMeshEnabled, nil
}

// adoptable returns the hand-written BGPPeers adoptBGPPeers may delete (node-to-node by selector,
// making sessions now), sorted: what Observe and Paused report Enforce would delete once covered.
func (r *Reconciler) adoptable(ctx context.Context, st *State) ([]string, error) {
	list, err := r.peers().List(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("listing BGPPeers: %w", err)
	}
	var nodes []*extender.Node
	var out []string
	for _, b := range list {
		if b.Labels[extender.LabelManagedBy] == extender.ManagedByValue {
			continue
		}
		if nodes == nil {
			nodes = clusterNodes(st, r.Nodes.List())
		}
		if _, why := sessionNodes(b, nodes, st.Managed.Resolved.ZoneLabel); why == "" {
			out = append(out, b.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}
