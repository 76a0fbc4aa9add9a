package extender

import (
	"time"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// Recommendation is one desired count seen at one time, for the scale-down stabilization window.
// Key is "" for the whole policy, or a zone's name in SingleCluster.
type Recommendation struct {
	Key   string    `json:"key"`
	Time  time.Time `json:"time"`
	Count int       `json:"count"`
}

// ScaledCount applies the policy's scaling rule to a healthy node count, without min/max.
func ScaledCount(p *policy.Resolved, healthy int) int {
	if healthy <= 0 {
		return 0
	}
	switch p.Scaling {
	case ScaleBySteps:
		for _, s := range p.Steps {
			if healthy <= int(s.MaxNodes) {
				return int(s.RouteReflectors)
			}
		}
		return int(p.Steps[len(p.Steps)-1].RouteReflectors)
	case ScaleByClients:
		// The smallest d with d*N >= healthy-d clients.
		n := p.ClientsPerRR + 1
		return (healthy + n - 1) / n
	default:
		num := int64(healthy) * p.RatioNum
		return int((num + p.RatioDen - 1) / p.RatioDen)
	}
}

// The scaling kinds, re-exported for brevity.
const (
	ScaleByRatio   = policy.ScaleByRatio
	ScaleBySteps   = policy.ScaleBySteps
	ScaleByClients = policy.ScaleByClients
)

// DesiredCount is clamp(scaling(healthy), min, max), raised in MultiCluster to the count that keeps
// every route reflector within maxClientsPerRouteReflector. The planner and the admission path
// both call it.
func DesiredCount(p *policy.Resolved, healthy int) int {
	return clamp(max(ScaledCount(p, healthy), clientBoundCount(p, healthy)), p.Min, p.Max)
}

// clientBoundCount is the fewest route reflectors that keep MultiCluster's clients within the
// bound: d route reflectors carry (healthy-d) x redundancy client sessions, at most d x bound.
func clientBoundCount(p *policy.Resolved, healthy int) int {
	if p.MaxClientsPerRR <= 0 || p.Topology != v1alpha1.MultiCluster || healthy <= 0 {
		return 0
	}
	r := p.Redundancy
	return (healthy*r + p.MaxClientsPerRR + r - 1) / (p.MaxClientsPerRR + r)
}

// stabilize returns the count to use: the highest recommendation for key within the scale-down
// window (the new one included), and the history with the new recommendation and without the
// expired ones. Scaling up is therefore immediate and scaling down waits for the window.
func stabilize(p *policy.Resolved, history []Recommendation, key string, count int, now time.Time) (int, []Recommendation) {
	out := make([]Recommendation, 0, len(history)+1)
	best := count
	for _, r := range history {
		if r.Key != key {
			continue
		}
		if now.Sub(r.Time) >= p.ScaleDownWindow || r.Time.After(now) {
			continue
		}
		if r.Count > best {
			best = r.Count
		}
		out = append(out, r)
	}
	if p.ScaleDownWindow > 0 {
		out = append(out, Recommendation{Key: key, Time: now, Count: count})
	}
	return best, out
}

// stabilize is stabilize for one key of the plan: it appends the key's history to the plan's
// (Result.Recommendations) and records the key and the count, so that the plan can be moved to a
// later time (Result.At).
func (pl *planner) stabilize(key string, count int) int {
	best, r := stabilize(pl.p, pl.in.Recommendations, key, count, pl.in.Now)
	pl.recs = append(pl.recs, r...)
	pl.counts = append(pl.counts, Recommendation{Key: key, Count: count})
	return best
}

func clamp(v, lo, hi int) int {
	if v < lo {
		v = lo
	}
	if v > hi {
		v = hi
	}
	return v
}

// HealthCounts are a plan's healthy nodes (Ready and not being deleted): in all, and by zone.
type HealthCounts struct {
	Total  int
	ByZone map[string]int
}

// HealthNeutral reports whether healthy counts going from before to after leave every count the
// planner derives from them as it is: DesiredCount of the whole policy and of each zone, and
// which zones have a healthy node (a zone without one wants no route reflector). The reconciler
// absorbs a client's readiness change only then.
func HealthNeutral(p *policy.Resolved, before, after HealthCounts) bool {
	if DesiredCount(p, before.Total) != DesiredCount(p, after.Total) {
		return false
	}
	for z, n := range after.ByZone {
		b, ok := before.ByZone[z]
		if !ok || (b > 0) != (n > 0) || DesiredCount(p, b) != DesiredCount(p, n) {
			return false
		}
	}
	return len(before.ByZone) == len(after.ByZone)
}
