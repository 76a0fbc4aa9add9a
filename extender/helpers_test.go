package extender

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv/nodetest"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

type nodeOpt = nodetest.Opt

// node is a Ready node of zone (none when zone is empty) created age minutes after t0.
func node(name, zone string, age int, opts ...nodeOpt) *Node {
	return FromNode(nodetest.New(name, append([]nodeOpt{nodetest.Zone(zone), nodetest.Created(t0.Add(time.Duration(age) * time.Minute))}, opts...)...))
}

var (
	notReady = nodetest.NotReady
	cordoned = nodetest.Cordoned
	deleting = nodetest.Deleting(t0)
	label    = nodetest.Label
	annot    = nodetest.Annotation
	taint    = nodetest.Taint
)

// asRR marks a node as a current route reflector with cluster ID id.
func asRR(id string) nodeOpt {
	return func(n *corev1.Node) {
		n.Labels[policy.DefaultRouteReflectorLabelKey] = ""
		n.Annotations[AnnotationClusterID] = id
	}
}

// cluster returns n Ready nodes spread round-robin over zones, one minute apart.
func cluster(n, zones int, opts ...nodeOpt) []*Node {
	return FromNodes(nodetest.Cluster(n, zones, t0, time.Minute, opts...))
}

// resolve resolves a policy with spec. A spec that names no topology type gets MultiCluster: the
// tests that use it were written for MultiCluster, the default before DualPlane (whose tests name
// it, or use policy.Default).
func resolve(t testing.TB, spec v1alpha1.RouteReflectorPolicySpec) *policy.Resolved {
	t.Helper()
	p := policy.Default("default")
	p.Spec = spec
	if spec.Topology == nil || spec.Topology.Type == "" {
		topo := v1alpha1.Topology{}
		if spec.Topology != nil {
			topo = *spec.Topology
		}
		topo.Type = v1alpha1.MultiCluster
		p.Spec.Topology = &topo
	}
	r, errs := policy.Resolve(p)
	require.NoError(t, errs.ToAggregate(), "policy")
	return r
}

func i32(v int32) *int32 { return &v }

func plan(t testing.TB, p *policy.Resolved, nodes []*Node) *Result {
	t.Helper()
	return Plan(Input{Policy: p, Nodes: nodes, Now: t0.Add(24 * time.Hour)})
}

// apply writes a plan's owned labels and annotations onto the nodes, as the reconciler would.
func apply(p *policy.Resolved, nodes []*Node, r *Result) {
	want := map[string]NodeState{}
	for _, s := range r.Nodes {
		want[s.Name] = s
	}
	for _, n := range nodes {
		s, ok := want[n.Name]
		if !ok {
			continue
		}
		for _, k := range OwnedLabelKeys(p.RRLabelKey) {
			delete(n.Labels, k)
		}
		for _, k := range OwnedAnnotationKeysOf(n.Annotations, s.Annotations) {
			delete(n.Annotations, k)
		}
		for k, v := range s.Labels {
			n.Labels[k] = v
		}
		for k, v := range s.Annotations {
			n.Annotations[k] = v
		}
	}
}

func rrNames(r *Result) map[string]RouteReflector {
	m := map[string]RouteReflector{}
	for _, rr := range r.RouteReflectors {
		m[rr.Node] = rr
	}
	return m
}

// with applies node options (nodetest's, written for corev1.Node) to a record in place.
func with(n *Node, opts ...nodeOpt) {
	c := n.ToNode()
	for _, o := range opts {
		o(c)
	}
	gen := n.Generation // not a corev1.Node's: ToNode leaves it
	*n = *FromNode(c)
	n.Generation = gen
}
