// Command release writes a release into a directory without a container engine (package
// internal/release): the image's OCI layout, the chart package with its version and the image's
// digest pinned, the SBOM (CycloneDX), the kubectl-rr archives and their krew manifest, and
// SHA256SUMS. `make release` runs it:
//
//	go run ./hack/release -out bin/release -version 0.2.0
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/release"
)

func main() {
	out := flag.String("out", "bin/release", "the release directory to write (replaced)")
	version := flag.String("version", "", "the release's version: the chart's version and appVersion, the image's tag (default: Chart.yaml's version)")
	registry := flag.String("registry", release.DefaultRegistry, "the registry the image is published to (the chart's image.registry)")
	repository := flag.String("repository", release.DefaultRepository, "the image's repository (the chart's image.repository)")
	download := flag.String("download-url", release.DefaultDownloadURL, "the krew manifest's base URL of the plugin archives (%s: the version)")
	platforms := flag.String("plugin-platforms", strings.Join(release.DefaultPluginPlatforms, ","), "the kubectl-rr archives' os/arch, comma-separated")
	flag.Parse()
	if err := run(*out, *version, *registry, *repository, *download, *platforms); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(out, version, registry, repository, download, platforms string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	res, err := release.Build(ctx, release.Options{Root: root, Out: out, Version: version, Registry: registry,
		Repository: repository, DownloadURL: download, PluginPlatforms: strings.Split(platforms, ","), Log: os.Stderr})
	if err != nil {
		return err
	}
	fmt.Printf("release %s in %s\n", res.Version, out)
	fmt.Printf("image  %s (OCI layout %s)\n", res.ImageRef, res.ImageLayout)
	fmt.Printf("chart  %s\n", res.Chart)
	fmt.Printf("sbom   %s\n", res.SBOM)
	for _, p := range res.Plugins {
		fmt.Printf("plugin %s %s\n", filepath.Base(p.Path), p.SHA256)
	}
	fmt.Printf("krew   %s\n", res.Krew)
	fmt.Printf("sums   %s\n", res.Checksums)
	return nil
}
