package testenv_test

import (
	"strings"
	"testing"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico/crds"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// TestCalicoAPIServer: Calico's own API server, registered as the APIService v3.projectcalico.org,
// stores a projectcalico.org/v3 BGPPeer as a crd.projectcalico.org/v1 one, managed by its own
// service account (the field manager of a server-side write is the user agent of its client).
func TestCalicoAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs kube-apiserver, etcd and calico-apiserver (hack/tools.sh)")
	}
	env := testenv.Start(t, testenv.WithCalicoAPIServer())
	dir, err := crds.Dir()
	if err != nil {
		t.Fatal(err)
	}
	testenv.InstallCRDs(t, env.Config, dir)
	env.StartCalicoAPIServer(t)
	peer := "apiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {name: p1, labels: {a: b}}\nspec: {nodeSelector: all(), peerSelector: has(rr)}\n"
	if _, stderr, err := env.KubectlStdin(t, testenv.UserAlice, peer, "create", "-f", "-"); err != nil {
		t.Fatalf("creating a v3 BGPPeer: %v: %s", err, stderr)
	}
	out, stderr, err := env.Kubectl(t, testenv.UserAdmin, "get", "bgppeers.crd.projectcalico.org", "p1", "-o", "yaml", "--show-managed-fields")
	if err != nil {
		t.Fatalf("the CRD object: %v: %s", err, stderr)
	}
	if !strings.Contains(out, "has(rr)") || !strings.Contains(out, "a: b") {
		t.Fatalf("the CRD object does not hold the v3 spec and labels:\n%s", out)
	}
	t.Logf("crd.projectcalico.org/v1 p1:\n%s", out)
}
