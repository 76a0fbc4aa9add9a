package reconciler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoetcd"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// fakeEtcd stands for Calico's etcd datastore (calicoetcd.Store) in unit tests: the roles of the
// Calico Nodes it has, the BGPPeers, and the order of the role writes.
type fakeEtcd struct {
	mu     sync.Mutex
	roles  map[string]calicoetcd.Role
	peers  map[string]*apiv3.BGPPeer
	writes []string // "name clusterID" in write order
	rv     int
	fail   int // the next fail role writes fail
	addrs  map[string][]string
}

func newFakeEtcd(nodes ...string) *fakeEtcd {
	f := &fakeEtcd{roles: map[string]calicoetcd.Role{}, peers: map[string]*apiv3.BGPPeer{}}
	for _, n := range nodes {
		f.roles[n] = calicoetcd.Role{Labels: map[string]string{}}
	}
	return f
}

func (f *fakeEtcd) Roles(_ context.Context, _ []string) (map[string]calicoetcd.Role, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.roles), nil
}

func (f *fakeEtcd) SetRole(_ context.Context, name string, _ []string, want calicoetcd.Role) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.roles[name]; !ok {
		return fmt.Errorf("calico node %s: %w", name, calicoetcd.ErrNoCalicoNode)
	}
	if f.fail > 0 {
		f.fail--
		return fmt.Errorf("calico node %s: etcd unavailable", name)
	}
	f.roles[name] = want
	f.writes = append(f.writes, name+" "+want.ClusterID)
	return nil
}

func (f *fakeEtcd) BGPAddresses(_ context.Context) (map[string][]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.addrs), nil
}

var gr = schema.GroupResource{Group: "projectcalico.org", Resource: "bgppeers"}

func (f *fakeEtcd) List(_ context.Context, match map[string]string) ([]*apiv3.BGPPeer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*apiv3.BGPPeer
	for _, name := range slices.Sorted(maps.Keys(f.peers)) {
		p := f.peers[name]
		ok := true
		for k, v := range match {
			ok = ok && p.Labels[k] == v
		}
		if ok {
			out = append(out, p.DeepCopy())
		}
	}
	return out, nil
}

func (f *fakeEtcd) Create(_ context.Context, p *apiv3.BGPPeer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.peers[p.Name] != nil {
		return apierrors.NewAlreadyExists(gr, p.Name)
	}
	f.rv++
	c := p.DeepCopy()
	c.ResourceVersion = fmt.Sprint(f.rv)
	f.peers[p.Name] = c
	return nil
}

func (f *fakeEtcd) Update(_ context.Context, p *apiv3.BGPPeer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.peers[p.Name]
	if cur == nil {
		return apierrors.NewNotFound(gr, p.Name)
	}
	if cur.ResourceVersion != p.ResourceVersion {
		return apierrors.NewConflict(gr, p.Name, fmt.Errorf("stale"))
	}
	f.rv++
	c := p.DeepCopy()
	c.ResourceVersion = fmt.Sprint(f.rv)
	f.peers[p.Name] = c
	return nil
}

func (f *fakeEtcd) Delete(_ context.Context, p *apiv3.BGPPeer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.peers[p.Name] == nil {
		return apierrors.NewNotFound(gr, p.Name)
	}
	delete(f.peers, p.Name)
	return nil
}

func (f *fakeEtcd) edit(name string, fn func(*calicoetcd.Role)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.roles[name]
	r.Labels = maps.Clone(r.Labels)
	fn(&r)
	f.roles[name] = r
}

// etcdHarness is a harness whose reconciler writes the role and the BGPPeers to a fakeEtcd.
func etcdHarness(t *testing.T, n int, calicoNodes ...string) (*harness, *fakeEtcd) {
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.RemovalDelay = &metav1.Duration{Duration: 2 * time.Second}
	}, cluster(n))
	f := newFakeEtcd(calicoNodes...)
	h.r.Peers, h.r.CalicoNodes, h.r.Resync = f, f, 3*time.Second
	return h, f
}

func names(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("node-%02d", i))
	}
	return out
}

// inSync: every node with a Calico Node carries there the role of its Kubernetes Node.
func (h *harness) inSync(f *fakeEtcd) error {
	owned := extender.OwnedLabelKeys("calico-route-reflector")
	nodes := &corev1.NodeList{}
	if err := h.client.List(context.Background(), nodes); err != nil {
		return err
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		have, ok := f.roles[n.Name]
		if !ok {
			continue
		}
		if want := calicoetcd.RoleOfNode(owned, extender.FromNode(n)); !have.Equal(want) {
			return fmt.Errorf("%s: %v", n.Name, calicoetcd.Diff(have, want))
		}
	}
	return nil
}

func driftEvents(ev []string) []string {
	var out []string
	for _, e := range ev {
		if strings.Contains(e, EventDriftReverted) {
			out = append(out, e)
		}
	}
	return out
}

func TestEtcdRolesMirroredRouteReflectorsFirst(t *testing.T) {
	all := names(12)
	h, f := etcdHarness(t, 12, all[:11]...) // node-11 has no Calico Node yet
	requeue := h.reconcile()
	require.NoError(t, h.inSync(f))
	require.Falsef(t, requeue > 3*time.Second, "requeue after %v: a missing Calico Node is retried at the resync", requeue)
	if _, ok := f.roles["node-11"]; ok {
		require.Fail(t, "a Calico Node was created")
	}
	// Route reflectors (with a cluster ID) are written before any client.
	seenClient := false
	for _, w := range f.writes {
		isRR := !strings.HasSuffix(w, " ")
		require.Falsef(t, isRR && seenClient, "route reflector written after a client: %v", f.writes)
		seenClient = seenClient || !isRR
	}
	if len(h.rrs()) != 3 || len(f.writes) != 11 {
		require.Fail(t, fmt.Sprintf("route reflectors %v, writes %v", h.rrs(), f.writes))
	}
	// The BGPPeers went to etcd, none to the Kubernetes API.
	if len(f.peers) == 0 || len(h.peers()) != 0 {
		require.Fail(t, fmt.Sprintf("BGPPeers in etcd %d, in the Kubernetes API %v", len(f.peers), h.peers()))
	}
	// node-11's Calico Node appears: it gets its role at the next reconcile.
	f.mu.Lock()
	f.roles["node-11"] = calicoetcd.Role{Labels: map[string]string{}}
	f.mu.Unlock()
	h.reconcile()
	if err := h.inSync(f); err != nil || f.roles["node-11"].Labels[extender.LabelPeeringSet] == "" {
		require.Fail(t, fmt.Sprintf("late Calico Node: %v %+v", err, f.roles["node-11"]))
	}
	if ev := driftEvents(h.events()); len(ev) != 0 {
		require.Fail(t, fmt.Sprintf("drift reported for planned writes: %v", ev))
	}
}

func TestEtcdDriftRevertedWithEvents(t *testing.T) {
	h, f := etcdHarness(t, 12, names(12)...)
	h.reconcile()
	h.events()
	rr := slices.Sorted(maps.Keys(h.rrs()))[0]
	id := h.rrs()[rr]
	for _, tc := range []struct {
		name  string
		edit  func()
		event string
	}{
		{"RR label removed, cluster ID changed", func() {
			f.edit(rr, func(r *calicoetcd.Role) { delete(r.Labels, "calico-route-reflector"); r.ClusterID = "10.9.9.9" })
		}, fmt.Sprintf("Warning CalicoDriftReverted Calico Node in etcd changed by hand, reverted: label calico-route-reflector removed; spec.bgp.routeReflectorClusterID 10.9.9.9 (want %s)", id)},
		{"a client given a cluster ID", func() {
			f.edit("node-11", func(r *calicoetcd.Role) { r.ClusterID = "224.0.0.9" })
		}, "Warning CalicoDriftReverted Calico Node in etcd changed by hand, reverted: spec.bgp.routeReflectorClusterID 224.0.0.9 added"},
		{"a BGPPeer's selector edited", func() {
			f.mu.Lock()
			p := f.peers["rr-autoscaler-mesh-default"]
			p.Spec.PeerSelector = "all()"
			f.mu.Unlock()
		}, `Warning CalicoDriftReverted BGPPeer rr-autoscaler-mesh-default in etcd changed by hand, reverted: spec.peerSelector "all()" (want "has(calico-route-reflector)")`},
		{"a BGPPeer deleted", func() {
			f.mu.Lock()
			delete(f.peers, "rr-autoscaler-mesh-default")
			f.mu.Unlock()
		}, "Warning CalicoDriftReverted BGPPeer rr-autoscaler-mesh-default deleted from etcd by hand, recreated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.edit()
			h.reconcile()
			require.NoError(t, h.inSync(f))
			if p := f.peers["rr-autoscaler-mesh-default"]; p == nil || p.Spec.PeerSelector != "has(calico-route-reflector)" {
				require.Fail(t, fmt.Sprintf("mesh BGPPeer %+v", p))
			}
			if ev := driftEvents(h.events()); len(ev) != 1 || ev[0] != tc.event {
				require.Fail(t, fmt.Sprintf("events %q, want %q", ev, tc.event))
			}
		})
	}
}

func TestEtcdCordonHandsOverWithoutDrift(t *testing.T) {
	h, f := etcdHarness(t, 12, names(12)...)
	h.reconcile()
	h.events()
	h.now = h.now.Add(transitions.DefaultMax) // the route reflectors' sessions have settled (moves.go)
	h.update("node-01", func(n *corev1.Node) { n.Spec.Unschedulable = true })
	h.reconcile()
	h.now = h.now.Add(3 * time.Second)
	h.reconcile()
	require.NoError(t, h.inSync(f))
	if r := f.roles["node-01"]; r.ClusterID != "" || r.Labels["calico-route-reflector"] != "" || len(h.rrs()) != 3 {
		require.Fail(t, fmt.Sprintf("node-01 in etcd %+v, route reflectors %v", r, h.rrs()))
	}
	if _, ok := f.roles["node-01"].Labels["calico-route-reflector"]; ok {
		require.Fail(t, "node-01 keeps the route reflector label in etcd")
	}
	if ev := driftEvents(h.events()); len(ev) != 0 {
		require.Fail(t, fmt.Sprintf("a handover reported as drift: %v", ev))
	}
}

// fakeConfigs stands for the BGPConfigurations in etcd.
type fakeConfigs struct {
	mu  sync.Mutex
	cfg map[string]*apiv3.BGPConfiguration
}

var cgr = schema.GroupResource{Group: "projectcalico.org", Resource: "bgpconfigurations"}

func (f *fakeConfigs) Get(_ context.Context, name string) (*apiv3.BGPConfiguration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.cfg[name]; c != nil {
		return c.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(cgr, name)
}

func (f *fakeConfigs) Create(_ context.Context, c *apiv3.BGPConfiguration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cfg[c.Name] != nil {
		return apierrors.NewAlreadyExists(cgr, c.Name)
	}
	f.cfg[c.Name] = c.DeepCopy()
	return nil
}

func (f *fakeConfigs) Patch(_ context.Context, _, c *apiv3.BGPConfiguration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cfg[c.Name] = c.DeepCopy()
	return nil
}

func (f *fakeConfigs) meshOff() bool {
	c, err := f.Get(context.Background(), "default")
	return err == nil && c.Spec.NodeToNodeMeshEnabled != nil && !*c.Spec.NodeToNodeMeshEnabled
}

// TestEtcdMigrateMeshAndDeletePolicy: with the etcd datastore the node-to-node mesh is the
// BGPConfiguration in etcd: migrateFromNodeMesh turns it off there (not in the Kubernetes API);
// deleting the policy turns it back on, then releases every role from the Calico Nodes and
// deletes the BGPPeers from etcd.
func TestEtcdMigrateMeshAndDeletePolicy(t *testing.T) {
	h := newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
		s.RemovalDelay = &metav1.Duration{Duration: time.Minute}
		s.MigrateFromNodeMesh = true
	}, ipCluster(12))
	f := newFakeEtcd(names(12)...)
	cfgs := &fakeConfigs{cfg: map[string]*apiv3.BGPConfiguration{}}
	h.r.Peers, h.r.CalicoNodes, h.r.Configs = f, f, cfgs
	h.reconcile()
	h.now = h.now.Add(time.Minute + time.Second)
	h.reconcile()
	if !cfgs.meshOff() || meshOff(h) {
		require.Fail(t, fmt.Sprintf("mesh off in etcd %v, in the Kubernetes API %v", cfgs.meshOff(), meshOff(h)))
	}
	pol := &v1alpha1.RouteReflectorPolicy{}
	require.NoError(t, h.client.Get(context.Background(), client.ObjectKey{Name: h.policyNm}, pol))
	require.NoError(t, h.client.Delete(context.Background(), pol))
	rrs := h.rrs()
	h.reconcile() // the release BGPPeer to the keeper
	h.now = h.now.Add(time.Minute + time.Second)
	for range len(rrs) - 1 { // the other route reflectors, one at a time, in etcd too
		h.now = h.now.Add(transitions.DefaultMin) // each once the keeper's sessions are reported up
		h.calicoNodeAllUp()
		h.reconcile()
	}
	released := 0
	for name := range rrs {
		if r := f.roles[name]; r.ClusterID == "" {
			released++
		}
	}
	require.Equal(t, len(rrs)-1, released, "route reflectors released in etcd before the mesh comes back")
	h.reconcile()
	require.False(t, cfgs.meshOff(), "the mesh is not back on in etcd")
	h.now = h.now.Add(time.Minute + time.Second)
	// The first release attempt fails in etcd after the Kubernetes Nodes were released: the
	// retry still releases the Calico Nodes.
	f.mu.Lock()
	f.fail = 1
	f.mu.Unlock()
	h.sync()
	if _, err := h.r.Reconcile(context.Background(), request(h.policyNm)); err == nil {
		require.Fail(t, "no error from a failed etcd write")
	}
	if len(h.rrs()) != 0 {
		require.Fail(t, fmt.Sprintf("the Kubernetes Nodes keep route reflectors %v", h.rrs()))
	}
	h.reconcile()
	for name, r := range f.roles {
		require.Emptyf(t, r.Labels, "%s keeps %+v in etcd", name, r)
		require.Emptyf(t, r.ClusterID, "%s keeps %+v in etcd", name, r)
	}
	require.Emptyf(t, f.peers, "BGPPeers left in etcd: %d", len(f.peers))
	if err := h.client.Get(context.Background(), client.ObjectKey{Name: h.policyNm}, pol); !apierrors.IsNotFound(err) {
		require.Fail(t, fmt.Sprintf("the policy is not gone: %v", err))
	}
}
