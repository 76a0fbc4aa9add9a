package serve_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
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

	libapiv3 "github.com/projectcalico/calico/libcalico-go/lib/apis/v3"
	"github.com/projectcalico/calico/libcalico-go/lib/options"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoetcd"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/reconciler"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/serve"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/tools/bgpverify"
)

const rrLabel = "calico-route-reflector"

// etcdOptions point a replica at Calico's etcd datastore: the test environment's etcd, where
// Calico keeps its keys under /calico beside the API server's /registry. The resync is long, so
// that the tests see changes in etcd arrive by the watch.
func etcdOptions(endpoints string) func(*serve.Options) {
	return func(o *serve.Options) {
		o.Datastore = calicoetcd.EtcdV3
		o.Etcd = calicoetcd.Config{Endpoints: endpoints}
		o.EtcdResync = time.Minute // changes in etcd must arrive by the watch
	}
}

// newEtcdWorld starts the product from the chart with Calico's etcd datastore (the test
// environment's etcd) and returns a client of that etcd, as calicoctl would use.
func newEtcdWorld(t *testing.T) (*world, *calicoetcd.Store) {
	w := newEnv(t)
	w.port = testenv.FreePort(t)
	w.install(w.port)
	w.rep = w.start(w.port, true, etcdOptions(w.env.EtcdURL))
	w.awaitWebhooks()
	calicoctl, err := calicoetcd.New(calicoetcd.Config{Endpoints: w.env.EtcdURL})
	require.NoError(t, err)
	return w, calicoctl
}

// calicoNode registers a node in etcd as calico-node does when it starts (the labels
// kube-controllers copies from the Kubernetes Node, its BGP address).
func registerCalicoNode(t *testing.T, c *calicoetcd.Store, name, zone, ip string) {
	t.Helper()
	n := libapiv3.NewNode()
	n.Name = name
	n.Labels = map[string]string{corev1.LabelTopologyZone: zone, corev1.LabelHostname: name}
	n.Spec.BGP = &libapiv3.NodeBGPSpec{IPv4Address: ip + "/24"}
	_, err := c.Client().Nodes().Create(t.Context(), n, options.SetOptions{})
	require.NoError(t, err, "creating Calico Node %s", name)
}

// etcdState is the cluster as Calico's confd on etcd sees it, beside the Kubernetes Nodes.
type etcdState struct {
	k8s     *snapshot
	calico  map[string]*libapiv3.Node
	rrs     map[string]string // Calico Nodes with the RR label and a cluster ID
	peers   map[string]*apiv3.BGPPeer
	missing int64 // the graph model's missing node pairs on the etcd state
}

// awaitHandedOverInEtcd waits until victim is no route reflector in etcd (no role label, no cluster
// ID on its Calico Node) and the cluster has settled on 3 route reflectors.
func (w *world) awaitHandedOverInEtcd(calicoctl *calicoetcd.Store, victim string, timeout time.Duration) {
	w.t.Helper()
	w.eventually("handed over in etcd", timeout, func() error {
		s, err := w.etcdState(calicoctl)
		if err != nil {
			return err
		}
		if _, ok := s.rrs[victim]; ok {
			return fmt.Errorf("%s still a route reflector in etcd", victim)
		}
		if c := s.calico[victim]; c.Spec.BGP.RouteReflectorClusterID != "" {
			return fmt.Errorf("%s keeps cluster ID %s in etcd", victim, c.Spec.BGP.RouteReflectorClusterID)
		}
		return s.settled(3)
	})
}

func (w *world) etcdState(c *calicoetcd.Store) (*etcdState, error) {
	ctx := w.t.Context()
	s := &etcdState{k8s: w.snapshot(), rrs: map[string]string{}, peers: map[string]*apiv3.BGPPeer{}}
	var err error
	if s.calico, err = c.ListNodes(ctx); err != nil {
		return nil, err
	}
	for name, n := range s.calico {
		if _, ok := n.Labels[rrLabel]; ok && n.Spec.BGP != nil && n.Spec.BGP.RouteReflectorClusterID != "" {
			s.rrs[name] = n.Spec.BGP.RouteReflectorClusterID
		}
	}
	peers, err := c.Peers().List(ctx, nil)
	if err != nil {
		return nil, err
	}
	for _, p := range peers {
		s.peers[p.Name] = p
	}
	st, err := c.ReadState(ctx)
	if err != nil {
		return nil, err
	}
	topo, err := bgpmodel.FromCluster(extender.FromNodes(st.Nodes), st.Peers, corev1.LabelTopologyZone, bgpmodel.Options{})
	if err != nil {
		return nil, err
	}
	m, err := topo.Propagate(nil)
	if err != nil {
		return nil, err
	}
	s.missing = m.Summary.MissingPairs
	return s, nil
}

// settled: every Kubernetes Node that has a Calico Node carries the same role there, want route
// reflectors in etcd, every client's peering set has its BGPPeer in etcd, nothing draining, and
// the graph model on the etcd state misses no pair.
func (s *etcdState) settled(want int) error {
	owned := extender.OwnedLabelKeys(rrLabel)
	for name, n := range s.k8s.nodes {
		c := s.calico[name]
		if c == nil {
			continue
		}
		if k, e := calicoetcd.RoleOfNode(owned, extender.FromNode(n)), calicoetcd.RoleOfCalicoNode(owned, c); !k.Equal(e) {
			return fmt.Errorf("%s: etcd differs from the Kubernetes Node: %v", name, calicoetcd.Diff(e, k))
		}
		if n.Annotations[extender.AnnotationDrainingSince] != "" {
			return fmt.Errorf("%s still draining", name)
		}
		if _, rr := s.rrs[name]; rr {
			continue
		}
		set := c.Labels[extender.LabelPeeringSet]
		if set == "" || s.peers[extender.BGPPeerPrefix+set] == nil {
			return fmt.Errorf("client %s: peering set %q in etcd, BGPPeer in etcd %v", name, set, s.peers[extender.BGPPeerPrefix+set] != nil)
		}
	}
	if len(s.rrs) != want {
		return fmt.Errorf("%d route reflectors in etcd %v, want %d", len(s.rrs), s.rrs, want)
	}
	if s.missing != 0 {
		return fmt.Errorf("the graph model on etcd's state misses %d node pairs", s.missing)
	}
	return nil
}

// TestEtcdDatastoreOnRealAPIServer: serve --datastore etcdv3 on a real kube-apiserver and a real
// etcd. Health, cordon and zones come from the Kubernetes Nodes; the route reflector role and the
// BGPPeers go to etcd through Calico's client (read back with another one, as calicoctl would):
// 30 nodes in 3 zones, a cordon handing over, hand edits of a Calico Node and of a BGPPeer in etcd
// reverted with Events, the graph model on etcd's state missing no pair, and nothing of Calico
// written to the Kubernetes API.
func TestEtcdDatastoreOnRealAPIServer(t *testing.T) {
	t.Parallel() // its own API server and product: beside the other live tests, mostly waiting
	w, calicoctl := newEtcdWorld(t)
	ctx := t.Context()
	var err error
	w.applyPolicy(policyYAML)
	name := func(i int) string { return fmt.Sprintf("node-%02d", i) }
	zone := func(i int) string { return fmt.Sprintf("zone-%c", 'a'+i%3) }

	t.Run("30 nodes across 3 zones get their roles in etcd", func(t *testing.T) {
		// calico-node has started on 27 of them; the first 3 (the oldest, one per zone: the
		// planner's first choice) register later.
		for i := 3; i < 30; i++ {
			registerCalicoNode(t, calicoctl, name(i), zone(i), fmt.Sprintf("10.0.0.%d", i+1))
		}
		// The unregistered 3 join first (without the filter, admission would make each its zone's
		// route reflector), then the others at once.
		for i := range 3 {
			w.joinIP(name(i), zone(i), fmt.Sprintf("10.0.0.%d", i+1))
		}
		var wg sync.WaitGroup
		for i := 3; i < 30; i++ {
			wg.Go(func() { w.joinIP(name(i), zone(i), fmt.Sprintf("10.0.0.%d", i+1)) })
		}
		wg.Wait()
		// A route reflector is never one of the first 3 while
		// registered eligible nodes exist (the CalicoNodeRegistered filter, fed by the watch of
		// Calico Nodes): at admission and in every plan.
		w.eventually("27 Calico Nodes in etcd settled", 60*time.Second, func() error {
			s, err := w.etcdState(calicoctl)
			if err != nil {
				return err
			}
			if len(s.k8s.rrs) != 3 {
				return fmt.Errorf("%d route reflectors on the Kubernetes Nodes %v, want 3", len(s.k8s.rrs), s.k8s.rrs)
			}
			for rr := range s.k8s.rrs {
				if s.calico[rr] == nil {
					require.Fail(t, fmt.Sprintf("%s is a route reflector but calico-node has not registered it", rr))
				}
			}
			return s.settled(3)
		})
		for i := range 3 {
			registerCalicoNode(t, calicoctl, name(i), zone(i), fmt.Sprintf("10.0.0.%d", i+1))
		}
		var s *etcdState
		w.eventually("30 Calico Nodes in etcd settled", 30*time.Second, func() error {
			if s, err = w.etcdState(calicoctl); err != nil {
				return err
			}
			if len(s.calico) != 30 {
				return fmt.Errorf("%d Calico Nodes", len(s.calico))
			}
			for i := range 3 {
				if c := s.calico[name(i)]; c.Labels[extender.LabelPeeringSet] == "" && s.rrs[name(i)] == "" {
					return fmt.Errorf("late node %s has no role in etcd", name(i))
				}
			}
			return s.settled(3)
		})
		zones := map[string]bool{}
		for rr, id := range s.rrs {
			zones[s.calico[rr].Labels[corev1.LabelTopologyZone]] = true
			if _, ok := s.k8s.rrs[rr]; !ok {
				require.Fail(t, fmt.Sprintf("%s is a route reflector in etcd (%s) but not on its Kubernetes Node", rr, id))
			}
		}
		require.Lenf(t, zones, 3, "route reflectors %v in zones %v, want one per zone", s.rrs, zones)
		require.NotEmpty(t, s.peers, "no BGPPeer in etcd")
		kube, err := w.dyn.Resource(bgpPeersGVR).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		require.Empty(t, kube.Items, "BGPPeers in the Kubernetes API")
	})

	t.Run("a cordon hands over in etcd", func(t *testing.T) {
		s, err := w.etcdState(calicoctl)
		require.NoError(t, err)
		rrs := slices.Sorted(func(yield func(string) bool) {
			for n := range s.rrs {
				if !yield(n) {
					return
				}
			}
		})
		victim := rrs[0]
		w.cordon(victim)
		w.awaitHandedOverInEtcd(calicoctl, victim, 60*time.Second)

	})

	t.Run("a hand edit of a Calico Node is reverted with an Event", func(t *testing.T) {
		s, err := w.etcdState(calicoctl)
		require.NoError(t, err)
		var rr string
		for n := range s.rrs {
			if rr == "" || n < rr {
				rr = n
			}
		}
		wantID := s.rrs[rr]
		n, err := calicoctl.Client().Nodes().Get(ctx, rr, options.GetOptions{})
		require.NoError(t, err)
		delete(n.Labels, rrLabel)
		n.Spec.BGP.RouteReflectorClusterID = "10.9.9.9"
		_, err = calicoctl.Client().Nodes().Update(ctx, n, options.SetOptions{})
		require.NoError(t, err)
		edited := time.Now()
		w.eventually("Calico Node reverted", 15*time.Second, func() error {
			n, err := calicoctl.Client().Nodes().Get(ctx, rr, options.GetOptions{})
			if err != nil {
				return err
			}
			if _, ok := n.Labels[rrLabel]; !ok || n.Spec.BGP.RouteReflectorClusterID != wantID {
				return fmt.Errorf("labels %v, cluster ID %s", n.Labels, n.Spec.BGP.RouteReflectorClusterID)
			}
			return nil
		})
		t.Logf("reverted in %v", time.Since(edited).Round(time.Millisecond))
		want := fmt.Sprintf("Calico Node in etcd changed by hand, reverted: label %s removed; spec.bgp.routeReflectorClusterID 10.9.9.9 (want %s)", rrLabel, wantID)
		w.eventually("drift Event on the Kubernetes Node", 10*time.Second, func() error {
			if ev := w.events("Node", rr, reconciler.EventDriftReverted); !slices.Contains(ev, want) {
				return fmt.Errorf("events %q, want %q", ev, want)
			}
			return nil
		})
	})

	t.Run("a hand edit and a deletion of a BGPPeer in etcd are reverted with Events", func(t *testing.T) {
		managed, err := calicoctl.Peers().List(ctx, map[string]string{extender.LabelManagedBy: extender.ManagedByValue})
		require.NoError(t, err)
		require.NotEmpty(t, managed, "no managed BGPPeer")
		edit, gone := managed[0].DeepCopy(), managed[len(managed)-1].DeepCopy()
		wantSel := edit.Spec.PeerSelector
		edit.Spec.PeerSelector = "has(nothing)"
		require.NoError(t, calicoctl.Peers().Update(ctx, edit))
		if gone.Name != edit.Name {
			require.NoError(t, calicoctl.Peers().Delete(ctx, gone))
		}
		w.eventually("BGPPeers reverted", 15*time.Second, func() error {
			cur, err := calicoctl.Peers().List(ctx, map[string]string{extender.LabelManagedBy: extender.ManagedByValue})
			if err != nil {
				return err
			}
			byName := map[string]*apiv3.BGPPeer{}
			for _, p := range cur {
				byName[p.Name] = p
			}
			if p := byName[edit.Name]; p == nil || p.Spec.PeerSelector != wantSel {
				return fmt.Errorf("%s: %+v", edit.Name, p)
			}
			if byName[gone.Name] == nil {
				return fmt.Errorf("%s not recreated", gone.Name)
			}
			return nil
		})
		wantEdit := fmt.Sprintf("BGPPeer %s in etcd changed by hand, reverted: spec.peerSelector %q (want %q)", edit.Name, "has(nothing)", wantSel)
		wantGone := fmt.Sprintf("BGPPeer %s deleted from etcd by hand, recreated", gone.Name)
		w.eventually("drift Events on the policy", 10*time.Second, func() error {
			ev := w.events("RouteReflectorPolicy", "default", reconciler.EventDriftReverted)
			if !slices.Contains(ev, wantEdit) || gone.Name != edit.Name && !slices.Contains(ev, wantGone) {
				return fmt.Errorf("events %q, want %q and %q", ev, wantEdit, wantGone)
			}
			return nil
		})
	})

	t.Run("confd in etcdv3 mode renders what the graph model says", func(t *testing.T) {
		confd, err := bgpverify.FindConfd("")
		if err != nil {
			require.Fail(t, fmt.Sprint(err)) // make tools
		}
		off := false
		if _, err := calicoctl.Client().BGPConfigurations().Create(ctx, &apiv3.BGPConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "default"},
			Spec: apiv3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off}}, options.SetOptions{}); err != nil {
			require.Fail(t, fmt.Sprint(err))
		}
		st, err := calicoctl.ReadState(ctx)
		require.NoError(t, err)
		start := time.Now()
		diffs, err := bgpverify.RenderEtcd(ctx, confd, []string{"ETCD_ENDPOINTS=" + w.env.EtcdURL}, st.Nodes, st.Peers, st.Configs, t.TempDir())
		require.NoError(t, err)
		if len(diffs) > 0 {
			require.Fail(t, fmt.Sprintf("confd's sessions differ from the graph model's:\n%s", strings.Join(diffs, "\n")))
		}
		t.Logf("confd (DATASTORE_TYPE=etcdv3) rendered %d nodes' BIRD configurations in %v, every session the graph model's", len(st.Nodes), time.Since(start).Round(time.Millisecond))
	})

	t.Run("the mesh is read from etcd: deleting the policy with the mesh off there keeps the roles", func(t *testing.T) {
		// The confd check left the default BGPConfiguration in etcd with the mesh off, by hand;
		// the Kubernetes API has none (it would read as the mesh on, and the roles would go).
		_, stderr, err := w.kubectl(testenv.UserAdmin, "delete", "routereflectorpolicy", "default", "--wait=false")
		require.NoError(t, err, "delete policy %s", stderr)
		w.eventually("policy gone", 30*time.Second, func() error {
			if _, err := w.policyPath("default", "{.metadata.name}"); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there (%v)", err)
			}
			return nil
		})
		if ev := w.events("RouteReflectorPolicy", "default", reconciler.EventRouteReflectorsKept); len(ev) == 0 {
			require.Fail(t, "no RouteReflectorsKept Event")
		}
		s, err := w.etcdState(calicoctl)
		require.NoError(t, err)
		require.Len(t, s.rrs, 3, "after the policy's deletion: route reflectors in etcd")
		require.NotEmpty(t, s.peers, "after the policy's deletion: BGPPeers in etcd")
		require.Zero(t, s.missing, "after the policy's deletion: missing pairs")
	})
}

// events returns the messages of the Events with reason on the object kind/name.
func (w *world) events(kind, name, reason string) []string {
	list, err := w.admin.CoreV1().Events("").List(w.t.Context(), metav1.ListOptions{})
	require.NoError(w.t, err)
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name && e.Reason == reason {
			out = append(out, e.Message)
		}
	}
	return out
}

// TestEtcdUnreachableNotReady: with etcd endpoints where nothing answers, serve starts, stays up
// and reports not ready through /readyz, naming etcd; bad TLS files are one line at start.
func TestEtcdUnreachableNotReady(t *testing.T) {
	t.Parallel() // its own API server and product: beside the other live tests, mostly waiting
	w := newEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + l.Addr().String()
	l.Close()

	t.Run("bad certificate files: one line at start", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "etcd-client.crt")
		_, err := serve.New(t.Context(), serve.Options{RestConfig: w.env.Config, Datastore: calicoetcd.EtcdV3,
			Etcd: calicoetcd.Config{Endpoints: dead, CertFile: missing, KeyFile: missing}})
		require.Error(t, err)
		require.True(t, strings.HasPrefix(err.Error(), "--etcd-cert-file "+missing), "got %v", err)
		require.NotContains(t, err.Error(), "\n", "want one line")
	})

	t.Run("unreachable: running and not ready", func(t *testing.T) {
		probe, port := testenv.FreePort(t), testenv.FreePort(t)
		w.install(port)
		rep := w.start(port, true, etcdOptions(dead), func(o *serve.Options) {
			o.HealthProbeBindAddress = fmt.Sprintf("127.0.0.1:%d", probe)
		})
		var body string
		w.eventually("readyz names etcd", 20*time.Second, func() error {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz?verbose", probe))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			body = string(b)
			if resp.StatusCode == http.StatusOK || !strings.Contains(body, "[-]etcd failed") {
				return fmt.Errorf("%d %s", resp.StatusCode, body)
			}
			return nil
		})
		select {
		case err := <-rep.done:
			require.Fail(t, fmt.Sprintf("serve stopped: %v", err))
		case <-time.After(2 * time.Second):
		}
		if errors.Is(w.t.Context().Err(), nil) {
			t.Logf("readyz: %s", strings.TrimSpace(body))
		}
	})
}
