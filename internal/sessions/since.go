package sessions

import (
	"slices"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
)

// RestartedAfter is cns without the Established sessions that BIRD's protocol table dates before
// start less slack: a renumbering restarts every session the route reflector keeps, and is settled
// only by sessions that came up again after it. A report made after the change can still show the
// old sessions Established while the node's BIRD has not loaded it (its confd late: on the live
// lab's follow loop, stalled 18 s under load, two renumberings 10 s apart reached BIRD together).
// A promotion needs no such filter: the sessions it awaits, with its new clients, do not exist
// before BIRD loads it. calico-node copies the table's since column (sessionSince), which moves
// when a session comes up again. slack: a record's start is moved to when its reconcile's writes
// were all made (transitions.Table.Restamp), seconds after the Node patch on a loaded machine. A
// since that does not parse is kept: read as before. A calico-node whose BIRD prints another time
// zone than UTC makes each renumbering wait its record's Max.
func RestartedAfter(cns *apiv3.CalicoNodeStatus, start time.Time, slack time.Duration) *apiv3.CalicoNodeStatus {
	from := start.Add(-slack).Truncate(time.Second)
	reported := cns.Status.LastUpdated.Time
	keep := func(ps []apiv3.CalicoNodePeer) []apiv3.CalicoNodePeer {
		return slices.DeleteFunc(slices.Clone(ps), func(p apiv3.CalicoNodePeer) bool {
			at, ok := sessionSince(p.Since, reported)
			return p.State == apiv3.BGPSessionStateEstablished && ok && at.Before(from)
		})
	}
	out := *cns
	out.Status.BGP.PeersV4, out.Status.BGP.PeersV6 = keep(cns.Status.BGP.PeersV4), keep(cns.Status.BGP.PeersV6)
	return &out
}

// sessionSince reads a since column of BIRD's `show protocols` as calico-node reports it: BIRD 1.6
// prints hh:mm:ss (the node's local time; calico-node's image runs in UTC) for the last 20 hours,
// BIRD 2 adds milliseconds, and both print a date for older states. A time of day is taken on the
// date of reported, the report's time, or the day before when that would be in the future.
func sessionSince(since string, reported time.Time) (time.Time, bool) {
	if d, err := time.Parse(time.DateOnly, since); err == nil {
		return d, true
	}
	for _, layout := range []string{time.TimeOnly, "15:04:05.000"} {
		c, err := time.Parse(layout, since)
		if err != nil {
			continue
		}
		r := reported.UTC()
		at := time.Date(r.Year(), r.Month(), r.Day(), c.Hour(), c.Minute(), c.Second(), c.Nanosecond(), time.UTC)
		if at.After(r.Add(time.Minute)) {
			at = at.AddDate(0, 0, -1)
		}
		return at, true
	}
	return time.Time{}, false
}
