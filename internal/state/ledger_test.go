package state

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv/nodetest"
)

var tNow = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func strp(s string) *string { return &s }

// mkNode is a Ready node of zone.
func mkNode(name, zone string) *extender.Node {
	return extender.FromNode(nodetest.New(name, nodetest.Zone(zone), nodetest.ResourceVersion("100")))
}

func TestLedgerOverlaySettlesAndExpires(t *testing.T) {
	now := tNow
	l := NewLedger(10*time.Second, func() time.Time { return now })
	a := mkNode("node-a", "zone-a")
	a.ResourceVersion = "100"
	b := mkNode("node-b", "zone-a")
	b.ResourceVersion = "100"
	created := mkNode("node-new", "zone-a")

	l.Assume("default", Change{Node: "node-a", BaseRV: "100", Labels: map[string]*string{"calico-route-reflector": strp("")}})
	l.Assume("default", Change{Node: "node-b", AfterRV: "105", Annotations: map[string]*string{extender.AnnotationDrainingSince: strp("x")}})
	l.Assume("default", Change{Node: "node-new", Object: created, Create: true})

	out, seq := l.Overlay([]*extender.Node{a, b})
	require.Equal(t, uint64(3), seq, "seq")
	require.Len(t, out, 3, "nodes")
	require.Contains(t, out[0].Labels, "calico-route-reflector", "node-a: assumed label missing")
	require.NotContains(t, a.Labels, "calico-route-reflector", "the cached node was modified")
	require.Equal(t, "x", out[1].Annotations[extender.AnnotationDrainingSince], "overlay: node-b annotations %v", out[1].Annotations)
	require.Equal(t, "node-new", out[2].Name, "overlay: created node")

	// Another writer's version of node-a (101, without the label) lands first, as when the API
	// server retries the admitted request after a conflict: the change still counts...
	a1 := a.DeepCopy()
	a1.ResourceVersion = "101"
	out, _ = l.Overlay([]*extender.Node{a1, b, created})
	require.Equal(t, 2, l.Pending(), "another writer's version settled the change: pending")
	require.Contains(t, out[0].Labels, "calico-route-reflector", "node-a: assumed label missing while the request may be retried")
	// ...until the cache shows it: node-a at 102 with the label settles; node-b at 104 does not
	// yet; the created node shows up.
	a2, b2 := a.DeepCopy(), b.DeepCopy()
	a2.ResourceVersion, b2.ResourceVersion = "102", "104"
	a2.Labels["calico-route-reflector"] = ""
	out, _ = l.Overlay([]*extender.Node{a2, b2, created})
	require.Len(t, out, 3, "settled: nodes")
	require.Same(t, a2, out[0], "settled: node-a %v", out[0].Labels)
	require.Equal(t, 1, l.Pending(), "settled: pending")
	// Expiry.
	now = now.Add(11 * time.Second)
	out, _ = l.Overlay([]*extender.Node{a2, b2})
	assert.Equal(t, 0, l.Pending(), "expired: pending")
	assert.NotEqual(t, "x", out[1].Annotations[extender.AnnotationDrainingSince], "expired: node-b still has the assumed annotation")
}

func TestLedgerSettleGrace(t *testing.T) {
	now := tNow
	l := NewLedger(30*time.Second, func() time.Time { return now })
	a := mkNode("node-a", "zone-a")
	a.ResourceVersion = "100"
	l.Assume("default", Change{Node: "node-a", BaseRV: "100", Labels: map[string]*string{"calico-route-reflector": strp("")}})
	a1 := a.DeepCopy()
	a1.ResourceVersion = "101"
	l.Overlay([]*extender.Node{a1})
	require.Equal(t, 1, l.Pending(), "settled at once on a version without the change")
	// The request failed for good: after the grace the newer version stands.
	now = now.Add(SettleGrace + time.Second)
	out, _ := l.Overlay([]*extender.Node{a1})
	assert.Equal(t, 0, l.Pending(), "after the grace: pending")
	assert.Same(t, a1, out[0], "after the grace: the newer version stands")
}

// TestLedgerUnsettled: a change counts until the cache shows it, as in Overlay, and is dropped then.
func TestLedgerUnsettled(t *testing.T) {
	now := tNow
	l := NewLedger(30*time.Second, func() time.Time { return now })
	a := mkNode("node-a", "zone-a")
	require.False(t, l.Unsettled(a), "no change recorded")
	l.Assume("default", Change{Node: "node-a", BaseRV: "100", Labels: map[string]*string{"calico-route-reflector": strp("")}})
	require.True(t, l.Unsettled(a), "the cache holds the version the change was made on")
	a1 := a.DeepCopy()
	a1.ResourceVersion = "101"
	require.True(t, l.Unsettled(a1), "a newer version without the change, within the grace")
	a2 := a1.DeepCopy()
	a2.ResourceVersion = "102"
	a2.Labels["calico-route-reflector"] = ""
	require.False(t, l.Unsettled(a2), "the cache shows the change")
	require.Zero(t, l.Pending(), "the settled change is dropped")
	l.Assume("default", Change{Node: "node-a", BaseRV: "102", Labels: map[string]*string{"calico-route-reflector": nil}})
	now = now.Add(31 * time.Second)
	require.False(t, l.Unsettled(a2), "expired")
}

func TestOwnedKeysMatchExtender(t *testing.T) {
	// OwnedChanges spells out the owned label keys; they must stay those of the extender.
	want := extender.OwnedLabelKeys("k")
	n := &extender.Node{}
	st := extender.NodeState{Labels: map[string]string{}, Annotations: map[string]string{}}
	for _, k := range want {
		st.Labels[k] = "v"
	}
	for _, k := range extender.OwnedAnnotationKeys() {
		st.Annotations[k] = "v"
	}
	lbl, ann := OwnedChanges("k", n, st)
	assert.Len(t, lbl, len(want), "labels %v", lbl)
	assert.Len(t, ann, len(extender.OwnedAnnotationKeys()), "annotations %v", ann)
}
