package state

import (
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/nodedecode"
)

func labelled(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func TestLabelKeysStrip(t *testing.T) {
	keys := NewLabelKeys()
	n := keys.Strip(labelled("a", map[string]string{
		corev1.LabelTopologyZone: "z1", corev1.LabelHostname: "a", "pool": "x",
		extender.LabelPeeringSet: "s1", extender.AnnotationRack: "r1", "calico-route-reflector": "",
	}))
	want := map[string]string{corev1.LabelTopologyZone: "z1", extender.LabelPeeringSet: "s1", extender.AnnotationRack: "r1", "calico-route-reflector": ""}
	if len(n.Labels) != len(want) {
		t.Fatalf("labels %v, want %v", n.Labels, want)
	}
	for k, v := range want {
		if got, ok := n.Labels[k]; !ok || got != v {
			t.Errorf("label %s = %q, %v; want %q", k, got, ok, v)
		}
	}
	if StrippedUnder(n) != 1 {
		t.Errorf("stamp %d, want generation 1", StrippedUnder(n))
	}
	// A node transformed twice keeps its first stamp: the labels dropped then are not back.
	keys.Want("pool")
	if again, err := keys.Transform(n); err != nil || again != n || StrippedUnder(n) != 1 {
		t.Errorf("transformed again: %p (want %p, err %v), stamp %d, want 1", again, n, err, StrippedUnder(n))
	}
	m := keys.Strip(labelled("b", map[string]string{"pool": "x", corev1.LabelHostname: "b"}))
	if m.Labels["pool"] != "x" || len(m.Labels) != 1 || StrippedUnder(m) != 2 {
		t.Errorf("after Want(pool): labels %v, stamp %d", m.Labels, StrippedUnder(m))
	}
	if n := keys.Strip(labelled("c", map[string]string{corev1.LabelHostname: "c"})); n.Labels != nil {
		t.Errorf("no kept label: labels %v, want nil", n.Labels)
	}
	// Nodes with the same kept labels share one map; others do not.
	d := keys.Strip(labelled("d", map[string]string{"pool": "x", corev1.LabelHostname: "d"}))
	e := keys.Strip(labelled("e", map[string]string{"pool": "y", corev1.LabelHostname: "e"}))
	if reflect.ValueOf(d.Labels).UnsafePointer() != reflect.ValueOf(m.Labels).UnsafePointer() {
		t.Error("b and d, both pool=x, do not share their labels map")
	}
	if reflect.ValueOf(e.Labels).UnsafePointer() == reflect.ValueOf(m.Labels).UnsafePointer() || e.Labels["pool"] != "y" {
		t.Errorf("e (pool=y) shares b's map: %v", e.Labels)
	}
}

// TestLabelKeysRefill: a key wanted after the nodes were cached is not held until every cached
// node was stripped again under a set that has it; the relist function is called once per growth.
func TestLabelKeysRefill(t *testing.T) {
	keys := NewLabelKeys()
	store := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
	relists := 0
	keys.SetRelist(store, func() { relists++ })
	for _, name := range []string{"a", "b"} {
		if err := store.Add(keys.Strip(labelled(name, map[string]string{"pool": name, corev1.LabelTopologyZone: "z"}))); err != nil {
			t.Fatal(err)
		}
	}
	if got := keys.Held(corev1.LabelTopologyZone, "routereflector.io/anything"); got != nil {
		t.Errorf("fixed keys not held: %v", got)
	}
	if got := keys.Held("pool"); len(got) != 1 {
		t.Errorf("Held(pool) before Want = %v, want [pool]", got)
	}
	if added := keys.Want("pool", corev1.LabelTopologyZone); len(added) != 1 || added[0] != "pool" || relists != 1 {
		t.Fatalf("Want added %v, relists %d; want [pool], 1", added, relists)
	}
	if added := keys.Want("pool"); added != nil || relists != 1 {
		t.Errorf("Want again added %v, relists %d", added, relists)
	}
	if got := keys.Held("pool"); len(got) != 1 {
		t.Errorf("Held(pool) before the refill = %v, want [pool]", got)
	}
	if got := keys.Refilling(); len(got) != 1 || got[0] != "pool" {
		t.Errorf("Refilling = %v, want [pool]", got)
	}
	// The relist: the informer replaces the nodes with ones stripped under the new set.
	if err := store.Update(keys.Strip(labelled("a", map[string]string{"pool": "a"}))); err != nil {
		t.Fatal(err)
	}
	if got := keys.Held("pool"); len(got) != 1 {
		t.Errorf("Held(pool) with b not refilled = %v", got)
	}
	if err := store.Update(keys.Strip(labelled("b", map[string]string{"pool": "b"}))); err != nil {
		t.Fatal(err)
	}
	if got := keys.Held("pool"); got != nil {
		t.Errorf("Held(pool) after the refill = %v", got)
	}
	if got := keys.Refilling(); got != nil {
		t.Errorf("Refilling after the refill = %v", got)
	}
}

func TestLabelKeysWantSelectors(t *testing.T) {
	keys := NewLabelKeys()
	added := keys.WantSelectors("rack == 'r1' && has(tor)", "", "all()", "zone in {'a'} || !has(spine)", "not a selector ((")
	want := map[string]bool{"rack": true, "tor": true, "zone": true, "spine": true}
	if len(added) != len(want) {
		t.Fatalf("added %v, want %v", added, want)
	}
	for _, k := range added {
		if !want[k] {
			t.Errorf("added %q", k)
		}
	}
	if _, all := keys.Keys(); all {
		t.Error("every key kept for selectors whose keys are known")
	}
}

// TestLabelKeysStripReusesCachedParts: a node stripped while the store holds an object of it points
// each kept part that is equal at the cached object's (a kubelet's status report), and keeps its
// own where it differs, or when the cached object is another node's (another UID).
func TestLabelKeysStripReusesCachedParts(t *testing.T) {
	ready := func(at time.Time) []corev1.NodeCondition {
		return []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at),
			LastHeartbeatTime: metav1.NewTime(at.Add(time.Hour))}}
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	node := func(rv string, mutate func(*corev1.Node)) *corev1.Node {
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "uid-1", ResourceVersion: rv,
				Labels: map[string]string{corev1.LabelTopologyZone: "z1"},
				// No Calico address: the InternalIPs are kept (StripNode).
				Annotations: map[string]string{extender.AnnotationRack: "r1", "other": "x"}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Conditions: ready(t0),
				Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}},
		}
		if mutate != nil {
			mutate(n)
		}
		return n
	}
	type parts struct{ annotations, conditions, addresses, taints bool }
	for _, tc := range []struct {
		name   string
		mutate func(*corev1.Node)
		shared parts
	}{
		{"a status report: every part shared", func(n *corev1.Node) {
			n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(t0.Add(2 * time.Hour)) // dropped by the strip
		}, parts{true, true, true, true}},
		{"an annotation changed", func(n *corev1.Node) { n.Annotations[extender.AnnotationRack] = "r2" }, parts{false, true, true, true}},
		{"readiness changed", func(n *corev1.Node) { n.Status.Conditions = ready(t0.Add(time.Minute)) }, parts{true, false, true, true}},
		{"an address changed", func(n *corev1.Node) { n.Status.Addresses[0].Address = "10.0.0.2" }, parts{true, true, false, true}},
		{"a taint changed", func(n *corev1.Node) { n.Spec.Taints[0].Value = "edge" }, parts{true, true, true, false}},
		// Taints and conditions equal to another node's are shared whatever the node (shareTaints,
		// shareConditions).
		{"another node of the same name", func(n *corev1.Node) { n.UID = "uid-2" }, parts{conditions: true, taints: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := NewLabelKeys()
			store := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
			keys.SetRelist(store, nil)
			was := keys.Strip(node("1", nil))
			if err := store.Add(was); err != nil {
				t.Fatal(err)
			}
			n := keys.Strip(node("2", tc.mutate))
			got := parts{
				annotations: reflect.ValueOf(n.Annotations).UnsafePointer() == reflect.ValueOf(was.Annotations).UnsafePointer(),
				conditions:  len(n.Status.Conditions) > 0 && &n.Status.Conditions[0] == &was.Status.Conditions[0],
				addresses:   &n.Status.Addresses[0] == &was.Status.Addresses[0],
				taints:      len(n.Spec.Taints) > 0 && &n.Spec.Taints[0] == &was.Spec.Taints[0],
			}
			if got != tc.shared {
				t.Errorf("shared parts %+v, want %+v", got, tc.shared)
			}
			// Sharing changes no value: the node reads as its own decode stripped alone.
			alone := NewLabelKeys().Strip(node("2", tc.mutate))
			if !equality.Semantic.DeepEqual(n, alone) {
				t.Errorf("stripped with the cache %+v, alone %+v", n, alone)
			}
			if n.ResourceVersion != "2" || was.ResourceVersion != "1" {
				t.Errorf("resourceVersions %s and %s, want 2 and 1 (the cached object untouched)", n.ResourceVersion, was.ResourceVersion)
			}
		})
	}
}

// TestLabelKeysStripSharesTaints: nodes with the same taints share one slice (the not-ready taint
// the API server puts on every new node); a different taint, or the same one added at another
// time, gets its own.
func TestLabelKeysStripSharesTaints(t *testing.T) {
	notReady := corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}
	added := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	tainted := func(name string, taints ...corev1.Taint) *corev1.Node {
		n := labelled(name, nil)
		n.Spec.Taints = taints
		return n
	}
	keys := NewLabelKeys()
	a := keys.Strip(tainted("a", notReady))
	checkSharing(t, keys, a, []sharingCase{
		{"the same taint", tainted("b", notReady), true},
		{"another effect", tainted("c", corev1.Taint{Key: notReady.Key, Effect: corev1.TaintEffectNoExecute}), false},
		{"added at a time", tainted("d", corev1.Taint{Key: notReady.Key, Effect: notReady.Effect, TimeAdded: &added}), false},
		{"one more taint", tainted("e", notReady, corev1.Taint{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoSchedule}), false},
	}, func(n *extender.Node) []corev1.Taint { return n.Spec.Taints }, func(n *corev1.Node) []corev1.Taint { return slices.Clone(n.Spec.Taints) })
	if n := keys.Strip(tainted("f")); n.Spec.Taints != nil {
		t.Errorf("untainted node's taints %v, want nil", n.Spec.Taints)
	}
	// The time added is compared as conditions' times are (writeTime): the same instant in
	// another zone is another value.
	at := func(name string, tm metav1.Time) *extender.Node {
		return keys.Strip(tainted(name, corev1.Taint{Key: notReady.Key, Effect: notReady.Effect, TimeAdded: &tm}))
	}
	utc := at("g", added)
	if n := at("h", added); &n.Spec.Taints[0] != &utc.Spec.Taints[0] {
		t.Error("taints added at the same time do not share a slice")
	}
	if n := at("i", metav1.NewTime(added.In(time.FixedZone("x", 3600)))); &n.Spec.Taints[0] == &utc.Spec.Taints[0] {
		t.Error("taints added at the same instant in another zone share a slice")
	}
}

// sharingCase is a node stripped after another, a, and whether a part of it must share a's.
type sharingCase struct {
	name   string
	node   *corev1.Node
	shared bool
}

// checkSharing strips each case's node with keys: its part (part) shares a's exactly when the
// case says, and holds what want reads of the node before the strip.
func checkSharing[T any](t *testing.T, keys *LabelKeys, a *extender.Node, cases []sharingCase, part func(*extender.Node) []T, want func(*corev1.Node) []T) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := want(tc.node)
			n := keys.Strip(tc.node)
			if got := &part(n)[0] == &part(a)[0]; got != tc.shared {
				t.Errorf("shares a's %T: %v, want %v", w, got, tc.shared)
			}
			if !equality.Semantic.DeepEqual(part(n), w) {
				t.Errorf("%v, want %v", part(n), w)
			}
		})
	}
}

// TestLabelKeysStripSharesConditions: nodes whose stripped conditions are the same (Ready since the
// same second) share one slice; another status, second, zone or one more condition does not.
func TestLabelKeysStripSharesConditions(t *testing.T) {
	at := func(sec int) metav1.Time { return metav1.NewTime(time.Date(2026, 1, 1, 0, 0, sec, 0, time.UTC)) }
	ready := func(status corev1.ConditionStatus, sec int) corev1.NodeCondition {
		return corev1.NodeCondition{Type: corev1.NodeReady, Status: status, LastTransitionTime: at(sec),
			LastHeartbeatTime: at(sec + 30), Message: "kubelet is posting ready status"}
	}
	conditioned := func(name string, conds ...corev1.NodeCondition) *corev1.Node {
		n := labelled(name, nil)
		n.Status.Conditions = conds
		return n
	}
	memory := corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue, LastTransitionTime: at(5)}
	keys := NewLabelKeys()
	a := keys.Strip(conditioned("a", ready(corev1.ConditionTrue, 1)))
	checkSharing(t, keys, a, []sharingCase{
		{"Ready since the same second (another heartbeat and message)", conditioned("b", func() corev1.NodeCondition {
			c := ready(corev1.ConditionTrue, 1)
			c.LastHeartbeatTime, c.Message = at(50), "other"
			return c
		}()), true},
		{"Ready since another second", conditioned("c", ready(corev1.ConditionTrue, 2)), false},
		{"NotReady since the same second", conditioned("d", ready(corev1.ConditionFalse, 1)), false},
		{"the same second in another zone", conditioned("e", func() corev1.NodeCondition {
			c := ready(corev1.ConditionTrue, 1)
			c.LastTransitionTime = metav1.NewTime(c.LastTransitionTime.In(time.FixedZone("x", 3600)))
			return c
		}()), false},
		{"and under memory pressure", conditioned("f", ready(corev1.ConditionTrue, 1), memory), false},
	}, func(n *extender.Node) []corev1.NodeCondition { return n.Status.Conditions },
		func(n *corev1.Node) []corev1.NodeCondition { return extender.SlimConditions(n.Status.Conditions) })
	if n := keys.Strip(conditioned("g")); n.Status.Conditions != nil {
		t.Errorf("a node without conditions has %v, want nil", n.Status.Conditions)
	}
}

// TestLabelKeysDecodedBeforeAKeyIsAdded: a node the watch decoded keeping the labels of one
// generation, then stripped after a policy wanted another key, lacks that key: Strip stamps it with
// the generation it was decoded under, so Held waits for the relist's copy instead of reading a
// selector on the key as matching nothing.
func TestLabelKeysDecodedBeforeAKeyIsAdded(t *testing.T) {
	keys := NewLabelKeys()
	store := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
	keys.SetRelist(store, nil)
	decode := func() *corev1.Node {
		n := &corev1.Node{}
		b, err := (&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "u",
			Labels: map[string]string{corev1.LabelTopologyZone: "z1", "team": "infra"}}}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if err := (nodedecode.Decoder{KeepAnnotation: KeptAnnotation, Labels: keys.DecodeLabels}).Node(b, n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	early := decode() // under generation 1: "team" is not read yet
	if _, ok := early.Labels["team"]; ok {
		t.Fatalf("decoded %v under generation 1, want no team label", early.Labels)
	}
	keys.Want("team") // generation 2 (the informer would list again)
	stripped := keys.Strip(early)
	if err := store.Add(stripped); err != nil {
		t.Fatal(err)
	}
	if got := StrippedUnder(stripped); got != 1 {
		t.Errorf("stamped with generation %d, want 1 (the decode's)", got)
	}
	if pending := keys.Held("team"); !slices.Equal(pending, []string{"team"}) {
		t.Errorf("Held(team) = %v with a node decoded before the key was wanted, want [team]", pending)
	}
	late := keys.Strip(decode()) // the relist's copy
	if err := store.Update(late); err != nil {
		t.Fatal(err)
	}
	if late.Labels["team"] != "infra" || StrippedUnder(late) != 2 {
		t.Errorf("relisted node: labels %v, generation %d; want team=infra under 2", late.Labels, StrippedUnder(late))
	}
	if pending := keys.Held("team"); pending != nil {
		t.Errorf("Held(team) = %v once every node was decoded under generation 2, want none", pending)
	}
}

// TestLabelKeysDecodeLabels: the decoder keeps exactly the keys the set keeps (the fixed ones, the
// product's prefix, the wanted ones; every key once every key is wanted), under the set's
// generation.
func TestLabelKeysDecodeLabels(t *testing.T) {
	keys := NewLabelKeys()
	keys.Want("team")
	for _, step := range []struct {
		name string
		all  bool
		want map[string]bool
	}{
		{"the keys read", false, map[string]bool{corev1.LabelTopologyZone: true, extender.LabelPeeringSet: true, "team": true,
			corev1.LabelHostname: false, "pool": false}},
		{"every key", true, map[string]bool{corev1.LabelTopologyZone: true, corev1.LabelHostname: true, "pool": true}},
	} {
		t.Run(step.name, func(t *testing.T) {
			if step.all {
				keys.WantAll()
			}
			keep, gen := keys.DecodeLabels()
			if gen != keys.Generation() {
				t.Errorf("generation %d, want the set's %d", gen, keys.Generation())
			}
			for k, want := range step.want {
				if got := keep([]byte(k)); got != want || got != keys.Kept(k) {
					t.Errorf("keep(%s) = %v, want %v (Kept: %v)", k, got, want, keys.Kept(k))
				}
			}
		})
	}
}
