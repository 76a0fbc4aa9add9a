package reconciler

import (
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// TestLoggingRecorder: every Event is recorded and logged once, with the object's kind as its key
// (node or policy), the reason and the type.
func TestLoggingRecorder(t *testing.T) {
	var lines []string
	log := funcr.NewJSON(func(obj string) { lines = append(lines, obj) }, funcr.Options{})
	fake := record.NewFakeRecorder(10)
	rec := NewLoggingRecorder(fake, log)
	pol := &v1alpha1.RouteReflectorPolicy{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	for _, c := range []struct {
		name string
		emit func()
		want []string
	}{
		{"node reference", func() { rec.Event(nodeRef("node-03", nil), corev1.EventTypeNormal, EventHandedOver, "handed over") },
			[]string{`"node":"node-03"`, `"reason":"` + EventHandedOver + `"`, `"type":"Normal"`, `"msg":"handed over"`}},
		{"policy", func() { rec.Eventf(pol, corev1.EventTypeWarning, EventTransition, "%d sessions", 3) },
			[]string{`"policy":"default"`, `"reason":"` + EventTransition + `"`, `"type":"Warning"`, `"msg":"3 sessions"`}},
		{"node object", func() {
			rec.AnnotatedEventf(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-04"}}, nil, corev1.EventTypeNormal, "X", "y")
		}, []string{`"node":"node-04"`, `"reason":"X"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			lines = nil
			c.emit()
			require.Len(t, lines, 1)
			for _, w := range c.want {
				require.True(t, strings.Contains(lines[0], w), "%s lacks %s", lines[0], w)
			}
			require.Len(t, fake.Events, 1, "recorded too")
			<-fake.Events
		})
	}
}
