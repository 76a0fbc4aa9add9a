// Command image builds the product's OCI image index (linux/amd64 and linux/arm64) into an OCI
// image layout directory without a container engine (package internal/image), and prints the
// index's digest and each image manifest's. `make image` runs it:
//
//	go run ./hack/image -out bin/image -image calico-rr-autoscaler:dev
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/image"
)

func main() {
	out := flag.String("out", "bin/image", "the OCI image layout directory to write (replaced)")
	archs := flag.String("archs", strings.Join(image.DefaultArchs, ","), "linux GOARCH values, comma-separated")
	name := flag.String("image", "calico-rr-autoscaler:dev", "the image's name:tag, recorded in the layout's index.json (the tag as org.opencontainers.image.ref.name)")
	ca := flag.String("ca-bundle", image.HostCABundle, "the CA bundle copied into the image (default: the build machine's)")
	flag.Parse()
	if err := run(*out, *archs, *name, *ca); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(out, archs, name, ca string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	created, err := image.SourceDate()
	if err != nil {
		return err
	}
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	ref := ""
	if i := strings.LastIndex(name, ":"); i >= 0 && !strings.Contains(name[i:], "/") {
		ref = name[i+1:]
	}
	res, err := image.Build(ctx, image.Options{Root: root, Out: out, Archs: strings.Split(archs, ","), CABundle: ca,
		Created: created, RefName: ref, ImageName: name, Log: os.Stderr})
	if err != nil {
		return err
	}
	fmt.Printf("%s (OCI layout %s, ref %q)\n", name, out, ref)
	fmt.Printf("index %s\n", res.Index)
	for _, a := range strings.Split(archs, ",") {
		fmt.Printf("linux/%s %s (layer %.1f MiB compressed)\n", a, res.Manifests[a], float64(res.Sizes[a])/(1<<20))
	}
	fmt.Printf("CA bundle from %s\n", ca)
	return nil
}
