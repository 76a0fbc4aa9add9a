package reconciler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/sessions"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/transitions"
)

// A deleted policy's release is make-before-break on the sessions themselves, not on a timer: a
// route reflector of the policy other than the keeper loses its role only once the keeper's
// sessions to every Ready node the release BGPPeer gives it are seen Established in the keeper's
// CalicoNodeStatus, reported transitions.DefaultMin after the release's last change (the release
// BGPPeer, or the last route reflector released, whose sessions all restart and which then peers
// with the keeper as any node). It waits transitions.DefaultMax at most after that change, then
// goes on as before (logged); without the CalicoNodeStatus API, or when calico-node does not fill
// them in (the keeper's is still empty a period and 3 s after it was written: calico-node before
// 3.22), it waits removalDelay only, as before. The session verifier keeps and reads the keeper's
// (verify): its Sessions record of those nodes, started the change's Min after the change.
//
// On the live lab (TestTransitionsHistoryOnRealBIRD, event (f), 2026-11-27) both ends of a new
// session were configured within milliseconds, BIRD's first connects failed, and the keeper's
// session to a client came up 6 s after the release BGPPeer; the route reflectors were released
// at removalDelay (3 s), and that client had no Established session for 2.6 s: 384 pair-samples
// lost between nodes that kept their role.

// unreported is how long a CalicoNodeStatus may stay never filled in before the release takes it
// that calico-node does not report (its period and transitions.DefaultMin; the release's first step
// comes removalDelay, by default 5 minutes, after the keeper's is written with the release
// BGPPeer).
const unreported = sessions.Period*time.Second + transitions.DefaultMin

// keeperSessionsWait says whether the release must wait for the keeper's sessions (requeued), with
// change the record of the release's last change: its start, its Max the end of the wait, and its
// Min after its start the start of the keeper's Sessions record, read by the session verifier's
// rule (observe).
func (r *Reconciler) keeperSessionsWait(ctx context.Context, st *State, keeper string, change *transitions.Record) (bool, error) {
	// wait waits unless the wait is over (then it goes on, saying why).
	wait := func(why string) (bool, error) {
		if st.Now.Sub(change.Started) >= change.Max {
			r.Log.Info("policy deleted: the keeper's sessions were not all seen Established; releasing on", "policy", st.Name,
				"keeper", keeper, "since", change.Started.UTC().Format(time.RFC3339), "why", why)
			return false, nil
		}
		r.Log.V(1).Info("policy deleted: waiting for the keeper's sessions", "policy", st.Name, "keeper", keeper, "why", why)
		st.requeue(handoverRetry)
		return true, nil
	}
	nodes := r.Nodes.List()
	view := make(map[string]*extender.Node, len(nodes))
	for _, n := range nodes {
		view[n.Name] = n
	}
	ips := r.calicoBGPAddresses(ctx, true)
	if len(sessions.Addresses(ips, view, keeper)) == 0 {
		return false, nil // no address to peer with: nothing calico-node can report
	}
	var peers []string
	for _, n := range nodes {
		if n.Name != keeper && n.Labels[extender.LabelRouteReflectorID] == "" && extender.IsReady(n) &&
			len(sessions.Addresses(ips, view, n.Name)) > 0 { // Calico peers with none without an address
			peers = append(peers, n.Name)
		}
	}
	from := change.Started.Add(change.Min)
	if rec := st.trans.Get(transitions.Sessions, transitions.Subject(keeper, peers)); rec != nil && rec.Started.Before(from) {
		st.trans.Drop(transitions.Sessions)
	}
	err := r.verify(ctx, st, map[string]*sessionNeed{keeper: {peers: peers}}, view, ips, from)
	cns, missing := st.statuses[keeper], st.lacking[keeper]
	switch {
	case err != nil && !sessions.Unavailable(err):
		return false, err
	case err != nil || sessionsUp(st, keeper, peers):
		return false, nil // up, or no CalicoNodeStatus API: removalDelay only
	case cns == nil:
		return wait("no CalicoNodeStatus of the keeper yet")
	case cns.Status.LastUpdated.IsZero() && !cns.CreationTimestamp.IsZero() && st.Now.Sub(cns.CreationTimestamp.Time) >= unreported:
		return false, nil // calico-node does not fill them in (before 3.22, or not running): removalDelay only
	case missing == nil:
		return wait("the keeper's CalicoNodeStatus not reported since the last change")
	}
	names := slices.Sorted(maps.Keys(missing))
	return wait(fmt.Sprintf("%d nodes without an Established session to the keeper, e.g. %v", len(names), names[:min(5, len(names))]))
}
