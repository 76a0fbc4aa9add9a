package release

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// BOM is the part of a CycloneDX 1.5 JSON document SBOM writes.
type BOM struct {
	BOMFormat    string       `json:"bomFormat"`
	SpecVersion  string       `json:"specVersion"`
	SerialNumber string       `json:"serialNumber"`
	Version      int          `json:"version"`
	Metadata     Metadata     `json:"metadata"`
	Components   []Component  `json:"components"`
	Dependencies []Dependency `json:"dependencies"`
}

// Metadata is the BOM's metadata: when, by what, and of what.
type Metadata struct {
	Timestamp  string     `json:"timestamp"`
	Tools      Tools      `json:"tools"`
	Component  Component  `json:"component"`
	Properties []Property `json:"properties,omitempty"`
}

// Tools are the BOM's producers.
type Tools struct {
	Components []Component `json:"components"`
}

// Component is a CycloneDX component: the product (application) or a Go module (library).
type Component struct {
	BOMRef     string     `json:"bom-ref,omitempty"`
	Type       string     `json:"type"`
	Name       string     `json:"name"`
	Version    string     `json:"version,omitempty"`
	PURL       string     `json:"purl,omitempty"`
	Hashes     []Hash     `json:"hashes,omitempty"`
	Properties []Property `json:"properties,omitempty"`
}

// Hash is a component's hash.
type Hash struct {
	Alg     string `json:"alg"`
	Content string `json:"content"`
}

// Property is a name and value.
type Property struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Dependency lists what a component depends on.
type Dependency struct {
	Ref       string   `json:"ref"`
	DependsOn []string `json:"dependsOn,omitempty"`
}

// SBOM reads the module graph recorded in a Go binary (debug/buildinfo, what `go version -m`
// prints) and returns it as a CycloneDX 1.5 JSON SBOM: the product as metadata.component (at
// version), every module linked into the binary as a library component with its version, its
// purl (pkg:golang/path@version) and its go.sum hash (h1:, a SHA-256), the Go standard library
// as a component, and the build's settings as properties. Replaced modules are listed at their
// replacement. The serial number is a UUID derived from the contents, so the same binary gives
// the same SBOM.
func SBOM(binary, version string, created time.Time) ([]byte, error) {
	bi, err := buildinfo.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	main := Component{Type: "application", Name: bi.Main.Path, Version: version, PURL: purl(bi.Main.Path, "v"+strings.TrimPrefix(version, "v"))}
	if main.Name == "" {
		main.Name = bi.Path
	}
	main.BOMRef = main.PURL
	for _, s := range bi.Settings {
		main.Properties = append(main.Properties, Property{Name: "go:build:" + s.Key, Value: s.Value})
	}
	std := Component{Type: "library", Name: "stdlib", Version: bi.GoVersion, PURL: purl("stdlib", bi.GoVersion)}
	std.BOMRef = std.PURL
	comps := []Component{std}
	dep := Dependency{Ref: main.BOMRef, DependsOn: []string{std.BOMRef}}
	for _, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		c := Component{Type: "library", Name: m.Path, Version: m.Version, PURL: purl(m.Path, m.Version)}
		c.BOMRef = c.PURL
		if h, ok := strings.CutPrefix(m.Sum, "h1:"); ok {
			if b, err := base64.StdEncoding.DecodeString(h); err == nil {
				c.Hashes = []Hash{{Alg: "SHA-256", Content: hex.EncodeToString(b)}}
			}
		}
		comps = append(comps, c)
		dep.DependsOn = append(dep.DependsOn, c.BOMRef)
	}
	deps := []Dependency{dep}
	for _, c := range comps {
		deps = append(deps, Dependency{Ref: c.BOMRef})
	}
	bom := BOM{
		BOMFormat: "CycloneDX", SpecVersion: "1.5", Version: 1,
		Metadata: Metadata{
			Timestamp: created.UTC().Format(time.RFC3339),
			Tools: Tools{Components: []Component{{Type: "application", Name: Module + "/internal/release",
				Properties: []Property{{Name: "source", Value: "debug/buildinfo of the linux binary"}}}}},
			Component: main,
		},
		Components:   comps,
		Dependencies: deps,
	}
	b, err := json.MarshalIndent(bom, "", "  ")
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	sum[6] = sum[6]&0x0f | 0x50 // a name-based (SHA) UUID: version 5, RFC 4122 variant
	sum[8] = sum[8]&0x3f | 0x80
	h := hex.EncodeToString(sum[:16])
	bom.SerialNumber = fmt.Sprintf("urn:uuid:%s-%s-%s-%s-%s", h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])
	b, err = json.MarshalIndent(bom, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// purl is a Go module's package URL: pkg:golang/<path>@<version>, each path segment and the
// version percent-encoded (a "+incompatible" version's plus sign as %2B).
func purl(path, version string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return "pkg:golang/" + strings.Join(segs, "/") + "@" + strings.ReplaceAll(url.PathEscape(version), "+", "%2B")
}
