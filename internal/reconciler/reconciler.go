// Package reconciler is the leader-elected control loop of calico-rr-autoscaler serve: what the
// webhooks cannot see (node deletion, nodes going NotReady, rebalancing, delayed removal, the
// BGPPeers). One reconcile handles one policy and runs an ordered list of steps with one signature
// (Cilium's BGP control plane style): plan from the cache, write the BGPPeers, patch the nodes'
// owned labels and annotations, demote the route reflectors that have been handed over, delete the
// hand-written BGPPeers the product's cover (adoptBGPPeers), delete the obsolete BGPPeers, update the policy status, record Events and export metrics.
//
// Node events are coalesced: a burst of them becomes a few plans (one workqueue key per policy,
// added after a short delay), and every plan reads the informer cache, writes only what differs
// and commits itself to the webhooks' ledger (see the webhook package). A reconcile whose only
// events are client changes the last quiet plan does not decide on now ends after checking those
// nodes (see absorb.go): its cost follows the events, not the cluster.
//
// Running product: serve starts it on the lease holder.
package reconciler

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoetcd"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/sessions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// Defaults.
const (
	// DefaultCoalesce is how long a node event waits for others before its policy is planned.
	DefaultCoalesce = 250 * time.Millisecond
	// maxCoalesce bounds the wait when reconciles are slow (see coalesce): a join left to the
	// reconciler by a replica without the lease still gets its role within about a second.
	maxCoalesce = 750 * time.Millisecond
	// DefaultResync replans every policy this often even without events.
	DefaultResync = time.Minute
	// handoverRetry is how soon a demotion that waits for its clients to move is retried.
	handoverRetry = time.Second
	patchWorkers  = 8
)

// Reconciler reconciles RouteReflectorPolicies. Its fields are set before the manager starts.
type Reconciler struct {
	// Client writes (nodes, BGPPeers, policy status) and reads BGPPeers from the cache.
	Client client.Client
	// APIReader reads CalicoNodeStatuses and the BGPConfiguration without a cache (default Client).
	APIReader client.Reader
	// Nodes and Policies read the shared informer cache.
	Nodes    *state.NodeStore
	Policies *state.Policies
	// Ledger is shared with the mutating webhook.
	Ledger *state.Ledger
	// LabelKeys, when set, are the node label keys the cache keeps: no policy is planned while
	// the cache lists the nodes again for a key it dropped (see refill.go); nil: every key.
	LabelKeys *state.LabelKeys
	// Recorder records Events on nodes and policies.
	Recorder record.EventRecorder
	// PeerAPI is the group version of Calico's BGPPeers.
	PeerAPI schema.GroupVersion
	// CRDPeerDeletes, when set (projectcalico.org/v3 served by the Calico API server), is a client
	// of crd.projectcalico.org that deletes the BGPPeers: the Calico API server runs no admission
	// for a v3 DELETE, so the guard refuses the CRD deletes it makes under its identity, and the
	// product deletes its BGPPeers where the Calico API server stores them.
	CRDPeerDeletes client.Client
	// Peers is where the BGPPeers are written; nil: the Kubernetes API through Client (and the
	// BGPPeers are watched). calicoetcd.Peers for the etcd datastore.
	Peers calico.PeerStore
	// CalicoNodes, when set (the etcd datastore), receives every node's role after its Kubernetes
	// Node. No admission webhook sees those writes: a hand change is reverted at the next
	// reconcile (set Resync to a few seconds), with an Event.
	CalicoNodes CalicoNodes
	// Configs is where the BGPConfigurations are (the node-to-node mesh); nil: the Kubernetes API.
	// calicoetcd.Configs for the etcd datastore.
	Configs calico.ConfigStore
	// NodeStatuses is where calico-node reports BGP sessions (handover BGPSessions); nil: the
	// Kubernetes API. calicoetcd.NodeStatuses for the etcd datastore.
	NodeStatuses sessions.Store
	// Changes, when set, reports the changes of a datastore no informer watches (etcd): each one
	// replans every policy after Coalesce.
	Changes ChangeWatcher
	// Now, Coalesce and Resync default to time.Now, DefaultCoalesce and DefaultResync.
	Now      func() time.Time
	Coalesce time.Duration
	Resync   time.Duration
	Log      logr.Logger

	mu      sync.Mutex
	history map[string][]extender.Recommendation // the stabilization window, per policy
	last    map[string]*extender.Result          // the previous plan, per policy
	planned map[string]*state.Planned            // the previous plan, for state.Ledger.Reuse
	facts   map[string]*viewFacts                // the previous plan's view facts
	memos   map[string]*handoverMemo             // handovers and mesh migration, per policy
	costs   map[string]*costMemo                 // the graph model's figures of the last plan shape
	// calicoRoles and calicoPeers are what was last written to (or seen in sync in) etcd: a
	// difference from them is a hand change (see syncCalicoNodes).
	calicoRoles map[string]calicoetcd.Role
	calicoPeers map[string]*apiv3.BGPPeer
	// steps and releaseSteps: a policy's reconcile, and a deleted policy's after its load.
	steps, releaseSteps []Step
	// bgp: the BGP health records of route reflectors by node, per policy (see bgpHealth).
	bgp map[string]map[string]extender.BGPHealth
	// marks and quiet: the events since each policy's last reconcile, and its last quiet full
	// plan (see absorb); unquiet: why its last full plan was not quiet (quietness).
	marks   map[string]*marks
	quiet   map[string]*quietPlan
	unquiet map[string]string
	// healthSeen: per policy, what its last reconcile read of the CalicoNodeStatuses
	// (sessions.Fingerprint), for watchBGPHealth.
	healthSeen map[string]string

	// refillNoted: the label key set generation whose refill was last reported.
	refillNoted int64

	lastTook atomic.Int64 // the last reconcile's duration, in nanoseconds
	after    func(policy string)
}

// SetAfterReconcile sets a function called at the end of every reconcile, before the next one can
// start (tests read the cluster's state there: what each reconcile left behind).
func (r *Reconciler) SetAfterReconcile(f func(policy string)) {
	r.mu.Lock()
	r.after = f
	r.mu.Unlock()
}

// Step is one reconcile function; they all have this signature and run in order. A step stops the
// pipeline by setting State.Done.
type Step struct {
	Name string
	Run  func(ctx context.Context, st *State) error
}

// PreviousPlan is what a reconcile keeps of the policy's previous plan (State.Previous).
type PreviousPlan struct {
	RouteReflectors []extender.RouteReflector
}

// State is what the steps of one reconcile share.
type State struct {
	Name    string
	Now     time.Time
	Policy  *v1alpha1.RouteReflectorPolicy // from the cache: read only
	Managed state.Managed
	Invalid field.ErrorList
	// Refilling: the node label keys the cache does not hold on every node yet (no plan).
	Refilling []string
	Input     extender.Input
	Result    *extender.Result
	// Previous is what the events step compares the plan with: the policy's previous plan in this
	// process (nil before the first: a restart or a takeover), its route reflectors only. The
	// previous result is garbage once the plan step replaced it, where holding it whole kept it
	// live through the route cost's graph model (10 MB at 65,000 nodes).
	Previous *PreviousPlan
	// View is the policy's nodes as this reconcile knows them: the cache, the ledger's assumed
	// changes, and this reconcile's own patches. Nodes in it are never modified in place.
	View map[string]*extender.Node
	// Peers are the policy's managed BGPPeers in the cache.
	Peers []*apiv3.BGPPeer
	// Demotions are route reflectors the plan makes clients, handled by the demote step.
	Demotions []string
	Changes   []RoleChange
	// Pending is what Enforce would change now, in Observe and Paused mode.
	Pending []string
	// Overlaps are the nodes this policy selects that other policies select too (node -> the
	// other policies): managed by none of them.
	Overlaps map[string][]string
	// HealthStatuses are the nodes whose CalicoNodeStatus bgpHealth keeps (the handover leaves
	// them in place).
	HealthStatuses map[string]bool
	// healthReports are the policy's CalicoNodeStatuses bgpHealth read (node -> status) and
	// healthIPs Calico's BGP addresses it read with them (nil in the Kubernetes datastore).
	healthReports map[string]*apiv3.CalicoNodeStatus
	healthIPs     map[string][]string
	// health are the BGP health records bgpHealth kept in this reconcile (node -> record).
	health map[string]extender.BGPHealth
	// SettleWaits are the route reflectors whose sessions a held client move or BGPPeer narrowing
	// waits for (moves.go): with handover BGPSessions the session verifier reads their
	// CalicoNodeStatus.
	SettleWaits map[string]bool
	// statuses, lacking and sessionIPs are what the session verifier read (verify.go): the
	// CalicoNodeStatuses it keeps by node; node -> its peers without an Established session, with
	// the families they lack, in its report read in this reconcile (a node whose report did not
	// count is not in it); Calico's BGP addresses it read with them (nil in the Kubernetes
	// datastore).
	statuses   map[string]*apiv3.CalicoNodeStatus
	lacking    map[string]map[string]extender.Families
	sessionIPs map[string][]string
	// adoptWhy: hand-written BGPPeer -> why the adopt step kept it, for the status step.
	adoptWhy map[string]string
	// handoverTimeout: the HandoverTimeout condition's message of a handover that timed out in
	// this reconcile; handedOver: one was confirmed (degradedCondition).
	handoverTimeout string
	handedOver      bool
	// outside is what stageOutside read, once per reconcile: the nodes step's two stagings both
	// model it before either writes.
	outside *outsideRead
	Requeue time.Duration
	Done    bool
	// then, set by a step, replaces the steps after it (load: a deleted policy's release).
	then []Step

	// trans are the policy's records of the moves in flight (handoverMemo.trans, loaded from its
	// status by the load step): the steps read and start them here.
	trans *transitions.Table

	facts    *viewFacts      // what the steps read of the plan's view (nil: no plan)
	patched  int             // the patches of this reconcile in View
	marks    marks           // what happened since the last reconcile (see absorb)
	valid    []state.Managed // the valid policies the plan partitioned the nodes among
	absorbed bool            // the absorb step ended the reconcile
}

// healthReported: bgpHealth keeps route reflector rr's CalicoNodeStatus (HealthStatuses) and
// calico-node has reported into it at least once (status.lastUpdated set): in a cluster whose
// calico-node does not report, none is.
func (st *State) healthReported(rr string) bool {
	cns := st.healthReports[rr]
	return st.HealthStatuses[rr] && cns != nil && !cns.Status.LastUpdated.IsZero()
}

// RoleChange is a role change this reconcile made, for Events and metrics.
type RoleChange struct {
	Node    string
	Kind    ChangeKind
	Message string
}

// requeue asks for the next reconcile within d at the latest.
func (st *State) requeue(d time.Duration) {
	if d <= 0 {
		d = 100 * time.Millisecond
	}
	if st.Requeue == 0 || d < st.Requeue {
		st.Requeue = d
	}
}

// ReleaseSteps are a deleted policy's reconcile after load, in order (load chooses them): the
// release of what the policy made (cleanup.go, release.go).
func (r *Reconciler) ReleaseSteps() []Step {
	return []Step{
		{"keep-invalid", r.keepInvalid},
		{"release", r.cleanup},
	}
}

// Steps returns the reconcile steps, in order.
func (r *Reconciler) Steps() []Step {
	return []Step{
		{"load", r.load},
		{"absorb", r.absorb},
		{"bgphealth", r.bgpHealth},
		{"plan", r.plan},
		{"bgppeers", r.enforcing(r.applyPeers)},
		{"transition", r.enforcing(r.transition)},
		{"nodes", r.enforcing(r.patchNodes)},
		{"sessions", r.enforcing(r.verifySessions)},
		{"handover", r.enforcing(r.handover)},
		{"demote", r.enforcing(r.demote)},
		{"calico-nodes", r.enforcing(r.syncCalicoNodes)},
		{"mesh", r.enforcing(r.migrateMesh)},
		{"adopt", r.enforcing(r.adoptPeers)},
		{"prune", r.enforcing(r.prunePeers)},
		{"pending", r.pending},
		{"status", r.status},
		{"events", r.enforcing(r.events)},
		{"metrics", r.metrics},
	}
}

// Reconcile implements reconcile.Reconciler for one policy.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	r.init()
	if !r.Ledger.Leader() {
		// Elected, but the cache has not caught up with the previous leader's writes yet.
		return reconcile.Result{RequeueAfter: 200 * time.Millisecond}, nil
	}
	start := time.Now()
	st := &State{Name: req.Name, Now: r.now(), marks: r.takeMarks(req.Name)}
	r.mu.Lock()
	if last := r.last[req.Name]; last != nil {
		st.Previous = &PreviousPlan{RouteReflectors: last.RouteReflectors}
	}
	r.mu.Unlock()
	log := r.Log.WithValues("policy", req.Name)
	for steps := r.steps; len(steps) > 0 && !st.Done; steps = steps[1:] {
		s := steps[0]
		if err := s.Run(ctx, st); err != nil {
			reconcileErrors.WithLabelValues(req.Name, s.Name).Inc()
			r.forgetQuiet(req.Name)
			return reconcile.Result{}, fmt.Errorf("%s: %w", s.Name, err)
		}
		if st.then != nil { // the step chose the rest of the reconcile
			steps, st.then = append([]Step{s}, st.then...), nil
		}
	}
	r.remember(st)
	took := time.Since(start)
	r.lastTook.Store(int64(took))
	r.mu.Lock()
	after := r.after
	r.mu.Unlock()
	if after != nil {
		after(req.Name)
	}
	reconcileDuration.WithLabelValues(req.Name).Observe(took.Seconds())
	if st.Result != nil {
		kv := []any{"nodes", st.Result.Summary.Nodes, "routeReflectors", st.Result.Summary.RouteReflectors, "changes", len(st.Changes)}
		if st.Previous == nil {
			// The first plan of this process (a restart or a takeover): how long it took is the
			// time a new leader leaves the cluster unplanned.
			log.Info("first reconcile", append(kv, "took", took.Round(time.Millisecond))...)
		} else {
			log.V(1).Info("reconciled", append(kv, "took", took)...)
		}
	}
	resync := r.resync()
	if st.Requeue == 0 || st.Requeue > resync {
		st.Requeue = resync
	}
	return reconcile.Result{RequeueAfter: st.Requeue}, nil
}

func (r *Reconciler) init() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.history == nil {
		r.history = map[string][]extender.Recommendation{}
		r.last = map[string]*extender.Result{}
		r.planned, r.facts = map[string]*state.Planned{}, map[string]*viewFacts{}
		r.quiet, r.unquiet = map[string]*quietPlan{}, map[string]string{}
	}
	if r.steps == nil {
		r.steps = r.Steps()
	}
	if r.releaseSteps == nil {
		r.releaseSteps = r.ReleaseSteps()
	}
}

func (r *Reconciler) resync() time.Duration {
	if r.Resync > 0 {
		return r.Resync
	}
	return DefaultResync
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}
