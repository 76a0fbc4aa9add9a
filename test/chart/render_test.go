// Package chart tests the Helm chart in charts/calico-rr-autoscaler: lint,
// rendering with default and other values, the values schema, the CRD copy,
// server-side dry runs on a real kube-apiserver, and end-to-end installs with
// cert-manager (its controllers run in the test process) and with the
// self-managed certificates of package certs.
package chart

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/certs"
)

// The chart and the identity the tests install it as; testenv's
// UserServiceAccount is system:serviceaccount:calico-rr-autoscaler:calico-rr-autoscaler.
const (
	releaseName      = "calico-rr-autoscaler"
	releaseNamespace = "calico-rr-autoscaler"
	kubeVersion      = "v1.34.3"
)

func chartDir(t testing.TB) string {
	t.Helper()
	d, err := filepath.Abs(filepath.Join("..", "..", "charts", "calico-rr-autoscaler"))
	require.NoError(t, err)
	return d
}

func loadChart(t testing.TB) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir(t))
	require.NoError(t, err)
	return c
}

// valuesYAML parses values written as YAML.
func valuesYAML(t testing.TB, s string) map[string]any {
	t.Helper()
	v := map[string]any{}
	require.NoError(t, yaml.Unmarshal([]byte(s), &v))
	return v
}

// rendered is the output of the chart for some values.
type rendered struct {
	Objects  []*unstructured.Unstructured // in Helm's install order
	Policies []*unstructured.Unstructured // the RouteReflectorPolicy the policy hook applies (the ConfigMap's policy.yaml)
	CRDs     []*unstructured.Unstructured // from crds/
	Manifest string
	Notes    string
}

// render runs the chart like `helm template --include-crds` (client-only
// install) and returns its objects, or the error (schema, template).
func renderErr(t testing.TB, ns string, vals map[string]any) (*rendered, error) {
	t.Helper()
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun, inst.ClientOnly, inst.Replace, inst.IncludeCRDs = true, true, true, true
	inst.ReleaseName, inst.Namespace = releaseName, ns
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	require.NoError(t, err)
	inst.KubeVersion = kv
	rel, err := inst.Run(loadChart(t), vals)
	if err != nil {
		return nil, err
	}
	out := &rendered{Manifest: rel.Manifest, Notes: rel.Info.Notes}
	manifest := rel.Manifest
	for _, h := range rel.Hooks { // the uninstall hook's objects
		manifest += "\n---\n" + h.Manifest
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		if u.GetKind() == "CustomResourceDefinition" {
			out.CRDs = append(out.CRDs, u)
		} else {
			out.Objects = append(out.Objects, u)
		}
		if doc, ok, _ := unstructured.NestedString(u.Object, "data", "policy.yaml"); ok && u.GetKind() == "ConfigMap" {
			p := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &p.Object); err != nil {
				return nil, fmt.Errorf("ConfigMap %s: policy.yaml: %w", u.GetName(), err)
			}
			out.Policies = append(out.Policies, p)
		}
	}
	return out, nil
}

func render(t testing.TB, vals map[string]any) *rendered {
	t.Helper()
	r, err := renderErr(t, releaseNamespace, vals)
	require.NoError(t, err)
	return r
}

// get returns the one object of kind and name; it fails the test when absent.
func (r *rendered) get(t testing.TB, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range append(r.Objects[:len(r.Objects):len(r.Objects)], r.Policies...) {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	require.Failf(t, "object not rendered", "%s %s (rendered: %v)", kind, name, r.kinds())
	return nil
}

func (r *rendered) all(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range append(r.Objects[:len(r.Objects):len(r.Objects)], r.Policies...) {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func (r *rendered) kinds() []string {
	var out []string
	for _, o := range r.Objects {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	return out
}

// typed converts u into T, failing on any field T does not have: a
// misspelled or misplaced field in a template fails here.
func typed[T any](t testing.TB, u *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, out, true),
		"%s %s", u.GetKind(), u.GetName())
	return out
}

// serveFlags is the flag set of `calico-rr-autoscaler serve` as its issue
// specifies it, plus the certs package's flags: every argument the chart
// passes must parse.
func serveFlags() (*flag.FlagSet, *certs.Options) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String("kubeconfig", "", "")
	fs.String("webhook-host", "", "")
	fs.Int("webhook-port", 9443, "")
	fs.String("cert-dir", "", "")
	fs.String("metrics-bind-address", "", "")
	fs.String("health-probe-bind-address", "", "")
	fs.Bool("leader-elect", false, "")
	fs.String("service-account", "", "")
	fs.String("calico-apiserver-user", "", "")
	fs.String("datastore", "kubernetes", "")
	fs.String("etcd-endpoints", "", "")
	fs.String("etcd-key-file", "", "")
	fs.String("etcd-cert-file", "", "")
	fs.String("etcd-ca-cert-file", "", "")
	fs.Func("logging-format", "", func(v string) error {
		if v != "text" && v != "json" {
			return fmt.Errorf("%q is not text or json", v)
		}
		return nil
	})
	var o certs.Options
	o.BindFlags(fs)
	return fs, &o
}

func TestLint(t *testing.T) {
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	require.NoError(t, err)
	for name, vals := range map[string]map[string]any{
		"defaults":    nil,
		"non-default": valuesYAML(t, nonDefaultValues),
	} {
		t.Run(name, func(t *testing.T) {
			lint := action.NewLint()
			lint.Strict, lint.Namespace, lint.KubeVersion = true, releaseNamespace, kv
			res := lint.Run([]string{chartDir(t)}, vals)
			for _, m := range res.Messages {
				t.Log(m.Error())
			}
			require.Empty(t, res.Errors)
			require.Equal(t, 1, res.TotalChartsLinted)
		})
	}
}

// TestChartCRDIsPolicyCRD: the chart ships policy/crd's generated CRD byte
// for byte (hack/sync-chart-crd.sh copies it).
func TestChartCRDIsPolicyCRD(t *testing.T) {
	const f = "routereflector.io_routereflectorpolicies.yaml"
	want, err := os.ReadFile(filepath.Join("..", "..", "policy", "crd", f))
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(chartDir(t), "crds", f))
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "charts/calico-rr-autoscaler/crds/%s differs from policy/crd/%s: run hack/sync-chart-crd.sh", f, f)

	entries, err := os.ReadDir(filepath.Join(chartDir(t), "crds"))
	require.NoError(t, err)
	require.Len(t, entries, 1, "crds/ holds only the policy CRD")

	r := render(t, nil)
	require.Len(t, r.CRDs, 1)
	require.Equal(t, "routereflectorpolicies.routereflector.io", r.CRDs[0].GetName())
}

// TestValuesDocumented: every key of values.yaml has a comment right above
// it, unless it lies inside a documented key's value (e.g. the fields of
// podSecurityContext).
func TestValuesDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir(t), "values.yaml"))
	require.NoError(t, err)
	lines := strings.Split(string(b), "\n")
	commented := func(i int) bool { return i > 0 && strings.HasPrefix(strings.TrimSpace(lines[i-1]), "#") }
	indentOf := func(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }
	keys := 0
	for i, l := range lines {
		tr := strings.TrimSpace(l)
		if tr == "" || strings.HasPrefix(tr, "#") || strings.HasPrefix(tr, "-") || !strings.Contains(tr, ":") {
			continue
		}
		keys++
		if commented(i) {
			continue
		}
		// Inside a documented ancestor?
		documented, indent := false, indentOf(l)
		for j := i - 1; j >= 0 && indent > 0; j-- {
			tj := strings.TrimSpace(lines[j])
			if tj == "" || strings.HasPrefix(tj, "#") || indentOf(lines[j]) >= indent {
				continue
			}
			indent = indentOf(lines[j])
			if commented(j) {
				documented = true
				break
			}
		}
		if !documented {
			assert.Fail(t, fmt.Sprintf("values.yaml:%d: key without a comment: %s", i+1, tr))
		}
	}
	require.Greater(t, keys, 50)
}
