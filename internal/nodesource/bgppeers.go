package nodesource

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// ReadBGPPeersFile reads Calico BGPPeers (kind BGPPeer, BGPPeerList or List; projectcalico.org/v3
// or the crd.projectcalico.org/v1 CRDs, whose spec is the same), as `kubectl get bgppeers -o yaml`
// writes them.
func ReadBGPPeersFile(path string) ([]apiv3.BGPPeer, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	peers, err := DecodeBGPPeers(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return peers, nil
}

// DecodeBGPPeers decodes a stream of BGPPeer documents.
func DecodeBGPPeers(data []byte) ([]apiv3.BGPPeer, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []apiv3.BGPPeer
	seen := map[string]bool{}
	one := func(m map[string]any) error {
		if k, _ := m["kind"].(string); k != "BGPPeer" {
			return fmt.Errorf("kind %q is not BGPPeer", k)
		}
		b, err := yaml.Marshal(m)
		if err != nil {
			return err
		}
		var p apiv3.BGPPeer
		if err := yaml.Unmarshal(b, &p); err != nil {
			return errors.New(oneLine(err.Error()))
		}
		if p.Name == "" {
			return errors.New("metadata.name: Required value")
		}
		if seen[p.Name] {
			return fmt.Errorf("metadata.name: Duplicate value: %q", p.Name)
		}
		seen[p.Name] = true
		out = append(out, p)
		return nil
	}
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
		switch kind, _ := raw["kind"].(string); kind {
		case "BGPPeerList", "List":
			items, _ := raw["items"].([]any)
			for i, it := range items {
				m, ok := it.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("document %d: items[%d]: not an object", doc, i)
				}
				if err := one(m); err != nil {
					return nil, fmt.Errorf("document %d: items[%d]: %v", doc, i, err)
				}
			}
		default:
			if err := one(raw); err != nil {
				return nil, fmt.Errorf("document %d: %v", doc, err)
			}
		}
	}
}
