package bgpverify

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDiffProtocols: a configure's protocols as BIRD compares them: a changed option (rr client,
// cluster ID) is a changed protocol, a new or gone peer is added or removed, the rest unchanged.
func TestDiffProtocols(t *testing.T) {
	proto := func(name, extra string) string {
		return "protocol bgp " + name + " from bgp_template {\n  neighbor 100.64.0.2 as 64512;\n" + extra + "}\n"
	}
	before := "router id 100.64.0.1;\n" + proto("Node_100_64_0_2", "  rr client;\n  rr cluster id 224.0.0.2;\n") + proto("Node_100_64_0_3", "") + proto("Node_100_64_0_4", "")
	after := "router id 100.64.0.1;\n" + proto("Node_100_64_0_2", "  rr client;\n  rr cluster id 224.0.0.3;\n") + proto("Node_100_64_0_3", "") + proto("Node_100_64_0_5", "")
	r := diffProtocols("n", []byte(before), []byte(after))
	require.Equal(t, []string{"Node_100_64_0_2"}, r.Changed)
	require.Equal(t, []string{"Node_100_64_0_5"}, r.Added)
	require.Equal(t, []string{"Node_100_64_0_4"}, r.Removed)
	require.Empty(t, diffProtocols("n", []byte(before), []byte(before)).Changed)
}

func TestTransitionFiguresString(t *testing.T) {
	f := TransitionFigures{Event: "e", Duration: 3 * time.Second, Samples: 30, MissingPairSamples: 3,
		MissingByPair: map[string]int{"a->b": 2, "c->b": 1}, LongestGap: 300 * time.Millisecond, LongestGapPair: "a->b",
		Restarts: []SessionRestart{{Node: "a", Peer: "b"}, {Node: "b", Peer: "a"}, {Node: "a", Peer: "c"}}, SteadyRoutes: 10, PeakRoutes: 12, PeakNode: "a"}
	s := f.String()
	for _, want := range []string{"3 missing pair-samples (2 pairs)", "longest gap 300ms (a->b)", "3 sessions restarted [a:2 b:1]", "peak 12 (a)"} {
		require.Contains(t, s, want)
	}
	n, pairs := f.MissingWhere(func(a, _ string) bool { return a == "a" })
	require.Equal(t, 2, n)
	require.Equal(t, "a->b(2)", strings.Join(pairs, " "))
}

// TestSplitRemoved: a session seen going down is a removal when neither end's final configuration
// peers with the other (the plan removed it: one end's protocol went down on the peer's Cease
// before its own configure removed it), and a restart when one end's still does (it came back, or
// is still down), or when its peer is not a node of the Lab.
func TestSplitRemoved(t *testing.T) {
	names := []string{"a", "b", "c", "d"}
	proto := func(peer string) string {
		return "protocol bgp Node_" + peer + " from bgp_template {\n  neighbor " + peer + " as 64512;\n}\n"
	}
	cfgs := [][]byte{
		[]byte(proto("d")),              // a: peers with d only at the end
		[]byte(""),                      // b: no session
		[]byte(proto("a")),              // c: still has a (a removed its side)
		[]byte(proto("a") + proto("b")), // d
	}
	peerOf := func(protocol string) int {
		if peer, ok := strings.CutPrefix(protocol, "Node_"); ok {
			return slices.Index(names, peer)
		}
		return -1
	}
	downs := []SessionRestart{{Node: "a", Peer: "b"}, {Node: "b", Peer: "a"}, {Node: "a", Peer: "c"}, {Node: "a", Peer: "d"}, {Node: "d", Peer: "b"}, {Node: "a", Peer: "Global_x"}}
	restarts, removed := splitRemoved(downs, names, cfgs, peerOf)
	require.Equal(t, []SessionRestart{{Node: "a", Peer: "b"}, {Node: "b", Peer: "a"}}, removed)
	require.Equal(t, []SessionRestart{{Node: "a", Peer: "c"}, {Node: "a", Peer: "d"}, {Node: "d", Peer: "b"}, {Node: "a", Peer: "Global_x"}}, restarts)
	f := TransitionFigures{Restarts: restarts, Removed: removed}
	require.Contains(t, f.String(), "4 sessions restarted [a:3 d:1], 2 removed")
	require.Equal(t, []string{"a->b@0.0s", "b->a@0.0s"}, f.RemovedSessions())
}
