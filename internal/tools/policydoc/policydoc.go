// Package policydoc renders the RouteReflectorPolicy reference (docs/policy-reference.md) from
// the CRD's OpenAPI schema, so that the reference cannot drift from what the API server serves.
package policydoc

import (
	"fmt"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// Render is the Markdown reference of every field of the CRD's served version.
func Render(crdYAML []byte) (string, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(crdYAML, &crd); err != nil {
		return "", fmt.Errorf("reading the CRD: %w", err)
	}
	var ver *apiextensionsv1.CustomResourceDefinitionVersion
	for i := range crd.Spec.Versions {
		if crd.Spec.Versions[i].Served && crd.Spec.Versions[i].Storage {
			ver = &crd.Spec.Versions[i]
		}
	}
	if ver == nil || ver.Schema == nil || ver.Schema.OpenAPIV3Schema == nil {
		return "", fmt.Errorf("the CRD %s has no served storage version with a schema", crd.Name)
	}
	root := ver.Schema.OpenAPIV3Schema
	var b strings.Builder
	fmt.Fprintf(&b, "<!-- Generated from policy/crd by `make generate` (hack/policydoc); do not edit. -->\n")
	fmt.Fprintf(&b, "# %s reference (%s/%s)\n\n", crd.Spec.Names.Kind, crd.Spec.Group, ver.Name)
	fmt.Fprintf(&b, "%s\n\n", oneParagraph(root.Description))
	fmt.Fprintf(&b, "Cluster-scoped; short name `%s`. Defaults are given in brackets in each description; a field\n", strings.Join(crd.Spec.Names.ShortNames, "`, `"))
	fmt.Fprintf(&b, "left out takes its default. Every section below is one object of the schema.\n\n")
	for _, top := range []string{"spec", "status"} {
		s, ok := root.Properties[top]
		if !ok {
			continue
		}
		section(&b, top, s)
	}
	return b.String(), nil
}

// section writes the table of an object's fields, then the sections of its object fields.
func section(b *strings.Builder, path string, s apiextensionsv1.JSONSchemaProps) {
	fmt.Fprintf(b, "## `%s`\n\n", path)
	if d := oneParagraph(s.Description); d != "" {
		fmt.Fprintf(b, "%s\n\n", d)
	}
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) == 0 {
		fmt.Fprintf(b, "Free-form.\n\n")
		return
	}
	fmt.Fprintf(b, "| field | type | description |\n|---|---|---|\n")
	var nested []string
	for _, n := range names {
		p := s.Properties[n]
		req := ""
		if slices.Contains(s.Required, n) {
			req = " (required)"
		}
		fmt.Fprintf(b, "| `%s`%s | %s | %s |\n", n, req, typeOf(p), cell(p))
		if obj := objectOf(p); obj != nil && len(obj.Properties) > 0 {
			nested = append(nested, n)
		}
	}
	b.WriteString("\n")
	for _, n := range nested {
		p := s.Properties[n]
		child := path + "." + n
		if p.Type == "array" {
			child += "[]"
		}
		section(b, child, *objectOf(p))
	}
}

// objectOf is the object schema a field holds, itself or its array's items.
func objectOf(p apiextensionsv1.JSONSchemaProps) *apiextensionsv1.JSONSchemaProps {
	switch {
	case p.Type == "object":
		return &p
	case p.Type == "array" && p.Items != nil && p.Items.Schema != nil && p.Items.Schema.Type == "object":
		return p.Items.Schema
	}
	return nil
}

func typeOf(p apiextensionsv1.JSONSchemaProps) string {
	t := p.Type
	switch {
	case p.XIntOrString:
		t = "integer or string"
	case t == "array" && p.Items != nil && p.Items.Schema != nil:
		t = "array of " + p.Items.Schema.Type
	case t == "object" && p.AdditionalProperties != nil && p.AdditionalProperties.Schema != nil:
		t = "map of " + p.AdditionalProperties.Schema.Type
	}
	if p.Format != "" {
		t += " (" + p.Format + ")"
	}
	return t
}

// cell is a field's description with its enum, bounds and pattern, on one table line.
func cell(p apiextensionsv1.JSONSchemaProps) string {
	parts := []string{oneParagraph(p.Description)}
	if len(p.Enum) > 0 {
		var vs []string
		for _, e := range p.Enum {
			vs = append(vs, "`"+strings.Trim(string(e.Raw), `"`)+"`")
		}
		parts = append(parts, "One of "+strings.Join(vs, ", ")+".")
	}
	if p.Default != nil {
		parts = append(parts, "Default `"+string(p.Default.Raw)+"`.")
	}
	if p.Minimum != nil {
		parts = append(parts, fmt.Sprintf("Minimum %v.", *p.Minimum))
	}
	if p.Maximum != nil {
		parts = append(parts, fmt.Sprintf("Maximum %v.", *p.Maximum))
	}
	if p.Pattern != "" {
		parts = append(parts, "Pattern `"+p.Pattern+"`.")
	}
	return strings.ReplaceAll(strings.TrimSpace(strings.Join(parts, " ")), "|", `\|`)
}

// oneParagraph joins a description's lines into one.
func oneParagraph(s string) string { return strings.Join(strings.Fields(s), " ") }
