package reconciler

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// renumbered counts the route reflectors of before still route reflectors in after with another
// cluster ID.
func renumbered(before, after map[string]string) (out []string) {
	for n, id := range before {
		if to, ok := after[n]; ok && to != id {
			out = append(out, n)
		}
	}
	return out
}

// TestReconcileClusterIDChangesOneAtATime: layout switches at 90 nodes (MultiCluster to DualPlane,
// racks halved, to Hierarchical, Hierarchical's racks split from 30 to 12, back to MultiCluster)
// renumber several route reflectors that keep their role; each renumbering restarts all of that
// route reflector's BGP sessions. The reconciler makes them one at a time: never two in one
// reconcile, and the next not before transitions.DefaultSettle (no BGPSessions handover here)
// although reconciles come every 4 s. The graph model finds 0 missing pairs after every reconcile
// (a rack split first renumbers the route reflector whose old ID another rack takes, the rest
// waiting), and every switch completes. Without staging, MultiCluster to Hierarchical renumbered 4
// in one reconcile, and holding changes without the model's check lost 29 pairs in the rack split.
func TestReconcileClusterIDChangesOneAtATime(t *testing.T) {
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.Topology = &v1alpha1.Topology{Type: v1alpha1.MultiCluster, MaxRackSize: ptrTo(int32(20))}
	}, cluster(90))
	h.reconcile()
	require.Zero(t, h.modelMissing(), "settled on MultiCluster")

	for _, topo := range []*v1alpha1.Topology{
		{Type: v1alpha1.DualPlane, MaxRackSize: ptrTo(int32(20))}, {Type: v1alpha1.DualPlane, MaxRackSize: ptrTo(int32(10))},
		{Type: v1alpha1.Hierarchical, MaxRackSize: ptrTo(int32(30))}, {Type: v1alpha1.Hierarchical, MaxRackSize: ptrTo(int32(12))},
		{Type: v1alpha1.MultiCluster, MaxRackSize: ptrTo(int32(20))},
	} {
		h.editPolicy(func(s *v1alpha1.RouteReflectorPolicySpec) { s.Topology = topo })
		total, lastAt := 0, time.Time{}
		for step := 0; step < 60; step++ {
			before := h.rrs()
			h.reconcile()
			changed := renumbered(before, h.rrs())
			require.LessOrEqual(t, len(changed), 1, "%s, reconcile %d: renumbered together: %v", topo.Type, step, changed)
			if len(changed) == 1 {
				if !lastAt.IsZero() {
					require.GreaterOrEqual(t, h.now.Sub(lastAt), transitions.DefaultSettle, "%s: %s renumbered %v after the last", topo.Type, changed[0], h.now.Sub(lastAt))
				}
				total, lastAt = total+1, h.now
			}
			require.Zero(t, h.modelMissing(), "%s, reconcile %d", topo.Type, step)
			h.now = h.now.Add(4 * time.Second)
		}
		t.Logf("%s %d: %d route reflectors renumbered, one at a time", topo.Type, *topo.MaxRackSize, total)
		h.now = h.now.Add(5 * time.Minute)
		h.reconcile()
		h.reconcile()
		require.Zero(t, h.r.last[h.policyNm].Summary.DrainingRouteReflectors, "%s: no route reflector left draining", topo.Type)
		require.Empty(t, renumbered(h.rrs(), planIDs(h)), "%s: every planned cluster ID applied", topo.Type)
	}
}

// planIDs is the last plan's cluster ID by route reflector.
func planIDs(h *harness) map[string]string {
	out := map[string]string{}
	for _, rr := range h.r.last[h.policyNm].RouteReflectors {
		out[rr.Node] = rr.ClusterID
	}
	return out
}

// TestStagedClusterIDKeepsTopLevel: the nodes outside every policy peer with the policy's top-level
// route reflectors alone (the mesh off). The plan drains c-00, the top-level one, and gives the
// top-level label to c-01, a draining route reflector taken back with another cluster ID, while the
// last cluster-ID change is still settling: c-01's change is held. The drain must wait with it:
// written alone it left no node with the top-level label and x-00..x-02 without a route (1,128
// missing pairs on the live test's 36 nodes, TestPoliciesDeletionOnRealAPIServerLarge), which the
// check of the policy's own nodes did not see. Once the change settles, both go.
func TestStagedClusterIDKeepsTopLevel(t *testing.T) {
	var nodes []*corev1.Node
	for i := range 5 {
		n := node(fmt.Sprintf("c-%02d", i), "zone-a", i)
		n.Labels["pool"] = "c"
		nodes = append(nodes, n)
	}
	for i := range 3 {
		nodes = append(nodes, node(fmt.Sprintf("x-%02d", i), "zone-b", 10+i))
	}
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "c"}}
	}, nodes)
	ctx := context.Background()
	rr := func(name, id string, top bool, draining string) extender.NodeState {
		s := extender.NodeState{Name: name,
			Labels:      map[string]string{"calico-route-reflector": "", extender.LabelRouteReflectorID: name},
			Annotations: map[string]string{extender.AnnotationClusterID: id}}
		if top {
			s.Labels[extender.LabelTopLevel] = ""
		}
		if draining != "" {
			s.Annotations[extender.AnnotationDrainingSince] = draining
		}
		return s
	}
	client := func(name string) extender.NodeState {
		return extender.NodeState{Name: name, Labels: map[string]string{extender.LabelPeeringSet: "s1"},
			Annotations: map[string]string{extender.AnnotationRouteReflectors: "c-00,c-01"}}
	}
	drained := h.now.Add(-10 * time.Second).UTC().Format(time.RFC3339)
	cur := []extender.NodeState{rr("c-00", "224.0.0.1", true, ""), rr("c-01", "224.0.0.2", false, drained), client("c-02"), client("c-03"), client("c-04")}
	for _, s := range cur {
		h.update(s.Name, func(n *corev1.Node) {
			if n.Annotations == nil {
				n.Annotations = map[string]string{}
			}
			maps.Copy(n.Labels, s.Labels)
			maps.Copy(n.Annotations, s.Annotations)
		})
	}
	labels := managedPeers("default")
	peers := []extender.BGPPeer{
		{Name: extender.BGPPeerPrefix + "s1", Labels: labels, Spec: apiv3.BGPPeerSpec{
			NodeSelector: extender.LabelPeeringSet + " == 's1'", PeerSelector: extender.LabelRouteReflectorID + " in {'c-00', 'c-01'}"}},
		{Name: extender.MeshBGPPeerName("default"), Labels: labels, Spec: apiv3.BGPPeerSpec{
			NodeSelector: "has(calico-route-reflector)", PeerSelector: "has(calico-route-reflector)"}},
		{Name: extender.OutsideBGPPeerName("default"), Labels: labels, Spec: apiv3.BGPPeerSpec{
			NodeSelector: "!(pool == 'c')", PeerSelector: extender.CrossPolicySelector}},
	}
	for _, p := range peers {
		require.NoError(t, h.client.Create(ctx, calico.BGPPeer(calico.CRD, p)))
	}
	require.Zero(t, h.modelMissing(), "before")

	want := []extender.NodeState{rr("c-00", "224.0.0.1", false, "2000-01-01T00:00:00Z"), rr("c-01", "224.0.0.3", true, ""), client("c-02"), client("c-03"), client("c-04")}
	nodesStep := func() {
		t.Helper()
		h.sync()
		pol := h.r.Policies.List()[0]
		resolved, errs := h.r.Policies.Resolve(pol)
		require.Empty(t, errs)
		st := &State{Name: "default", Now: h.now, Policy: pol, Managed: state.Managed{Policy: pol, Resolved: resolved},
			Result: &extender.Result{Nodes: want, BGPPeers: peers}, View: map[string]*extender.Node{}, trans: h.r.memo("default").trans}
		for _, n := range h.r.Nodes.List() {
			if n.Labels["pool"] == "c" {
				st.View[n.Name] = n
			}
		}
		list, err := h.r.peers().List(ctx, labels)
		require.NoError(t, err)
		st.Peers = list
		require.NoError(t, h.r.patchNodes(ctx, st))
	}
	// The last cluster-ID change was made 4 s ago: the next waits for its sessions.
	h.r.memo("default").trans.Start(transitions.Renumber, h.now.Add(-4*time.Second), "c-02")
	nodesStep()
	require.Zero(t, h.modelMissing(), "while c-01's cluster-ID change is held")
	require.Equal(t, "224.0.0.2", h.node("c-01").Annotations[extender.AnnotationClusterID], "c-01's change is held")
	require.Contains(t, h.node("c-00").Labels, extender.LabelTopLevel, "c-00 stays top-level while c-01's change is held")

	h.now = h.now.Add(transitions.DefaultMax)
	nodesStep()
	require.Zero(t, h.modelMissing(), "after")
	require.Equal(t, "224.0.0.3", h.node("c-01").Annotations[extender.AnnotationClusterID])
	require.Contains(t, h.node("c-01").Labels, extender.LabelTopLevel)
	require.NotContains(t, h.node("c-00").Labels, extender.LabelTopLevel)
	require.NotEmpty(t, h.node("c-00").Annotations[extender.AnnotationDrainingSince])
}

// TestUnrecordedRenumberingWaits: a leader of a release before the records (0.2.0 staged its
// cluster-ID changes in memory) renumbers a route reflector of a Hierarchical racks split and loses
// the lease (a `helm upgrade`). Its successor finds the staging in flight and no Renumber record;
// it reads the last write of the product's field manager to a route reflector that keeps its role
// from the Node's managedFields and waits the settle rule from there (the second renumbering
// transitions.DefaultSettle after the first, not at once), keeping that start as a record. Without
// the managedFields entry (the control) it renumbers the next at once, which is what the entry
// prevents.
func TestUnrecordedRenumberingWaits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		written bool // the older leader's write is in the Node's managedFields
	}{{"write in managedFields", true}, {"no write known", false}} {
		t.Run(tc.name, func(t *testing.T) {
			h := settle(newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
				s.Topology = &v1alpha1.Topology{Type: v1alpha1.Hierarchical, MaxRackSize: ptrTo(int32(30))}
			}, cluster(90)), func(*harness) {}, 4*time.Second)
			h.editPolicy(func(s *v1alpha1.RouteReflectorPolicySpec) {
				s.Topology = &v1alpha1.Topology{Type: v1alpha1.Hierarchical, MaxRackSize: ptrTo(int32(12))}
			})
			before := h.rrs()
			h.reconcile()
			first := renumbered(before, h.rrs())
			require.Len(t, first, 1, "the split's first renumbering")
			at := h.now

			// What an older leader leaves: no record in the status, its write in managedFields.
			pol := &v1alpha1.RouteReflectorPolicy{}
			require.NoError(t, h.client.Get(context.Background(), client.ObjectKey{Name: h.policyNm}, pol))
			orig := pol.DeepCopy()
			pol.Status.Transitions = nil
			require.NoError(t, h.client.Status().Patch(context.Background(), pol, client.MergeFrom(orig)))
			// The fake API server keeps no managedFields: the new leader's reads get them here.
			var fields map[string][]metav1.ManagedFieldsEntry
			if tc.written {
				fields = map[string][]metav1.ManagedFieldsEntry{first[0]: {
					{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: at.Add(2 * time.Second)}},
					{Manager: "calico-rr-autoscaler", Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: at}},
				}}
			}

			h.failover()
			h.r.APIReader = managedFieldsReader{h.client, fields}
			h.now = at.Add(2 * time.Second)
			before = h.rrs()
			h.reconcile()
			next := renumbered(before, h.rrs())
			if !tc.written {
				require.Len(t, next, 1, "without a known write the new leader renumbers at once")
				return
			}
			require.Empty(t, next, "2 s after the older leader's renumbering")
			require.NoError(t, h.client.Get(context.Background(), client.ObjectKey{Name: h.policyNm}, pol))
			require.Len(t, pol.Status.Transitions, 1, "the wait is a record: %+v", pol.Status.Transitions)
			tr := pol.Status.Transitions[0]
			require.Equal(t, string(transitions.Renumber)+" "+first[0], tr.Kind+" "+tr.Node)
			require.True(t, at.Add(time.Second).Equal(tr.StartedAt.Time), "from the write, rounded up to its second: %v", tr.StartedAt)

			// A leader after it resumes that wait; the next goes once the settle rule allows.
			h.failover()
			h.now = at.Add(transitions.DefaultSettle)
			before = h.rrs()
			h.reconcile()
			require.Empty(t, renumbered(before, h.rrs()), "transitions.DefaultSettle after the write, within its second")
			h.now = at.Add(transitions.DefaultSettle + time.Second)
			before = h.rrs()
			h.reconcile()
			require.Len(t, renumbered(before, h.rrs()), 1, "the next renumbering, transitions.DefaultSettle after the write's second")
		})
	}
}

// TestRenumberingWaitsForRestartedSessions: with handover BGPSessions the next renumbering waits
// until the last renumbered route reflector's report shows its client sessions come up again
// after the change (BIRD's since column), not only Established: a report made while its BIRD has
// not loaded the change yet (confd late) still shows the old sessions Established. While every
// report dates the sessions before the transition, no second renumbering goes until the record's
// Max; once a report dates them after the first renumbering, the second goes within seconds.
func TestRenumberingWaitsForRestartedSessions(t *testing.T) {
	var old string
	stale := func(string) string { return old }
	h := rackSplitReported(t, func(h *harness) func(string) string {
		old = h.now.Add(-time.Hour).UTC().Format(time.TimeOnly)
		return stale
	})
	var first time.Time
	for step := 0; step < 60; step++ {
		before := h.rrs()
		h.reconcile()
		if changed := renumbered(before, h.rrs()); len(changed) > 0 {
			require.True(t, first.IsZero(), "%v renumbered %v after the first, every report dating its sessions before it", changed, h.now.Sub(first))
			first = h.now
		}
		if !first.IsZero() && h.now.Sub(first) >= 40*time.Second {
			break
		}
		h.now = h.now.Add(time.Second)
		h.calicoNodeSince(allUp, stale)
	}
	require.False(t, first.IsZero(), "the split's first renumbering")
	fresh := func(string) string { return h.now.Add(-time.Second).UTC().Format(time.TimeOnly) }
	for step := 0; ; step++ {
		require.Less(t, step, 8, "no second renumbering within 8 s of reports dating the sessions after the first")
		h.now = h.now.Add(time.Second)
		h.calicoNodeSince(allUp, fresh)
		before := h.rrs()
		h.reconcile()
		if len(renumbered(before, h.rrs())) > 0 {
			break
		}
	}
}

// managedFieldsReader reads through Reader, giving the Nodes named in fields those managedFields.
type managedFieldsReader struct {
	client.Reader
	fields map[string][]metav1.ManagedFieldsEntry
}

func (r managedFieldsReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := r.Reader.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if n, ok := obj.(*corev1.Node); ok && r.fields[n.Name] != nil {
		n.ManagedFields = r.fields[n.Name]
	}
	return nil
}

// allUp reports every session Established (calicoNodeBy, calicoNodeSince).
func allUp(string, string, extender.Families) bool { return true }

// rackSplitReported is 90 nodes under Hierarchical racks of 30 with handover BGPSessions,
// settled over three reconciles a minute apart with every session reported Established, each
// report's since column as the function since returns (given the harness) says; then its racks
// split to 12, which renumbers six route reflectors that keep their role, one at a time.
func rackSplitReported(t *testing.T, since func(h *harness) func(rr string) string) *harness {
	t.Helper()
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.Topology = &v1alpha1.Topology{Type: v1alpha1.Hierarchical, MaxRackSize: ptrTo(int32(30))}
		s.Handover = v1alpha1.HandoverBGPSessions
	}, ipCluster(90))
	at := since(h)
	for range 3 {
		h.reconcile()
		h.calicoNodeSince(allUp, at)
		h.now = h.now.Add(time.Minute)
	}
	h.editPolicy(func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.Topology = &v1alpha1.Topology{Type: v1alpha1.Hierarchical, MaxRackSize: ptrTo(int32(12))}
	})
	return h
}

// TestRenumberingWaitsForAReportAcrossAFailover: once a report settled a renumbering, calico-node
// is known to report, and a new leader that finds the next renumbering's record with no report of
// it waits for a fresh one until Max, not Settle: a confd or BIRD late past Settle (the live lab's
// follow loop stalled 15 s) must not let two renumberings reach BIRD together. Without Reporting
// the third renumbering came Settle (10 s) after the new leader's read.
func TestRenumberingWaitsForAReportAcrossAFailover(t *testing.T) {
	var fresh func(string) string
	h := rackSplitReported(t, func(h *harness) func(string) string {
		fresh = func(string) string { return h.now.Add(-time.Second).UTC().Format(time.TimeOnly) }
		return fresh
	})
	var at []time.Time // the renumberings
	for step := 0; len(at) < 2; step++ {
		require.Less(t, step, 60, "two renumberings with every report fresh")
		h.now = h.now.Add(time.Second)
		h.calicoNodeSince(allUp, fresh)
		before := h.rrs()
		h.reconcile()
		if len(renumbered(before, h.rrs())) > 0 {
			at = append(at, h.now)
		}
	}
	require.NotNil(t, h.status().SessionReportsSeen, "the first renumbering's report")
	h.failover() // and calico-node's reports stop
	for {
		h.now = h.now.Add(time.Second)
		before := h.rrs()
		h.reconcile()
		if c := renumbered(before, h.rrs()); len(c) > 0 {
			t.Logf("DBG %v renumbered %v; status %+v", h.now.Sub(at[1]), c, h.status().Transitions)
			break
		}
		if h.now.Sub(at[1]) < 5*time.Second {
			t.Logf("DBG %v status %+v", h.now.Sub(at[1]), h.status().Transitions)
		}
		require.Less(t, h.now.Sub(at[1]), transitions.DefaultMax+3*time.Second, "no third renumbering by Max")
	}
	require.GreaterOrEqual(t, h.now.Sub(at[1]), transitions.DefaultMax,
		"the new leader renumbered %v after the second, without a report of it", h.now.Sub(at[1]))
}
