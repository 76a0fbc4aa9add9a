package reconciler

import (
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// LoggingRecorder records every Event the reconciler decides and logs it too, one line with its
// keys (policy or node, reason, type), so that a log pipeline (serve --logging-format=json) sees
// every Event-worthy decision without reading Events, which the API server keeps for an hour.
type LoggingRecorder struct {
	record.EventRecorder
	Log logr.Logger
}

var _ record.EventRecorder = LoggingRecorder{}

// NewLoggingRecorder wraps rec.
func NewLoggingRecorder(rec record.EventRecorder, log logr.Logger) LoggingRecorder {
	return LoggingRecorder{EventRecorder: rec, Log: log}
}

func (r LoggingRecorder) Event(obj runtime.Object, eventtype, reason, message string) {
	r.log(obj, eventtype, reason, message)
	r.EventRecorder.Event(obj, eventtype, reason, message)
}

func (r LoggingRecorder) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.log(obj, eventtype, reason, fmt.Sprintf(messageFmt, args...))
	r.EventRecorder.Eventf(obj, eventtype, reason, messageFmt, args...)
}

func (r LoggingRecorder) AnnotatedEventf(obj runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.log(obj, eventtype, reason, fmt.Sprintf(messageFmt, args...))
	r.EventRecorder.AnnotatedEventf(obj, annotations, eventtype, reason, messageFmt, args...)
}

// log writes the Event's line: the object as "node" or "policy" (the only kinds the reconciler
// records Events on), "reason", "type".
func (r LoggingRecorder) log(obj runtime.Object, eventtype, reason, message string) {
	kv := []any{"reason", reason, "type", eventtype}
	switch o := obj.(type) {
	case *extender.Node:
		kv = append(kv, "node", o.Name)
	case *corev1.Node:
		kv = append(kv, "node", o.Name)
	case *corev1.ObjectReference:
		key := "policy"
		if o.Kind == "Node" {
			key = "node"
		}
		kv = append(kv, key, o.Name)
	default:
		if m, ok := obj.(interface{ GetName() string }); ok {
			kv = append(kv, "policy", m.GetName())
		}
	}
	r.Log.Info(message, kv...)
}
