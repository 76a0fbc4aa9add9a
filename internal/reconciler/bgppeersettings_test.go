package reconciler

import (
	"context"
	"fmt"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// TestBGPPeerSettingsUpdateInPlace: changing a policy's spec.bgpPeer (a password and a restart
// time, then another restart time, then none) updates every BGPPeer of the policy in place: the
// same objects (names, UIDs) are updated, none is deleted or created, no drift is reported, the
// selectors (the sessions the graph model sees) stay, and the model loses no pair.
func TestBGPPeerSettingsUpdateInPlace(t *testing.T) {
	h := newHarness(t, nil, cluster(24))
	h.syncPolicies()
	h.reconcile()
	h.reconcile()
	h.events()
	type peer struct {
		identity  string
		selectors string
	}
	snapshot := func() (map[string]peer, []apiv3.BGPPeer) {
		list := &apiv3.BGPPeerList{}
		require.NoError(t, h.client.List(context.Background(), list))
		out := map[string]peer{}
		for _, p := range list.Items {
			out[p.Name] = peer{p.Annotations["test/identity"], p.Spec.NodeSelector + " / " + p.Spec.PeerSelector}
		}
		return out, list.Items
	}
	// The fake API server gives no UIDs: an annotation of the test's marks each object, which an
	// update keeps and a re-created object would not have.
	_, items := snapshot()
	require.NotEmpty(t, items)
	for i := range items {
		items[i].Annotations = map[string]string{"test/identity": "id-" + items[i].Name}
		require.NoError(t, h.client.Update(context.Background(), &items[i]))
	}
	before, _ := snapshot()
	writes := func(kind string) float64 { return testutil.ToFloat64(peerWrites.WithLabelValues("default", kind)) }
	pw := &v1alpha1.BGPPassword{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "bgp-secrets"}, Key: "rr"}}
	for _, step := range []struct {
		name string
		s    *v1alpha1.BGPPeerSettings
	}{
		{"password and restart time", &v1alpha1.BGPPeerSettings{Password: pw, MaxRestartTime: &metav1.Duration{Duration: 300 * time.Second}}},
		{"another restart time", &v1alpha1.BGPPeerSettings{Password: pw, MaxRestartTime: &metav1.Duration{Duration: 90 * time.Second}}},
		{"no settings", nil},
	} {
		creates, updates, deletes := writes("create"), writes("update"), writes("delete")
		h.editPolicy(func(s *v1alpha1.RouteReflectorPolicySpec) { s.BGPPeer = step.s })
		h.syncPolicies()
		h.reconcile()
		after, items := snapshot()
		assert.Equal(t, before, after, "%s: the BGPPeers (names, identities, selectors) changed", step.name)
		assert.Equalf(t, float64(len(before)), writes("update")-updates, "%s: BGPPeer updates", step.name)
		assert.Zerof(t, writes("create")-creates, "%s: BGPPeers created", step.name)
		assert.Zerof(t, writes("delete")-deletes, "%s: BGPPeers deleted", step.name)
		for _, p := range items {
			if step.s == nil {
				assert.Nilf(t, p.Spec.Password, "%s: %s keeps a password", step.name, p.Name)
				assert.Nilf(t, p.Spec.MaxRestartTime, "%s: %s keeps a restart time", step.name, p.Name)
				continue
			}
			require.NotNilf(t, p.Spec.Password, "%s: %s has no password", step.name, p.Name)
			assert.Equal(t, "bgp-secrets/rr", p.Spec.Password.SecretKeyRef.Name+"/"+p.Spec.Password.SecretKeyRef.Key, "%s: %s", step.name, p.Name)
			require.NotNilf(t, p.Spec.MaxRestartTime, "%s: %s has no restart time", step.name, p.Name)
			assert.Equalf(t, step.s.MaxRestartTime.Duration, p.Spec.MaxRestartTime.Duration, "%s: %s", step.name, p.Name)
		}
		if ev := driftEvents(h.events()); len(ev) != 0 {
			assert.Fail(t, fmt.Sprintf("%s: drift reported for a policy change: %v", step.name, ev))
		}
		assert.Zero(t, h.modelMissing(), "%s: the graph model misses pairs", step.name)
		// A second reconcile writes nothing: the BGPPeers are as the policy wants them.
		updates = writes("update")
		h.reconcile()
		assert.Equalf(t, updates, writes("update"), "%s: BGPPeers written again", step.name)
	}
}
