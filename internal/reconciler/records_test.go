package reconciler

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
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
	one, many = twinRuns(t, settled, change, between, steps, interval)
	for i := range one.rendered {
		for _, n := range keysOf(one.rendered[i], many.rendered[i]) {
			require.Equal(t, one.rendered[i][n], many.rendered[i][n],
				"reconcile %d, %s: a new leader from the API state alone wrote otherwise (records %q)", i, n, many.records[i])
		}
	}
	return one, many
}

// twinRuns makes failoverTwin's two runs.
func twinRuns(t *testing.T, settled func() *harness, change func(h *harness), between func(h *harness),
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
	return run(false), run(true)
}

// keysOf is the keys of a and b, sorted.
func keysOf(a, b map[string]string) []string {
	out := slices.Collect(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// deletePolicy deletes the harness's policy (its release starts: the finalizer holds it).
func (h *harness) deletePolicy() {
	h.t.Helper()
	pol := &v1alpha1.RouteReflectorPolicy{}
	require.NoError(h.t, h.client.Get(context.Background(), client.ObjectKey{Name: h.policyNm}, pol))
	require.NoError(h.t, h.client.Delete(context.Background(), pol))
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
// renumbers several route reflectors that keep their role, one per transitions.DefaultSettle. A new
// leader before every reconcile renumbers exactly when the single leader does: the Renumber records
// in the policy's status keep the pace across leaders (before them, a new leader renumbered the
// next at once: 4.8 s after the last, live).
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
		(*harness).deletePolicy, func(h *harness) { h.calicoNodeAllUp() }, 40, 2*time.Second)
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

// narrowedAt is the first reconcile of the run after which a peering set's BGPPeer selects fewer
// route reflectors than after the one before, and some of the same (-1: none): the BGPPeer
// narrowing of a make-before-break.
func (r *twinRun) narrowedAt() int {
	for i := 1; i < len(r.rendered); i++ {
		for n, sel := range r.rendered[i] {
			if !strings.HasPrefix(n, "BGPPeer "+extender.BGPPeerPrefix) {
				continue
			}
			now, ok := extender.PeerRouteReflectorIDs(sel)
			was, ok2 := extender.PeerRouteReflectorIDs(r.rendered[i-1][n])
			if ok && ok2 && len(now) > 0 && len(now) < len(was) && len(minus(now, was)) == 0 {
				return i
			}
		}
	}
	return -1
}

// TestFailoverResumesEveryKind: failoverTwin for the transition kinds the twins above leave out,
// each asserting that the single leader made the move (so that the twin compared something): an
// uplink move (a DualPlane spine member cordoned: UplinkMove records); a BGPPeer narrowing (a
// DualPlane rack's two route reflectors cordoned: the rack's BGPPeer selects the old and the new
// ones, then the new ones); BGP health's settling (the same with BGP health on and the new route
// reflectors' reports showing every session down for 20 s: starting, by their SessionsRestart
// records, they are not judged and keep their role); BGP health's failure (a DualPlane rack's two
// route reflectors' BIRDs killed: replaced at once and kept in the rack's set through the restart
// time, by their BGPDown records); a demotion (a scale-down from 9 route
// reflectors to 3, through client moves); the mesh turned off (BGPSessions); the mesh restored by
// a deleted policy's release; the mesh turned off with handover Delay (its MeshOff record) and the
// adoption of hand-written BGPPeers (their Adopt records: with Delay, the wait's start; with
// BGPSessions, that the handover step keeps CalicoNodeStatuses for their clients). Each fails with
// the records' loading broken (a new leader starting from an empty table).
func TestFailoverResumesEveryKind(t *testing.T) {
	none := func(*harness) {}
	up := func(h *harness) { h.calicoNode() }
	on := true
	dualPlane := func(health bool) func() *harness {
		return func() *harness {
			return settle(newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
				s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: ptrTo(int32(10))}
				s.RemovalDelay = &metav1.Duration{Duration: 3 * time.Second}
				if health {
					s.BGPHealth = &v1alpha1.BGPHealth{Enabled: &on, GracePeriod: &metav1.Duration{Duration: 5 * time.Second}}
				}
			}, ipCluster(30)), up, time.Minute)
		}
	}
	// cordonRack cordons the two route reflectors of the first rack.
	cordonRack := func(h *harness) {
		var id string
		for _, rr := range h.r.last[h.policyNm].RouteReflectors {
			if !rr.Spine && (id == "" || rr.ClusterID == id) {
				id = rr.ClusterID
				h.update(rr.Node, func(n *corev1.Node) { n.Spec.Unschedulable = true })
			}
		}
	}
	// slowBIRD: calico-node reports, and the route reflectors promoted after the change show
	// every session down until 20 s after it.
	type slow struct {
		rrs   map[string]string
		until time.Time
	}
	slowOf := map[*harness]*slow{}
	slowBIRD := func(h *harness) {
		h.calicoNode()
		s := slowOf[h]
		if s == nil {
			s = &slow{rrs: h.rrs(), until: h.now.Add(20 * time.Second)}
			slowOf[h] = s
		}
		if h.now.After(s.until) {
			return
		}
		h.reportStatuses(func(cns *apiv3.CalicoNodeStatus, _ []corev1.Node) {
			if _, old := s.rrs[cns.Spec.Node]; !old {
				for i := range cns.Status.BGP.PeersV4 {
					cns.Status.BGP.PeersV4[i].State = apiv3.BGPSessionStateActive
				}
			}
		})
	}
	// killRack kills the BIRDs of the first rack's two route reflectors (deadBIRDs reports it):
	// every client of the rack is left without a route reflector, so BGP health fails both at once.
	killed := map[*harness][]string{}
	killRack := func(h *harness) {
		var id string
		for _, rr := range h.r.last[h.policyNm].RouteReflectors {
			if !rr.Spine && (id == "" || rr.ClusterID == id) {
				id = rr.ClusterID
				killed[h] = append(killed[h], rr.Node)
			}
		}
	}
	deadBIRDs := func(h *harness) {
		h.calicoNodeBy(func(rr, peer string, _ extender.Families) bool {
			return !slices.Contains(killed[h], rr) && !slices.Contains(killed[h], peer)
		})
	}
	meshHarness := func(mode v1alpha1.HandoverMode) func() *harness {
		return func() *harness {
			return newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
				sessionsPolicy(3 * time.Second)(s)
				s.Handover = mode
				s.MigrateFromNodeMesh = true
			}, ipCluster(12))
		}
	}
	adoptHarness := func(mode v1alpha1.HandoverMode) func() *harness {
		return func() *harness {
			return handBuilt(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
				sessionsPolicy(5 * time.Second)(s)
				s.Handover = mode
				s.AdoptBGPPeers = true
			})
		}
	}
	mesh := func(want string) func(t *testing.T, one *twinRun) {
		return func(t *testing.T, one *twinRun) {
			last := one.rendered[len(one.rendered)-1]
			require.Equal(t, "nodeToNodeMesh="+want, last["BGPConfiguration default"], "the mesh")
		}
	}
	adopted := func(t *testing.T, one *twinRun) {
		last := one.rendered[len(one.rendered)-1]
		require.NotContains(t, last, "BGPPeer peer-to-rrs", "the hand-written BGPPeer adopted")
		require.Contains(t, last, "BGPPeer tor", "a BGPPeer to an address stays")
	}
	for _, tc := range []struct {
		name     string
		settled  func() *harness
		change   func(h *harness)
		between  func(h *harness)
		steps    int
		interval time.Duration
		check    func(t *testing.T, one *twinRun)
	}{
		{"uplink move", func() *harness {
			return settle(newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
				sessionsPolicy(3 * time.Second)(s)
				s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: ptrTo(int32(15))}
			}, ipCluster(90)), up, time.Minute)
		}, func(h *harness) {
			for _, rr := range h.r.last[h.policyNm].RouteReflectors {
				if rr.Spine && rr.Plane == 1 {
					h.update(rr.Node, func(n *corev1.Node) { n.Spec.Unschedulable = true })
				}
			}
		}, up, 10, 2 * time.Second, func(t *testing.T, one *twinRun) {
			require.True(t, one.sawKind(transitions.UplinkMove), "the spine member's rack route reflectors moved: %q", one.records)
		}},
		{"BGPPeer narrowing", dualPlane(false), cordonRack, none, 8, 2 * time.Second, func(t *testing.T, one *twinRun) {
			// The rack's BGPPeer selects the old and the new route reflectors, then the new ones.
			require.Positive(t, one.narrowedAt(), "the rack's BGPPeer narrowed after the union")
		}},
		{"BGP health settling", dualPlane(true), cordonRack, slowBIRD, 12, 2 * time.Second, func(t *testing.T, one *twinRun) {
			// The new route reflectors, their sessions reported down for 20 s from their
			// promotion, are not judged (they are starting): they keep their role, and the rack's
			// BGPPeer narrows to them.
			require.Positive(t, one.narrowedAt(), "the rack's BGPPeer narrowed after the union")
			first, last := one.rendered[0], one.rendered[len(one.rendered)-1]
			promoted := 0
			for n, s := range first {
				if _, old := slowOf[one.h].rrs[n]; !old && strings.HasPrefix(s, "rr=true") {
					promoted++
					require.True(t, strings.HasPrefix(last[n], "rr=true"), "%s, promoted with its BIRD slow, lost its role: %s", n, last[n])
				}
			}
			require.Positive(t, promoted, "route reflectors promoted")
		}},
		{"BGP health failure", func() *harness {
			return settle(newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
				s.Topology = &v1alpha1.Topology{Type: v1alpha1.DualPlane, MaxRackSize: ptrTo(int32(10))}
				s.RemovalDelay = &metav1.Duration{Duration: 75 * time.Second}
				s.BGPHealth = &v1alpha1.BGPHealth{Enabled: &on, GracePeriod: &metav1.Duration{Duration: 2 * time.Minute}}
			}, ipCluster(30)), func(h *harness) { h.r.Ledger.BGPHealth = h.r.BGPHealthRecords; up(h) }, time.Minute)
		}, killRack, deadBIRDs, 12, 2 * time.Second, func(t *testing.T, one *twinRun) {
			// Replaced at once (a client orphaned), and kept in the rack's BGPPeer beside the
			// replacements through the restart time (staleHold): its BGPDown records say both.
			require.True(t, one.sawKind(transitions.BGPDown), "BGP health's records: %q", one.records)
			dead := killed[one.h]
			last := one.rendered[len(one.rendered)-1]
			for _, rr := range dead {
				require.True(t, strings.HasPrefix(last[rr], "rr=false") || strings.Contains(one.h.node(rr).Annotations[extender.AnnotationDrainingSince], "T"),
					"%s, its BIRD dead, neither replaced nor draining: %s", rr, last[rr])
			}
			sets := 0
			for n, sel := range last {
				ids, ok := extender.PeerRouteReflectorIDs(sel)
				if !strings.HasPrefix(n, "BGPPeer "+extender.BGPPeerPrefix+"rack-") || !ok || !slices.Contains(ids, dead[0]) {
					continue
				}
				sets++
				for _, rr := range dead {
					require.Contains(t, ids, extender.RouteReflectorID(rr), "%s keeps the rack's dead route reflectors: %v", n, ids)
				}
				require.Greater(t, len(ids), len(dead), "the replacements in %s: %v", n, ids)
			}
			require.Positive(t, sets, "the rack's clients' set")
		}},
		{"demotion", func() *harness {
			return settle(newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
				s.RemovalDelay = &metav1.Duration{Duration: 3 * time.Second}
				s.MinRouteReflectors = ptrTo(int32(9))
				s.Behavior = &v1alpha1.Behavior{ScaleDown: &v1alpha1.ScaleDown{StabilizationWindowSeconds: ptrTo(int32(0))}}
			}, cluster(30)), none, time.Minute)
		}, func(h *harness) {
			h.editPolicy(func(s *v1alpha1.RouteReflectorPolicySpec) { s.MinRouteReflectors = nil })
		}, none, 17, 2 * time.Second, func(t *testing.T, one *twinRun) {
			require.Len(t, one.h.rrs(), 3, "scaled down")
		}},
		{"mesh off, BGPSessions", meshHarness(v1alpha1.HandoverBGPSessions), none, up, 8, time.Second, mesh("off")},
		{"mesh restore", func() *harness {
			return migrated(t, twoZoneRacks(24), func(s *v1alpha1.RouteReflectorPolicySpec) {
				dualPlaneRacksOf8(s)
				s.RemovalDelay = &metav1.Duration{Duration: 5 * time.Second}
			})
		}, (*harness).deletePolicy, func(h *harness) { h.calicoNodeAllUp() }, 22, 2 * time.Second, mesh("on")},
		{"mesh off, Delay", meshHarness(v1alpha1.HandoverDelay), none, none, 12, time.Second, mesh("off")},
		{"adopt, Delay", adoptHarness(v1alpha1.HandoverDelay), none, none, 8, time.Second, adopted},
		{"adopt, BGPSessions", adoptHarness(v1alpha1.HandoverBGPSessions), none, up, 5, time.Second, adopted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			one, _ := failoverTwin(t, tc.settled, tc.change, tc.between, tc.steps, tc.interval)
			tc.check(t, one)
		})
	}
}

// TestFailoverResumesBoundedHandover: four route reflectors of nine cordoned (handover
// BGPSessions), more replacements than MaxNodeStatuses: the session verifier reads them a few at a
// time, and a replacement seen with every client Established is kept as an Up Sessions record in
// the policy's status. A new leader before every reconcile, reading those records from the API
// state alone, hands over when the single leader does (with the verification in memory, each new
// leader read the first replacements again and never reached the others before removalDelay).
func TestFailoverResumesBoundedHandover(t *testing.T) {
	var drained []string
	one, many := failoverTwin(t, func() *harness {
		return settle(newHarness(t, func(s *v1alpha1.RouteReflectorPolicySpec) {
			sessionsPolicy(time.Hour)(s)
			s.MinRouteReflectors = ptr(int32(9))
		}, ipCluster(30)), func(*harness) {}, transitions.DefaultMax)
	}, func(h *harness) {
		drained = slices.Sorted(maps.Keys(h.rrs()))[:4]
		for _, rr := range drained {
			h.update(rr, func(n *corev1.Node) { n.Spec.Unschedulable = true })
		}
	}, func(h *harness) { h.calicoNode() }, 40, time.Second)
	require.True(t, one.sawKind(transitions.Sessions), "the verifier kept Sessions records: %q", one.records)
	for _, d := range drained {
		_, ok := many.h.rrs()[d]
		require.False(t, ok, "%s not handed over by the new leaders: %v", d, many.h.rrs())
	}
}

// TestPatchThatLandsAndFailsRestartsItsRecords: a node patch the API server writes but whose
// answer is lost (a timeout 10 s later): the reconcile fails, and the records of its moves count
// from when the call returned, confirmed in the policy's status. Left pending from the reconcile's
// start, this leader's waits would count from before the write reached the node.
func TestPatchThatLandsAndFailsRestartsItsRecords(t *testing.T) {
	h := newHarness(t, nil, cluster(30))
	var clock atomic.Int64
	clock.Store(h.now.UnixNano())
	h.r.Now = func() time.Time { return time.Unix(0, clock.Load()).UTC() }
	var failed atomic.Bool
	h.r.Client = interceptor.NewClient(h.client.(client.WithWatch), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			if err := c.Patch(ctx, obj, p, opts...); err != nil {
				return err
			}
			if _, ok := obj.(*corev1.Node); ok && failed.CompareAndSwap(false, true) {
				clock.Add(int64(10 * time.Second))
				return apierrors.NewTimeoutError("the answer lost", 10)
			}
			return nil
		},
	})
	began := h.r.Now()
	h.sync()
	_, err := h.r.Reconcile(context.Background(), request(h.policyNm))
	require.ErrorContains(t, err, "the answer lost")
	pol := &v1alpha1.RouteReflectorPolicy{}
	require.NoError(t, h.client.Get(context.Background(), client.ObjectKey{Name: h.policyNm}, pol))
	require.NotEmpty(t, pol.Status.Transitions, "the promotions' records")
	for _, tr := range pol.Status.Transitions {
		require.Falsef(t, tr.Pending, "%s %s still pending", tr.Kind, tr.Node)
		require.Truef(t, !tr.StartedAt.Time.Before(began.Add(10*time.Second)), "%s %s started %v, before the failed call returned (%v)",
			tr.Kind, tr.Node, tr.StartedAt.Time, began.Add(10*time.Second))
	}
}
