package nodesource

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// ReadStateFile reads a cluster's state as it is: its Nodes and its Calico BGPPeers in one stream
// (documents of kind Node, BGPPeer, NodeList, BGPPeerList or a List of both, YAML or JSON), as
// `kubectl get nodes,bgppeers.crd.projectcalico.org -o yaml` writes it. At least one Node.
func ReadStateFile(path string) ([]*corev1.Node, []apiv3.BGPPeer, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, nil, err
	}
	nodes, peers, err := DecodeState(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(nodes) == 0 {
		return nil, nil, fmt.Errorf("%s: no Node objects found", path)
	}
	return nodes, peers, nil
}

// DecodeState decodes a stream of Nodes and BGPPeers (see ReadStateFile).
func DecodeState(data []byte) ([]*corev1.Node, []apiv3.BGPPeer, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var nodes []*corev1.Node
	var peers []apiv3.BGPPeer
	seenNodes, seenPeers := map[string]bool{}, map[string]bool{}
	one := func(m map[string]any) error {
		switch k, _ := m["kind"].(string); k {
		case "Node":
			n, err := toNode(m)
			if err != nil {
				return err
			}
			return add(&nodes, seenNodes, n)
		case "BGPPeer":
			p, err := toBGPPeer(m)
			if err != nil {
				return err
			}
			if seenPeers[p.Name] {
				return fmt.Errorf("metadata.name: Duplicate value: %q", p.Name)
			}
			seenPeers[p.Name] = true
			peers = append(peers, p)
			return nil
		case "":
			return errors.New("no kind (want Node or BGPPeer)")
		default:
			return fmt.Errorf("kind %q is not Node or BGPPeer", k)
		}
	}
	for doc := 1; ; doc++ {
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return nodes, peers, nil
			}
			return nil, nil, fmt.Errorf("document %d: %s", doc, oneLine(err.Error()))
		}
		if raw == nil {
			continue
		}
		switch kind, _ := raw["kind"].(string); kind {
		case "List", "NodeList", "BGPPeerList":
			items, _ := raw["items"].([]any)
			for i, it := range items {
				m, ok := it.(map[string]any)
				if !ok {
					return nil, nil, fmt.Errorf("document %d: items[%d]: not an object", doc, i)
				}
				if _, ok := m["kind"]; !ok && kind != "List" { // kubectl leaves the items' kind out of a typed list
					m["kind"] = kind[:len(kind)-len("List")]
				}
				if err := one(m); err != nil {
					return nil, nil, fmt.Errorf("document %d: items[%d]: %v", doc, i, err)
				}
			}
		default:
			if err := one(raw); err != nil {
				return nil, nil, fmt.Errorf("document %d: %v", doc, err)
			}
		}
	}
}

// toBGPPeer converts one decoded BGPPeer document (projectcalico.org/v3 or the
// crd.projectcalico.org/v1 CRD, whose spec is the same).
func toBGPPeer(m map[string]any) (apiv3.BGPPeer, error) {
	var p apiv3.BGPPeer
	b, err := yaml.Marshal(m)
	if err != nil {
		return p, err
	}
	if err := yaml.Unmarshal(b, &p); err != nil {
		return p, errors.New(oneLine(err.Error()))
	}
	if p.Name == "" {
		return p, errors.New("metadata.name: Required value")
	}
	return p, nil
}
