package main

import (
	"fmt"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// renderChart renders the chart as `helm template <release> <dir> --namespace ns
// --include-crds=false -f values` does, with Helm's own code (the helm.sh/helm/v3 module go.mod
// pins, the same code as the helm command): a client-only dry-run install whose manifest is
// followed by its hooks' manifests. The Kubernetes version is the API server's, as Helm reads it
// when it talks to one. The demo needs no helm binary, so make demo does not build one.
func renderChart(cfg *rest.Config, dir, release, ns, values string) (string, error) {
	c, err := loader.Load(dir)
	if err != nil {
		return "", fmt.Errorf("loading the chart: %w", err)
	}
	vals := map[string]any{}
	if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
		return "", fmt.Errorf("values: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return "", err
	}
	sv, err := dc.ServerVersion()
	if err != nil {
		return "", fmt.Errorf("reading the API server's version: %w", err)
	}
	kv, err := chartutil.ParseKubeVersion(sv.GitVersion)
	if err != nil {
		return "", err
	}
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun, inst.ClientOnly, inst.Replace, inst.IncludeCRDs = true, true, true, false
	inst.ReleaseName, inst.Namespace, inst.KubeVersion = release, ns, kv
	rel, err := inst.Run(c, vals)
	if err != nil {
		return "", fmt.Errorf("rendering the chart: %w", err)
	}
	var b strings.Builder
	b.WriteString(rel.Manifest)
	for _, h := range rel.Hooks { // as helm template prints them
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", h.Path, h.Manifest)
	}
	return b.String(), nil
}
