package bgpverify

import (
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
