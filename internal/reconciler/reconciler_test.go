package reconciler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv/nodetest"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// harness runs the reconciler on a fake API server whose state it copies into the informer stores
// before every reconcile, as the cache would.
type harness struct {
	t        testing.TB
	client   client.Client
	nodeIdx  toolscache.Indexer
	polIdx   toolscache.Indexer
	r        *Reconciler
	rec      *record.FakeRecorder
	now      time.Time
	writes   atomic.Int32
	policyNm string

	// writeLimit, when positive, makes every write after the first writeLimit-1 fail: a leader that
	// dies in the middle of a reconcile (see failover_test.go).
	writeLimit atomic.Int32
	// statusWrites counts the policy status writes among writes.
	statusWrites atomic.Int32

	mu          sync.Mutex
	nodePatches []string // "name body" of every node patch, in the order they were sent
	writeLog    []string // "verb Kind name[ subresource]" of every write, in order
}

// logWrite adds a write to the harness's write log.
func (h *harness) logWrite(verb string, obj client.Object, sub string) {
	kind := fmt.Sprintf("%T", obj)
	kind = kind[strings.LastIndex(kind, ".")+1:]
	h.mu.Lock()
	h.writeLog = append(h.writeLog, strings.TrimSpace(verb+" "+kind+" "+obj.GetName()+" "+sub))
	h.mu.Unlock()
}

// errDied is the write error of a harness past its writeLimit.
var errDied = errors.New("the leader died")

// write counts a write and says whether it may go.
func (h *harness) write() error {
	n := h.writes.Add(1)
	if l := h.writeLimit.Load(); l > 0 && n >= l {
		return errDied
	}
	return nil
}

// scheme holds the kinds the reconciler reads and writes: core/v1 (nodes, events), the policy and
// Calico's. Not client-go's whole scheme: the fake client's field-managed tracker builds a REST
// mapper of every kind of the scheme on each create, update and patch
// (testrestmapper.TestOnlyStaticRESTMapper), which with client-go's hundreds of kinds was 39% of
// the package's CPU. A kind missing here fails the write or read that needs it ("no kind is
// registered"); the one kind the reconciler treats as optional (CalicoNodeStatus, noNodeStatusAPI)
// is Calico's, registered below.
func scheme(t testing.TB) *runtime.Scheme {
	s := runtime.NewScheme()
	require.NoError(t, corev1.AddToScheme(s))
	require.NoError(t, v1alpha1.AddToScheme(s))
	require.NoError(t, calico.AddToScheme(s, calico.CRD))
	return s
}

// node is a Ready node of zone created age seconds after an hour before t0.
func node(name, zone string, age int) *corev1.Node {
	return nodetest.New(name, nodetest.Zone(zone), nodetest.UID("uid-"+toUID(name)),
		nodetest.Created(t0.Add(-time.Hour+time.Duration(age)*time.Second)))
}

func toUID(s string) string { return strings.ReplaceAll(s, "/", "-") }

func newHarness(t testing.TB, spec func(*v1alpha1.RouteReflectorPolicySpec), nodes []*corev1.Node) *harness {
	t.Helper()
	pol := policy.Default("default")
	pol.Generation = 1
	// The tests were written for MultiCluster, the default before DualPlane; a spec may name another.
	pol.Spec.Topology = &v1alpha1.Topology{Type: v1alpha1.MultiCluster}
	// The fake API server serves CalicoNodeStatus, which turns bgpHealth on by default: the tests
	// that count writes and CalicoNodeStatuses leave it off (bgphealth_test.go turns it on).
	off := false
	pol.Spec.BGPHealth = &v1alpha1.BGPHealth{Enabled: &off}
	if spec != nil {
		spec(&pol.Spec)
	}
	var objs []client.Object
	objs = append(objs, pol)
	for _, n := range nodes {
		objs = append(objs, n)
	}
	h := &harness{t: t, now: t0, policyNm: "default", rec: record.NewFakeRecorder(10000)}
	// The fake API server sets no UID; a real one always does (cleanup compares them).
	pol.UID = types.UID("uid-policy-" + pol.Name)
	count := func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		h.logWrite("create", obj, "")
		if err := h.write(); err != nil {
			return err
		}
		if p, ok := obj.(*v1alpha1.RouteReflectorPolicy); ok && p.UID == "" {
			p.UID = types.UID("uid-policy-" + p.Name)
		}
		return c.Create(ctx, obj, opts...)
	}
	h.client = fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.RouteReflectorPolicy{}).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: count,
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				h.logWrite("update", obj, "")
				if err := h.write(); err != nil {
					return err
				}
				return c.Update(ctx, obj, opts...)
			},
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
				h.logWrite("patch", obj, "")
				if err := h.write(); err != nil {
					return err
				}
				if _, ok := obj.(*corev1.Node); ok {
					body, _ := p.Data(obj)
					h.mu.Lock()
					h.nodePatches = append(h.nodePatches, obj.GetName()+" "+string(body))
					h.mu.Unlock()
				}
				return c.Patch(ctx, obj, p, opts...)
			},
			Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				h.logWrite("delete", obj, "")
				if err := h.write(); err != nil {
					return err
				}
				return c.Delete(ctx, obj, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				if _, ok := obj.(*v1alpha1.RouteReflectorPolicy); ok && sub == "status" {
					h.statusWrites.Add(1)
				}
				h.logWrite("patch", obj, sub)
				if err := h.write(); err != nil {
					return err
				}
				return c.SubResource(sub).Patch(ctx, obj, p, opts...)
			},
		}).Build()
	h.nodeIdx = toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, state.NodeIndexers())
	h.polIdx = toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
	ledger := state.NewLedger(0, func() time.Time { return h.now })
	ledger.SetLeader(true)
	h.r = &Reconciler{
		Client:   h.client,
		Nodes:    state.NewNodeStore(h.nodeIdx),
		Policies: state.NewPolicies(h.polIdx),
		Ledger:   ledger,
		Recorder: h.rec,
		PeerAPI:  calico.CRD,
		Now:      func() time.Time { return h.now },
	}
	return h
}

// sync copies the fake API server into the stores (the informers).
func (h *harness) sync() {
	h.t.Helper()
	ctx := context.Background()
	nodes := &corev1.NodeList{}
	require.NoError(h.t, h.client.List(ctx, nodes))
	var objs []any
	for i := range nodes.Items {
		objs = append(objs, state.StripNode(nodes.Items[i].DeepCopy()))
	}
	require.NoError(h.t, h.nodeIdx.Replace(objs, ""))
	h.syncPolicies()
}

// syncPolicies copies the fake API server's policies into the policy store.
func (h *harness) syncPolicies() {
	h.t.Helper()
	ctx := context.Background()
	var objs []any
	pols := &v1alpha1.RouteReflectorPolicyList{}
	require.NoError(h.t, h.client.List(ctx, pols))
	for i := range pols.Items {
		p := pols.Items[i].DeepCopy()
		if p.UID == "" {
			p.UID = types.UID("uid-policy-" + p.Name)
		}
		objs = append(objs, p)
	}
	require.NoError(h.t, h.polIdx.Replace(objs, ""))
}

// reconcile syncs the stores and reconciles the policy once.
func (h *harness) reconcile() time.Duration {
	h.t.Helper()
	h.sync()
	res, err := h.r.Reconcile(context.Background(), request(h.policyNm))
	require.NoError(h.t, err)
	return res.RequeueAfter
}

func (h *harness) node(name string) *corev1.Node {
	h.t.Helper()
	n := &corev1.Node{}
	require.NoError(h.t, h.client.Get(context.Background(), client.ObjectKey{Name: name}, n))
	return n
}

func (h *harness) update(name string, f func(*corev1.Node)) {
	h.t.Helper()
	n := h.node(name)
	f(n)
	require.NoError(h.t, h.client.Update(context.Background(), n))
}

// rrs returns the route reflectors (label and cluster ID) by name, with their cluster IDs.
func (h *harness) rrs() map[string]string {
	h.t.Helper()
	nodes := &corev1.NodeList{}
	require.NoError(h.t, h.client.List(context.Background(), nodes))
	out := map[string]string{}
	for _, n := range nodes.Items {
		if _, ok := n.Labels["calico-route-reflector"]; ok && n.Annotations[extender.AnnotationClusterID] != "" {
			out[n.Name] = n.Annotations[extender.AnnotationClusterID]
		}
	}
	return out
}

func (h *harness) peers() []string {
	h.t.Helper()
	list := &apiv3.BGPPeerList{}
	require.NoError(h.t, h.client.List(context.Background(), list))
	var out []string
	for _, p := range list.Items {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// checkClients: every client peers with at least one current route reflector, through a peering
// set whose BGPPeer exists.
func (h *harness) checkClients() {
	h.t.Helper()
	rrs := h.rrs()
	peers := map[string]bool{}
	for _, p := range h.peers() {
		peers[p] = true
	}
	nodes := &corev1.NodeList{}
	_ = h.client.List(context.Background(), nodes)
	for _, n := range nodes.Items {
		if _, ok := rrs[n.Name]; ok {
			continue
		}
		ok := false
		for _, r := range strings.Split(n.Annotations[extender.AnnotationRouteReflectors], ",") {
			if _, isRR := rrs[r]; isRR {
				ok = true
			}
		}
		set := n.Labels[extender.LabelPeeringSet]
		if !ok || !peers[extender.BGPPeerPrefix+set] {
			require.Fail(h.t, fmt.Sprintf("client %s: route reflectors %q (current %v), set %q (BGPPeer exists: %v)", n.Name,
				n.Annotations[extender.AnnotationRouteReflectors], rrs, set, peers[extender.BGPPeerPrefix+set]))
		}
	}
}

func cluster(n int) []*corev1.Node {
	var nodes []*corev1.Node
	for i := range n {
		nodes = append(nodes, node(fmt.Sprintf("node-%02d", i), fmt.Sprintf("zone-%c", 'a'+i%3), i))
	}
	return nodes
}

func TestReconcileBootstrapsAndSettles(t *testing.T) {
	h := newHarness(t, nil, cluster(30))
	h.reconcile()
	rrs := h.rrs()
	require.EqualValuesf(t, "map[node-00:224.0.0.1 node-01:224.0.0.2 node-02:224.0.0.3]", fmt.Sprint(rrs), "route reflectors %v", rrs)
	if p := h.peers(); len(p) < 2 || !slices.Contains(p, "rr-autoscaler-mesh-default") {
		require.Fail(t, fmt.Sprintf("BGPPeers %v", p))
	}
	h.checkClients()
	ev := strings.Join(h.events(), "\n")
	require.Truef(t, strings.Contains(ev, "Normal RouteReflectorPromoted Promoted to route reflector: zone zone-b below desired 1"), "events:\n%s", ev)
	pol := &v1alpha1.RouteReflectorPolicy{}
	_ = h.client.Get(context.Background(), client.ObjectKey{Name: "default"}, pol)
	s := pol.Status
	require.EqualValues(t, 30, s.Nodes, "status %+v", s)
	require.EqualValues(t, 30, s.HealthyNodes, "status %+v", s)
	require.EqualValues(t, 3, s.DesiredRouteReflectors, "status %+v", s)
	require.EqualValues(t, 3, s.RouteReflectors, "status %+v", s)
	require.Len(t, s.Zones, 3, "status %+v", s)
	require.NotNil(t, s.LastScaleTime, "status %+v", s)
	if c := findCondition(s.Conditions, ConditionReady); c == nil || c.Status != "True" {
		require.Fail(t, fmt.Sprintf("conditions %+v", s.Conditions))
	}
	if c := findCondition(s.Conditions, ConditionDegraded); c == nil || c.Status != "False" {
		require.Fail(t, fmt.Sprintf("conditions %+v", s.Conditions))
	}
	if c := findCondition(s.Conditions, ConditionForeignBGPPeers); c == nil || c.Status != "False" {
		require.Fail(t, fmt.Sprintf("conditions %+v", s.Conditions))
	}
	// MultiCluster stores far more paths than the default layout would on these 30 nodes.
	if c := findCondition(s.Conditions, ConditionExpensiveTopology); c == nil || c.Status != "True" || c.Reason != ReasonMoreThanTwiceDefault ||
		!strings.Contains(c.Message, "the default layout (DualPlane) 2.0 and 2.0") {
		require.Fail(t, fmt.Sprintf("conditions %+v", s.Conditions))
	}
	if r := s.Routes; r == nil || r.DefaultMeanPathsPerPrefix != "2.0" || r.MeanPathsPerPrefix == "2.0" || r.MissingPairs != 0 {
		require.Fail(t, fmt.Sprintf("routes %+v", r))
	}
	// Settled: the next reconcile writes nothing.
	h.writes.Store(0)
	h.reconcile()
	if w := h.writes.Load(); w != 0 {
		require.Fail(t, fmt.Sprintf("%d writes on a settled cluster", w))
	}
}

func TestReconcileCordonHandsOver(t *testing.T) {
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.RemovalDelay = &metav1.Duration{Duration: 2 * time.Second}
	}, cluster(30))
	h.reconcile()
	h.events()
	h.now = h.now.Add(transitions.DefaultMax) // the route reflectors' sessions have settled (moves.go)
	h.update("node-01", func(n *corev1.Node) { n.Spec.Unschedulable = true })
	requeue := h.reconcile()
	rrs := h.rrs()
	// node-01 keeps its role, draining; node-04 (zone-b, next oldest) is promoted into its group.
	require.Equal(t, "224.0.0.2", rrs["node-04"], "after cordon: %v", rrs)
	require.Equal(t, "224.0.0.2", rrs["node-01"], "after cordon: %v", rrs)
	require.NotEmpty(t, h.node("node-01").Annotations[extender.AnnotationDrainingSince], "after cordon: node-01 is not draining")
	require.Positive(t, requeue, "want a requeue after about the removal delay")
	require.LessOrEqual(t, requeue, 3*time.Second, "want a requeue after about the removal delay")
	h.checkClients()
	ev := strings.Join(h.events(), "\n")
	for _, want := range []string{"RouteReflectorPromoted Promoted to route reflector: zone zone-b below desired 1", "RouteReflectorDraining Draining: cordoned; clients moving to node-04"} {
		require.Truef(t, strings.Contains(ev, want), "events lack %q:\n%s", want, ev)
	}
	// Before the delay: still a route reflector.
	h.now = h.now.Add(time.Second)
	h.reconcile()
	if _, ok := h.rrs()["node-01"]; !ok {
		require.Fail(t, "demoted before removalDelay")
	}
	// After it: demoted, with the Event naming where its clients went.
	h.now = h.now.Add(2 * time.Second)
	h.reconcile()
	if _, ok := h.rrs()["node-01"]; ok {
		require.Fail(t, fmt.Sprintf("not demoted after removalDelay: %v", h.rrs()))
	}
	h.checkClients()
	ev = strings.Join(h.events(), "\n")
	if !strings.Contains(ev, "RouteReflectorDemoted Demoted: cordoned; clients moved to node-04") {
		require.Fail(t, fmt.Sprintf("events:\n%s", ev))
	}
	n := h.node("node-01")
	require.Empty(t, n.Annotations[extender.AnnotationDrainingSince], "the demoted node keeps its draining mark")
	require.NotEmpty(t, n.Labels[extender.LabelPeeringSet], "the demoted node has no peering set: %v", n.Labels)
}

func TestReconcileDeletedRouteReflectorReplaced(t *testing.T) {
	h := newHarness(t, nil, cluster(12))
	h.reconcile()
	require.NoError(t, h.client.Delete(context.Background(), h.node("node-02")))
	h.reconcile()
	rrs := h.rrs()
	require.Len(t, rrs, 3, "after delete: %v", rrs)
	require.Equal(t, "224.0.0.3", rrs["node-05"], "after delete: %v", rrs)
	h.reconcile()
	h.checkClients()
}

// A policy deleted or edited after load read it and before the plan: the plan must not partition
// the nodes without it (it once planned 0 nodes for such a policy and demoted its route reflectors
// while the mesh was off). The reconcile ends at once and runs again.
func TestReconcilePolicyChangedBetweenLoadAndPlan(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(p *v1alpha1.RouteReflectorPolicy)
	}{
		{"deleted", func(p *v1alpha1.RouteReflectorPolicy) { p.DeletionTimestamp = &metav1.Time{Time: t0} }},
		{"edited", func(p *v1alpha1.RouteReflectorPolicy) { p.Generation++ }},
	} {
		for _, health := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/bgpHealth=%t", tc.name, health), func(t *testing.T) {
				h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) { s.BGPHealth.Enabled = &health }, cluster(12))
				h.reconcile()
				before := h.rrs()
				require.Len(t, before, 3)
				steps := h.r.Steps()
				for i, s := range steps {
					if s.Name == "load" {
						steps[i].Run = func(ctx context.Context, st *State) error {
							err := s.Run(ctx, st)
							obj, _, _ := h.polIdx.GetByKey(h.policyNm)
							p := obj.(*v1alpha1.RouteReflectorPolicy).DeepCopy()
							tc.change(p)
							require.NoError(t, h.polIdx.Update(p))
							return err
						}
					}
				}
				h.r.steps = steps
				h.sync()
				h.nodePatches = nil
				res, err := h.r.Reconcile(context.Background(), request(h.policyNm))
				require.NoError(t, err)
				require.Equal(t, before, h.rrs(), "route reflectors changed by a plan of a policy that changed after load")
				require.Empty(t, h.nodePatches)
				require.LessOrEqual(t, res.RequeueAfter, time.Second, "runs again at once")
			})
		}
	}
}

func TestReconcileRepairsDuplicateClusterID(t *testing.T) {
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.Topology = &v1alpha1.Topology{Type: v1alpha1.MultiCluster, ClusterIDs: v1alpha1.PerRouteReflector}
	}, cluster(30))
	h.reconcile()
	before := h.rrs()
	require.Lenf(t, before, 3, "route reflectors %v", before)
	h.events()
	// A manual edit (or a restore from backup) gives node-01 node-00's cluster ID.
	h.update("node-01", func(n *corev1.Node) { n.Annotations[extender.AnnotationClusterID] = before["node-00"] })
	for range 5 {
		h.reconcile()
	}
	after := h.rrs()
	ids := map[string]string{}
	for n, id := range after {
		if other, dup := ids[id]; dup {
			require.Fail(t, fmt.Sprintf("cluster ID %s held by %s and %s after the repair: %v", id, other, n, after))
		}
		ids[id] = n
	}
	require.Len(t, after, 3, "route reflectors %v, were %v: no promotion", after, before)
	require.Equal(t, before["node-00"], after["node-00"], "the higher-ranked holder keeps its ID")
	want := fmt.Sprintf("Normal RouteReflectorClusterIDChanged Cluster ID %s repaired to %s: %s is also held by node-00",
		before["node-00"], after["node-01"], before["node-00"])
	if ev := strings.Join(h.events(), "\n"); !strings.Contains(ev, want) {
		require.Fail(t, fmt.Sprintf("events lack %q:\n%s", want, ev))
	}
	h.checkClients()
}

func TestReconcileInvalidPolicyStatus(t *testing.T) {
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.MinRouteReflectors = ptr(int32(9))
		s.MaxRouteReflectors = ptr(int32(2))
	}, cluster(3))
	h.reconcile()
	pol := &v1alpha1.RouteReflectorPolicy{}
	_ = h.client.Get(context.Background(), client.ObjectKey{Name: "default"}, pol)
	if c := pol.Status.Conditions; len(c) != 2 || c[0].Reason != ReasonInvalidPolicy || !strings.Contains(c[0].Message, "spec.minRouteReflectors") {
		require.Fail(t, fmt.Sprintf("conditions %+v", c))
	}
	require.Empty(t, h.rrs(), "an invalid policy labelled nodes")
}

func TestReconcileHonoursAssumedAdmissions(t *testing.T) {
	// A zone-d node joins through the webhook and is admitted as a client; the cache does not show
	// it yet. The next plan must count it, through the ledger's overlay, as the client it was
	// admitted as, and not promote a node for its new zone.
	nodes := cluster(6)
	h := newHarness(t, nil, nodes[:5]) // node-05 (zone-c) is not in the cache yet
	h.reconcile()
	if fmt.Sprint(h.rrs()) != "map[node-00:224.0.0.1 node-01:224.0.0.2 node-02:224.0.0.3]" {
		require.Fail(t, fmt.Sprintf("%v", h.rrs()))
	}
	m, _ := h.r.Policies.Get("default")
	joiner := node("node-new", "zone-d", 99)
	ni := extender.NewNodeInfo(extender.FromNode(joiner), m.Resolved) // read as the mutating webhook reads it
	ni.Now = h.now
	extender.RunFilters(extender.DefaultFilters(), m.Resolved, ni)
	a, ok := h.r.Ledger.Admit(m, ni, state.Change{Object: state.StripNode(joiner.DeepCopy()), Create: true})
	require.True(t, ok, "no admission recorded")
	require.Equal(t, extender.AdmitClient, a.Role, "admission %+v", a)
	// The full plan sees the admitted node (not in the cache) through the ledger.
	h.sync()
	all, _ := h.r.Ledger.Overlay(h.r.Nodes.List())
	require.True(t, slices.ContainsFunc(all, func(n *extender.Node) bool { return n.Name == "node-new" }), "the overlay lacks the admitted node")
	h.reconcile()
	res := h.r.last["default"]
	i := slices.IndexFunc(res.Clients, func(c extender.Client) bool { return c.Node == "node-new" })
	require.Falsef(t, i < 0, "the plan does not count the admitted node: %+v", res.Summary)
	if got := res.Clients[i].RouteReflectors; fmt.Sprint(got) != fmt.Sprint(a.RouteReflectors) {
		require.Fail(t, fmt.Sprintf("the plan moved the admitted client from %v to %v", a.RouteReflectors, got))
	}
	if res.Summary.RouteReflectors != 3 || fmt.Sprint(h.rrs()) != "map[node-00:224.0.0.1 node-01:224.0.0.2 node-02:224.0.0.3]" {
		require.Fail(t, fmt.Sprintf("another node was promoted: %v (%d planned)", h.rrs(), res.Summary.RouteReflectors))
	}
}

func TestNodeChanged(t *testing.T) {
	// What the default policy plus a preferred selector on "tier" reads.
	read := func(k string) bool {
		return strings.HasPrefix(k, ownedLabelPrefix) || slices.Contains([]string{"calico-route-reflector", corev1.LabelTopologyZone, "tier"}, k)
	}
	a := node("n", "z", 0)
	a.Labels["unrelated"] = "1"
	for _, tc := range []struct {
		name   string
		change func(n *corev1.Node)
		want   bool
	}{
		{"heartbeat", func(n *corev1.Node) { n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(t0) }, false},
		{"unrelated label changed", func(n *corev1.Node) { n.Labels["unrelated"] = "2" }, false},
		{"unrelated label added", func(n *corev1.Node) { n.Labels["other"] = "x" }, false},
		{"unrelated label removed", func(n *corev1.Node) { delete(n.Labels, "unrelated") }, false},
		{"cordon", func(n *corev1.Node) { n.Spec.Unschedulable = true }, true},
		{"zone changed", func(n *corev1.Node) { n.Labels[corev1.LabelTopologyZone] = "y" }, true},
		{"selector key added", func(n *corev1.Node) { n.Labels["tier"] = "edge" }, true},
		{"zone removed", func(n *corev1.Node) { delete(n.Labels, corev1.LabelTopologyZone) }, true},
		{"owned label added", func(n *corev1.Node) { n.Labels[extender.LabelPeeringSet] = "p" }, true},
		{"route reflector label added", func(n *corev1.Node) { n.Labels["calico-route-reflector"] = "" }, true},
		{"owned annotation", func(n *corev1.Node) { n.Annotations = map[string]string{extender.AnnotationDrainingSince: "x"} }, true},
		{"not ready", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := a.DeepCopy()
			b.ResourceVersion = "2"
			tc.change(b)
			if got := NodeChanged(state.StripNode(a.DeepCopy()), state.StripNode(b), read); got != tc.want {
				require.Fail(t, fmt.Sprintf("NodeChanged = %v, want %v", got, tc.want))
			}
		})
	}
}

func TestCoalesce(t *testing.T) {
	for _, tc := range []struct {
		name           string
		coalesce, last time.Duration
		want           time.Duration
	}{
		{"default", 0, 0, DefaultCoalesce},
		{"fast reconciles", 0, 20 * time.Millisecond, DefaultCoalesce},
		{"slow reconciles", 0, 110 * time.Millisecond, 440 * time.Millisecond},
		{"very slow reconciles", 0, 2 * time.Second, maxCoalesce},
		{"set", 50 * time.Millisecond, 5 * time.Millisecond, 50 * time.Millisecond},
		{"set above the bound", 2 * time.Second, 2 * time.Second, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{Coalesce: tc.coalesce}
			r.lastTook.Store(int64(tc.last))
			if got := r.coalesce(); got != tc.want {
				require.Fail(t, fmt.Sprintf("coalesce() = %v, want %v", got, tc.want))
			}
		})
	}
}

func TestLabelRead(t *testing.T) {
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.PreferredNodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "edge"}}
	}, nil)
	h.sync()
	for _, k := range []string{extender.LabelPeeringSet, extender.LabelRouteReflectorID, "calico-route-reflector", corev1.LabelTopologyZone, "tier"} {
		assert.Truef(t, h.r.labelRead(k), "labelRead(%q) = false, want true", k)
	}
	for _, k := range []string{"unrelated", corev1.LabelHostname} {
		assert.Falsef(t, h.r.labelRead(k), "labelRead(%q) = true, want false", k)
	}
}

func ptr[T any](v T) *T { return &v }

// benchSettled measures one reconcile of a settled cluster of n nodes: the cache read, the ledger
// overlay, the full plan, its commit to the ledger, the comparisons (no writes), status, metrics.
// The nodes are settled on their plan directly in the informer store (the fake API server holds
// only the policy and the BGPPeers), so that set-up stays quick at 65,000 nodes.
func benchSettled(b *testing.B, n int) {
	h := settledHarness(b, n)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startCPU()
	for b.Loop() {
		_, err := h.r.Reconcile(context.Background(), request("default"))
		require.NoError(b, err)
	}
	cpu.report(b)
	b.StopTimer()
	if w := h.writes.Load(); w != 0 {
		require.Fail(b, fmt.Sprintf("%d writes on a settled cluster", w))
	}
}

// settledHarness is a harness whose n nodes carry their plan (see benchSettled), reconciled once,
// with its write count at 0.
func settledHarness(b testing.TB, n int) *harness {
	var nodes []*corev1.Node
	for i := range n {
		nodes = append(nodes, node(fmt.Sprintf("node-%05d", i), fmt.Sprintf("zone-%c", 'a'+i%3), i))
	}
	h := newHarness(b, nil, nil)
	h.sync()
	m, _ := h.r.Policies.Get("default")
	in := extender.Input{Policy: m.Resolved, Nodes: extender.FromNodes(nodes), Now: h.now}
	res := extender.Plan(in)
	for i, nd := range nodes {
		for k, v := range res.Nodes[i].Labels {
			nd.Labels[k] = v
		}
		nd.Annotations = res.Nodes[i].Annotations
		require.NoError(b, h.nodeIdx.Add(state.StripNode(nd)))
	}
	for _, p := range res.BGPPeers {
		require.NoError(b, h.client.Create(context.Background(), calico.BGPPeer(calico.CRD, p)))
	}
	_, err := h.r.Reconcile(context.Background(), request("default"))
	require.NoError(b, err)
	h.syncPolicies()
	h.writes.Store(0)
	return h
}

// benchOneEvent measures the reconcile that follows one relevant node event on a settled cluster
// of n nodes: a client cordoned or uncordoned (the plan keeps every role, so nothing is written),
// as the informer delivers it (the store updated, then the update handler's NodeUpdated), then the
// reconcile it queues. Issue 27 asks for this to cost well under a full reconcile (benchSettled):
// the absorb step checks the changed node against the quiet plan and plans nothing.
func benchOneEvent(b *testing.B, n int) {
	h := settledHarness(b, n)
	client := ""
	for _, nd := range h.r.Nodes.List() {
		if _, rr := nd.Labels["calico-route-reflector"]; !rr {
			client = nd.Name
			break
		}
	}
	require.NotEmpty(b, client)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startCPU()
	for b.Loop() {
		h.informerUpdate(b, client, func(nd *corev1.Node) { nd.Spec.Unschedulable = !nd.Spec.Unschedulable })
		_, err := h.r.Reconcile(context.Background(), request("default"))
		require.NoError(b, err)
	}
	cpu.report(b)
	b.StopTimer()
	if w := h.writes.Load(); w != 0 {
		require.Fail(b, fmt.Sprintf("%d writes after cordoning a client", w))
	}
	if a := testutil.ToFloat64(absorbedEvents.WithLabelValues("default")); a < float64(b.N) {
		require.Fail(b, fmt.Sprintf("%v of %d events absorbed", a, b.N))
	}
}

// informerUpdate changes node name as the informer delivers a change: the store updated, then
// NodeUpdated with the old object.
func (h *harness) informerUpdate(b *testing.B, name string, change func(*corev1.Node)) {
	obj, _, _ := h.nodeIdx.GetByKey(name)
	old := obj.(*corev1.Node)
	nd := old.DeepCopy()
	change(nd)
	require.NoError(b, h.nodeIdx.Update(nd))
	h.r.NodeUpdated(extender.FromNode(old))
}

func BenchmarkReconcileOneEvent5000(b *testing.B)  { benchOneEvent(b, 5000) }
func BenchmarkReconcileOneEvent65000(b *testing.B) { benchOneEvent(b, 65000) }

// benchTenChanges measures the reconcile that follows ten node changes on a settled cluster of n
// nodes (issue 38: under 20 ms at 65,000): ten clients go NotReady, then, at the next op, Ready
// again, as the informer delivers them (the store updated, then NodeUpdated). The clock moves one
// second per op. Their readiness leaves the desired counts as they are, so the reconcile absorbs
// them; the full plan that absorbWindow asks for comes every tenth op or so (full-plans/op).
// The plan keeps every role; that full plan writes the policy's status (its healthy count).
func benchTenChanges(b *testing.B, n int) {
	h := settledHarness(b, n)
	var clients []string
	for _, nd := range h.r.Nodes.List() {
		if _, rr := nd.Labels["calico-route-reflector"]; !rr && len(clients) < 10 {
			clients = append(clients, nd.Name)
		}
	}
	slices.Sort(clients)
	require.Len(b, clients, 10)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startCPU()
	plans := testutil.ToFloat64(plansTotal.WithLabelValues("default", "committed"))
	ready := true
	for b.Loop() {
		ready = !ready
		h.now = h.now.Add(time.Second)
		for _, name := range clients {
			h.informerUpdate(b, name, func(nd *corev1.Node) {
				for i := range nd.Status.Conditions {
					if c := &nd.Status.Conditions[i]; c.Type == corev1.NodeReady {
						c.Status = corev1.ConditionFalse
						if ready {
							c.Status = corev1.ConditionTrue
						}
						c.LastTransitionTime = metav1.NewTime(h.now)
					}
				}
			})
		}
		_, err := h.r.Reconcile(context.Background(), request("default"))
		require.NoError(b, err)
	}
	cpu.report(b)
	b.StopTimer()
	b.ReportMetric(float64(h.writes.Load())/float64(b.N), "writes/op")
	b.ReportMetric((testutil.ToFloat64(plansTotal.WithLabelValues("default", "committed"))-plans)/float64(b.N), "full-plans/op")
}

// cpuClock reads the process's CPU time (user and system, every thread), so that a benchmark
// also reports what an op costs in CPU, which the other processes of a loaded machine change far
// less than its wall time.
type cpuClock struct{ start time.Duration }

func startCPU() cpuClock { return cpuClock{processCPU()} }

// report adds the CPU time per op since start as the cpu-ns/op metric.
func (c cpuClock) report(b *testing.B) {
	if b.N > 0 {
		b.ReportMetric(float64(processCPU()-c.start)/float64(b.N), "cpu-ns/op")
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkReconcileTenChanges5000(b *testing.B)  { benchTenChanges(b, 5000) }
func BenchmarkReconcileTenChanges65000(b *testing.B) { benchTenChanges(b, 65000) }

func BenchmarkReconcileSettled5000(b *testing.B)  { benchSettled(b, 5000) }
func BenchmarkReconcileSettled65000(b *testing.B) { benchSettled(b, 65000) }

// records is a view of corev1 test nodes as the reconciler reads them (extender.FromNode).
func records(view map[string]*corev1.Node) map[string]*extender.Node {
	out := make(map[string]*extender.Node, len(view))
	for k, n := range view {
		out[k] = extender.FromNode(n)
	}
	return out
}
