package calicoetcd_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	libapiv3 "github.com/projectcalico/calico/libcalico-go/lib/apis/v3"
	"github.com/projectcalico/calico/libcalico-go/lib/options"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoetcd"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	require.NoError(t, os.WriteFile(garbage, []byte("not a certificate"), 0o600))
	for _, tc := range []struct {
		name string
		cfg  calicoetcd.Config
		want string // "" for valid
	}{
		{"one endpoint", calicoetcd.Config{Endpoints: "http://127.0.0.1:2379"}, ""},
		{"two endpoints", calicoetcd.Config{Endpoints: "https://10.0.0.1:2379, https://10.0.0.2:2379"}, ""},
		{"none", calicoetcd.Config{}, "--etcd-endpoints: empty"},
		{"no scheme", calicoetcd.Config{Endpoints: "10.0.0.1:2379"}, `--etcd-endpoints: "10.0.0.1:2379" is not an http:// or https:// URL`},
		{"key without cert", calicoetcd.Config{Endpoints: "https://e:2379", KeyFile: garbage}, "give both or neither"},
		{"missing cert", calicoetcd.Config{Endpoints: "https://e:2379", KeyFile: garbage, CertFile: filepath.Join(dir, "nope.pem")}, "--etcd-cert-file " + filepath.Join(dir, "nope.pem")},
		{"garbage cert", calicoetcd.Config{Endpoints: "https://e:2379", KeyFile: garbage, CertFile: garbage}, "failed to find any PEM data"},
		{"missing CA", calicoetcd.Config{Endpoints: "https://e:2379", CACertFile: filepath.Join(dir, "nope.pem")}, "--etcd-ca-cert-file: open"},
		{"garbage CA", calicoetcd.Config{Endpoints: "https://e:2379", CACertFile: garbage}, "no PEM certificate in it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "\n", "want one line")
		})
	}
}

func TestDiff(t *testing.T) {
	want := calicoetcd.Role{Labels: map[string]string{"calico-route-reflector": "", extender.LabelRouteReflectorID: "n1"}, ClusterID: "224.0.0.1"}
	for _, tc := range []struct {
		name string
		have calicoetcd.Role
		want []string
	}{
		{"equal", want, nil},
		{"label removed, ID changed", calicoetcd.Role{Labels: map[string]string{extender.LabelRouteReflectorID: "n1"}, ClusterID: "10.9.9.9"},
			[]string{"label calico-route-reflector removed", "spec.bgp.routeReflectorClusterID 10.9.9.9 (want 224.0.0.1)"}},
		{"label changed and added, ID removed", calicoetcd.Role{Labels: map[string]string{"calico-route-reflector": "", extender.LabelRouteReflectorID: "x", extender.LabelPeeringSet: "s"}},
			[]string{`label routereflector.io/peering-set="s" added`, `label routereflector.io/rr-id="x" (want "n1")`, "spec.bgp.routeReflectorClusterID removed (want 224.0.0.1)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := calicoetcd.Diff(tc.have, want)
			require.Equalf(t, fmt.Sprint(tc.want), fmt.Sprint(got), "got %q, want %q", got, tc.want)
		})
	}
}

// TestStoreOnRealEtcd: roles and BGPPeers through Calico's client on a real etcd, read back with
// a second client as calicoctl would.
func TestStoreOnRealEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs etcd (hack/tools.sh)")
	}
	env := testenv.StartEtcd(t) // Calico's etcd datastore needs no API server
	ctx := t.Context()
	s, err := calicoetcd.New(calicoetcd.Config{Endpoints: env.EtcdURL})
	require.NoError(t, err)
	other, err := calicoetcd.New(calicoetcd.Config{Endpoints: env.EtcdURL})
	require.NoError(t, err)
	require.NoError(t, s.Check(ctx))
	owned := extender.OwnedLabelKeys("calico-route-reflector")

	t.Run("role on a Calico Node", func(t *testing.T) {
		n := libapiv3.NewNode()
		n.Name = "node-1"
		n.Labels = map[string]string{"topology.kubernetes.io/zone": "zone-a", extender.LabelPeeringSet: "old"}
		n.Spec.BGP = &libapiv3.NodeBGPSpec{IPv4Address: "10.0.0.1/24"}
		_, err := other.Client().Nodes().Create(ctx, n, options.SetOptions{})
		require.NoError(t, err)
		want := calicoetcd.Role{Labels: map[string]string{"calico-route-reflector": "", extender.LabelRouteReflectorID: "node-1"}, ClusterID: "224.0.0.1"}
		require.NoError(t, s.SetRole(ctx, "node-1", owned, want))
		got, err := other.Client().Nodes().Get(ctx, "node-1", options.GetOptions{})
		require.NoError(t, err)
		if r := calicoetcd.RoleOfCalicoNode(owned, got); !r.Equal(want) {
			require.Fail(t, fmt.Sprintf("role %+v, want %+v", r, want))
		}
		require.Equal(t, "zone-a", got.Labels["topology.kubernetes.io/zone"], "foreign label lost")
		require.Equal(t, "10.0.0.1/24", got.Spec.BGP.IPv4Address, "foreign field lost")
		k := calicoetcd.KubernetesShape(got)
		require.Equal(t, "224.0.0.1", k.Annotations[extender.AnnotationClusterID], "kubernetes shape %+v", k.Annotations)
		require.Equal(t, "10.0.0.1/24", k.Annotations[extender.AnnotationCalicoIPv4], "kubernetes shape %+v", k.Annotations)
		// Back to a client: the label and the ID go.
		require.NoError(t, s.SetRole(ctx, "node-1", owned, calicoetcd.Role{Labels: map[string]string{extender.LabelPeeringSet: "s1"}}))
		roles, err := other.Roles(ctx, owned)
		require.NoError(t, err)
		if r := roles["node-1"]; r.ClusterID != "" || len(r.Labels) != 1 || r.Labels[extender.LabelPeeringSet] != "s1" {
			require.Fail(t, fmt.Sprintf("role %+v", r))
		}
	})

	t.Run("the watch sees the Calico Nodes' BGP addresses", func(t *testing.T) {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go s.WatchChanges(wctx, func() {})
		n := libapiv3.NewNode()
		n.Name = "node-dual"
		n.Spec.BGP = &libapiv3.NodeBGPSpec{IPv4Address: "10.0.0.7/24", IPv6Address: "fd00::7/64"}
		_, err := other.Client().Nodes().Create(ctx, n, options.SetOptions{})
		require.NoError(t, err)
		want := extender.CalicoAddresses{IPv4: "10.0.0.7/24", IPv6: "fd00::7/64"}
		require.Eventually(t, func() bool { return s.Addresses()["node-dual"] == want }, 10*time.Second, 20*time.Millisecond, "addresses %v", s.Addresses())
		require.Equal(t, extender.FamilyIPv4|extender.FamilyIPv6, extender.NodeFamilies(extender.FromNode(calicoetcd.KubernetesShape(n))))
		// calico-node drops the node's IPv6 address: IPv4 only.
		cur, err := other.Client().Nodes().Get(ctx, "node-dual", options.GetOptions{})
		require.NoError(t, err)
		cur.Spec.BGP.IPv6Address = ""
		_, err = other.Client().Nodes().Update(ctx, cur, options.SetOptions{})
		require.NoError(t, err)
		want.IPv6 = ""
		require.Eventually(t, func() bool { return s.Addresses()["node-dual"] == want }, 10*time.Second, 20*time.Millisecond, "addresses %v", s.Addresses())
		_, err = other.Client().Nodes().Delete(ctx, "node-dual", options.DeleteOptions{})
		require.NoError(t, err)
		require.Eventually(t, func() bool { _, ok := s.Addresses()["node-dual"]; return !ok }, 10*time.Second, 20*time.Millisecond, "addresses %v", s.Addresses())
		require.Equal(t, "10.0.0.1/24", s.Addresses()["node-1"].IPv4, "the other node")
	})

	t.Run("no Calico Node: never created", func(t *testing.T) {
		err := s.SetRole(ctx, "node-missing", owned, calicoetcd.Role{ClusterID: "224.0.0.1"})
		require.Truef(t, errors.Is(err, calicoetcd.ErrNoCalicoNode), "got %v", err)
		if _, err := other.Client().Nodes().Get(ctx, "node-missing", options.GetOptions{}); err == nil {
			require.Fail(t, "the Calico Node was created")
		}
	})

	t.Run("BGPPeers with the Kubernetes API's errors", func(t *testing.T) {
		peers := s.Peers()
		p := &apiv3.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "rr-autoscaler-x", Labels: map[string]string{extender.LabelManagedBy: extender.ManagedByValue}},
			Spec: apiv3.BGPPeerSpec{NodeSelector: "routereflector.io/peering-set == 'x'", PeerSelector: "routereflector.io/rr-id in {'node-1'}"}}
		foreign := &apiv3.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "hand-made"}, Spec: apiv3.BGPPeerSpec{PeerIP: "10.1.1.1", ASNumber: 64512}}
		for _, b := range []*apiv3.BGPPeer{p, foreign} {
			require.NoError(t, peers.Create(ctx, b))
		}
		if err := peers.Create(ctx, p); !apierrors.IsAlreadyExists(err) {
			require.Fail(t, fmt.Sprintf("second create: %v", err))
		}
		got, err := other.Peers().List(ctx, map[string]string{extender.LabelManagedBy: extender.ManagedByValue})
		require.NoError(t, err)
		require.Len(t, got, 1, "managed list %v", got)
		require.Equal(t, p.Name, got[0].Name)
		require.Equal(t, p.Spec.PeerSelector, got[0].Spec.PeerSelector)
		all, err := other.Peers().List(ctx, nil)
		require.NoError(t, err)
		require.Len(t, all, 2, "all %v", all)
		stale := got[0].DeepCopy()
		got[0].Spec.PeerSelector = "has(calico-route-reflector)"
		require.NoError(t, peers.Update(ctx, got[0]))
		if err := peers.Update(ctx, stale); !apierrors.IsConflict(err) {
			require.Fail(t, fmt.Sprintf("stale update: %v", err))
		}
		if err := peers.Delete(ctx, stale); !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			require.Fail(t, fmt.Sprintf("stale delete: %v", err))
		}
		cur, _ := other.Peers().List(ctx, map[string]string{extender.LabelManagedBy: extender.ManagedByValue})
		require.NoError(t, peers.Delete(ctx, cur[0]))
		if err := peers.Delete(ctx, cur[0]); !apierrors.IsNotFound(err) {
			require.Fail(t, fmt.Sprintf("second delete: %v", err))
		}
	})

	t.Run("CalicoNodeStatus: created, its status as calico-node writes it read back, deleted", func(t *testing.T) {
		st := s.NodeStatuses()
		period := uint32(5)
		obj := &apiv3.CalicoNodeStatus{ObjectMeta: metav1.ObjectMeta{Name: "rr-autoscaler-handover-node-1", Labels: map[string]string{extender.LabelManagedBy: extender.ManagedByValue}},
			Spec: apiv3.CalicoNodeStatusSpec{Node: "node-1", Classes: []apiv3.NodeStatusClassType{apiv3.NodeStatusClassTypeBGP}, UpdatePeriodSeconds: &period}}
		require.NoError(t, st.Create(ctx, obj))
		if err := st.Create(ctx, obj); !apierrors.IsAlreadyExists(err) {
			require.Fail(t, fmt.Sprintf("second create: %v", err))
		}
		// calico-node on etcd reports its sessions in the status.
		cur, err := other.Client().CalicoNodeStatus().Get(ctx, obj.Name, options.GetOptions{})
		require.NoError(t, err)
		cur.Status.BGP.PeersV4 = []apiv3.CalicoNodePeer{{PeerIP: "10.0.0.2", State: apiv3.BGPSessionStateEstablished}}
		_, err = other.Client().CalicoNodeStatus().Update(ctx, cur, options.SetOptions{})
		require.NoError(t, err)
		got, err := st.List(ctx, map[string]string{extender.LabelManagedBy: extender.ManagedByValue})
		require.NoError(t, err)
		require.Len(t, got, 1, "listed %+v", got)
		require.Len(t, got[0].Status.BGP.PeersV4, 1, "listed %+v", got)
		require.Equal(t, apiv3.BGPSessionStateEstablished, got[0].Status.BGP.PeersV4[0].State)
		require.NoError(t, st.Delete(ctx, got[0]))
		if err := st.Delete(ctx, got[0]); !apierrors.IsNotFound(err) {
			require.Fail(t, fmt.Sprintf("second delete: %v", err))
		}
	})

	t.Run("BGPConfiguration: created, patched at its version", func(t *testing.T) {
		cs := s.Configs()
		if _, err := cs.Get(ctx, "default"); !apierrors.IsNotFound(err) {
			require.Fail(t, fmt.Sprintf("get before create: %v", err))
		}
		off := false
		if err := cs.Create(ctx, &apiv3.BGPConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "default", Annotations: map[string]string{"a": "b"}},
			Spec: apiv3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off}}); err != nil {
			require.Fail(t, fmt.Sprint(err))
		}
		orig, err := other.Configs().Get(ctx, "default")
		require.NoError(t, err)
		require.Equal(t, "b", orig.Annotations["a"], "got %+v", orig)
		require.False(t, *orig.Spec.NodeToNodeMeshEnabled, "got %+v", orig)
		on := orig.DeepCopy()
		on.Spec.NodeToNodeMeshEnabled = new(bool)
		*on.Spec.NodeToNodeMeshEnabled = true
		require.NoError(t, cs.Patch(ctx, orig, on))
		if err := cs.Patch(ctx, orig, on); !apierrors.IsConflict(err) {
			require.Fail(t, fmt.Sprintf("stale patch: %v", err))
		}
		if got, _ := other.Configs().Get(ctx, "default"); !*got.Spec.NodeToNodeMeshEnabled {
			require.Fail(t, fmt.Sprintf("mesh %v", *got.Spec.NodeToNodeMeshEnabled))
		}
	})

	t.Run("unreachable etcd: a one-line error naming it", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		l.Close()
		down, err := calicoetcd.New(calicoetcd.Config{Endpoints: "http://" + addr})
		if err != nil {
			require.Fail(t, fmt.Sprint(err)) // building the client does not wait for etcd
		}
		err = down.Check(ctx)
		if err == nil || !strings.Contains(err.Error(), "etcd at http://"+addr+" unreachable: "+addr+": dial tcp "+addr+": connect: connection refused") ||
			strings.Contains(err.Error(), "\n") {
			require.Fail(t, fmt.Sprintf("got %v", err))
		}
	})
}

// TestTLSEtcd: a real etcd serving TLS. Trusting its CA, the client reads; trusting another CA,
// Check fails in one line naming the certificate problem (the readiness probe's message).
func TestTLSEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs etcd (hack/tools.sh)")
	}
	bin := testenv.RequireBinary(t, testenv.ToolEtcd)
	dir := t.TempDir()
	_, err := testenv.WriteWebhookCert(filepath.Join(dir, "server"))
	require.NoError(t, err)
	_, err = testenv.WriteWebhookCert(filepath.Join(dir, "other"))
	require.NoError(t, err)
	ports := make([]int, 2)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	client := fmt.Sprintf("https://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	cmd := exec.CommandContext(t.Context(), bin, "--name=tls", "--data-dir="+filepath.Join(dir, "data"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer, "--initial-cluster=tls="+peer,
		"--cert-file="+filepath.Join(dir, "server", "tls.crt"), "--key-file="+filepath.Join(dir, "server", "tls.key"),
		"--unsafe-no-fsync=true", "--log-level=error")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	good, err := calicoetcd.New(calicoetcd.Config{Endpoints: client, CACertFile: filepath.Join(dir, "server", "ca.crt")})
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for err = good.Check(t.Context()); err != nil && time.Now().Before(deadline); err = good.Check(t.Context()) {
		time.Sleep(200 * time.Millisecond)
	}
	require.NoErrorf(t, err, "trusted CA")
	bad, err := calicoetcd.New(calicoetcd.Config{Endpoints: client, CACertFile: filepath.Join(dir, "other", "ca.crt")})
	require.NoError(t, err)
	err = bad.Check(t.Context())
	if err == nil || !strings.Contains(err.Error(), "etcd at "+client+" unreachable") || !strings.Contains(err.Error(), "certificate signed by unknown authority") ||
		strings.Contains(err.Error(), "\n") {
		require.Fail(t, fmt.Sprintf("untrusted CA: %v", err))
	}
	t.Log(err)
}
