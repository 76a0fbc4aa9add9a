package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	libapiv3 "github.com/projectcalico/calico/libcalico-go/lib/apis/v3"
	"github.com/projectcalico/calico/libcalico-go/lib/options"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoetcd"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/nodesource"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

func TestDatastoreFlagsBadInputOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--datastore", "etcd"}, `--datastore: "etcd" is not kubernetes or etcdv3`},
		{[]string{"--simulate", "5", "--etcd-endpoints", "http://e:2379"}, "need --datastore etcdv3"},
		{[]string{"--datastore", "etcdv3"}, "--etcd-endpoints: empty"},
		{[]string{"--datastore", "etcdv3", "--etcd-endpoints", "e:2379"}, "is not an http:// or https:// URL"},
		{[]string{"--datastore", "etcdv3", "--etcd-endpoints", "http://e:2379", "--simulate", "5"}, "no --simulate with it"},
		{[]string{"--datastore", "etcdv3", "--etcd-endpoints", "http://e:2379", "--etcd-ca-cert-file", "/nonexistent/ca.pem"}, "--etcd-ca-cert-file: open /nonexistent/ca.pem"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			err := runPlan(tc.args, &out)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "\n", "want one line")
		})
	}
}

// TestPlanAndVerifyFromEtcd: a plan's state written to a real etcd as Calico's etcd datastore
// keeps it (Calico Nodes with the role, BGPPeers, the mesh off), read back by plan and verify
// --datastore etcdv3: 0 missing pairs in the graph model and on GoBGP speakers; with a BGPPeer
// deleted, both find the missing pairs.
func TestPlanAndVerifyFromEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs etcd (hack/tools.sh)")
	}
	env := testenv.StartEtcd(t) // Calico's etcd datastore needs no API server
	ctx := t.Context()
	s, err := calicoetcd.New(calicoetcd.Config{Endpoints: env.EtcdURL})
	require.NoError(t, err)
	nodes, err := nodesource.Simulate(15, 3)
	require.NoError(t, err)
	in := extender.Input{Policy: policy.MustResolve(policy.Default("default")), Nodes: extender.FromNodes(nodes), Now: time.Now()}
	res := extender.Plan(in)
	owned := extender.OwnedLabelKeys(in.Policy.RRLabelKey)
	for i, n := range nodes {
		c := libapiv3.NewNode()
		c.Name, c.Labels = n.Name, n.Labels
		c.Spec.BGP = &libapiv3.NodeBGPSpec{IPv4Address: fmt.Sprintf("10.0.0.%d/24", i+1)}
		_, err := s.Client().Nodes().Create(ctx, c, options.SetOptions{})
		require.NoError(t, err)
	}
	for _, ns := range res.Nodes {
		n := &metav1.ObjectMeta{Labels: ns.Labels, Annotations: ns.Annotations}
		role := calicoetcd.Role{Labels: map[string]string{}, ClusterID: n.Annotations[extender.AnnotationClusterID]}
		for _, k := range owned {
			if v, ok := n.Labels[k]; ok {
				role.Labels[k] = v
			}
		}
		require.NoError(t, s.SetRole(ctx, ns.Name, owned, role))
	}
	for _, p := range res.BGPPeers {
		require.NoError(t, s.Peers().Create(ctx, calico.BGPPeer(calico.CRD, p)))
	}
	off := false
	if _, err := s.Client().BGPConfigurations().Create(ctx, &apiv3.BGPConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: apiv3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off}}, options.SetOptions{}); err != nil {
		require.Fail(t, fmt.Sprint(err))
	}
	etcdArgs := []string{"--datastore", "etcdv3", "--etcd-endpoints", env.EtcdURL}

	planMissing := func() (int64, int) {
		t.Helper()
		var out bytes.Buffer
		require.NoError(t, runPlan(append(etcdArgs, "-o", "json"), &out))
		var got struct {
			Summary struct {
				Nodes           int `json:"nodes"`
				RouteReflectors int `json:"routeReflectors"`
			} `json:"summary"`
			Etcd *etcdFigures `json:"etcd"`
		}
		require.NoError(t, json.Unmarshal(out.Bytes(), &got))
		require.NotNil(t, got.Etcd, "plan from etcd: no etcd section")
		require.EqualValues(t, 15, got.Etcd.Nodes, "plan from etcd: %+v", got.Etcd)
		require.False(t, got.Etcd.Mesh, "plan from etcd: %+v", got.Etcd)
		require.EqualValues(t, 15, got.Summary.Nodes, "plan from etcd: %+v", got.Summary)
		return got.Etcd.MissingPairs, got.Summary.RouteReflectors
	}
	if missing, rrs := planMissing(); missing != 0 || rrs != len(res.RouteReflectors) {
		require.Fail(t, fmt.Sprintf("plan from etcd: %d missing pairs, %d route reflectors (want 0, %d)", missing, rrs, len(res.RouteReflectors)))
	}
	var out, errb bytes.Buffer
	err = runVerify(append(etcdArgs, "--speaker", "gobgp", "-o", "json"), &out, &errb)
	require.NoError(t, err, "verify from etcd\n%s", errb.String())
	if !strings.Contains(out.String(), `"missingPairs": 0`) {
		require.Fail(t, fmt.Sprintf("verify from etcd: %s", out.String()))
	}

	// Break it: a client peering set's BGPPeer goes.
	peers, err := s.Peers().List(ctx, nil)
	require.NoError(t, err)
	for _, p := range peers {
		if _, _, ok := extender.SetLabelOf(p.Name); ok {
			require.NoError(t, s.Peers().Delete(ctx, p))
			break
		}
	}
	if missing, _ := planMissing(); missing == 0 {
		require.Fail(t, "plan from etcd finds no missing pair without a BGPPeer")
	}
	out.Reset()
	err = runVerify(append(etcdArgs, "--speaker", "gobgp", "--timeout", "5s"), &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "node pairs miss each other's routes") {
		require.Fail(t, fmt.Sprintf("verify from etcd without a BGPPeer: %v\n%s", err, out.String()))
	}
}
