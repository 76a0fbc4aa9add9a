package state

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// TestReuse: Ledger.Reuse gives the last plan again on the same cache, on a cache whose objects
// changed in their resourceVersion only (with those objects in its input), and refuses a node
// changed otherwise, a node gone, an admission recorded since the commit, a BGP health record and
// the etcd datastore's inputs; its admission state stays the one published.
func TestReuse(t *testing.T) {
	f := newAdmitFixture(t, 30)
	plan := func() *Planned {
		pd, ok := f.l.PlanKept(f.pols.Valid(), f.cache, f.m, tNow, nil)
		require.True(t, ok)
		return pd
	}
	reuse := func(prev *Planned, cache []*extender.Node) (*Planned, bool) {
		return f.l.Reuse(prev, f.pols.Valid(), cache, f.m, tNow.Add(time.Second), prev.Res.Recommendations)
	}
	prev := plan()
	ps := (*f.l.states.Load())["default"]
	next, ok := reuse(prev, f.cache)
	require.True(t, ok, "the same cache")
	require.Same(t, ps, (*f.l.states.Load())["default"], "the admission state stays")
	require.Equal(t, tNow.Add(time.Second), next.In.Now)

	// A heartbeat: a new object, a new resourceVersion, nothing else.
	hb := append([]*extender.Node(nil), f.cache...)
	hb[3] = hb[3].DeepCopy()
	hb[3].ResourceVersion = "99"
	next, ok = reuse(prev, hb)
	require.True(t, ok, "a resourceVersion changed")
	require.Contains(t, next.In.Nodes, hb[3], "the input holds the cache's object")

	changed := append([]*extender.Node(nil), f.cache...)
	changed[3] = changed[3].DeepCopy()
	changed[3].Labels["tier"] = "edge"
	_, ok = reuse(prev, changed)
	require.False(t, ok, "a label changed")
	_, ok = reuse(prev, f.cache[1:])
	require.False(t, ok, "a node gone")

	f.l.BGPHealth = func() map[string]extender.BGPHealth {
		return map[string]extender.BGPHealth{f.cache[0].Name: {DownSince: tNow}}
	}
	_, ok = reuse(prev, f.cache)
	require.False(t, ok, "a BGP health record")
	f.l.BGPHealth = nil
	f.l.Registered = func() map[string]bool { return nil }
	_, ok = reuse(prev, f.cache)
	require.False(t, ok, "the etcd datastore")
	f.l.Registered = nil

	f.join("node-joined", "zone-a")
	_, ok = reuse(prev, f.cache)
	require.False(t, ok, "an admission since the commit")
}
