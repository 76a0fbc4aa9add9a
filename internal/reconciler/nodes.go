package reconciler

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

type nodePatch struct {
	name     string
	lbl, ann map[string]*string
	change   *RoleChange
	phase    int // patchNodes' phase: 0 active route reflectors, 1 clients, 2 draining marks
}

// patchNodes writes the plan's owned labels and annotations to the nodes that differ, with merge
// patches that touch only the owned keys. Promotions, draining marks and clients' new peering sets
// are written here; a route reflector the plan makes a client is left to demote. The patches go
// in three phases, each finished before the next starts: the plan's active route reflectors
// (promotions, cluster IDs, their own peering), then the clients, then the draining marks. So a
// client never peers with a node that is not a route reflector yet (it would learn nothing from
// it), and an old route reflector is marked only once its clients have moved.
func (r *Reconciler) patchNodes(ctx context.Context, st *State) error {
	p := st.Managed.Resolved
	releasing := releasingIDs(st)
	var phases [3][]nodePatch
	for _, c := range ownedChanges(st) {
		want, cur, lbl, ann := c.want, c.cur, c.lbl, c.ann
		if v, ok := ann[extender.AnnotationDrainingSince]; ok && v != nil {
			if cur.Annotations[extender.AnnotationDrainingSince] != "" {
				// An existing mark stands (the planner reads a mark in the future as now).
				delete(ann, extender.AnnotationDrainingSince)
			} else {
				// A new mark: rounded up to the second, so that removalDelay is never cut short.
				ts := state.CeilSecond(st.Now).Format(time.RFC3339)
				ann[extender.AnnotationDrainingSince] = &ts
			}
			if len(lbl)+len(ann) == 0 {
				continue
			}
		}
		kind := changeKind(p, cur, want)
		if kind == KindDemoted {
			st.Demotions = append(st.Demotions, want.Name)
			continue
		}
		_, wantRR := want.Annotations[extender.AnnotationClusterID]
		if id := ann[extender.AnnotationClusterID]; id != nil {
			if holder := releasing[*id]; holder != "" && holder != want.Name {
				// With one cluster ID per route reflector, the ID moves only once its holder
				// (demoted after its handover) has let it go.
				st.requeue(handoverRetry)
				continue
			}
		}
		np := nodePatch{name: want.Name, lbl: lbl, ann: ann, phase: 1} // a client
		switch {
		case wantRR && want.Annotations[extender.AnnotationDrainingSince] != "":
			np.phase = 2
		case wantRR:
			np.phase = 0
		}
		switch kind {
		case KindPromoted:
			np.change = promoted(st, cur, "")
		case KindDraining:
			np.change = draining(st, want.Name)
		case KindClusterIDChanged:
			np.change = clusterIDChanged(st, cur, want)
		}
		phases[np.phase] = append(phases[np.phase], np)
	}
	r.expireTransitions(st)
	r.stageClusterIDs(ctx, st, &phases)
	if err := r.stageMoves(ctx, st, &phases); err != nil {
		return err
	}
	// The records of the moves these patches make are in the API before the patches: a leader
	// that dies between the two leaves its successor the waits, not the moves without them.
	if err := r.persistTransitions(ctx, st); err != nil {
		return err
	}
	for _, patches := range phases {
		if err := r.applyPatches(ctx, st, patches); err != nil {
			return r.confirm(ctx, st, st.Now, err)
		}
	}
	return r.confirm(ctx, st, st.Now, nil)
}

// ownedChange is a planned node whose owned labels or annotations differ from the cache.
type ownedChange struct {
	want     extender.NodeState
	cur      *extender.Node
	lbl, ann map[string]*string
}

// ownedChanges lists, in plan order, the planned nodes whose owned keys differ from the view the
// plan was made from (state.OwnedChanges), with the changes; nodes gone from the view are skipped.
func ownedChanges(st *State) []ownedChange {
	if st.pristine() && st.facts.ownedNone {
		return nil
	}
	var out []ownedChange
	for _, want := range st.Result.Nodes {
		cur := st.View[want.Name]
		if cur == nil {
			continue
		}
		lbl, ann := state.OwnedChanges(st.Managed.Resolved.RRLabelKey, cur, want)
		if len(lbl)+len(ann) == 0 {
			continue
		}
		out = append(out, ownedChange{want: want, cur: cur, lbl: lbl, ann: ann})
	}
	if st.pristine() {
		st.facts.ownedRead, st.facts.ownedNone = true, len(out) == 0
	}
	return out
}

// changeKind is the role change a planned node state makes to the node as the cluster shows it:
// promoted, demoted, a new draining mark, a route reflector's cluster ID changed, or "" (a
// client's peering, or an RR's other keys). patchNodes makes the change; pending (Observe,
// Paused) says what Enforce would make.
func changeKind(p *policy.Resolved, cur *extender.Node, want extender.NodeState) ChangeKind {
	wasRR := extender.NewNodeInfo(cur, p).CurrentRR
	_, wantRR := want.Annotations[extender.AnnotationClusterID]
	curID := cur.Annotations[extender.AnnotationClusterID]
	switch {
	case wasRR && !wantRR:
		return KindDemoted
	case !wasRR && wantRR:
		return KindPromoted
	case wantRR && want.Annotations[extender.AnnotationDrainingSince] != "" && cur.Annotations[extender.AnnotationDrainingSince] == "":
		return KindDraining
	case wasRR && wantRR && curID != "" && curID != want.Annotations[extender.AnnotationClusterID]:
		return KindClusterIDChanged
	}
	return ""
}

// releasingIDs maps, with one cluster ID per route reflector, each cluster ID that a node still
// carries but the plan takes from it, to that node.
func releasingIDs(st *State) map[string]string {
	p := st.Managed.Resolved
	if p.Topology != v1alpha1.MultiCluster || p.ClusterIDMode != v1alpha1.PerRouteReflector {
		return nil
	}
	out := map[string]string{}
	for _, want := range st.Result.Nodes {
		cur := st.View[want.Name]
		if cur == nil {
			continue
		}
		if id, ok := cur.Annotations[extender.AnnotationClusterID]; ok && want.Annotations[extender.AnnotationClusterID] != id {
			out[id] = want.Name
		}
	}
	return out
}

// applyPatches writes patches with a few workers and records each in the ledger and the view.
func (r *Reconciler) applyPatches(ctx context.Context, st *State, patches []nodePatch) error {
	var mu sync.Mutex
	return inParallel(patches, func(np nodePatch) error {
		n, err := r.patchNode(ctx, st.Name, np)
		if err != nil || n == nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		st.setView(np.name, n)
		if np.change != nil {
			st.Changes = append(st.Changes, *np.change)
		}
		return nil
	})
}

// inParallel calls fn on every item with patchWorkers workers and returns the first error (the
// other items are still done).
func inParallel[T any](items []T, fn func(T) error) error {
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		next  = make(chan T)
	)
	for range min(patchWorkers, len(items)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range next {
				if err := fn(it); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, it := range items {
		next <- it
	}
	close(next)
	wg.Wait()
	return first
}

// patchNode merge-patches a node's owned keys (null removes a key) and records the change in the
// ledger until the cache shows it. It returns the view of the node after the patch, or nil when
// the node is gone.
func (r *Reconciler) patchNode(ctx context.Context, policyName string, np nodePatch) (*extender.Node, error) {
	meta := map[string]any{}
	if len(np.lbl) > 0 {
		meta["labels"] = np.lbl
	}
	if len(np.ann) > 0 {
		meta["annotations"] = np.ann
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return nil, err
	}
	obj := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: np.name}}
	if err := r.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, body)); err != nil {
		if apierrors.IsNotFound(err) {
			r.Ledger.Forget(np.name)
			return nil, nil
		}
		return nil, fmt.Errorf("patching node %s: %w", np.name, err)
	}
	nodePatches.WithLabelValues(policyName).Inc()
	stripped := state.StripNode(obj)
	r.Ledger.Assume(policyName, state.Change{Node: np.name, Labels: np.lbl, Annotations: np.ann, AfterRV: obj.ResourceVersion, Object: stripped})
	return stripped, nil
}

// demote takes the role from the route reflectors the plan makes clients (their removalDelay has
// passed: the planner keeps them draining until then), once every planned route reflector carries
// its label and cluster ID and no client peers with them any more. Until then it retries.
func (r *Reconciler) demote(ctx context.Context, st *State) error {
	p := st.Managed.Resolved
	// Come back when the first draining route reflector's removalDelay ends, not at the next resync.
	for _, s := range st.Result.Nodes {
		if v := s.Annotations[extender.AnnotationDrainingSince]; v != "" {
			if since, err := time.Parse(time.RFC3339, v); err == nil {
				st.requeue(since.Add(p.RemovalDelay).Sub(st.Now) + time.Second)
			}
		}
	}
	if len(st.Demotions) == 0 {
		return nil
	}
	if !replacementsInPlace(st) {
		st.requeue(handoverRetry)
		return nil
	}
	want := map[string]extender.NodeState{}
	for _, s := range st.Result.Nodes {
		want[s.Name] = s
	}
	var patches []nodePatch
	clients := r.Nodes.ClientsOfEach(st.Demotions...)
	for _, name := range st.Demotions {
		cur := st.View[name]
		moved, blocked := clientsMoved(st, name, clients[name])
		if blocked {
			st.requeue(handoverRetry)
			continue
		}
		lbl, ann := state.OwnedChanges(p.RRLabelKey, cur, want[name])
		patches = append(patches, nodePatch{name: name, lbl: lbl, ann: ann, change: demoted(st, name, moved)})
	}
	return r.applyPatches(ctx, st, patches)
}

// clientsMoved reports whether a client still peers with rr (of clients, the cache's clients of
// rr: NodeStore.ClientsOfEach), or a rack route reflector's uplink set still selects it (blocked),
// and otherwise the route reflectors that took its clients over: the planned ones of its zone,
// else of its cluster ID.
func clientsMoved(st *State, rr string, clients []*extender.Node) (moved []string, blocked bool) {
	if len(uplinkHolders(st, rr)) > 0 {
		return nil, true
	}
	for _, c := range clients {
		v := st.View[c.Name]
		if v == nil {
			v = c
		}
		if slices.Contains(strings.Split(v.Annotations[extender.AnnotationRouteReflectors], ","), rr) {
			return nil, true
		}
	}
	return replacements(st, rr), false
}
