package webhook

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

func mutate(t *testing.T, f *fixture, req *admissionv1.AdmissionRequest, obj *corev1.Node) (*corev1.Node, *admissionv1.AdmissionResponse) {
	t.Helper()
	resp, err := f.mutator.Handle(context.Background(), req)
	require.NoError(t, err)
	require.True(t, resp.Allowed, "mutator denied: %+v", resp.Result)
	return patched(t, obj, resp), resp
}

func owned(n *corev1.Node) string {
	var out []string
	for _, k := range extender.OwnedLabelKeys("calico-route-reflector") {
		if v, ok := n.Labels[k]; ok {
			out = append(out, k+"="+v)
		}
	}
	for _, k := range extender.OwnedAnnotationKeys() {
		if v, ok := n.Annotations[k]; ok && k != extender.AnnotationProtection { // requireProtected's
			out = append(out, k+"="+v)
		}
	}
	return fmt.Sprint(out)
}

// requireProtected checks that a node the mutator made a route reflector (was, before the patch,
// carried no cluster ID; n does) carries the protection annotations, and a client none.
func requireProtected(t *testing.T, was, n *corev1.Node) {
	t.Helper()
	_, wasRR := was.Annotations[extender.AnnotationClusterID]
	_, rr := n.Annotations[extender.AnnotationClusterID]
	for _, k := range policy.ProtectionAnnotations() {
		switch {
		case rr && !wasRR:
			require.Equal(t, "true", n.Annotations[k], "promoted %s: %s", n.Name, k)
		case !rr:
			require.NotContains(t, n.Annotations, k, n.Name)
		}
	}
}

func TestNodeMutator(t *testing.T) {
	type step struct {
		name       string
		leader     bool
		commit     bool
		deferRoles bool           // DeferRoles (Calico's etcd datastore)
		nodes      []*corev1.Node // the cache
		user       string
		old        *corev1.Node // nil: CREATE
		obj        *corev1.Node
		want       string // owned keys after the patch
	}
	joiner := mkNode("node-new", "zone-a")
	tests := []step{
		{name: "leader promotes a joiner on an empty cluster", leader: true, commit: true, obj: joiner,
			want: "[calico-route-reflector= routereflector.io/rr-id=node-new projectcalico.org/RouteReflectorClusterID=224.0.0.1]"},
		{name: "no plan committed yet: left to the reconciler", leader: true, obj: joiner, want: "[]"},
		{name: "non-leader answers without a patch", commit: true, obj: joiner, want: "[]"},
		{name: "etcd datastore: the leader too leaves a joiner to the reconciler", leader: true, commit: true, deferRoles: true, obj: joiner, want: "[]"},
		{name: "etcd datastore: a cordoned route reflector is still marked draining", deferRoles: true, leader: true, nodes: threeZones(),
			old: mkNode("node-a1", "zone-a", rr("224.0.0.1")), obj: mkNode("node-a1", "zone-a", rr("224.0.0.1"), cordon),
			want: "[calico-route-reflector= routereflector.io/rr-id=node-a1 projectcalico.org/RouteReflectorClusterID=224.0.0.1 routereflector.io/draining-since=2025-06-01T12:00:00Z]"},
		{name: "leader makes a joiner a client", leader: true, commit: true, nodes: threeZones(), obj: mkNode("node-new", "zone-b", notReady),
			want: "[routereflector.io/peering-set=a88f56a637 routereflector.io/route-reflectors=node-a1,node-b1,node-c1]"},
		{name: "cordoned route reflector is marked draining (any replica)", nodes: threeZones(),
			old: mkNode("node-a1", "zone-a", rr("224.0.0.1")), obj: mkNode("node-a1", "zone-a", rr("224.0.0.1"), cordon),
			want: "[calico-route-reflector= routereflector.io/rr-id=node-a1 projectcalico.org/RouteReflectorClusterID=224.0.0.1 routereflector.io/draining-since=2025-06-01T12:00:00Z]"},
		{name: "a route reflector NotReady within the grace period keeps its role, unmarked", nodes: threeZones(),
			old: mkNode("node-a1", "zone-a", rr("224.0.0.1")), obj: mkNode("node-a1", "zone-a", rr("224.0.0.1"), notReadySince(tNow.Add(-30*time.Second))),
			want: "[calico-route-reflector= routereflector.io/rr-id=node-a1 projectcalico.org/RouteReflectorClusterID=224.0.0.1]"},
		{name: "a route reflector NotReady past the grace period is marked draining, for being NotReady", nodes: threeZones(),
			old: mkNode("node-a1", "zone-a", rr("224.0.0.1")), obj: mkNode("node-a1", "zone-a", rr("224.0.0.1"), notReadySince(tNow.Add(-3*time.Minute))),
			want: "[calico-route-reflector= routereflector.io/rr-id=node-a1 projectcalico.org/RouteReflectorClusterID=224.0.0.1 routereflector.io/draining-since=2025-06-01T12:00:00Z routereflector.io/draining-reason=NotReady]"},
		{name: "already draining: no change", nodes: threeZones(),
			old: mkNode("node-a1", "zone-a", rr("224.0.0.1"), drainingMark), obj: mkNode("node-a1", "zone-a", rr("224.0.0.1"), drainingMark, cordon),
			want: "[calico-route-reflector= routereflector.io/rr-id=node-a1 projectcalico.org/RouteReflectorClusterID=224.0.0.1 routereflector.io/draining-since=2025-06-01T11:59:00Z]"},
		{name: "a role removed by hand is not put back", leader: true, commit: true, nodes: threeZones(),
			old:  mkNode("node-a1", "zone-a", rr("224.0.0.1")),
			obj:  mkNode("node-a1", "zone-a", rr("224.0.0.1"), func(n *corev1.Node) { delete(n.Labels, "calico-route-reflector") }),
			want: "[routereflector.io/rr-id=node-a1 projectcalico.org/RouteReflectorClusterID=224.0.0.1]"},
		{name: "a known client stays", leader: true, commit: true, nodes: threeZones(),
			old:  mkNode("node-a2", "zone-a", clientOf("node-a1", "node-b1", "node-c1")),
			obj:  mkNode("node-a2", "zone-a", clientOf("node-a1", "node-b1", "node-c1"), withLabel("team", "x")),
			want: "[routereflector.io/peering-set=set-node-a1-node-b1-node-c1 routereflector.io/route-reflectors=node-a1,node-b1,node-c1]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, tc.nodes)
			f.ledger.SetLeader(tc.leader || tc.commit)
			if tc.commit {
				f.commit(t)
			}
			f.ledger.SetLeader(tc.leader)
			f.mutator.DeferRoles = tc.deferRoles
			req := nodeReq(t, alice, tc.obj, tc.old)
			got, resp := mutate(t, f, req, tc.obj)
			require.Equal(t, tc.want, owned(got), "owned keys (patch %s)", resp.Patch)
			requireProtected(t, tc.obj, got)
			// Idempotent: the reinvocation on the patched object changes nothing.
			req2 := nodeReq(t, alice, got, tc.old)
			_, resp2 := mutate(t, f, req2, got)
			require.Empty(t, resp2.Patch, "reinvocation patched again: %s", resp2.Patch)
		})
	}
}

func TestNodeMutatorJoinThenReady(t *testing.T) {
	// A cluster with one eligible node, the route reflector of zone-a: a node of zone-b joins NotReady
	// (client), then turns Ready through nodes/status (promoted in that request).
	nodes := []*corev1.Node{
		mkNode("node-a1", "zone-a", rr("224.0.0.1")),
		mkNode("node-a2", "zone-a", cordon, clientOf("node-a1")),
		mkNode("node-b9", "zone-b", cordon, clientOf("node-a1")),
	}
	f := newFixture(t, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, nodes)
	f.ledger.SetLeader(true)
	f.commit(t)
	n := mkNode("node-b1", "zone-b", notReady)
	created, _ := mutate(t, f, nodeReq(t, kubelet, n, nil), n)
	require.Equal(t, "node-a1", created.Annotations[extender.AnnotationRouteReflectors], "joiner: %s", owned(created))
	ready := created.DeepCopy()
	ready.Status.Conditions[0].Status = corev1.ConditionTrue
	req := nodeReq(t, kubelet, ready, created)
	req.SubResource = "status"
	got, _ := mutate(t, f, req, ready)
	want := "[calico-route-reflector= routereflector.io/rr-id=node-b1 projectcalico.org/RouteReflectorClusterID=224.0.0.2]"
	require.Equal(t, want, owned(got), "ready")
	require.Equal(t, 1, f.ledger.Pending(), "pending")
}

func TestNodeMutatorConcurrentBurst(t *testing.T) {
	f := newFixture(t, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, nil)
	f.ledger.SetLeader(true)
	f.commit(t)
	const n = 60
	// The requests are built and the answers checked and applied on the test goroutine: require
	// (t.FailNow) must not be called from the goroutines, which only call the mutator.
	nodes := make([]*corev1.Node, n)
	reqs := make([]*admissionv1.AdmissionRequest, n)
	for i := range n {
		nodes[i] = mkNode(fmt.Sprintf("node-%02d", i), fmt.Sprintf("zone-%c", 'a'+i%3))
		reqs[i] = nodeReq(t, kubelet, nodes[i], nil)
	}
	resps := make([]*admissionv1.AdmissionResponse, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resps[i], errs[i] = f.mutator.Handle(context.Background(), reqs[i])
		}()
	}
	wg.Wait()
	out := make([]*corev1.Node, n)
	for i := range n {
		require.NoError(t, errs[i], nodes[i].Name)
		out[i] = patched(t, nodes[i], resps[i])
	}
	ids := map[string]string{}
	rrs := 0
	for _, node := range out {
		if id, ok := node.Annotations[extender.AnnotationClusterID]; ok {
			rrs++
			o, dup := ids[id]
			require.False(t, dup, "%s and %s share cluster ID %s", o, node.Name, id)
			ids[id] = node.Name
		}
	}
	require.Equal(t, 3, rrs, "route reflectors promoted")
}

func TestNodeMutatorNoPolicy(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.ledger.SetLeader(true)
	n := mkNode("node-1", "zone-a")
	got, _ := mutate(t, f, nodeReq(t, kubelet, n, nil), n)
	require.Equal(t, "[]", owned(got), "owned keys")
}

var _ = time.Second

// TestNodeMutatorDryRunLeavesNoTrace: a server-side dry run gets the answer a real request would,
// and records nothing: the next real joiner is decided as if the dry run never happened.
func TestNodeMutatorDryRunLeavesNoTrace(t *testing.T) {
	f := newFixture(t, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, nil)
	f.ledger.SetLeader(true)
	f.commit(t)
	promoted := "[calico-route-reflector= routereflector.io/rr-id=%s projectcalico.org/RouteReflectorClusterID=224.0.0.1]"

	dry := mkNode("node-dry", "zone-a")
	req := nodeReq(t, alice, dry, nil)
	yes := true
	req.DryRun = &yes
	got, _ := mutate(t, f, req, dry)
	require.Equal(t, fmt.Sprintf(promoted, "node-dry"), owned(got), "dry run: owned keys")
	real := mkNode("node-real", "zone-a")
	got, _ = mutate(t, f, nodeReq(t, alice, real, nil), real)
	require.Equal(t, fmt.Sprintf(promoted, "node-real"), owned(got), "after a dry run: owned keys (the dry run was recorded)")

	// A dry-run cordon of a route reflector is answered with the draining mark but not assumed.
	f2 := newFixture(t, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, threeZones())
	old, obj := mkNode("node-a1", "zone-a", rr("224.0.0.1")), mkNode("node-a1", "zone-a", rr("224.0.0.1"), cordon)
	req = nodeReq(t, alice, obj, old)
	req.DryRun = &yes
	got, _ = mutate(t, f2, req, obj)
	require.NotEmpty(t, got.Annotations[extender.AnnotationDrainingSince], "dry-run cordon: no draining mark in the answer")
	all, _ := f2.ledger.Overlay(extender.FromNodes(threeZones()))
	for _, n := range all {
		assert.Empty(t, n.Annotations[extender.AnnotationDrainingSince], "dry-run cordon assumed a draining mark on %s", n.Name)
	}
}

// TestMutatorCountsJoinsWithoutRole: a join that gets no role counts as "none", and as
// "none-held" when it was eligible while the reconciler held promotions for a plan (a route
// reflector would have been promoted otherwise).
func TestMutatorCountsJoinsWithoutRole(t *testing.T) {
	f := newFixture(t, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, nil)
	f.ledger.SetLeader(true)
	f.commit(t)
	count := func(label string) float64 { return testutil.ToFloat64(decisionsTotal.WithLabelValues(label)) }
	held, none := count("none-held"), count("none")

	unblock := f.ledger.HoldPromotions()
	n := mkNode("node-1", "zone-a")
	got, _ := mutate(t, f, nodeReq(t, kubelet, n, nil), n)
	unblock()
	require.Equal(t, "[]", owned(got), "no role while promotions are held and no route reflector exists")
	require.Equal(t, held+1, count("none-held"))
	require.Equal(t, none, count("none"))

	notReady := mkNode("node-2", "zone-a")
	notReady.Status.Conditions[0].Status = corev1.ConditionFalse
	got, _ = mutate(t, f, nodeReq(t, kubelet, notReady, nil), notReady)
	require.Equal(t, "[]", owned(got))
	require.Equal(t, none+1, count("none"), "a NotReady node is not eligible: no role, not held")

	promoted, _ := mutate(t, f, nodeReq(t, kubelet, n, nil), n)
	require.Contains(t, owned(promoted), "calico-route-reflector", "promoted once the hold is released")
}
