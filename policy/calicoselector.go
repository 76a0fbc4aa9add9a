package policy

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// CalicoNodeSelector returns the policy's nodeSelector in Calico's selector syntax (for BGPPeer
// selectors): "all()" when it selects every node. It selects the same nodes as NodeSelector.
func (r *Resolved) CalicoNodeSelector() string { return calicoSelector(r.NodeSelector) }

func calicoSelector(s labels.Selector) string {
	if s.Empty() {
		return "all()"
	}
	reqs, _ := s.Requirements()
	parts := make([]string, 0, len(reqs))
	for _, q := range reqs {
		k, vals := q.Key(), q.ValuesUnsorted()
		slices.Sort(vals)
		quoted := make([]string, len(vals))
		for i, v := range vals {
			quoted[i] = "'" + v + "'"
		}
		switch q.Operator() {
		case selection.Equals, selection.DoubleEquals:
			parts = append(parts, fmt.Sprintf("%s == %s", k, quoted[0]))
		case selection.NotEquals:
			parts = append(parts, fmt.Sprintf("%s != %s", k, quoted[0]))
		case selection.In:
			parts = append(parts, fmt.Sprintf("%s in {%s}", k, strings.Join(quoted, ", ")))
		case selection.NotIn:
			parts = append(parts, fmt.Sprintf("%s not in {%s}", k, strings.Join(quoted, ", ")))
		case selection.Exists:
			parts = append(parts, fmt.Sprintf("has(%s)", k))
		case selection.DoesNotExist:
			parts = append(parts, fmt.Sprintf("!has(%s)", k))
		default: // Gt, Lt: not allowed in a LabelSelector
			return "all()"
		}
	}
	return strings.Join(parts, " && ")
}
