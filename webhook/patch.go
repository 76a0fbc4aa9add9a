package webhook

import (
	"maps"
	"slices"
	"strings"
)

// PatchOp is one RFC 6902 JSON patch operation.
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// escapePointer escapes a key for a JSON pointer (RFC 6901).
func escapePointer(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

// metadataPatch returns the operations that apply label and annotation changes (nil removes a key)
// to an object whose current labels and annotations are cur*, in a stable order. Keys already as
// wanted produce no operation.
func metadataPatch(curLabels, curAnnotations map[string]string, labels, annotations map[string]*string) []PatchOp {
	var ops []PatchOp
	add := func(field string, cur map[string]string, ch map[string]*string) {
		created := false
		for _, k := range slices.Sorted(maps.Keys(ch)) {
			v := ch[k]
			old, ok := cur[k]
			switch {
			case v == nil && ok:
				ops = append(ops, PatchOp{Op: "remove", Path: "/metadata/" + field + "/" + escapePointer(k)})
			case v != nil && (!ok || old != *v):
				if cur == nil && !created {
					ops = append(ops, PatchOp{Op: "add", Path: "/metadata/" + field, Value: map[string]string{}})
					created = true
				}
				ops = append(ops, PatchOp{Op: "add", Path: "/metadata/" + field + "/" + escapePointer(k), Value: *v})
			}
		}
	}
	add("labels", curLabels, labels)
	add("annotations", curAnnotations, annotations)
	return ops
}
