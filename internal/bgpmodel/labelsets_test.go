package bgpmodel

import (
	"maps"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// TestFromPlanSharesLabelSets: the nodes of a plan whose labels are the same share one map in the
// topology, a node's labels read as they do unshared (planNode alone), and nodes with labels of
// their own (a hostname) keep their own maps.
func TestFromPlanSharesLabelSets(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hostname bool
		shared   bool
	}{
		{"the labels the cache keeps", false, true},
		{"with a hostname label each", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, res, err := SamplePlan("DualPlane", 300, 3)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.hostname {
				for _, n := range in.Nodes {
					delete(n.Labels, corev1.LabelHostname)
				}
			}
			topo, err := FromPlan(in, res, Options{})
			if err != nil {
				t.Fatal(err)
			}
			distinct := map[uintptr]bool{}
			ownedLabels, ownedAnn := extender.OwnedLabelKeys(in.Policy.RRLabelKey), extender.OwnedAnnotationKeys()
			for i, n := range topo.Nodes {
				distinct[reflect.ValueOf(n.Labels).Pointer()] = true
				st, src := res.Nodes[i], in.Nodes[i]
				alone := planNode(st.Name, src.Labels, src.Annotations, ownedLabels, ownedAnn, st.Labels, st.Annotations, in.Policy.ZoneLabel)
				if !maps.Equal(n.Labels, alone.Labels) {
					t.Fatalf("%s: labels %v, alone %v", n.Name, n.Labels, alone.Labels)
				}
			}
			if got := len(distinct) < len(topo.Nodes)/4; got != tc.shared {
				t.Errorf("%d label maps for %d nodes: shared %v, want %v", len(distinct), len(topo.Nodes), got, tc.shared)
			}
		})
	}
}
