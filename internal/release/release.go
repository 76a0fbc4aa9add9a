// Package release writes what a release of the product publishes, without a container engine:
// the image (an OCI layout, package image), the Helm chart packaged with its version and the
// image's digest pinned in its values, an SBOM of the product's binary (CycloneDX 1.5 JSON, from
// the module graph recorded in the binary), and the kubectl-rr plugin's archives with a krew
// manifest. `make release` runs it (hack/release) into bin/release.
//
// Like the image, the files are reproducible: the chart archive's and the plugin archives'
// entries carry the source date (SOURCE_DATE_EPOCH, or the Unix epoch) and the SBOM's serial
// number is derived from its contents, so the same sources give the same bytes.
package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/yaml"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/image"
)

// Defaults of Options.
const (
	DefaultRegistry   = "ghcr.io"
	DefaultRepository = "calico-rr-autoscaler/calico-rr-autoscaler"
	// DefaultDownloadURL is where the plugin archives are published (the krew manifest's uri);
	// %s is the version.
	DefaultDownloadURL = "https://github.com/calico-rr-autoscaler/calico-rr-autoscaler/releases/download/v%s/"
	ChartName          = "calico-rr-autoscaler"
	PluginName         = "rr"
	// Module is the product's main module (the SBOM's metadata.component).
	Module = "github.com/calico-rr-autoscaler/calico-rr-autoscaler"
)

// DefaultPluginPlatforms are the GOOS/GOARCH pairs of the kubectl-rr archives.
var DefaultPluginPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}

// Options are the inputs of Build.
type Options struct {
	// Root is the module root.
	Root string
	// Out is the release directory (bin/release); it is removed and written anew.
	Out string
	// Version is the chart's version and appVersion, the image's tag in the chart's values and
	// the SBOM's component version (default: Chart.yaml's version).
	Version string
	// Registry and Repository are where the image is published (the chart's image.registry and
	// image.repository; defaults DefaultRegistry and DefaultRepository).
	Registry, Repository string
	// DownloadURL is the krew manifest's base URL of the archives (a %s takes the version;
	// default DefaultDownloadURL).
	DownloadURL string
	// PluginPlatforms are the kubectl-rr archives' "os/arch" (DefaultPluginPlatforms if empty).
	// A linux one reuses the image's binary.
	PluginPlatforms []string
	// Archs are the image's linux GOARCH values (image.DefaultArchs if empty).
	Archs []string
	// Created is the source date (image.SourceDate if zero).
	Created time.Time
	// Log, when set, receives progress lines.
	Log io.Writer
}

// Plugin is one kubectl-rr archive.
type Plugin struct {
	OS, Arch string
	Path     string // the .tar.gz
	SHA256   string // hex
}

// Result is what Build wrote, under Options.Out.
type Result struct {
	Version     string
	ImageLayout string        // the OCI layout (Out/image)
	Image       *image.Result // its digests
	ImageRef    string        // registry/repository@digest, as the chart renders it
	Chart       string        // the chart package (.tgz)
	SBOM        string        // CycloneDX JSON
	Plugins     []Plugin
	Krew        string // the krew manifest
	Checksums   string // SHA256SUMS of every file above but the layout
}

// Build writes a release into o.Out: image/ (the OCI layout), the chart package, the SBOM,
// the plugin archives, the krew manifest and SHA256SUMS.
func Build(ctx context.Context, o Options) (*Result, error) {
	if o.Root == "" {
		return nil, errors.New("release: no module root")
	}
	if o.Registry == "" && o.Repository == "" {
		o.Registry, o.Repository = DefaultRegistry, DefaultRepository
	}
	if o.Repository == "" {
		return nil, errors.New("release: no image repository")
	}
	if o.DownloadURL == "" {
		o.DownloadURL = DefaultDownloadURL
	}
	if len(o.PluginPlatforms) == 0 {
		o.PluginPlatforms = DefaultPluginPlatforms
	}
	if o.Created.IsZero() {
		var err error
		if o.Created, err = image.SourceDate(); err != nil {
			return nil, err
		}
	}
	chartDir := filepath.Join(o.Root, "charts", ChartName)
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, fmt.Errorf("loading the chart: %w", err)
	}
	if o.Version == "" {
		o.Version = ch.Metadata.Version
	}
	if err := os.RemoveAll(o.Out); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	res := &Result{Version: o.Version, ImageLayout: filepath.Join(o.Out, "image")}

	start := time.Now()
	res.Image, err = image.Build(ctx, image.Options{Root: o.Root, Out: res.ImageLayout, Archs: o.Archs, Created: o.Created,
		RefName: o.Version, ImageName: imageRepo(o.Registry, o.Repository) + ":" + o.Version, Log: o.Log})
	if err != nil {
		return nil, fmt.Errorf("the image: %w", err)
	}
	res.ImageRef = imageRepo(o.Registry, o.Repository) + "@" + res.Image.Index.String()
	logf(o.Log, "image %s in %s", res.ImageRef, time.Since(start).Round(time.Millisecond))

	if res.Chart, err = PackageChart(ch, o.Out, o.Version, o.Registry, o.Repository, res.Image.Index.String(), o.Created); err != nil {
		return nil, fmt.Errorf("the chart: %w", err)
	}
	logf(o.Log, "chart %s", res.Chart)

	sbomBin, ok := res.Image.Binaries["amd64"]
	if !ok {
		for _, b := range res.Image.Binaries {
			sbomBin = b
			break
		}
	}
	sbom, err := SBOM(sbomBin, o.Version, o.Created)
	if err != nil {
		return nil, fmt.Errorf("the SBOM: %w", err)
	}
	res.SBOM = filepath.Join(o.Out, "sbom.cdx.json")
	if err := os.WriteFile(res.SBOM, sbom, 0o644); err != nil {
		return nil, err
	}
	logf(o.Log, "SBOM %s (from %s)", res.SBOM, sbomBin)

	for _, p := range o.PluginPlatforms {
		goos, goarch, ok := strings.Cut(p, "/")
		if !ok {
			return nil, fmt.Errorf("plugin platform %q: want os/arch", p)
		}
		bin := res.Image.Binaries[goarch]
		if goos != "linux" || bin == "" {
			bin = filepath.Join(filepath.Clean(res.ImageLayout)+".build", "calico-rr-autoscaler-"+goos+"-"+goarch)
			start := time.Now()
			if err := buildBinary(ctx, o.Root, goos, goarch, bin); err != nil {
				return nil, err
			}
			logf(o.Log, "built %s (%s) in %s", bin, p, time.Since(start).Round(time.Millisecond))
		}
		pl, err := pluginArchive(bin, o.Out, o.Version, goos, goarch, o.Created)
		if err != nil {
			return nil, err
		}
		res.Plugins = append(res.Plugins, pl)
	}
	krew, err := KrewManifest(o.Version, fmt.Sprintf(o.DownloadURL, o.Version), res.Plugins)
	if err != nil {
		return nil, err
	}
	res.Krew = filepath.Join(o.Out, "krew-"+PluginName+".yaml")
	if err := os.WriteFile(res.Krew, krew, 0o644); err != nil {
		return nil, err
	}

	files := []string{res.Chart, res.SBOM, res.Krew}
	for _, p := range res.Plugins {
		files = append(files, p.Path)
	}
	var sums bytes.Buffer
	sort.Strings(files)
	for _, f := range files {
		h, err := fileSHA256(f)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&sums, "%s  %s\n", h, filepath.Base(f))
	}
	res.Checksums = filepath.Join(o.Out, "SHA256SUMS")
	if err := os.WriteFile(res.Checksums, sums.Bytes(), 0o644); err != nil {
		return nil, err
	}
	return res, nil
}

func imageRepo(registry, repository string) string {
	if registry == "" {
		return repository
	}
	return registry + "/" + repository
}

// buildBinary builds the product for goos/goarch as package image builds the image's (static,
// -trimpath, no build ID, no VCS stamp).
func buildBinary(ctx context.Context, root, goos, goarch, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=",
		"-o", out, "./cmd/calico-rr-autoscaler")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build (%s/%s): %v\n%s", goos, goarch, err, b)
	}
	return nil
}

// PackageChart packages ch as `helm package --version v --app-version v` does (Helm's
// chartutil.Save), with the image pinned in its values.yaml: image.registry, image.repository,
// image.tag (the version) and image.digest (the index's digest, which the chart renders as
// registry/repository@digest). The values' comments are kept. The archive's entries get the
// time created (Helm writes the current time). It returns the package's path under out.
func PackageChart(ch *chart.Chart, out, version, registry, repository, digest string, created time.Time) (string, error) {
	ch.Metadata.Version, ch.Metadata.AppVersion = version, version
	var raw *chart.File
	for _, f := range ch.Raw {
		if f.Name == chartutil.ValuesfileName {
			raw = f
		}
	}
	if raw == nil {
		return "", errors.New("no values.yaml")
	}
	data, err := setImageValues(raw.Data, map[string]string{"registry": registry, "repository": repository,
		"tag": version, "digest": digest})
	if err != nil {
		return "", err
	}
	vals, err := chartutil.ReadValues(data)
	if err != nil {
		return "", err
	}
	img, _ := vals["image"].(map[string]any)
	if img["digest"] != digest || img["repository"] != repository || img["registry"] != registry || img["tag"] != version {
		return "", fmt.Errorf("values.yaml's image after pinning: %v", img)
	}
	raw.Data, ch.Values = data, vals
	if err := ch.Validate(); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(out, ".chart-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	saved, err := chartutil.Save(ch, tmp)
	if err != nil {
		return "", err
	}
	dst := filepath.Join(out, filepath.Base(saved))
	return dst, retimeTarGz(saved, dst, created)
}

// setImageValues sets the keys of the top-level image: block of a values.yaml to the given
// values, line by line (the comments stay), and fails when one is not there.
func setImageValues(values []byte, set map[string]string) ([]byte, error) {
	lines := strings.Split(string(values), "\n")
	in, done := false, map[string]bool{}
	for i, l := range lines {
		if !strings.HasPrefix(l, " ") && !strings.HasPrefix(l, "#") && strings.TrimSpace(l) != "" {
			in = strings.TrimSpace(l) == "image:"
			continue
		}
		if !in || !strings.HasPrefix(l, "  ") || strings.HasPrefix(l, "   ") {
			continue
		}
		key, _, ok := strings.Cut(strings.TrimSpace(l), ":")
		if v, want := set[key]; ok && want && !done[key] {
			lines[i] = fmt.Sprintf("  %s: %q", key, v)
			done[key] = true
		}
	}
	for k := range set {
		if !done[k] {
			return nil, fmt.Errorf("values.yaml: no image.%s", k)
		}
	}
	return []byte(strings.Join(lines, "\n")), nil
}

// retimeTarGz copies a .tar.gz from src to dst with every entry's times set to t.
func retimeTarGz(src, dst string, t time.Time) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		h.ModTime, h.AccessTime, h.ChangeTime = t, time.Time{}, time.Time{}
		if h.Format == tar.FormatPAX || h.Format == tar.FormatGNU {
			h.PAXRecords = nil
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(dst, buf.Bytes(), 0o644)
}

// pluginArchive writes kubectl-rr_<version>_<os>_<arch>.tar.gz: the binary named kubectl-rr
// (as kubectl-rr it runs the status command: `kubectl rr`), 0755, owned by root, modified at t.
func pluginArchive(bin, out, version, goos, goarch string, t time.Time) (Plugin, error) {
	exe, err := os.ReadFile(bin)
	if err != nil {
		return Plugin{}, err
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: "kubectl-" + PluginName, Mode: 0o755, Size: int64(len(exe)),
		ModTime: t, Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}); err != nil {
		return Plugin{}, err
	}
	if _, err := tw.Write(exe); err != nil {
		return Plugin{}, err
	}
	if err := tw.Close(); err != nil {
		return Plugin{}, err
	}
	if err := zw.Close(); err != nil {
		return Plugin{}, err
	}
	p := Plugin{OS: goos, Arch: goarch,
		Path: filepath.Join(out, fmt.Sprintf("kubectl-%s_%s_%s_%s.tar.gz", PluginName, version, goos, goarch))}
	sum := sha256.Sum256(buf.Bytes())
	p.SHA256 = hex.EncodeToString(sum[:])
	return p, os.WriteFile(p.Path, buf.Bytes(), 0o644)
}

// KrewManifest is the krew plugin manifest (krew.googlecontainertools.github.com/v1alpha2
// Plugin) of the archives, each at baseURL + its file name.
func KrewManifest(version, baseURL string, plugins []Plugin) ([]byte, error) {
	type selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	}
	type platform struct {
		Selector selector `json:"selector"`
		URI      string   `json:"uri"`
		SHA256   string   `json:"sha256"`
		Bin      string   `json:"bin"`
	}
	var ps []platform
	for _, p := range plugins {
		ps = append(ps, platform{Selector: selector{MatchLabels: map[string]string{"os": p.OS, "arch": p.Arch}},
			URI: strings.TrimSuffix(baseURL, "/") + "/" + filepath.Base(p.Path), SHA256: p.SHA256, Bin: "kubectl-" + PluginName})
	}
	m := map[string]any{
		"apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
		"kind":       "Plugin",
		"metadata":   map[string]any{"name": PluginName},
		"spec": map[string]any{
			"version":          "v" + strings.TrimPrefix(version, "v"),
			"homepage":         "https://" + Module,
			"shortDescription": "What calico-rr-autoscaler manages in a cluster",
			"description": "kubectl rr shows what calico-rr-autoscaler manages in a live cluster: its\n" +
				"RouteReflectorPolicies and the route reflectors they chose (the `status` command of\n" +
				"calico-rr-autoscaler).\n",
			"platforms": ps,
		},
	}
	return yaml.Marshal(m)
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}
