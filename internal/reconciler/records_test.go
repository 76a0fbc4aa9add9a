package reconciler

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// twinRun is one of failoverTwin's two runs.
type twinRun struct {
	h        *harness
	rendered []map[string]string // after every reconcile
	records  []string            // the kinds of the records the policy's status held, after every reconcile
}

// settle reconciles a new harness three times, interval apart, between(h) before each.
func settle(h *harness, between func(*harness), interval time.Duration) *harness {
	for range 3 {
		between(h)
		h.reconcile()
		h.now = h.now.Add(interval)
	}
	return h
}

// failoverTwin runs a transition twice on identical clusters (settled makes each): once under one leader, and once with
// a new leader (h.failover: nothing of the old one's memory) before every reconcile, so that each
// of its reconciles starts from the API state alone. The move starts with change; every reconcile
// is interval after the last; between reconciles between(h) plays calico-node (CalicoNodeStatus
// reports). Each reconcile of the second run must write what the first wrote: the rendered BGP
// configuration of every node equal after every reconcile. It returns both runs.
func failoverTwin(t *testing.T, settled func() *harness, change func(h *harness), between func(h *harness),
	steps int, interval time.Duration) (one, many *twinRun) {
	t.Helper()
	run := func(failover bool) *twinRun {
		h := settled()
		change(h)
		out := &twinRun{h: h}
		for range steps {
			if failover {
				h.failover()
			}
			between(h)
			h.reconcile()
			out.rendered = append(out.rendered, h.rendered())
			var kinds []string
			pol := &v1alpha1.RouteReflectorPolicy{}
			if err := h.client.Get(context.Background(), client.ObjectKey{Name: h.policyNm}, pol); err == nil {
				for _, tr := range pol.Status.Transitions {
					kinds = append(kinds, tr.Kind+" "+tr.Node)
				}
			}
			out.records = append(out.records, strings.Join(kinds, ","))
			h.now = h.now.Add(interval)
		}
		return out
	}
	one, many = run(false), run(true)
	for i := range one.rendered {
		for _, n := range slices.Sorted(maps.Keys(one.rendered[i])) {
			require.Equal(t, one.rendered[i][n], many.rendered[i][n],
				"reconcile %d, node %s: a new leader from the API state alone wrote otherwise (records %q)", i, n, many.records[i])
		}
	}
	return one, many
}

// sawKind: some reconcile of the run left a record of the kind in the policy's status.
func (r *twinRun) sawKind(kind transitions.Kind) bool {
	for _, s := range r.records {
		if strings.Contains(s, string(kind)+" ") {
			return true
		}
	}
	return false
}

// TestFailoverResumesRenumbering: Hierarchical racks split (maxRackSize 30 to 12 at 90 nodes)
// renumbers several route reflectors that keep their role, one per idSettle. A new leader before
// every reconcile renumbers exactly when the single leader does: the Renumber records in the
// policy's status keep the pace across leaders (before them, a new leader renumbered the next at
// once: 4.8 s after the last, live).
func TestFailoverResumesRenumbering(t *testing.T) {
	none := func(*harness) {}
	one, _ := failoverTwin(t, func() *harness {
		return settle(newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.Topology = &v1alpha1.Topology{Type: v1alpha1.Hierarchical, MaxRackSize: ptrTo(int32(30))}
		}, cluster(90)), none, 4*time.Second)
	}, func(h *harness) {
		h.editPolicy(func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.Topology = &v1alpha1.Topology{Type: v1alpha1.Hierarchical, MaxRackSize: ptrTo(int32(12))}
		})
	}, none, 30, 4*time.Second)
	require.True(t, one.sawKind(transitions.Renumber), "the switch renumbered: %q", one.records)
}

// TestFailoverResumesClientMoves: a DualPlane rack split (racks of 20 to 10 at 60 nodes, BGP
// health and the BGPSessions handover on, calico-node reporting every session up) moves clients
// through transitional peering sets onto new route reflectors, each move waiting for the new
// route reflector's sessions. A new leader before every reconcile moves them when the single
// leader does: it neither takes a client to a route reflector whose record has not settled nor
// waits again for one that has.
func TestFailoverResumesClientMoves(t *testing.T) {
	on := true
	up := func(h *harness) { h.calicoNode() }
	one, _ := failoverTwin(t, func() *harness {
		return settle(newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: ptrTo(int32(20))}
			s.BGPHealth = &v1alpha1.BGPHealth{Enabled: &on, GracePeriod: &metav1.Duration{Duration: 5 * time.Second}}
			s.Handover = v1alpha1.HandoverBGPSessions
			s.RemovalDelay = &metav1.Duration{Duration: 3 * time.Second}
		}, ipCluster(60)), up, 2*time.Second)
	}, func(h *harness) {
		h.editPolicy(func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: ptrTo(int32(10))}
		})
	}, up, 40, 2*time.Second)
	require.True(t, one.sawKind(transitions.SessionsRestart), "the split promoted: %q", one.records)
}

// TestFailoverResumesRelease: a deleted policy's release through its keeper releases its route
// reflectors one at a time, each waiting for the keeper's sessions (ReleaseStep). A new leader
// before every reconcile releases them when the single leader does.
func TestFailoverResumesRelease(t *testing.T) {
	one, _ := failoverTwin(t, func() *harness { return migrated(t, twoZoneRacks(24), dualPlaneRacksOf8) },
		func(h *harness) {
			pol := &v1alpha1.RouteReflectorPolicy{}
			require.NoError(t, h.client.Get(context.Background(), client.ObjectKey{Name: h.policyNm}, pol))
			require.NoError(t, h.client.Delete(context.Background(), pol))
		}, func(h *harness) { h.calicoNodeAllUp() }, 40, 2*time.Second)
	require.True(t, one.sawKind(transitions.ReleaseStep), "the release went in steps: %q", one.records)
}

// TestFailoverResumesHandover: a rack route reflector cordoned (DualPlane, racks of 10, BGP health
// and the BGPSessions handover on): its replacement is promoted and its clients move to it once its
// sessions are seen. A new leader before every reconcile hands over when the single leader does.
func TestFailoverResumesHandover(t *testing.T) {
	on := true
	up := func(h *harness) { h.calicoNode() }
	one, _ := failoverTwin(t, func() *harness {
		return settle(newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
			s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: ptrTo(int32(10))}
			s.BGPHealth = &v1alpha1.BGPHealth{Enabled: &on, GracePeriod: &metav1.Duration{Duration: 5 * time.Second}}
			s.Handover = v1alpha1.HandoverBGPSessions
			s.RemovalDelay = &metav1.Duration{Duration: 3 * time.Second}
		}, ipCluster(30)), up, time.Second)
	}, func(h *harness) {
		rrs := slices.Sorted(maps.Keys(h.rrs()))
		h.update(rrs[0], func(n *corev1.Node) { n.Spec.Unschedulable = true })
	}, up, 25, time.Second)
	require.True(t, one.sawKind(transitions.SessionsRestart), "the handover promoted: %q", one.records)
}

// TestProductWrite: the latest write of the product's field managers to an object's own fields,
// not after now.
func TestProductWrite(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(d)} }
	for _, tc := range []struct {
		name   string
		fields []metav1.ManagedFieldsEntry
		want   time.Time
	}{
		{"none", nil, time.Time{}},
		{"another manager", []metav1.ManagedFieldsEntry{{Manager: "kubelet", Time: at(-time.Second)}}, time.Time{}},
		{"the status subresource", []metav1.ManagedFieldsEntry{{Manager: "calico-rr-autoscaler", Subresource: "status", Time: at(-time.Second)}}, time.Time{}},
		{"after now", []metav1.ManagedFieldsEntry{{Manager: "calico-rr-autoscaler", Time: at(time.Second)}}, time.Time{}},
		{"no time", []metav1.ManagedFieldsEntry{{Manager: "calico-rr-autoscaler"}}, time.Time{}},
		{"the latest of both builds", []metav1.ManagedFieldsEntry{
			{Manager: "calico-rr-autoscaler", Time: at(-5 * time.Second)},
			{Manager: "calico-rr-autoscaler-full", Time: at(-2 * time.Second)},
			{Manager: "kubectl", Time: at(-time.Second)},
		}, now.Add(-2 * time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.True(t, tc.want.Equal(productWrite(tc.fields, now)), "got %v", productWrite(tc.fields, now))
		})
	}
}
