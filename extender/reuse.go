package extender

import (
	"slices"
	"time"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// A plan read again at a later time.
//
// A plan depends on its input's clock only through a few instants: a node's NotReady grace and
// the wait for an awaited node (from its NotReadySince or its creation), a draining route
// reflector's removalDelay, a route reflector's BGP grace and hold, and the end of the scale-down
// window of each stabilization entry above the count the nodes ask for. Between two of them, the same nodes give the same plan at any time,
// but for the stabilization history, which gets each count again at the new time. Result.At
// returns that plan without computing it: the reconciler's settled reconcile, where nothing the
// planner reads has changed since the last plan, costs no plan (issue 38).

// stableUntil returns the first time after the plan's Now at which the plan may change by the
// clock alone (zero: never), or the plan's Now itself when it holds a time taken from its Now (a
// route reflector that starts draining now, a node awaited from now): it is then the plan of that
// instant only. res is the plan pl made.
func (pl *planner) stableUntil(res *Result) time.Time {
	now, p := pl.in.Now, pl.p
	if now.IsZero() {
		return now // no clock: the grace periods do not apply, and a later plan's do
	}
	var first time.Time
	at := func(t time.Time) {
		if t.After(now) && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	at(res.RecheckAt)
	for i, n := range pl.nodes {
		if !n.Ready {
			start := n.NotReadySince
			if start.IsZero() {
				start = n.Node.CreationTimestamp.Time
			}
			if start.IsZero() || start.After(now) {
				return now // awaited from now (AwaitedUntil)
			}
			for _, t := range [...]time.Time{n.NotReadySince, n.Node.CreationTimestamp.Time} {
				if !t.IsZero() {
					at(t)
					at(t.Add(p.NotReadyGrace))
				}
			}
		}
		if pl.dec[i].role == roleDraining && (n.DrainingSince.IsZero() || n.DrainingSince.After(now)) {
			return now // drains from now (retire)
		}
		if n.Draining() {
			at(n.DrainingSince)
			at(n.DrainingSince.Add(p.RemovalDelay))
		}
		if h := n.BGP; !h.DownSince.IsZero() || !h.UpSince.IsZero() {
			for _, t := range [...]time.Time{h.DownSince, h.UpSince} {
				if !t.IsZero() {
					at(t)
					at(t.Add(p.BGPGrace))
					at(t.Add(BGPHold(p)))
				}
			}
		}
	}
	// A stabilization entry counts until the window has passed; its end changes the plan only when
	// it holds more than the nodes ask for now (the history never holds a time after now).
	count := make(map[string]int, len(pl.counts))
	for _, c := range pl.counts {
		count[c.Key] = c.Count
	}
	for _, r := range pl.recs {
		if r.Count > count[r.Key] {
			at(r.Time.Add(p.ScaleDownWindow))
		}
	}
	return first
}

// earliest returns the earlier of two stableUntil times (zero: never).
func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero():
		return a
	case b.Before(a):
		return b
	}
	return a
}

// At returns the plan of res's input at now instead of res's time, with history as the
// stabilization history (Input.Recommendations), and true, when that is res with now's
// stabilization history (each count again at now): now is res's time, or after it and before the
// clock alone changes the plan (stableUntil), and history is res's Recommendations (what the
// reconciler passes to its next plan). The result is equal to what Plan returns for that input (TestAtIsPlan). Otherwise nil and
// false: plan again. p is the input's policy; res and its slices are shared, never modified.
func (res *Result) At(p *policy.Resolved, now time.Time, history []Recommendation) (*Result, bool) {
	if res == nil || !sameHistory(history, res.Recommendations) {
		return nil, false
	}
	if later := now.After(res.now); !later && !now.Equal(res.now) ||
		later && (res.stable.Equal(res.now) || !res.stable.IsZero() && !now.Before(res.stable)) {
		return nil, false
	}
	out := *res
	out.now = now
	out.Recommendations = nil
	for _, c := range res.counts {
		_, r := stabilize(p, history, c.Key, c.Count, now)
		out.Recommendations = append(out.Recommendations, r...)
	}
	return &out, true
}

func sameHistory(a, b []Recommendation) bool {
	return slices.EqualFunc(a, b, func(x, y Recommendation) bool {
		return x.Key == y.Key && x.Count == y.Count && x.Time.Equal(y.Time)
	})
}
