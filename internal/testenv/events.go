package testenv

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// NodeEvents lists the Events on nodes whose reason starts with reasonPrefix, oldest first, one per
// line ("15:04:05.000 node-3 RouteReflectorDraining: message"), for failure messages and logs.
func NodeEvents(ctx context.Context, cs kubernetes.Interface, reasonPrefix string) string {
	list, err := cs.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Kind != "Node" || !strings.HasPrefix(e.Reason, reasonPrefix) {
			continue
		}
		ts := e.EventTime.Time
		if ts.IsZero() {
			ts = e.FirstTimestamp.Time
		}
		out = append(out, fmt.Sprintf("%s %s %s: %s", ts.Format("15:04:05.000"), e.InvolvedObject.Name, e.Reason, e.Message))
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}
