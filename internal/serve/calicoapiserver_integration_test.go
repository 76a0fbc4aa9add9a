package serve_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico/crds"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// TestCalicoAPIServerOnRealAPIServer: Calico's own API server (built from the calico module)
// serves projectcalico.org/v3 as the APIService v3.projectcalico.org and stores each v3 BGPPeer as
// a crd.projectcalico.org one under its own service account, the way a Tigera operator install
// does (the labels of the stored object in its projectcalico.org/metadata annotation). The product
// detects it, writes its BGPPeers through v3 and prunes them through crd.projectcalico.org with no
// denial (0 reconcile errors); a hand edit or delete of a managed BGPPeer through v3 and through
// the CRD group (by a user, and by an admin) is refused with the guard's reason (a v3 DELETE,
// which the Calico API server admits without review, by the guard refusing that server's CRD
// delete); the Calico API server's identity is no exemption through v3.
func TestCalicoAPIServerOnRealAPIServer(t *testing.T) {
	t.Parallel() // its own API server and product: beside the other live tests, mostly waiting
	w := newEnv(t, testenv.WithCalicoAPIServer())
	dir, err := crds.Dir()
	require.NoError(t, err)
	testenv.InstallCRDs(t, w.env.Config, dir) // all of Calico's: its API server serves every kind
	w.env.StartCalicoAPIServer(t)
	w.port = testenv.FreePort(t)
	w.install(w.port)
	w.rep = w.start(w.port, true)
	w.awaitWebhooks()
	if got, v3 := w.rep.srv.PeerAPI, w.rep.srv.V3Server; got != calico.V3 || !v3.Aggregated || v3.User != testenv.UserCalicoAPIServer {
		require.Fail(t, fmt.Sprintf("BGPPeer API %s, %s", got, v3))
	}
	// Its own policy name: the reconcile error counter is the package's (every in-process product
	// adds to it), and other parallel tests' policies are named default.
	const name = "calico-api"
	pol := strings.Replace(policyYAML, "name: default", "name: "+name, 1)
	ownErrors := map[string]string{"policy": name}
	errorsBefore := counter("calico_rr_autoscaler_reconcile_errors_total", ownErrors)

	w.applyPolicy(pol) // MultiCluster
	for i := range 12 {
		w.join(fmt.Sprintf("node-%02d", i), fmt.Sprintf("zone-%c", 'a'+i%3), nil)
	}
	var before map[string]bool
	w.eventually("route reflectors and BGPPeers", 60*time.Second, func() error {
		s := w.snapshot()
		if err := s.settled(3); err != nil {
			return err
		}
		if !s.peers["rr-autoscaler-mesh-"+name] {
			return fmt.Errorf("BGPPeers %v", slices.Sorted(maps.Keys(s.peers)))
		}
		before = s.peers
		return nil
	})

	// Another layout: the product prunes the BGPPeers it no longer plans.
	w.applyPolicy(strings.Replace(pol, "MultiCluster", "DualPlane", 1))
	var pruned, now []string
	w.eventually("a BGPPeer pruned", 60*time.Second, func() error {
		s := w.snapshot()
		pruned = pruned[:0]
		for p := range before {
			if !s.peers[p] {
				pruned = append(pruned, p)
			}
		}
		now = slices.Sorted(maps.Keys(s.peers))
		if len(pruned) == 0 || len(now) == 0 {
			return fmt.Errorf("BGPPeers %v, before %v", slices.Sorted(maps.Keys(s.peers)), slices.Sorted(maps.Keys(before)))
		}
		return nil
	})
	t.Logf("pruned: %v", pruned)
	if n := counter("calico_rr_autoscaler_reconcile_errors_total", ownErrors) - errorsBefore; n != 0 {
		require.Fail(t, fmt.Sprintf("%v reconcile errors (a denied write?)", n))
	}

	// Hand edits of a managed BGPPeer, once the new layout has settled (no draining route
	// reflector, the policy Ready, the same BGPPeers two seconds apart): refused through either
	// group.
	w.eventually("the DualPlane layout settled", 60*time.Second, func() error {
		s := w.snapshot()
		for name := range s.rrs {
			if d := s.nodes[name].Annotations[extender.AnnotationDrainingSince]; d != "" {
				return fmt.Errorf("%s draining", name)
			}
		}
		ready, err := w.policyPath(name, `{.status.conditions[?(@.type=="Ready")].status}`)
		if err != nil || ready != "True" {
			return fmt.Errorf("policy Ready %q %v", ready, err)
		}
		time.Sleep(2 * time.Second)
		now = slices.Sorted(maps.Keys(s.peers))
		if later := slices.Sorted(maps.Keys(w.snapshot().peers)); !slices.Equal(later, now) {
			return fmt.Errorf("BGPPeers still changing: %v -> %v", now, later)
		}
		return nil
	})
	peer := now[0]
	reason := "[managed-bgppeer] BGPPeer " + peer + " is managed by calico-rr-autoscaler"
	patch := `{"spec":{"peerSelector":"all()"}}`
	for _, tc := range []struct {
		name string
		user string
		args []string
	}{
		{"alice patches through v3", testenv.UserAlice, []string{"patch", "bgppeers.projectcalico.org", peer, "--type=merge", "-p", patch}},
		{"admin patches through the CRD", testenv.UserAdmin, []string{"patch", "bgppeers.crd.projectcalico.org", peer, "--type=merge", "-p", patch}},
		{"alice deletes through the CRD", testenv.UserAlice, []string{"delete", "bgppeers.crd.projectcalico.org", peer}},
		{"admin deletes through v3", testenv.UserAdmin, []string{"delete", "bgppeers.projectcalico.org", peer}},
		{"the Calico API server's identity through v3", testenv.UserCalicoAPIServer, []string{"patch", "bgppeers.projectcalico.org", peer, "--type=merge", "-p", patch}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, err := w.kubectl(tc.user, tc.args...)
			require.Error(t, err, "not refused")
			require.Contains(t, stderr, reason, "not refused with the guard's reason")
		})
	}
	out, _, err := w.kubectl(testenv.UserAdmin, "get", "bgppeers.projectcalico.org", peer, "-o", "jsonpath={.spec.peerSelector}")
	require.NoError(t, err)
	require.NotEqual(t, "all()", out, "%s's peerSelector", peer)
}
