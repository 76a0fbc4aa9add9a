package webhook

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

func TestMetadataPatch(t *testing.T) {
	tests := []struct {
		name       string
		lbl, ann   map[string]string
		setL, setA map[string]*string
		want       string
	}{
		{"nothing", nil, nil, nil, nil, "null"},
		{"create maps", nil, nil, map[string]*string{"a/b": strp("1")}, map[string]*string{"c~d": strp("2"), "gone": nil},
			`[{"op":"add","path":"/metadata/labels","value":{}},{"op":"add","path":"/metadata/labels/a~1b","value":"1"},{"op":"add","path":"/metadata/annotations","value":{}},{"op":"add","path":"/metadata/annotations/c~0d","value":"2"}]`},
		{"replace and remove", map[string]string{"a": "1", "b": ""}, map[string]string{"x": "y"},
			map[string]*string{"a": strp("2"), "b": nil, "c": strp("")}, map[string]*string{"x": strp("y")},
			`[{"op":"add","path":"/metadata/labels/a","value":"2"},{"op":"remove","path":"/metadata/labels/b"},{"op":"add","path":"/metadata/labels/c","value":""}]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ops := metadataPatch(tc.lbl, tc.ann, tc.setL, tc.setA)
			b, _ := json.Marshal(ops)
			require.Equal(t, tc.want, string(b), "patch")
			// And it applies.
			n := &corev1.Node{}
			n.Name, n.Labels, n.Annotations = "n", tc.lbl, tc.ann
			resp, err := Patched(ops)
			require.NoError(t, err)
			got := patched(t, n, resp)
			for k, v := range tc.setL {
				w, ok := got.Labels[k]
				if v == nil {
					require.False(t, ok, "label %s: %q, want it removed", k, w)
					continue
				}
				require.True(t, ok, "label %s missing", k)
				require.Equal(t, *v, w, "label %s", k)
			}
		})
	}
}
