// Package nodesource reads the nodes and the policy the plan and verify commands work on: Kubernetes
// Node manifests (a NodeList, a List or a stream of Nodes, YAML or JSON), synthetic clusters, and
// RouteReflectorPolicy files. Errors name the file and what was wrong, on one line.
//
// Running product and tools: the graph model (sample clusters for the cost figures), the plan and
// verify commands and `make demo` call it.
package nodesource

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// SimulationStart is the creation time of the first simulated node.
var SimulationStart = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// Simulate returns n Ready nodes named node-00001..., spread round-robin over zones zone-a...,
// created one minute apart.
func Simulate(n, zones int) ([]*corev1.Node, error) {
	if n < 1 {
		return nil, fmt.Errorf("--simulate: need at least 1 node, got %d", n)
	}
	if zones < 1 || zones > 26*26 {
		return nil, fmt.Errorf("--zones: need between 1 and %d zones, got %d", 26*26, zones)
	}
	out := make([]*corev1.Node, n)
	for i := range out {
		name := fmt.Sprintf("node-%05d", i+1)
		out[i] = &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:              name,
				CreationTimestamp: metav1.NewTime(SimulationStart.Add(time.Duration(i) * time.Minute)),
				Labels: map[string]string{
					corev1.LabelHostname:     name,
					corev1.LabelTopologyZone: ZoneName(i % zones),
				},
			},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
		}
	}
	return out, nil
}

// ZoneName is the name of the i-th simulated zone: zone-a ... zone-z, zone-aa ...
func ZoneName(i int) string {
	if i < 26 {
		return "zone-" + string(rune('a'+i))
	}
	return "zone-" + string(rune('a'+i/26-1)) + string(rune('a'+i%26))
}

// ReadNodesFile reads Node objects from a file ("-" is standard input).
func ReadNodesFile(path string) ([]*corev1.Node, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	nodes, err := DecodeNodes(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%s: no Node objects found", path)
	}
	return nodes, nil
}

// DecodeNodes decodes a NodeList, a List of Nodes or a stream of Node documents, YAML or JSON.
func DecodeNodes(data []byte) ([]*corev1.Node, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*corev1.Node
	seen := map[string]bool{}
	for doc := 1; ; doc++ {
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("document %d: %s", doc, oneLine(err.Error()))
		}
		if raw == nil {
			continue
		}
		kind, _ := raw["kind"].(string)
		switch kind {
		case "Node":
			n, err := toNode(raw)
			if err != nil {
				return nil, fmt.Errorf("document %d: %v", doc, err)
			}
			if err := add(&out, seen, n); err != nil {
				return nil, fmt.Errorf("document %d: %v", doc, err)
			}
		case "NodeList", "List":
			items, _ := raw["items"].([]any)
			for i, it := range items {
				m, ok := it.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("document %d: items[%d]: not an object", doc, i)
				}
				if k, _ := m["kind"].(string); k != "" && k != "Node" {
					return nil, fmt.Errorf("document %d: items[%d]: kind %q is not Node", doc, i, k)
				}
				n, err := toNode(m)
				if err != nil {
					return nil, fmt.Errorf("document %d: items[%d]: %v", doc, i, err)
				}
				if err := add(&out, seen, n); err != nil {
					return nil, fmt.Errorf("document %d: items[%d]: %v", doc, i, err)
				}
			}
		case "":
			return nil, fmt.Errorf("document %d: no kind (want Node, NodeList or List)", doc)
		default:
			return nil, fmt.Errorf("document %d: kind %q is not Node, NodeList or List", doc, kind)
		}
	}
}

func add(out *[]*corev1.Node, seen map[string]bool, n *corev1.Node) error {
	if n.Name == "" {
		return errors.New("metadata.name: Required value")
	}
	if seen[n.Name] {
		return fmt.Errorf("metadata.name: Duplicate value: %q", n.Name)
	}
	seen[n.Name] = true
	*out = append(*out, n)
	return nil
}

func toNode(m map[string]any) (*corev1.Node, error) {
	b, err := yaml.Marshal(m)
	if err != nil {
		return nil, err
	}
	n := &corev1.Node{}
	if err := yaml.Unmarshal(b, n); err != nil {
		return nil, errors.New(oneLine(err.Error()))
	}
	return n, nil
}

// ReadPolicyFile reads and validates a RouteReflectorPolicy.
func ReadPolicyFile(path string) (*v1alpha1.RouteReflectorPolicy, *policy.Resolved, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, nil, err
	}
	p, r, err := DecodePolicy(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, r, nil
}

// DecodePolicy decodes (strictly: unknown fields are errors) and validates a RouteReflectorPolicy.
func DecodePolicy(data []byte) (*v1alpha1.RouteReflectorPolicy, *policy.Resolved, error) {
	p := &v1alpha1.RouteReflectorPolicy{}
	if err := yaml.UnmarshalStrict(data, p); err != nil {
		return nil, nil, errors.New(oneLine(err.Error()))
	}
	if p.Kind != "" && p.Kind != "RouteReflectorPolicy" {
		return nil, nil, fmt.Errorf("kind %q is not RouteReflectorPolicy", p.Kind)
	}
	if p.APIVersion != "" && p.APIVersion != v1alpha1.GroupVersion.String() {
		return nil, nil, fmt.Errorf("apiVersion %q is not %s", p.APIVersion, v1alpha1.GroupVersion)
	}
	if p.Name == "" {
		p.Name = "default"
	}
	r, errs := policy.Resolve(p)
	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		return nil, nil, errors.New(strings.Join(msgs, "; "))
	}
	return p, r, nil
}

func readFile(path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(os.Stdin)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("%s: %v", path, pe.Err)
		}
		return nil, err
	}
	return data, nil
}

// oneLine folds a decoder's message onto one line without the decoders' own prefixes.
func oneLine(s string) string {
	for _, p := range []string{"error converting YAML to JSON: ", "error unmarshaling JSON: ", "while decoding JSON: ", "json: "} {
		s = strings.ReplaceAll(s, p, "")
	}
	return strings.Join(strings.Fields(s), " ")
}
