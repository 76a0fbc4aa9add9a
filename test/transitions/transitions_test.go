// Package transitions is the live transition proof of issue 36: the real product changes the
// layout of a cluster whose every node runs BIRD configured by Calico's confd, and the routes are
// sampled while each change happens.
package transitions

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico/crds"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/tools/bgpverify"
)

const (
	nodes = 30
	// The policy's clocks, scaled down together from Calico's and the product's defaults
	// (graceful restart 120 s, notReadyGracePeriod 2 m): a dead route reflector's stale routes
	// are gone (restart time 5 s) before its replacement (grace 10 s), as in a real cluster, where
	// the replaced RR is dead past its graceful restart when the rack's other RR is all that is left.
	restartTime = 5 * time.Second
	grace       = 10 * time.Second
	policy      = `apiVersion: routereflector.io/v1alpha1
kind: RouteReflectorPolicy
metadata: {name: default}
spec:
  topology: {type: DualPlane, maxRackSize: 10}
  notReadyGracePeriod: 10s
  removalDelay: 3s
  bgpHealth: {enabled: false}
  bgpPeer: {maxRestartTime: 5s}
  behavior: {scaleDown: {stabilizationWindowSeconds: 3}}
`
	// quiet is how long the product's state and the BIRDs' configurations must stay unchanged
	// for an event to be over (longer than removalDelay and the product's coalescing).
	quiet = 5 * time.Second
)

var (
	bgpPeersGVR   = schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: "bgppeers"}
	bgpConfigGVR  = schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: "bgpconfigurations"}
	ipPoolsGVR    = schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: "ippools"}
	nodeStatusGVR = schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: "caliconodestatuses"}
	policyGVR     = schema.GroupVersionResource{Group: "routereflector.io", Version: "v1alpha1", Resource: "routereflectorpolicies"}
	zones         = []string{"zone-a", "zone-b", "zone-c"}
	calicoExtraRs = []string{"bgppeers", "bgpconfigurations", "caliconodestatuses", "ippools", "bgpfilters", "ipamblocks",
		"blockaffinities", "ipamconfigs", "clusterinformations", "felixconfigurations", "ipreservations"}
)

// TestTransitionsOnRealBIRD is the live transition proof at about 30 nodes (issue 36, item 4):
// the real product (the built binary's `serve`, the chart's webhooks and RBAC, a real
// kube-apiserver) runs a DualPlane cluster of 30 nodes in 3 zones (a rack per zone, 2 route
// reflectors each, a spine of 2); every node runs BIRD 1.6 in its own network namespace,
// configured by Calico's confd from the same API server and reloaded (`configure`) after every
// change the product writes, as calico-node does; every node's routes and BGP protocols are read
// every 200 ms (every 100 ms in the runs recorded below, before 2026-11-29). The events run as one cluster's history: (i) a rack route reflector cordoned,
// (ii) a rack route reflector NotReady past the grace with its BIRD killed, (iii) a spine member
// the same, (iv) a zone out and back. Per event it reports the missing pair-samples, the longest
// gap, the sessions BIRD restarted by node, the protocols each configure changed and the busiest
// node's peak routes; and it asserts that no pair between nodes that keep their role is missing
// in any sample, that a route reflector that stays one in the same rack and plane keeps its
// cluster ID, that none of its sessions to nodes that keep their role restarts, and that the
// busiest node's routes peak within twice the steady state (before, or once settled after).
//
// Before issue 36's cluster-ID fix events (i) and (ii) failed all three assertions (the
// replacement changed the surviving rack mate's cluster ID, BIRD restarted every session of the
// mate, and the rack's clients lost other nodes' blocks for seconds: 1,968 and 5,639 pair-samples
// between nodes keeping their role). With it, one run on 2026-11-26 still missed 150
// pair-samples between kept nodes in (i) (a restarted session of spine member node-02) and 1 in
// (ii); later that day the Lab's configures were found a round late on some nodes (a confd watch
// rewrote bird_ipam.cfg after the lab's strip, which Debian's BIRD refused: now retried), and two
// runs beside four other builds and tests (load 6 to 12) missed none between kept nodes. It runs
// in make test (2.3 to 4 minutes): each confd runs as a user of its own (Lab.Follow), so its
// inotify instances no longer take the ones the tests beside it need.
//
// On 2026-11-27, with the mesh migration's and the rack split's fixes merged, five runs
// (RRA_TRANSITIONS_HISTORY=1 go test -count=1 -v -timeout 30m -run 'TestTransitionsOnRealBIRD$'
// ./test/transitions/, 2.3-3.4 minutes, load average 15 to 77 beside other helpers' tests) all
// passed: 0 pair-samples between nodes that keep their role and no restarted session of a
// surviving route reflector to one in any event. Per event, pair-samples lost in all (each with a
// promoted, drained or revived node at one end), longest gap, restarted sessions, busiest node's
// peak routes (at the start): (i) 194-1,453, 1.8-6.2 s, 6-10, 77-101 (59); (ii) 34-538, 1.2-5.2 s,
// 2-3, 59 (59); (iii) 421-973, 1.2-12.1 s, 1-3, 57-85 (57); (iv) out 0, 0 s, 0, 55 (55); (iv) back
// 0-138 (the revived nodes'), 0-2.0 s, 0, 55 (37).
//
// What a faster test cannot prove: the model and the plan-level checks see only end states and
// their own idea of a session; here BIRD itself decides which protocol restarts on `configure`
// (a Cease withdraws the routes at once, graceful restart does not cover it), the order and
// timing are the product's own (its webhooks, its reconciler, its removalDelay and grace), and
// a pair counts as lost only when real routing tables lack it while it happens.
//
// make test runs events (i) to (iii); TestTransitionsOnRealBIRDLarge (make test-all) runs the same
// history with (iv), the zone out and back (about 37 s of the lab's sampling more, on two cores).
// make test proves a zone out and back in parts: the product's side on the real API server
// (TestLifeOnRealAPIServer: a zone NotReady past the grace and Ready again, the graph model of
// the cluster's nodes and BGPPeers after it) and confd + BIRD + BIRD6's side without the product
// (bgpverify's TestCalicoFamilies/DualStack: each zone's BIRDs stopped and started again, every
// family's routes the model's); what only (iv) adds is the routes sampled on BIRD while the
// product replaces a zone's route reflectors.
func TestTransitionsOnRealBIRD(t *testing.T) { transitionsOnRealBIRD(t, false) }

// TestTransitionsOnRealBIRDLarge (make test-all): TestTransitionsOnRealBIRD's history with event
// (iv), zone-c out (every node's BIRD killed and NotReady past the grace) and back.
func TestTransitionsOnRealBIRDLarge(t *testing.T) {
	skipUnlessAll(t, "the live transitions proof with a zone out and back")
	transitionsOnRealBIRD(t, true)
}

func transitionsOnRealBIRD(t *testing.T, zoneOut bool) {
	if testing.Short() {
		t.Skip("the live transitions proof: needs kube-apiserver, confd and BIRD (hack/tools.sh)")
	}
	if err := bgpverify.NetnsAvailable(); err != nil {
		t.Skipf("the live transitions proof runs BIRD in network namespaces (root): %v", err)
	}
	start := time.Now()
	w := newWorld(t, false, policy)
	names := nodeNames(nodes)
	lab := w.startLab(names, len(zones))
	w.eventually("8 route reflectors (3 racks of 2, a spine of 2)", time.Minute, func() error { return w.settled(8) })
	h := startHistory(t, w, lab, names, start, sampleEvery)
	event := h.event

	// (i) A rack route reflector of zone-a cordoned: drained and replaced while its BIRD runs.
	event("(i) rack RR cordoned", func(before *roles) {
		v := before.pick(func(n *corev1.Node) bool { return !before.spine(n) && n.Labels[corev1.LabelTopologyZone] == "zone-a" })
		require.NotEmpty(t, v, "no rack route reflector in zone-a: %v", before.id)
		t.Logf("(i) cordon %s (rack %s, plane %s, %s)", v, before.rack(v), before.plane(v), before.id[v])
		_, stderr, err := w.env.Kubectl(t, testenv.UserAdmin, "cordon", v)
		require.NoError(t, err, stderr)
		w.eventually("(i) "+v+" replaced", time.Minute, func() error { return w.replaced(v) })
	}, nodes)

	// (ii) A rack route reflector of zone-b dead (its BIRD killed, no Cease) and NotReady past
	// the grace: replaced; its rack's other route reflector keeps the rack running meanwhile.
	event("(ii) rack RR NotReady past the grace, BIRD killed", func(before *roles) {
		v := before.pick(func(n *corev1.Node) bool { return !before.spine(n) && n.Labels[corev1.LabelTopologyZone] == "zone-b" })
		require.NotEmpty(t, v, "no rack route reflector in zone-b: %v", before.id)
		t.Logf("(ii) kill %s (rack %s, plane %s, %s) and set it NotReady", v, before.rack(v), before.plane(v), before.id[v])
		lab.Kill(v)
		w.ready(v, false)
		w.eventually("(ii) "+v+" replaced", grace+time.Minute, func() error { return w.replaced(v) })
	}, nodes-1)

	// (iii) A spine member dead and NotReady past the grace: replaced.
	event("(iii) spine member NotReady past the grace, BIRD killed", func(before *roles) {
		v := before.pick(func(n *corev1.Node) bool {
			return before.spine(n) && n.Labels[corev1.LabelTopologyZone] != "zone-b" && extender.IsReady(extender.FromNode(n))
		})
		require.NotEmpty(t, v, "no spine member outside zone-b: %v", before.id)
		t.Logf("(iii) kill %s (spine, plane %s, %s, %s) and set it NotReady", v, before.plane(v), before.id[v], before.zone(v))
		lab.Kill(v)
		w.ready(v, false)
		w.eventually("(iii) "+v+" replaced", grace+time.Minute, func() error { return w.replaced(v) })
	}, nodes-2)

	if !zoneOut {
		h.finish()
		return
	}
	// (iv) zone-c out: every node's BIRD killed and NotReady past the grace; then back.
	var zoneC []string
	for i, n := range names {
		if zones[i%3] == "zone-c" && lab.Running(n) {
			zoneC = append(zoneC, n)
		}
	}
	event("(iv) zone-c out", func(*roles) {
		t.Logf("(iv) kill and set NotReady the %d live nodes of zone-c", len(zoneC))
		for _, n := range zoneC {
			lab.Kill(n)
		}
		for _, n := range zoneC {
			w.ready(n, false)
		}
		time.Sleep(grace + 2*time.Second) // the product acts past the grace; settle waits for it to be done
	}, nodes-2-len(zoneC))
	event("(iv) zone-c back", func(*roles) {
		for _, n := range zoneC {
			lab.Revive(n)
			w.ready(n, true)
		}
	}, nodes-2)

	h.finish()
}

// largeNodes is the size of TestTransitionsHistoryOnRealBIRD (zones of a third each);
// RRA_TRANSITIONS_NODES sets another.

// envHistory runs TestTransitionsHistoryOnRealBIRD (make test-transitions).
const envHistory = "RRA_TRANSITIONS_HISTORY"

func largeNodes(t *testing.T) int {
	if v := os.Getenv("RRA_TRANSITIONS_NODES"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "RRA_TRANSITIONS_NODES")
		require.GreaterOrEqual(t, n, 12, "RRA_TRANSITIONS_NODES")
		return n
	}
	return 30
}

// largePolicy is the policy of TestTransitionsHistoryOnRealBIRD: DualPlane with one rack per zone
// (racks of maxRackSize), BGP health on with a short grace, the node-to-node mesh migrated off.
func largePolicy(maxRackSize int) string {
	return fmt.Sprintf(`apiVersion: routereflector.io/v1alpha1
kind: RouteReflectorPolicy
metadata: {name: default}
spec:
  topology: {type: DualPlane, maxRackSize: %d}
  notReadyGracePeriod: 10s
  removalDelay: 3s
  migrateFromNodeMesh: true
  bgpHealth: {enabled: true, gracePeriod: 5s}
  bgpPeer: {maxRestartTime: 5s}
  behavior: {scaleDown: {stabilizationWindowSeconds: 3}}
`, maxRackSize)
}

// TestTransitionsHistoryOnRealBIRD is the rest of issue 36's item 4 on the same harness as
// TestTransitionsOnRealBIRD (the built product's `serve` from the chart, a real kube-apiserver,
// one BIRD per node configured by Calico's confd and kept in sync as calico-node does, every
// node's routes and sessions read every 100 ms), as one cluster's history of largeNodes nodes in
// 3 zones: (d) the cluster starts on Calico's node-to-node mesh with no policy, and a DualPlane
// policy with migrateFromNodeMesh is applied (racks and a spine promoted, then the mesh turned
// off); (c) the policy's maxRackSize halved so each zone's rack splits; (a) a spine member
// relabelled into the other spine member's zone; (b) BGP health replacing a rack route reflector
// whose BIRD is killed while its Node stays Ready (calico-node's status reporter played from
// each BIRD's protocol table into the product's CalicoNodeStatuses), then its BIRD back; (e) the
// product runs two replicas with leader election, and the leader is killed (SIGKILL, lease not
// released) as a rack route reflector is cordoned, so the other replica finishes the
// replacement once the lease expires (the "during joins" would need nodes outside the
// Lab's fixed set: a cordon stands in); (f) the policy is deleted, and the product turns the
// mesh back on make-before-break (below spec.release.maxMeshNodes). Per event it reports and asserts what
// TestTransitionsOnRealBIRD does (with the same bound on the busiest node's peak routes).
//
// What a faster test cannot prove: that these transitions (a whole cluster leaving the mesh, a
// policy change that moves racks, a relabel that moves the spine, a replacement decided from BGP
// sessions BIRD itself reports) lose no route between nodes that keep their role while they
// happen on real BIRD, in the product's own order and timing. It runs only in `make test-all`
// (2.5-3 minutes at 30 nodes; the small test already covers the commonest events).
//
// On the code of this commit (four runs at 30 nodes) (b) passes every time; the others fail
// assertions, with the figures in their messages. (d) every run: 3,300-10,200 missing
// pair-samples between clients, gaps of 15-27 s: the mesh goes off removalDelay after the
// layout is in the API (the Delay handover), and the clients' first sessions to their rack
// route reflectors arrive in the same confd render that removes their mesh sessions (their
// first peerings, to the spine members, are de-configured at the same moment). (c) every run:
// 5,800-17,000 between clients of the zones' split racks, gaps up to 13 s, 1-11 restarted
// sessions of surviving route reflectors, and in two runs peaks of 196 and 135 routes against
// 58-59 steady. (a) two runs of three: the relabelled member's plane moves to a rack route
// reflector of another zone (two cluster IDs change, as issue 36 says) and clients that keep
// their role miss 32 and 1,586 pair-samples (4 surviving sessions restarted in the second).
// (e) one run of two: after the failover the sessions of a client of the cordoned RR's rack to
// both its route reflectors are re-rendered twice (it takes a route reflector's settings and
// drops them), so its surviving route reflector's session to it restarts twice (1,025
// pair-samples). The assertions stay: they are what the product must meet.
//
// With the make-before-break client moves (internal/reconciler/moves.go, one run on 2026-11-27)
// (c) missed no pair-sample between nodes that keep their role in its window (3,227 in all, the six
// promoted nodes' own pairs; before, 10,543 of 17,844) and peaked at 99 routes against 58; its
// check failed on the old route reflectors' sessions to the moving clients, which the plan removes
// and the sampler counted as restarts (one end's protocol is seen down before its own configure
// removes it): the sampler now counts a session neither end's final configuration has as removed.
// An event now ends only once no node is left in a transitional set and every session between
// running BIRDs is Established: (c)'s last client moves, 10 s after its first, used to fall into
// (a)'s window. With the uplink moves (the same file; one run of the final code, load about 5)
// (a), (b) and (e) pass; (c) fails on its second step's client moves (3,851 pair-samples between
// kept clients; 0 to 4,970 in six runs) and (d) as before. RRA_TRANSITIONS_UNTIL='(c)' stops the
// history after (c).
//
// (d) on 2026-11-27, read from the lab's configures and the product's Events: the product wrote
// the whole layout in one reconcile (8 promotions, every client's peering set) and turned the mesh
// off 1-1.4 s after that reconcile's Events, removalDelay after the reconcile's start (it took
// about 10 s at load 17-43, so the clock had run before the writes). The lab's configures lag
// (rounds of up to 29 and 52 s at that load), so each client's first render after the policy had
// both its first sessions to its rack route reflectors and every mesh session gone; and BGP health
// (gracePeriod 5 s) judged new route reflectors down before their first sessions were up and
// replaced them (8 -> 9 -> 8, clients moved again) or gave the spine standbys (8 -> 10 -> 8, two
// clients promoted out of the mesh and back). Two runs of the code before: 8,544 and 6,847 missing
// pair-samples in all, gaps 33 and 58 s. Now (internal/reconciler migrate.go, bgphealth.go) the
// mesh goes off only once every route reflector's sessions have settled (stamped when the writes
// are made) and, as the CalicoNodeStatuses bgpHealth keeps can be read, every client's own session
// to each of its route reflectors and every rack route reflector's to its spine member is seen
// Established (a mesh session verifies nothing); a route reflector just promoted is judged by BGP
// health only once one of its sessions was up (transitions.DefaultMax at most). Four runs
// (RRA_TRANSITIONS_UNTIL='(d)', load 10-29): the mesh went off 24-32 s after the policy (18.6 s
// after the layout's writes in one); the two runs of the final code and one before its last change
// missed 0 pair-samples between nodes that keep their role (2,612, 5,687 and 10,252 in all, 407-408
// pairs, gaps 12.8, 11.4 and 18.3 s: every missed pair has a promoted node at one end, as every
// session of a promoted node changes and the test's check leaves them out); the other run, before
// BGP health waited transitions.DefaultMax, gave the spine standbys and missed 1,186 between kept nodes (the
// two standbys' own pairs, promoted out of the mesh and back).
// That second step moved a client to its planned set as soon as its first new route reflector
// (plane 1) had settled, leaving plane 2 on the client's new session alone while it established.
// Now (moves.go, 2026-11-27) a transitional set takes the new route reflectors one at a time, each
// in place of the old one of its plane once the new one of that plane has settled, and the client
// leaves its last old one only once every new one has settled: {old 1, old 2} -> {old 1, old 2,
// new 1} -> {old 2, new 1, new 2} -> {new 1, new 2}. Runs with RRA_TRANSITIONS_UNTIL='(c)' on
// 2026-11-27, beside other helpers' tests (load average 11 to 54): before the change, one run: (c)
// 0 pair-samples between kept nodes, 5,002 in all (the six promoted nodes'), longest gap 5.2 s, no
// session restarted, peak 104 routes against 59. After it, five runs that reached (c) (a sixth
// stopped in (d), not settled at load 45): four with 0 between kept nodes (6,054, 11,141, 2,838
// and 6,165 in all, each pair with a promoted node; longest gaps 4.2, 8.3, 4.5 and 11.9 s, each to
// or from a promoted node; 8, 3, 1 and 13 sessions restarted, none a surviving route reflector's
// to a kept node; peaks 104, 104, 104 and 94); and one at load 54 (the confd/BIRD loop's longest
// round 19 s) with 149 between kept nodes and a peak of 120 (over the bound of 118): in that run
// the plan itself changed mid-event, two kept clients (node-21, node-24) becoming route reflectors
// for a while and back (their sessions re-rendered as a route reflector's), which is not the
// moves' order (the leader's log, not kept, would say why: BGP health judging the just-promoted
// route reflectors down while their BIRD lagged would do it; BGP health now waits for a new route
// reflector's first session, above). Those runs had (d) fail as before; its fix (above) came from
// another branch the same day.
//
// The whole history on 2026-11-27, both fixes merged (RRA_TRANSITIONS_HISTORY=1 go test -count=1
// -v -timeout 40m -run 'TestTransitionsHistoryOnRealBIRD$' ./test/transitions/, 3.5-6.5 minutes),
// six runs at load average 12 to 86 beside other helpers' tests: four passed every event; every
// event of every run missed 0 pair-samples between nodes that keep their role but one, below.
// Per event over the six runs, pair-samples lost in all (every one with a promoted, drained or
// killed node at one end), longest gap (to or from such a node), restarted sessions, busiest
// node's peak routes (once settled): (d) 7,997-26,320, 12.0-28.0 s, 4-67 (12-207 removed), 80
// (59), the mesh off 23-50 s after the policy; (c) 347-18,785, 3.8-16.0 s, 0-8, 102-104 (59),
// only the six planned route reflectors promoted; (a) 567-3,660, 2.8-14.3 s, 7-17, 62-90 (61); (b)
// 122-1,496, 1.5-8.5 s, 2-4, 61 (59); its BIRD back 0; (e) 127-1,699, 1.5-4.0 s, 6-9, 61 (61).
// The failures: run 3 (load 60-77) in (b), 34 pair-samples between kept nodes: client node-21
// lacked the blocks of node-08 (zone-c-rack-1's plane-1 route reflector) and of node-14 (its
// client) for 17 samples each, while no configure touched node-21, its route reflectors or the
// plane-1 path (the product's writes were node-11's promotion, node-14's transitional set and
// node-05's demotion); unexplained: the test now logs when each gap between kept nodes began
// and which of the losing node's sessions were not Established then. A possible cause, found
// later that day: the kernel's neighbor table is shared by every namespace (1,024 learned
// entries), this history's mesh needs 870 of them and other helpers' labs ran beside it; past
// the bound ARP fails ("neighbor table overflow"), and a session whose entry had expired stalls.
// The Lab now writes permanent neighbor entries, which are not counted (netns.go). Run 4 (load 60-70) failed
// (b)'s "BIRD back" on one restart, node-05->node-11 ("Socket: Connection closed" 3.5 s after
// node-05's BIRD came back): the revived BIRD's first session, closed once while establishing,
// no restart of a session that was up; the check now leaves out the first sessions of BIRDs
// started in the event (run 5 had the same, a connection collision, and passed). Runs 3 to 6 ran
// with BGP health taking a route reflector whose sessions (re)started for alive only once a
// session of its new role is Established (internal/sessions RoleUp): a client promoted by the
// rack split was reported with its client sessions to its old route reflectors Established until
// its BIRD loaded the new role, and BGP health, taking that for alive, judged it down when its
// new sessions came up slower than gracePeriod: the likely cause of the run at load 54 above
// (its leader's log was not kept; TestBGPHealthJudgesPromotedClientsByTheirNewSessions reproduces
// the mechanism and fails without the fix). In runs 3 to 6 (c) promoted only its six planned
// route reflectors. Runs 5 and 6 also ran with the harness's last change, at load 68-86, and
// passed. A failing run now keeps the product's logs, the cluster's Events and the lab's
// configures under /tmp/rra-transitions-<test>-<time>/.
//
// (f), added on 2026-11-27: its first run missed 384 pair-samples between kept clients, every one
// with client node-05 at one end: the release BGPPeer's session between node-05 and the keeper was
// configured on both ends within 7 ms, came up only about 6 s later, and the product released the
// first route reflectors at removalDelay (3 s), so node-05 had no Established session for 2.6 s.
// The release now waits for the keeper's sessions as its CalicoNodeStatus reports them
// (internal/reconciler/releasesessions.go); the next two runs passed every event, (f) with 0
// between kept nodes (19,911 and 20,139 in all, each with a released route reflector at one end),
// 1 min 27 s and 1 min 32 s from the deletion to the policy gone (15 route reflectors, one at a
// time), peak 115 routes against 61.
func TestTransitionsHistoryOnRealBIRD(t *testing.T) {
	if os.Getenv(envHistory) == "" && os.Getenv(testenv.EnvAll) == "" {
		// Not in make test: its 3 to 15 minutes (by the load) do not fit beside
		// TestTransitionsOnRealBIRD. At 100 nodes (RRA_TRANSITIONS_NODES=100) a 2-core machine
		// does not carry it: the mesh's 4,950 sessions converge (2 min 16 s), but with 100 confd
		// watches and BIRDs the API server answered the leader's lease renewal too late and the
		// product lost its lease while the policy was applied (2026-11-27). Four of six whole runs passed on 2026-11-27; one missed 34
		// pair-samples between kept nodes in (b), unexplained (docs/testing.md).
		t.Skip("the transitions history: `make test-all` and `make test-transitions` run it (" + testenv.EnvAll + "=1 or " + envHistory + "=1)")
	}
	size := largeNodes(t)
	require.NoError(t, bgpverify.NetnsAvailable(), "this test runs BIRD in network namespaces (root)")
	start := time.Now()
	perZone := (size + 2) / 3
	w := newWorld(t, true, "", leaderArgs...)
	// A second replica, without the webhooks (the API server calls the first): it takes the
	// lease while the first is stopped, so that event (e) can kill the leader while the webhooks
	// stay up.
	second := w.replica("serve-2.log")
	w.product.Stop() // releases the lease
	w.eventually("the second replica leads", time.Minute, func() error {
		if !strings.Contains(readLog(second.Log), "successfully acquired lease") {
			return fmt.Errorf("no lease acquired in %s", second.Log)
		}
		return nil
	})
	require.NoError(t, w.product.Restart(t.Context(), time.Minute), "starting the first replica again")
	w.env.AwaitWebhooks(t, 30*time.Second)
	names := nodeNames(size)
	lab := w.startLab(names, len(zones))
	h := startHistory(t, w, lab, names, start, sampleEveryLarge)
	event := h.event
	w.reportStatuses(lab)

	// (d) Mesh to route reflectors: the policy arrives on a cluster that runs the mesh.
	event("(d) mesh to route reflectors (migrateFromNodeMesh)", func(*roles) {
		applied := time.Now()
		w.applyPolicy(largePolicy(perZone))
		// When the mesh went off, and the layout the product had then and last had before.
		var meshOff time.Duration
		var atMeshOff, lastLayout string
		layout := func(r *roles) string {
			var rr []string
			for n, id := range r.id {
				rr = append(rr, n+"="+id)
			}
			slices.Sort(rr)
			return strings.Join(rr, ",")
		}
		w.eventually("(d) 8 route reflectors and the mesh off", 2*time.Minute, func() error {
			r := w.roles()
			if l := layout(r); l != lastLayout {
				t.Logf("(d) %v after the policy: route reflectors %s", time.Since(applied).Round(100*time.Millisecond), l)
				lastLayout = l
			}
			if meshOff == 0 && !w.meshOn() {
				meshOff, atMeshOff = time.Since(applied), lastLayout
				t.Logf("(d) node-to-node mesh off %v after the policy", meshOff.Round(100*time.Millisecond))
			}
			if err := w.settled(8); err != nil {
				return err
			}
			if meshOff == 0 {
				return fmt.Errorf("node-to-node mesh still on")
			}
			return nil
		})
		t.Logf("(d) the mesh went off %v after the policy, with route reflectors %s; final %s", meshOff.Round(100*time.Millisecond), atMeshOff, lastLayout)
	}, size)

	// (c) A topology change of the policy: racks of half the size, so each zone's rack splits.
	event("(c) maxRackSize halved", func(before *roles) {
		t.Logf("(c) maxRackSize %d -> %d (%d racks before)", perZone, (perZone+1)/2, before.racks())
		w.applyPolicy(largePolicy((perZone + 1) / 2))
		w.eventually("(c) racks of at most the new size", 2*time.Minute, func() error {
			r := w.roles()
			if big := r.racksOver((perZone + 1) / 2); len(big) > 0 {
				return fmt.Errorf("racks over %d nodes: %v", (perZone+1)/2, big)
			}
			return w.settledAny()
		})
	}, size)

	// (a) A spine member relabelled into the other spine member's zone.
	event("(a) spine member relabelled into the other member's zone", func(before *roles) {
		var spine []string
		for n := range before.id {
			if before.spineName[n] {
				spine = append(spine, n)
			}
		}
		slices.Sort(spine)
		require.Len(t, spine, 2, "spine members: %v", before.id)
		v, other := spine[0], spine[1]
		require.NotEqual(t, before.zone(v), before.zone(other), "the spine's members share a zone")
		t.Logf("(a) relabel %s (spine, plane %s, %s, %s) into %s, the zone of %s", v, before.plane(v), before.id[v], before.zone(v), before.zone(other), other)
		_, stderr, err := w.env.Kubectl(t, testenv.UserAdmin, "label", "node", v, "--overwrite", corev1.LabelTopologyZone+"="+before.zone(other))
		require.NoError(t, err, stderr)
		w.eventually("(a) the relabel acted on", 2*time.Minute, func() error {
			r := w.roles()
			if r.spineName[v] && r.zone(v) == r.zone(other) && r.spineName[other] {
				return fmt.Errorf("both spine members in %s", r.zone(v))
			}
			return w.settledAny()
		})
	}, size)

	// (b) BGP health: a rack route reflector's BIRD killed, its Node Ready; replaced once its
	// sessions have been down for the grace; then its BIRD back.
	var victim string
	event("(b) BGP health replaces a rack RR (BIRD killed, Node Ready)", func(before *roles) {
		victim = before.pick(func(n *corev1.Node) bool { return !before.spine(n) && n.Labels[corev1.LabelTopologyZone] == "zone-c" })
		require.NotEmpty(t, victim, "no rack route reflector in zone-c: %v", before.id)
		t.Logf("(b) kill the BIRD of %s (rack %s, plane %s, %s); its Node stays Ready", victim, before.rack(victim), before.plane(victim), before.id[victim])
		killed := time.Now()
		lab.Kill(victim)
		w.eventually("(b) "+victim+" replaced", 2*time.Minute, func() error { return w.replaced(victim) })
		t.Logf("(b) %s replaced %v after its BIRD died", victim, time.Since(killed).Round(100*time.Millisecond))
	}, size-1)
	event("(b) the killed BIRD back", func(*roles) { lab.Revive(victim) }, size)

	// (e) Leader failover during a replacement: a rack route reflector cordoned and the leading
	// replica killed at once (SIGKILL: its lease is not released); the other replica, which
	// serves the webhooks, takes the lease when it expires and finishes the replacement.
	event("(e) leader killed as a rack RR is cordoned", func(before *roles) {
		v := before.pick(func(n *corev1.Node) bool { return !before.spine(n) && n.Labels[corev1.LabelTopologyZone] == "zone-a" })
		require.NotEmpty(t, v, "no rack route reflector in zone-a: %v", before.id)
		t.Logf("(e) cordon %s (rack %s, plane %s, %s) and kill the leader", v, before.rack(v), before.plane(v), before.id[v])
		_, stderr, err := w.env.Kubectl(t, testenv.UserAdmin, "cordon", v)
		require.NoError(t, err, stderr)
		killed := time.Now()
		require.NoError(t, syscall.Kill(-second.Cmd.Process.Pid, syscall.SIGKILL))
		w.eventually("(e) the first replica leads", time.Minute, func() error {
			if strings.Count(readLog(w.product.Log), "successfully acquired lease") < 2 {
				return fmt.Errorf("the first replica has not taken the lease back")
			}
			return nil
		})
		t.Logf("(e) the first replica took the lease %v after the leader was killed", time.Since(killed).Round(100*time.Millisecond))
		w.eventually("(e) "+v+" replaced", time.Minute, func() error { return w.replaced(v) })
	}, size)

	// (f) The policy deleted (what `helm uninstall`'s hook does too): below spec.release's
	// maxMeshNodes the product turns the node-to-node mesh back on make-before-break (a keeper
	// route reflector and the release BGPPeer, the other route reflectors released one at a time,
	// the mesh on, removalDelay, then the keeper), so no client loses a route and no node's routes
	// peak over twice the steady state (issue 36, item 3).
	event("(f) policy deleted: back to the node-to-node mesh", func(before *roles) {
		t.Logf("(f) delete the policy (%d route reflectors, the mesh off: %t)", len(before.id), !w.meshOn())
		_, stderr, err := w.env.Kubectl(t, testenv.UserAdmin, "delete", "routereflectorpolicy", "default", "--wait=false")
		require.NoError(t, err, stderr)
		deleted := time.Now()
		w.eventually("(f) the policy released", 3*time.Minute, func() error { return w.released() })
		t.Logf("(f) released %v after the deletion", time.Since(deleted).Round(100*time.Millisecond))
	}, size)

	h.finish()
}

func readLog(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func nodeNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("node-%02d", i)
	}
	return names
}

// history is one cluster's life on the Lab: the confd/BIRD follow loop, the sampler, and the
// figures of each event.
type history struct {
	t          *testing.T
	w          *world
	lab        *bgpverify.Lab
	names      []string
	s          *bgpverify.Sampler
	stopFollow func() error
	start      time.Time
	report     []string
	// until and stopped: the history stops after the first event whose name starts with until
	// (RRA_TRANSITIONS_UNTIL); the later events are skipped.
	until   string
	stopped bool
}

// envUntil stops TestTransitionsHistoryOnRealBIRD after the first event whose name starts with
// its value ("(c)": the mesh migration, which applies the policy, then the rack split), to
// measure one event without the rest of the history. Each event that runs is checked as in the
// whole history.
const envUntil = "RRA_TRANSITIONS_UNTIL"

// Sampling intervals: make test's live proofs read every BIRD every 200 ms (the issues' lab, 51
// and 52; half the reads of 100 ms on make test's two cores), make test-all's every 100 ms, as
// every figure recorded before 2026-11-29 was. A pair-sample is one pair missing in one round, so
// counts at 200 ms are about half those at 100 ms for the same gap.
const (
	sampleEvery      = 200 * time.Millisecond
	sampleEveryLarge = 100 * time.Millisecond
)

// startHistory renders every node once with confd, starts the follow loop (confd's watch and
// `configure` on change, as calico-node), waits until every pair is routed, and starts sampling
// every sample.
func startHistory(t *testing.T, w *world, lab *bgpverify.Lab, names []string, start time.Time, sample time.Duration) *history {
	t.Helper()
	ctx := t.Context()
	require.NoError(t, lab.Sync(ctx), "the first confd render")
	require.NoError(t, lab.OpenInOrder(ctx), "opening the sessions")
	stopFollow, err := lab.Follow(ctx, 100*time.Millisecond)
	require.NoError(t, err)
	t.Cleanup(func() { _ = stopFollow() })
	h := &history{t: t, w: w, lab: lab, names: names, stopFollow: stopFollow, start: start, until: os.Getenv(envUntil)}
	w.keepOnFailure("configures.txt", func() string {
		var b strings.Builder
		for _, r := range lab.Reconfigures() {
			fmt.Fprintf(&b, "%s %s changed %v added %v removed %v\n", r.At.Format("15:04:05.000"), r.Node, r.Changed, r.Added, r.Removed)
		}
		return b.String()
	})
	w.eventually(fmt.Sprintf("every pair routed on the %d BIRDs", len(names)), 3*time.Minute, func() error { return h.converged(len(names)) })
	t.Logf("setup: %d nodes routed on BIRD %v after the start", len(names), time.Since(start).Round(100*time.Millisecond))
	h.s = lab.StartSampler(ctx, sample)
	t.Cleanup(h.s.Stop)
	return h
}

// event runs act, waits until the cluster settled with live BIRDs running, logs the figures of
// the window and checks them.
func (h *history) event(name string, act func(before *roles), live int) {
	t := h.t
	t.Helper()
	if h.stopped {
		t.Logf("%s: skipped (%s=%s)", name, envUntil, h.until)
		return
	}
	if h.until != "" && strings.HasPrefix(name, h.until) {
		defer func() { h.stopped = true }()
	}
	before := h.w.roles()
	wasDown := map[string]bool{}
	for _, n := range h.names {
		wasDown[n] = !h.lab.Running(n)
	}
	h.s.Begin(name)
	act(before)
	h.settle(live)
	f := h.s.End()
	// A BIRD started in the event (revived) had no session before it: its first sessions going
	// down and up again while they establish (a connection collision) restart nothing.
	var starting []string
	f.Restarts = slices.DeleteFunc(f.Restarts, func(r bgpverify.SessionRestart) bool {
		if wasDown[r.Node] || wasDown[r.Peer] {
			starting = append(starting, fmt.Sprintf("%s->%s@%v(%s)", r.Node, r.Peer, r.At.Round(100*time.Millisecond), r.Reason))
			return true
		}
		return false
	})
	after := h.w.roles()
	// The busiest node's routes once settled: the steady state after the event (the window's
	// first round is the one before).
	steady := h.steadyRoutes(name)
	t.Logf("%s; busiest node's routes once settled %d", f.String(), steady.SteadyRoutes)
	t.Logf("  roles changed: %s", before.diff(after))
	if len(f.Restarts) > 0 {
		t.Logf("  restarted sessions: %s", strings.Join(f.RestartedSessions(), " "))
	}
	if len(starting) > 0 {
		t.Logf("  first sessions of BIRDs started in the event seen going down while establishing (no restart): %s", strings.Join(starting, " "))
	}
	if len(f.Removed) > 0 {
		t.Logf("  removed sessions seen going down (neither end's configuration has them at the end): %s", strings.Join(f.RemovedSessions(), " "))
	}
	for _, r := range f.Reconfigured {
		if len(r.Changed)+len(r.Added)+len(r.Removed) > 0 {
			t.Logf("  configure %s @%v: changed %v added %v removed %v", r.Node, r.At.Sub(f.Began).Round(10*time.Millisecond), r.Changed, r.Added, r.Removed)
		}
	}
	require.NoError(t, h.s.Err(), "sampling")
	require.NotZero(t, steady.Samples, "no sample once settled")
	kept, needless := check(t, &f, before, after, steady.SteadyRoutes)
	h.report = append(h.report, fmt.Sprintf("%s; routes once settled %d; between nodes that keep their role: %d missing pair-samples, %d sessions of surviving route reflectors restarted",
		f.String(), steady.SteadyRoutes, kept, needless))
}

// steadyRoutes samples the settled cluster in a window of its own until a sampling round
// completed in it (a round reads every BIRD: slower than its interval on a loaded machine).
func (h *history) steadyRoutes(name string) bgpverify.TransitionFigures {
	wait := 500 * time.Millisecond
	for {
		h.s.Begin(name + ", steady after")
		time.Sleep(wait)
		f := h.s.End()
		if f.Samples > 0 || wait > 10*time.Second {
			return f
		}
		wait *= 2
	}
}

func (h *history) finish() {
	t := h.t
	t.Helper()
	t.Logf("transition figures per event (%d nodes, %v in all):\n%s", len(h.names), time.Since(h.start).Round(time.Second), strings.Join(h.report, "\n"))
	rounds, mean, longest, longestErr := h.lab.FollowRounds()
	t.Logf("confd/BIRD follow loop: %d rounds, %v mean, %v longest (error %v)", rounds, mean.Round(time.Millisecond), longest.Round(time.Millisecond), longestErr)
	require.NoError(t, h.stopFollow(), "the confd/BIRD follow loop")
}

// check asserts what issue 36 wants of an event: no pair lost between nodes that keep their
// role; a route reflector that stays one in its rack and plane keeps its cluster ID; none of its
// sessions to nodes that keep their role restarts; the busiest node's routes at their peak within
// twice the steady state (the larger of the busiest node's routes before and once settled after).
// It returns the missing pair-samples between nodes that keep their role and the restarted
// sessions of surviving route reflectors to them.
func check(t *testing.T, f *bgpverify.TransitionFigures, before, after *roles, steadyAfter int) (kept, needlessRestarts int) {
	t.Helper()
	keeps := func(n string) bool { return before.id[n] == after.id[n] && before.ready[n] && after.ready[n] }
	missing, pairs := f.MissingWhere(func(a, b string) bool { return keeps(a) && keeps(b) })
	// The pairs missing longest first.
	slices.SortStableFunc(pairs, func(a, b string) int {
		return f.MissingByPair[strings.Split(b, "(")[0]] - f.MissingByPair[strings.Split(a, "(")[0]]
	})
	assert.Zerof(t, missing, "%s: %d missing pair-samples in %d pairs between nodes that keep their role, most missed first: %s",
		f.Event, missing, len(pairs), strings.Join(head(pairs, 12), " "))
	if missing > 0 {
		// Which nodes the lost pair-samples between kept nodes involve (each counts at both ends).
		byNode := map[string]int{}
		for p, n := range f.MissingByPair {
			a, b, _ := strings.Cut(p, "->")
			if keeps(a) && keeps(b) {
				byNode[a] += n
				byNode[b] += n
			}
		}
		names := slices.Collect(maps.Keys(byNode))
		slices.SortFunc(names, func(a, b string) int { return cmp.Or(byNode[b]-byNode[a], strings.Compare(a, b)) })
		var parts []string
		for _, n := range head(names, 12) {
			parts = append(parts, fmt.Sprintf("%s(%s):%d", n, before.role(n), byNode[n]))
		}
		t.Logf("  %s: pair-samples lost between kept nodes, by node: %s", f.Event, strings.Join(parts, " "))
		// When each of their gaps began, and the sessions of the node that lost the route that
		// were not Established then.
		var gaps []string
		for _, g := range f.GapStarts {
			a, b, _ := strings.Cut(g.Pair, "->")
			if keeps(a) && keeps(b) {
				gaps = append(gaps, fmt.Sprintf("%s@%v(not Established: %v)", g.Pair, g.At.Round(10*time.Millisecond), g.NotEstablished))
			}
		}
		t.Logf("  %s: gaps between kept nodes began: %s", f.Event, strings.Join(head(gaps, 40), " "))
	}

	surviving := func(n string) bool {
		return before.id[n] != "" && after.id[n] != "" && before.rack(n) == after.rack(n) && before.plane(n) == after.plane(n) &&
			before.spineName[n] == after.spineName[n]
	}
	var changed []string
	for n := range before.id {
		if surviving(n) && before.id[n] != after.id[n] {
			changed = append(changed, fmt.Sprintf("%s %s -> %s", n, before.id[n], after.id[n]))
		}
	}
	sort.Strings(changed)
	assert.Emptyf(t, changed, "%s: route reflectors that stay in their rack and plane changed cluster ID", f.Event)

	var needless []string
	for _, r := range f.Restarts {
		if surviving(r.Node) && keeps(r.Peer) || surviving(r.Peer) && keeps(r.Node) {
			needless = append(needless, r.Node+"->"+r.Peer)
		}
	}
	slices.Sort(needless)
	assert.Emptyf(t, needless, "%s: %d sessions of surviving route reflectors to nodes that keep their role restarted", f.Event, len(needless))

	steady := max(f.SteadyRoutes, steadyAfter)
	assert.LessOrEqualf(t, f.PeakRoutes, 2*steady, "%s: the busiest node's routes peaked at %d (%s), more than twice the steady state %d",
		f.Event, f.PeakRoutes, f.PeakNode, steady)
	return missing, len(needless)
}

func head(s []string, n int) []string { return s[:min(n, len(s))] }

// converged: live BIRDs run and every pair among them is routed.
func (h *history) converged(live int) error {
	lab := h.lab
	if err := lab.FollowErr(); err != nil {
		return err
	}
	running := 0
	for _, n := range h.names {
		if lab.Running(n) {
			running++
		}
	}
	if running != live {
		return fmt.Errorf("%d BIRDs running, want %d", running, live)
	}
	missing, err := lab.MissingPairs(h.t.Context())
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("%d missing pairs, e.g. %s", len(missing), strings.Join(head(missing, 5), ", "))
	}
	if down := h.sessionsDown(); len(down) > 0 {
		return fmt.Errorf("%d BGP sessions between running BIRDs not Established, e.g. %s", len(down), strings.Join(head(down, 5), ", "))
	}
	return nil
}

// sessionsDown names the BGP sessions between running BIRDs that are not Established, as
// node->peer(state). Every pair routed is not enough for an event to be over: a session the event
// opened that went down (a connection collision on the lab) left its node on one plane, and the
// next event's window counted what that cost.
func (h *history) sessionsDown() []string {
	lab := h.lab
	byAddr := h.nodeByAddr()
	var out []string
	for _, n := range h.names {
		if !lab.Running(n) {
			continue
		}
		for _, p := range lab.Peers(n) {
			peer := byAddr[p.PeerIP]
			if peer == "" || !lab.Running(peer) || p.State == "Established" {
				continue
			}
			out = append(out, fmt.Sprintf("%s->%s(%s)", n, peer, p.State))
		}
	}
	slices.Sort(out)
	return out
}

// nodeByAddr maps each node's BGP address on the Lab to its name.
func (h *history) nodeByAddr() map[string]string {
	byAddr := make(map[string]string, len(h.names))
	for i, n := range h.names {
		byAddr[bgpverify.NodeAddress(i).Addr().String()] = n
	}
	return byAddr
}

// sessionsUp names the peers of node's BIRD whose session is Established now.
func (h *history) sessionsUp(node string) map[string]bool {
	byAddr := h.nodeByAddr()
	up := map[string]bool{}
	for _, p := range h.lab.Peers(node) {
		if p.State == "Established" && byAddr[p.PeerIP] != "" {
			up[byAddr[p.PeerIP]] = true
		}
	}
	return up
}

type world struct {
	t       *testing.T
	env     *testenv.Env
	product *testenv.Product
	admin   kubernetes.Interface
	kubel   kubernetes.Interface
	dyn     dynamic.Interface
	started time.Time // names the folder keepOnFailure writes to
}

// newWorld starts the API server with Calico's CRDs, an IP pool of /24 blocks and the
// BGPConfiguration (Calico's node-to-node mesh on or off), the product from its chart, and the
// policy (none when policy is empty).
func newWorld(t *testing.T, mesh bool, policy string, serveArgs ...string) *world {
	started := time.Now()
	env := testenv.Start(t, testenv.WithChartRBAC())
	env.CreateNamespace(t, testenv.ChartNamespace)
	w := &world{t: t, env: env, started: started}
	var err error
	w.admin, err = kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	w.kubel, err = kubernetes.NewForConfig(env.ConfigFor(testenv.UserKubelet))
	require.NoError(t, err)
	w.dyn, err = dynamic.NewForConfig(env.Config)
	require.NoError(t, err)
	calicoDir, err := crds.Dir()
	require.NoError(t, err)
	files := []string{testenv.RepoPath(t, "policy/crd")}
	for _, r := range calicoExtraRs {
		files = append(files, filepath.Join(calicoDir, "crd.projectcalico.org_"+r+".yaml"))
	}
	testenv.InstallCRDs(t, env.Config, files...)
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool", "metadata": map[string]any{"name": "pods"},
		"spec": map[string]any{"cidr": "10.0.0.0/8", "ipipMode": "Never", "vxlanMode": "Never", "blockSize": int64(24), "nodeSelector": "all()"},
	}}
	_, err = w.dyn.Resource(ipPoolsGVR).Create(t.Context(), pool, metav1.CreateOptions{})
	require.NoError(t, err)
	cfg := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "crd.projectcalico.org/v1", "kind": "BGPConfiguration", "metadata": map[string]any{"name": "default"},
		"spec": map[string]any{"nodeToNodeMeshEnabled": mesh, "asNumber": int64(64512)},
	}}
	_, err = w.dyn.Resource(bgpConfigGVR).Create(t.Context(), cfg, metav1.CreateOptions{})
	require.NoError(t, err)

	w.product = env.StartProduct(t, false, "", serveArgs...)
	w.keepOnFailure("serve-1.log", func() string { return readLog(w.product.Log) })
	w.keepOnFailure("events.txt", w.events)
	env.AwaitWebhooks(t, 30*time.Second)
	if policy != "" {
		// Nodes join a cluster whose policy is in force.
		w.applyPolicy(policy)
	}
	return w
}

// applyPolicy applies the policy (named default) and waits until the product has reconciled
// this generation of it.
func (w *world) applyPolicy(policy string) {
	w.t.Helper()
	out, stderr, err := w.env.KubectlStdin(w.t, testenv.UserAdmin, policy, "apply", "-f", "-")
	require.NoError(w.t, err, "apply policy\n%s%s", out, stderr)
	w.eventually("the policy's reconcile", time.Minute, func() error {
		p, err := w.dyn.Resource(policyGVR).Get(w.t.Context(), "default", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if g, _, _ := unstructured.NestedInt64(p.Object, "status", "observedGeneration"); g < p.GetGeneration() {
			return fmt.Errorf("observed generation %d of %d", g, p.GetGeneration())
		}
		return nil
	})
}

// keepOnFailure writes what get returns, when the test failed, to name in a folder under /tmp
// that outlives the test (the product's log is in a t.TempDir and its tail in the test log
// rarely says why an event failed).
func (w *world) keepOnFailure(name string, get func() string) {
	t := w.t
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		dir := filepath.Join(os.TempDir(), "rra-transitions-"+strings.ReplaceAll(t.Name(), "/", "_")+"-"+w.started.Format("20060102-150405"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Log(err)
			return
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(get()), 0o644); err != nil {
			t.Log(err)
			return
		}
		t.Logf("kept %s", p)
	})
}

// events lists the cluster's Events, oldest first (the product's decisions, for a failed run).
func (w *world) events() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := w.admin.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	items := list.Items
	slices.SortStableFunc(items, func(a, b corev1.Event) int {
		return cmp.Or(a.LastTimestamp.Compare(b.LastTimestamp.Time), a.EventTime.Compare(b.EventTime.Time))
	})
	var b strings.Builder
	for _, e := range items {
		at := e.LastTimestamp.Time
		if at.IsZero() {
			at = e.EventTime.Time
		}
		fmt.Fprintf(&b, "%s %s %s/%s %s x%d: %s\n", at.Format("15:04:05"), e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Count, e.Message)
	}
	return b.String()
}

func (w *world) eventually(what string, timeout time.Duration, f func() error) {
	w.t.Helper()
	testenv.Eventually(w.t, what, timeout, 100*time.Millisecond, f)
}

// join registers a node as the kubelet and calico-node do: its zone, its BGP address
// (projectcalico.org/IPv4Address), its pod CIDR (confd runs with USE_POD_CIDR), Ready.
// startLab starts one BIRD per node of names, configured by Calico's confd (closed when the test
// ends), and joins each node, the i-th in zones[i%nZones] with the i-th lab address and block.
func (w *world) startLab(names []string, nZones int) *bgpverify.Lab {
	w.t.Helper()
	lab, err := bgpverify.StartLab(w.env.KubeconfigPath(testenv.UserAdmin), names)
	require.NoError(w.t, err)
	w.t.Cleanup(lab.Close)
	for i, n := range names {
		w.join(n, zones[i%nZones], bgpverify.NodeAddress(i).String(), bgpverify.Block(i).String())
	}
	return lab
}

func (w *world) join(name, zone, addr, block string) {
	w.t.Helper()
	ctx := w.t.Context()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels:      map[string]string{corev1.LabelTopologyZone: zone, corev1.LabelHostname: name},
		Annotations: map[string]string{extender.AnnotationCalicoIPv4: addr}},
		Spec: corev1.NodeSpec{PodCIDR: block, PodCIDRs: []string{block}}}
	_, err := w.kubel.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	require.NoErrorf(w.t, err, "creating %s", name)
	ip := strings.Split(addr, "/")[0]
	w.updateStatus(name, func(n *corev1.Node) {
		now := metav1.Now()
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}
	})
}

func (w *world) updateStatus(name string, change func(*corev1.Node)) {
	w.t.Helper()
	ctx := w.t.Context()
	for {
		n, err := w.kubel.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		require.NoError(w.t, err)
		change(n)
		_, err = w.kubel.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		require.NoError(w.t, err)
		return
	}
}

// ready sets the Ready condition through nodes/status, as the kubelet (or the node lifecycle
// controller) does.
func (w *world) ready(name string, ready bool) {
	st := corev1.ConditionTrue
	if !ready {
		st = corev1.ConditionFalse
	}
	w.updateStatus(name, func(n *corev1.Node) {
		now := metav1.Now()
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == corev1.NodeReady {
				n.Status.Conditions[i].Status, n.Status.Conditions[i].LastHeartbeatTime, n.Status.Conditions[i].LastTransitionTime = st, now, now
			}
		}
	})
}

// roles is the product's layout as the nodes carry it.
type roles struct {
	nodes     map[string]*corev1.Node
	id        map[string]string // cluster ID of the active (not draining) route reflectors
	draining  map[string]bool
	ready     map[string]bool
	spineName map[string]bool
	rrs       map[string]string // a client's route reflectors
	peers     []string          // the product's BGPPeers
}

func (w *world) roles() *roles {
	w.t.Helper()
	ctx := w.t.Context()
	list, err := w.admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(w.t, err)
	r := &roles{nodes: map[string]*corev1.Node{}, id: map[string]string{}, draining: map[string]bool{}, ready: map[string]bool{},
		spineName: map[string]bool{}, rrs: map[string]string{}}
	for i := range list.Items {
		n := &list.Items[i]
		r.nodes[n.Name] = n
		r.ready[n.Name] = extender.IsReady(extender.FromNode(n))
		_, label := n.Labels["calico-route-reflector"]
		id := n.Annotations[extender.AnnotationClusterID]
		switch {
		case label && id != "" && extender.IsDraining(extender.FromNode(n)):
			r.draining[n.Name] = true
		case label && id != "":
			r.id[n.Name] = id
			// A DualPlane rack route reflector peers with its plane's spine member through an
			// uplink set; a spine member has none.
			r.spineName[n.Name] = n.Labels[extender.LabelUplinkSet] == ""
		default:
			r.rrs[n.Name] = n.Annotations[extender.AnnotationRouteReflectors]
		}
	}
	peers, err := w.dyn.Resource(bgpPeersGVR).List(ctx, metav1.ListOptions{})
	require.NoError(w.t, err)
	for _, p := range peers.Items {
		r.peers = append(r.peers, p.GetName())
	}
	slices.Sort(r.peers)
	return r
}

func (r *roles) spine(n *corev1.Node) bool { return r.spineName[n.Name] }
func (r *roles) rack(n string) string      { return r.nodes[n].Annotations[extender.AnnotationRack] }
func (r *roles) plane(n string) string     { return r.nodes[n].Annotations[extender.AnnotationPlane] }
func (r *roles) zone(n string) string      { return r.nodes[n].Labels[corev1.LabelTopologyZone] }

// role names n's role in a few characters: spine p<plane>, rr p<plane> (a rack route reflector), or
// client.
func (r *roles) role(n string) string {
	switch {
	case r.spineName[n]:
		return "spine p" + r.plane(n)
	case r.id[n] != "":
		return "rr p" + r.plane(n)
	}
	return "client"
}

// pick returns the first active route reflector (by name) that ok accepts.
func (r *roles) pick(ok func(*corev1.Node) bool) string {
	var names []string
	for n := range r.id {
		if ok(r.nodes[n]) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names)
	return names[0]
}

// fingerprint is everything of the layout an event may change.
func (r *roles) fingerprint() string {
	var b strings.Builder
	names := make([]string, 0, len(r.nodes))
	for n := range r.nodes {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		nd := r.nodes[n]
		fmt.Fprintf(&b, "%s %s %v %s %s %s %s %s;", n, nd.Annotations[extender.AnnotationClusterID], r.draining[n], r.rrs[n],
			nd.Labels[extender.LabelPeeringSet], nd.Labels[extender.LabelUplinkSet], r.rack(n), r.plane(n))
	}
	b.WriteString(strings.Join(r.peers, ","))
	return b.String()
}

// transitional names the nodes in a transitional peering or uplink set (sorted).
func (r *roles) transitional() []string {
	var out []string
	for n, nd := range r.nodes {
		if extender.IsTransitionalSet(nd.Labels[extender.LabelPeeringSet]) || extender.IsTransitionalSet(nd.Labels[extender.LabelUplinkSet]) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// diff says which nodes' role changed between r and o.
func (r *roles) diff(o *roles) string {
	var out []string
	for n := range r.nodes {
		a, b := r.id[n], o.id[n]
		if a == b && r.draining[n] == o.draining[n] {
			continue
		}
		desc := func(x *roles) string {
			switch {
			case x.draining[n]:
				return "draining"
			case x.id[n] != "":
				s := x.id[n]
				if x.spineName[n] {
					s += " spine"
				}
				return s + " rack " + x.rack(n) + " plane " + x.plane(n)
			}
			return "client"
		}
		out = append(out, fmt.Sprintf("%s: %s -> %s", n, desc(r), desc(o)))
	}
	slices.Sort(out)
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}

// racks is the number of racks the route reflectors serve.
func (r *roles) racks() int {
	seen := map[string]bool{}
	for n := range r.id {
		seen[r.rack(n)] = true
	}
	return len(seen)
}

// racksOver lists the racks (rack annotation of the nodes) with more than max nodes.
func (r *roles) racksOver(max int) []string {
	count := map[string]int{}
	for n := range r.nodes {
		if rk := r.rack(n); rk != "" {
			count[rk]++
		}
	}
	var out []string
	for rk, c := range count {
		if c > max {
			out = append(out, fmt.Sprintf("%s:%d", rk, c))
		}
	}
	slices.Sort(out)
	return out
}

// meshOn reads Calico's node-to-node mesh setting (on unless the default BGPConfiguration says no).
func (w *world) meshOn() bool {
	w.t.Helper()
	cfg, err := w.dyn.Resource(bgpConfigGVR).Get(w.t.Context(), "default", metav1.GetOptions{})
	require.NoError(w.t, err)
	on, found, _ := unstructured.NestedBool(cfg.Object, "spec", "nodeToNodeMeshEnabled")
	return on || !found
}

// reportStatuses plays calico-node's status reporter until the test ends: every second, every
// CalicoNodeStatus of a node of the Lab gets status.bgp from that node's BIRD protocol table
// (empty when BIRD does not answer), lastUpdated now.
func (w *world) reportStatuses(lab *bgpverify.Lab) {
	ctx, stop := context.WithCancel(w.t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w.reportBIRD(ctx, lab)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	w.t.Cleanup(func() { stop(); <-done })
}

func (w *world) reportBIRD(ctx context.Context, lab *bgpverify.Lab) {
	for _, err := range lab.ReportStatuses(ctx, w.dyn, nodeStatusGVR) {
		w.t.Log(err)
	}
}

// settledAny: nothing draining, every client with a peering set whose BGPPeer exists.
// released: the policy is gone (its finalizer dropped), the node-to-node mesh is on, and no node
// keeps a route reflector's label or cluster ID or a peering set, nor any BGPPeer the product's.
func (w *world) released() error {
	ctx := w.t.Context()
	if _, err := w.dyn.Resource(policyGVR).Get(ctx, "default", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		return fmt.Errorf("the policy still there (%v)", err)
	}
	if !w.meshOn() {
		return fmt.Errorf("node-to-node mesh off")
	}
	r := w.roles()
	for n, nd := range r.nodes {
		if _, rr := nd.Labels["calico-route-reflector"]; rr || nd.Annotations[extender.AnnotationClusterID] != "" || nd.Labels[extender.LabelPeeringSet] != "" {
			return fmt.Errorf("%s keeps its role (route reflector label %t, cluster ID %q, peering set %q)", n, rr,
				nd.Annotations[extender.AnnotationClusterID], nd.Labels[extender.LabelPeeringSet])
		}
	}
	if len(r.peers) > 0 {
		return fmt.Errorf("BGPPeers left: %v", r.peers)
	}
	return nil
}

func (w *world) settledAny() error {
	r := w.roles()
	return w.settled(len(r.id))
}

// settled: want active route reflectors, nothing draining, every client with a peering set
// whose BGPPeer exists.
func (w *world) settled(want int) error {
	r := w.roles()
	if len(r.id) != want {
		return fmt.Errorf("%d route reflectors %v, want %d", len(r.id), r.id, want)
	}
	if len(r.draining) > 0 {
		return fmt.Errorf("draining: %v", r.draining)
	}
	for n, nd := range r.nodes {
		if _, rr := r.id[n]; rr {
			continue
		}
		set := nd.Labels[extender.LabelPeeringSet]
		if set == "" || !slices.Contains(r.peers, extender.BGPPeerPrefix+set) {
			return fmt.Errorf("client %s: peering set %q without its BGPPeer", n, set)
		}
	}
	return nil
}

// replaced: victim is no active route reflector any more and no route reflector drains.
func (w *world) replaced(victim string) error {
	r := w.roles()
	if id, ok := r.id[victim]; ok {
		return fmt.Errorf("%s still a route reflector (%s)", victim, id)
	}
	if len(r.draining) > 0 {
		return fmt.Errorf("draining: %v", r.draining)
	}
	return nil
}

// settle waits until the event is over: no node left in a transitional peering or uplink set (the
// product's make-before-break moves hold a node there transitions.DefaultSettle, longer than quiet: an event that
// ended on quiet alone left its last moves to the next event's window), the product's layout
// unchanged for quiet, the BIRDs' configurations unchanged for quiet (confd rendered the last
// change and BIRD loaded it), live BIRDs running, every pair among them routed and every session
// between them Established.
func (h *history) settle(live int) {
	w, lab := h.w, h.lab
	w.t.Helper()
	last, lastConf := "", -1
	since := time.Now()
	w.eventually("the event settled", 3*time.Minute, func() error {
		r := w.roles()
		fp, nc := r.fingerprint(), len(lab.Reconfigures())
		if fp != last || nc != lastConf {
			last, lastConf, since = fp, nc, time.Now()
		}
		if moving := r.transitional(); len(moving) > 0 {
			since = time.Now()
			return fmt.Errorf("nodes in a transitional set: %v", head(moving, 5))
		}
		if err := h.converged(live); err != nil {
			since = time.Now()
			return err
		}
		if d := time.Since(since); d < quiet {
			return fmt.Errorf("changed %v ago", d.Round(100*time.Millisecond))
		}
		return nil
	})
}
