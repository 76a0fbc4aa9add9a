package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	libapiv3 "github.com/projectcalico/calico/libcalico-go/lib/apis/v3"
	"github.com/projectcalico/calico/libcalico-go/lib/options"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico/crds"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoetcd"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/tools/clusterstatus"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestStatusOnRealAPIServer: `status` (and `kubectl rr`) on a real API server holding a policy in
// Observe mode, 12 nodes with 3 hand-labelled route reflectors (one of them draining), the
// product's BGPPeers and a hand-written one: the table matches testdata/status.golden and -o json
// carries the same.
func TestStatusOnRealAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs kube-apiserver and etcd (hack/tools.sh)")
	}
	env := testenv.Start(t)
	dir, err := crds.Dir()
	require.NoError(t, err)
	testenv.InstallCRDs(t, env.Config, filepath.Join(dir, "crd.projectcalico.org_bgppeers.yaml"),
		filepath.Join(dir, "crd.projectcalico.org_bgpconfigurations.yaml"), filepath.Join(dir, "crd.projectcalico.org_caliconodestatuses.yaml"),
		filepath.Join("..", "..", "policy", "crd"))
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	require.NoError(t, calico.AddToScheme(scheme, calico.CRD))
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	require.NoError(t, err)
	ctx := context.Background()

	since := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC).Format(time.RFC3339)
	for i := range 12 {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + string(rune('a'+i)), Labels: map[string]string{
			corev1.LabelTopologyZone: "zone-" + string(rune('a'+i%3))}, Annotations: map[string]string{}}}
		switch {
		case i < 3:
			n.Labels["calico-route-reflector"] = ""
			n.Annotations[extender.AnnotationClusterID] = "224.0.0." + string(rune('1'+i))
			if i == 0 { // dual-stack
				n.Annotations[extender.AnnotationCalicoIPv4] = "10.0.0.1/24"
				n.Annotations[extender.AnnotationCalicoIPv6] = "fd00::1/64"
			}
		case i == 3:
			n.Labels["calico-route-reflector"] = ""
			n.Annotations[extender.AnnotationClusterID] = "224.0.0.1"
			n.Annotations[extender.AnnotationDrainingSince] = since
		default:
			n.Labels[extender.LabelPeeringSet] = "abc"
			n.Annotations[extender.AnnotationRouteReflectors] = "node-a,node-b,node-c"
		}
		require.NoError(t, c.Create(ctx, n))
	}
	mk := func(name string, managed bool, spec apiv3.BGPPeerSpec) *apiv3.BGPPeer {
		p := &apiv3.BGPPeer{TypeMeta: metav1.TypeMeta{APIVersion: calico.CRD.String(), Kind: "BGPPeer"}, ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}, Spec: spec}
		if managed {
			p.Labels[extender.LabelManagedBy], p.Labels[extender.LabelPolicy] = extender.ManagedByValue, "default"
		}
		return p
	}
	require.NoError(t, c.Create(ctx, mk("rr-autoscaler-abc", true, apiv3.BGPPeerSpec{NodeSelector: "routereflector.io/peering-set == 'abc'", PeerSelector: "has(calico-route-reflector)"})))
	require.NoError(t, c.Create(ctx, mk("rr-autoscaler-mesh-default", true, apiv3.BGPPeerSpec{NodeSelector: "has(calico-route-reflector)", PeerSelector: "has(calico-route-reflector)"})))
	require.NoError(t, c.Create(ctx, mk("hand-made-rr-mesh", false, apiv3.BGPPeerSpec{NodeSelector: "has(calico-route-reflector)", PeerSelector: "has(calico-route-reflector)"})))
	pol := &v1alpha1.RouteReflectorPolicy{ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: v1alpha1.RouteReflectorPolicySpec{Mode: v1alpha1.Observe, Topology: &v1alpha1.Topology{Type: v1alpha1.MultiCluster}}}
	require.NoError(t, c.Create(ctx, pol))
	pol.Status = v1alpha1.RouteReflectorPolicyStatus{Mode: v1alpha1.Observe, DesiredRouteReflectors: 3, RouteReflectors: 3,
		PendingChanges: []string{"demote node-d", "create 1 BGPPeers"},
		Conditions:     []metav1.Condition{{Type: "Ready", Status: "False", Reason: "Observe", Message: "x", LastTransitionTime: metav1.Now()}}}
	require.NoError(t, c.Status().Update(ctx, pol))

	// bgpHealth's CalicoNodeStatus of node-a, as calico-node fills it in: its IPv4 sessions up, its
	// IPv6 ones down.
	cns := &apiv3.CalicoNodeStatus{TypeMeta: metav1.TypeMeta{APIVersion: calico.CRD.String(), Kind: apiv3.KindCalicoNodeStatus},
		ObjectMeta: metav1.ObjectMeta{Name: "rr-autoscaler-handover-node-a", Labels: map[string]string{extender.LabelManagedBy: extender.ManagedByValue, extender.LabelPolicy: "default"}},
		Spec:       apiv3.CalicoNodeStatusSpec{Node: "node-a", Classes: []apiv3.NodeStatusClassType{apiv3.NodeStatusClassTypeBGP}}}
	cns.Status.LastUpdated = metav1.Now()
	for i := range 8 {
		cns.Status.BGP.PeersV4 = append(cns.Status.BGP.PeersV4, apiv3.CalicoNodePeer{PeerIP: fmt.Sprintf("10.0.0.%d", i+5), Type: "NodePeer", State: apiv3.BGPSessionStateEstablished})
		cns.Status.BGP.PeersV6 = append(cns.Status.BGP.PeersV6, apiv3.CalicoNodePeer{PeerIP: fmt.Sprintf("fd00::%d", i+5), Type: "NodePeer", State: apiv3.BGPSessionStateActive})
	}
	require.NoError(t, c.Create(ctx, cns))

	kubeconfig := env.KubeconfigPath(testenv.UserAdmin)
	var out bytes.Buffer
	require.NoError(t, runStatus([]string{"--kubeconfig", kubeconfig}, &out))
	// The draining age depends on the clock.
	got := regexp.MustCompile(`\(\d+h\d+m\d+s\)|\(\d+m\d+s\)`).ReplaceAllString(out.String(), "(AGE)")
	golden := filepath.Join("testdata", "status.golden")
	if *update {
		require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	require.Equal(t, string(want), got)

	out.Reset()
	require.NoError(t, runStatus([]string{"--kubeconfig", kubeconfig, "-o", "json"}, &out))
	var rep clusterstatus.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	require.Len(t, rep.Policies, 1)
	p := rep.Policies[0]
	require.Equal(t, "Observe", p.Mode)
	require.Equal(t, 3, p.RouteReflectors)
	require.Equal(t, "node-d", p.Draining[0].Node)
	require.Equal(t, []string{"hand-made-rr-mesh"}, rep.ForeignBGPPeers)
	require.Equal(t, int64(0), rep.Routes.MissingPairs)
	require.Equal(t, 8, p.Zones[0].RouteReflectors[0].Clients)
	require.Equal(t, "IPv4+IPv6", p.Zones[0].RouteReflectors[0].Families)
	require.Equal(t, []clusterstatus.FamilySessions{{Family: "IPv4", Established: 8, Listed: 8}, {Family: "IPv6", Established: 0, Listed: 8}},
		p.Zones[0].RouteReflectors[0].Sessions)
	require.Equal(t, "IPv4", p.Zones[1].RouteReflectors[0].Families)
	require.Nil(t, p.Zones[1].RouteReflectors[0].Sessions, "no CalicoNodeStatus")
}

// TestStatusFromEtcd: with --datastore etcdv3, status reads the BGPPeers and the mesh setting from
// Calico's etcd (the API server serves no Calico resources at all here): the hand-written BGPPeer
// is reported as foreign, the mesh as off, and the graph model finds every pair; the address
// families are the Calico Nodes' (figures and drills per family); with the clients' BGPPeer
// deleted from etcd, it finds them missing.
func TestStatusFromEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs kube-apiserver and etcd (hack/tools.sh)")
	}
	env := testenv.Start(t)
	testenv.InstallCRDs(t, env.Config, filepath.Join("..", "..", "policy", "crd"))
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	require.NoError(t, err)
	ctx := t.Context()

	for i := range 6 {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + string(rune('a'+i)), Labels: map[string]string{
			corev1.LabelTopologyZone: "zone-a"}, Annotations: map[string]string{}}}
		if i < 2 {
			n.Labels["calico-route-reflector"] = ""
			n.Annotations[extender.AnnotationClusterID] = "224.0.0.1"
		} else {
			n.Labels[extender.LabelPeeringSet] = "abc"
			n.Annotations[extender.AnnotationRouteReflectors] = "node-a,node-b"
		}
		require.NoError(t, c.Create(ctx, n))
	}
	require.NoError(t, c.Create(ctx, &v1alpha1.RouteReflectorPolicy{ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: v1alpha1.RouteReflectorPolicySpec{Mode: v1alpha1.Observe}}))

	s, err := calicoetcd.New(calicoetcd.Config{Endpoints: env.EtcdURL})
	require.NoError(t, err)
	managed := map[string]string{extender.LabelManagedBy: extender.ManagedByValue, extender.LabelPolicy: "default"}
	for _, p := range []extender.BGPPeer{
		{Name: "rr-autoscaler-abc", Labels: managed, Spec: apiv3.BGPPeerSpec{NodeSelector: "routereflector.io/peering-set == 'abc'", PeerSelector: "has(calico-route-reflector)"}},
		{Name: "rr-autoscaler-mesh-default", Labels: managed, Spec: apiv3.BGPPeerSpec{NodeSelector: "has(calico-route-reflector)", PeerSelector: "has(calico-route-reflector)"}},
		{Name: "hand-made-rr-mesh", Spec: apiv3.BGPPeerSpec{NodeSelector: "has(calico-route-reflector)", PeerSelector: "has(calico-route-reflector)"}},
	} {
		require.NoError(t, s.Peers().Create(ctx, calico.BGPPeer(calico.CRD, p)), p.Name)
	}
	// calico-node's Calico Nodes: their BGP addresses, which the Kubernetes Nodes do not carry with
	// this datastore. node-b, a route reflector, has no IPv6 address.
	for i := range 6 {
		n := libapiv3.NewNode()
		n.Name = "node-" + string(rune('a'+i))
		n.Spec.BGP = &libapiv3.NodeBGPSpec{IPv4Address: fmt.Sprintf("10.0.0.%d/24", i+1)}
		if n.Name != "node-b" {
			n.Spec.BGP.IPv6Address = fmt.Sprintf("fd00::%d/64", i+1)
		}
		_, err := s.Client().Nodes().Create(ctx, n, options.SetOptions{})
		require.NoError(t, err)
	}
	off := false
	require.NoError(t, s.Configs().Create(ctx, &apiv3.BGPConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: apiv3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off}}))

	status := func() clusterstatus.Report {
		t.Helper()
		var out bytes.Buffer
		require.NoError(t, runStatus([]string{"--kubeconfig", env.KubeconfigPath(testenv.UserAdmin),
			"--datastore", "etcdv3", "--etcd-endpoints", env.EtcdURL, "-o", "json"}, &out))
		var rep clusterstatus.Report
		require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String())
		return rep
	}
	rep := status()
	require.Equal(t, []string{"hand-made-rr-mesh"}, rep.ForeignBGPPeers)
	require.False(t, rep.NodeToNodeMesh, "the mesh is off in etcd's BGPConfiguration")
	require.Equal(t, int64(0), rep.Routes.MissingPairs)
	require.Len(t, rep.Policies, 1)
	require.Equal(t, 2, rep.Policies[0].RouteReflectors)
	// The families are the Calico Nodes': the route figures and the drills per family; in IPv6
	// node-a is the clients' only route reflector, so losing it fails there (and only there).
	rrs := rep.Policies[0].Zones[0].RouteReflectors
	require.Equal(t, "IPv4+IPv6", rrs[0].Families, "%+v", rrs)
	require.Equal(t, "IPv4", rrs[1].Families, "%+v", rrs)
	require.Equal(t, []clusterstatus.FamilyFigures{{Family: "IPv4", Nodes: 6, BusiestPaths: rep.Routes.Families[0].BusiestPaths, MeanPaths: rep.Routes.Families[0].MeanPaths},
		{Family: "IPv6", Nodes: 5, BusiestPaths: rep.Routes.Families[1].BusiestPaths, MeanPaths: rep.Routes.Families[1].MeanPaths}}, rep.Routes.Families)
	failed := extender.FailedDrills(rep.Routes.Drills)
	require.Len(t, failed, 1, "%v", rep.Routes.Drills)
	require.Equal(t, "route reflector node-a lost: 12 node pairs missing in IPv6", failed[0].String())

	peers, err := s.Peers().List(ctx, nil)
	require.NoError(t, err)
	for _, p := range peers {
		if p.Name == "rr-autoscaler-abc" {
			require.NoError(t, s.Peers().Delete(ctx, p))
		}
	}
	rep = status()
	require.Positive(t, rep.Routes.MissingPairs, "the clients lost their BGPPeer in etcd")
}
