package testenv_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico/crds"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// TestCalicoAPIServer: Calico's own API server, registered as the APIService v3.projectcalico.org,
// stores a projectcalico.org/v3 BGPPeer as a crd.projectcalico.org/v1 one with the spec as is and
// the v3 labels in the annotation projectcalico.org/metadata, not in metadata.labels (so a webhook
// objectSelector on labels does not see the CRD object).
func TestCalicoAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs kube-apiserver, etcd and calico-apiserver (hack/tools.sh)")
	}
	env := testenv.Start(t, testenv.WithCalicoAPIServer())
	dir, err := crds.Dir()
	require.NoError(t, err)
	testenv.InstallCRDs(t, env.Config, dir)
	env.StartCalicoAPIServer(t)
	peer := "apiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {name: p1, labels: {a: b}}\nspec: {nodeSelector: all(), peerSelector: has(rr)}\n"
	if _, stderr, err := env.KubectlStdin(t, testenv.UserAlice, peer, "create", "-f", "-"); err != nil {
		require.Fail(t, fmt.Sprintf("creating a v3 BGPPeer: %v: %s", err, stderr))
	}
	out, stderr, err := env.Kubectl(t, testenv.UserAdmin, "get", "bgppeers.crd.projectcalico.org", "p1", "-o", "yaml", "--show-managed-fields")
	require.Falsef(t, err != nil, "the CRD object: %v: %s", err, stderr)
	if !strings.Contains(out, "has(rr)") || !strings.Contains(out, `projectcalico.org/metadata: '{"creationTimestamp"`) ||
		!strings.Contains(out, `"labels":{"a":"b"}`) || strings.Contains(out, "\n  labels:") {
		require.Fail(t, fmt.Sprintf("the CRD object does not hold the v3 spec, and the labels in projectcalico.org/metadata only:\n%s", out))
	}
	t.Logf("crd.projectcalico.org/v1 p1:\n%s", out)
}
