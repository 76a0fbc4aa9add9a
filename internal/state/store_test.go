package state

import (
	"fmt"
	"slices"
	"testing"

	toolscache "k8s.io/client-go/tools/cache"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// TestNodeStoreClientsOf: the clients of a route reflector are the nodes whose route-reflector
// list names it (a whole name, not a prefix), and follow a node's list as it changes.
func TestNodeStoreClientsOf(t *testing.T) {
	idx := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, NodeIndexers())
	store := NewNodeStore(idx)
	client := func(name, rrs string) *extender.Node {
		n := &extender.Node{ObjectMeta: extender.ObjectMeta{Name: name}}
		if rrs != "" {
			n.Annotations = map[string]string{extender.AnnotationRouteReflectors: rrs}
		}
		return n
	}
	for _, n := range []*extender.Node{client("n4", "rr-a,rr-b"), client("n1", "rr-a,rr-b"), client("n2", "rr-b,rr-c"),
		client("n3", "rr-ab"), client("rr-a", "")} {
		if err := idx.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	names := func(rr string) []string {
		var out []string
		for _, n := range store.ClientsOf(rr) {
			out = append(out, n.Name)
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		rr   string
		want []string
	}{
		{"rr-a", []string{"n1", "n4"}},
		{"rr-b", []string{"n1", "n2", "n4"}},
		{"rr-c", []string{"n2"}},
		{"rr-ab", []string{"n3"}},
		{"rr-x", nil},
	} {
		if got := names(tc.rr); !slices.Equal(got, tc.want) {
			t.Errorf("ClientsOf(%s) = %v, want %v", tc.rr, got, tc.want)
		}
	}
	// One read for several route reflectors gives each its own clients.
	each := store.ClientsOfEach("rr-a", "rr-b", "rr-x")
	for _, rr := range []string{"rr-a", "rr-b", "rr-x"} {
		var got []string
		for _, n := range each[rr] {
			got = append(got, n.Name)
		}
		slices.Sort(got)
		if want := names(rr); !slices.Equal(got, want) {
			t.Errorf("ClientsOfEach(...)[%s] = %v, want %v", rr, got, want)
		}
	}
	if err := idx.Update(client("n1", "rr-c")); err != nil {
		t.Fatal(err)
	}
	if err := idx.Delete(client("n4", "")); err != nil {
		t.Fatal(err)
	}
	if got, want := names("rr-a"), []string(nil); !slices.Equal(got, want) {
		t.Errorf("after the moves ClientsOf(rr-a) = %v, want %v", got, want)
	}
	if got, want := names("rr-c"), []string{"n1", "n2"}; !slices.Equal(got, want) {
		t.Errorf("after the moves ClientsOf(rr-c) = %v, want %v", got, want)
	}
}

// BenchmarkClientsOf: the clients of one route reflector among 65,000 nodes (clients of racks of
// 40, each rack's pair of route reflectors), read from every cached node as the validating
// webhook and the reconciler's demotion do.
func BenchmarkClientsOf(b *testing.B) {
	const n = 65000
	idx := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, NodeIndexers())
	lists := map[int]string{}
	for i := range n {
		rack := i / 40
		if lists[rack] == "" {
			lists[rack] = fmt.Sprintf("rr-%d-a,rr-%d-b", rack, rack)
		}
		node := &extender.Node{ObjectMeta: extender.ObjectMeta{Name: fmt.Sprintf("node-%05d", i),
			Annotations: map[string]string{extender.AnnotationRouteReflectors: lists[rack]}}}
		if err := idx.Add(node); err != nil {
			b.Fatal(err)
		}
	}
	store := NewNodeStore(idx)
	b.ReportAllocs()
	for b.Loop() {
		if got := len(store.ClientsOf("rr-700-b")); got != 40 {
			b.Fatalf("%d clients, want 40", got)
		}
	}
}
