package state

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv/nodetest"
)

var tNow = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func strp(s string) *string { return &s }

// mkNode is a Ready node of zone.
func mkNode(name, zone string) *corev1.Node {
	return nodetest.New(name, nodetest.Zone(zone), nodetest.ResourceVersion("100"))
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

	out, seq := l.Overlay([]*corev1.Node{a, b})
	if seq != 3 || len(out) != 3 {
		t.Fatalf("seq %d, %d nodes", seq, len(out))
	}
	if _, ok := out[0].Labels["calico-route-reflector"]; !ok {
		t.Fatal("node-a: assumed label missing")
	}
	if _, ok := a.Labels["calico-route-reflector"]; ok {
		t.Fatal("the cached node was modified")
	}
	if out[1].Annotations[extender.AnnotationDrainingSince] != "x" || out[2].Name != "node-new" {
		t.Fatalf("overlay %v %v", out[1].Annotations, out[2].Name)
	}

	// Another writer's version of node-a (101, without the label) lands first, as when the API
	// server retries the admitted request after a conflict: the change still counts...
	a1 := a.DeepCopy()
	a1.ResourceVersion = "101"
	if out, _ = l.Overlay([]*corev1.Node{a1, b, created}); l.Pending() != 2 {
		t.Fatalf("another writer's version settled the change: pending %d", l.Pending())
	} else if _, ok := out[0].Labels["calico-route-reflector"]; !ok {
		t.Fatal("node-a: assumed label missing while the request may be retried")
	}
	// ...until the cache shows it: node-a at 102 with the label settles; node-b at 104 does not
	// yet; the created node shows up.
	a2, b2 := a.DeepCopy(), b.DeepCopy()
	a2.ResourceVersion, b2.ResourceVersion = "102", "104"
	a2.Labels["calico-route-reflector"] = ""
	out, _ = l.Overlay([]*corev1.Node{a2, b2, created})
	if out[0] != a2 || l.Pending() != 1 || len(out) != 3 {
		t.Fatalf("settled: pending %d, node-a %v, %d nodes", l.Pending(), out[0].Labels, len(out))
	}
	// Expiry.
	now = now.Add(11 * time.Second)
	if out, _ = l.Overlay([]*corev1.Node{a2, b2}); l.Pending() != 0 || out[1].Annotations[extender.AnnotationDrainingSince] == "x" {
		t.Fatalf("expired: pending %d", l.Pending())
	}
}

func TestLedgerSettleGrace(t *testing.T) {
	now := tNow
	l := NewLedger(30*time.Second, func() time.Time { return now })
	a := mkNode("node-a", "zone-a")
	a.ResourceVersion = "100"
	l.Assume("default", Change{Node: "node-a", BaseRV: "100", Labels: map[string]*string{"calico-route-reflector": strp("")}})
	a1 := a.DeepCopy()
	a1.ResourceVersion = "101"
	if l.Overlay([]*corev1.Node{a1}); l.Pending() != 1 {
		t.Fatal("settled at once on a version without the change")
	}
	// The request failed for good: after the grace the newer version stands.
	now = now.Add(SettleGrace + time.Second)
	if out, _ := l.Overlay([]*corev1.Node{a1}); l.Pending() != 0 || out[0] != a1 {
		t.Fatalf("after the grace: pending %d", l.Pending())
	}
}

func TestOwnedKeysMatchExtender(t *testing.T) {
	// OwnedChanges spells out the owned label keys; they must stay those of the extender.
	want := extender.OwnedLabelKeys("k")
	n := &corev1.Node{}
	st := extender.NodeState{Labels: map[string]string{}, Annotations: map[string]string{}}
	for _, k := range want {
		st.Labels[k] = "v"
	}
	for _, k := range extender.OwnedAnnotationKeys() {
		st.Annotations[k] = "v"
	}
	lbl, ann := OwnedChanges("k", n, st)
	if len(lbl) != len(want) || len(ann) != len(extender.OwnedAnnotationKeys()) {
		t.Fatalf("labels %v annotations %v", lbl, ann)
	}
}
