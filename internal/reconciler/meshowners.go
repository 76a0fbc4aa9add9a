package reconciler

import (
	"slices"
	"strings"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
)

// The node-to-node mesh belongs to every policy that asked for migrateFromNodeMesh: the default
// BGPConfiguration's AnnotationMeshDisabledBy lists them (comma-separated, sorted). The mesh stays
// off while a live policy with migrateFromNodeMesh remains; it is turned back on when the last one
// goes. A mesh turned off without the annotation was turned off by a person, and is theirs.

// meshOwners returns the policies the annotation lists, and whether the product turned the mesh
// off (the annotation is present).
func meshOwners(cfg *apiv3.BGPConfiguration) ([]string, bool) {
	if cfg == nil {
		return nil, false
	}
	v, ok := cfg.Annotations[AnnotationMeshDisabledBy]
	if !ok {
		return nil, false
	}
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out, true
}

// setMeshOwners writes the owner list onto cfg (its annotations may be nil).
func setMeshOwners(cfg *apiv3.BGPConfiguration, owners []string) {
	if cfg.Annotations == nil {
		cfg.Annotations = map[string]string{}
	}
	owners = slices.Clone(owners)
	slices.Sort(owners)
	cfg.Annotations[AnnotationMeshDisabledBy] = strings.Join(slices.Compact(owners), ",")
}

// meshKeepers returns the live (not deleting) valid policies other than except that ask for
// migrateFromNodeMesh: while there is one, the mesh stays off.
func meshKeepers(valid []state.Managed, except string) []string {
	var out []string
	for _, m := range valid {
		if m.Policy.Name != except && m.Resolved.MigrateFromNodeMesh {
			out = append(out, m.Policy.Name)
		}
	}
	return out
}
