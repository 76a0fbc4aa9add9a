package reconciler

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
)

// TestChangeKind: the one classification patchNodes acts on and pending reports.
func TestChangeKind(t *testing.T) {
	p := policy.MustResolve(policy.Default("default"))
	rr := func(id, since string) map[string]string {
		a := map[string]string{extender.AnnotationClusterID: id}
		if since != "" {
			a[extender.AnnotationDrainingSince] = since
		}
		return a
	}
	node := func(isRR bool, ann map[string]string) *extender.Node {
		n := &extender.Node{ObjectMeta: extender.ObjectMeta{Name: "n", Labels: map[string]string{}, Annotations: ann}}
		if isRR {
			n.Labels[p.RRLabelKey] = ""
		}
		return n
	}
	const since = "2026-11-25T10:00:00Z"
	for _, tc := range []struct {
		name string
		cur  *extender.Node
		want map[string]string
		kind ChangeKind
	}{
		{"client becomes RR", node(false, map[string]string{}), rr("224.0.0.1", ""), KindPromoted},
		{"RR becomes client", node(true, rr("224.0.0.1", "")), map[string]string{}, KindDemoted},
		{"RR gets a draining mark", node(true, rr("224.0.0.1", "")), rr("224.0.0.1", since), KindDraining},
		{"a draining RR keeps its mark", node(true, rr("224.0.0.1", since)), rr("224.0.0.1", since), ""},
		{"RR changes cluster ID", node(true, rr("224.0.0.1", "")), rr("224.0.0.2", ""), KindClusterIDChanged},
		{"client moves", node(false, map[string]string{}), map[string]string{extender.AnnotationRouteReflectors: "a,b"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.kind, changeKind(p, tc.cur, extender.NodeState{Name: "n", Annotations: tc.want}))
		})
	}
}
