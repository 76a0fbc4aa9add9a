// Package image builds the product's container image without a container engine: an OCI image
// index (linux/amd64 and linux/arm64) written to an OCI image layout directory with
// go-containerregistry, each image one layer holding the static binary, a CA bundle and
// /etc/passwd and /etc/group naming the non-root user 65532, and no shell.
//
// The build is reproducible: the binary is built with -trimpath, no build ID and no VCS stamp,
// the tar entries are sorted with fixed times and owners, and the config's creation time is
// fixed (SOURCE_DATE_EPOCH, or the Unix epoch), so the same sources give the same digests.
package image

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the image holds and how it runs; the chart's pod security context runs it as the same
// user (podSecurityContext.runAsUser/runAsGroup).
const (
	// Binary is the entrypoint: the slim build (go build -tags slim), with the Kubernetes datastore
	// only and no verify command; it does not link Calico's client, the etcd client, gRPC or
	// GoBGP, and serves in about 10 MiB less memory (BENCHMARKS.md).
	Binary = "/calico-rr-autoscaler"
	// FullBinary is the full build: every command, and Calico's etcd datastore (the chart runs it
	// with datastore.type etcdv3).
	FullBinary = "/calico-rr-autoscaler-full"
	CABundle   = "/etc/ssl/certs/ca-certificates.crt"
	User       = "65532:65532"
	UID, GID   = 65532, 65532
	WorkingDir = "/"
	// HostCABundle is the build machine's CA bundle (Debian's ca-certificates), copied into the
	// image.
	HostCABundle = "/etc/ssl/certs/ca-certificates.crt"
)

// DefaultArchs are the platforms `make image` builds (all linux).
var DefaultArchs = []string{"amd64", "arm64"}

// Options are the inputs of Build.
type Options struct {
	// Root is the module root (cmd/calico-rr-autoscaler is built from it).
	Root string
	// Out is the OCI layout directory; it is removed and written anew.
	Out string
	// Archs are the GOARCH values to build for linux (DefaultArchs if empty).
	Archs []string
	// CABundle is the CA bundle file to copy into the image (HostCABundle if empty).
	CABundle string
	// Created is the images' creation time and the files' modification time (the Unix epoch
	// if zero; see SourceDate).
	Created time.Time
	// RefName, when set, names the index in the layout's index.json
	// (org.opencontainers.image.ref.name, e.g. "dev" for `skopeo copy oci:bin/image:dev ...`);
	// it does not change any digest.
	RefName string
	// ImageName, when set, is also written as io.containerd.image.name (e.g.
	// calico-rr-autoscaler:dev) in index.json; it does not change any digest.
	ImageName string
	// Log, when set, receives progress lines.
	Log io.Writer
}

// Result is what Build wrote.
type Result struct {
	Index     v1.Hash            // the image index's digest
	Manifests map[string]v1.Hash // per GOARCH, the image manifest's digest
	Sizes     map[string]int64   // per GOARCH, the compressed layer's size in bytes
	Binaries  map[string]string  // per GOARCH, the full build (FullBinary; the kubectl plugin's and the SBOM's), under Out's sibling build dir
	Slim      map[string]string  // per GOARCH, the slim build (Binary, the entrypoint), beside it
}

// SourceDate is the time SOURCE_DATE_EPOCH gives (seconds since the epoch), or the Unix epoch
// when it is unset.
func SourceDate() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
	}
	return time.Unix(n, 0).UTC(), nil
}

// Build builds the binary for each platform, the images and their index, and writes the index
// to the OCI layout o.Out. The binaries are kept in o.Out + ".build" (a build directory beside
// the layout, outside it).
func Build(ctx context.Context, o Options) (*Result, error) {
	if len(o.Archs) == 0 {
		o.Archs = DefaultArchs
	}
	if o.CABundle == "" {
		o.CABundle = HostCABundle
	}
	if o.Created.IsZero() {
		o.Created = time.Unix(0, 0).UTC()
	}
	ca, err := os.ReadFile(o.CABundle)
	if err != nil {
		return nil, fmt.Errorf("the CA bundle: %w", err)
	}
	buildDir := filepath.Clean(o.Out) + ".build"
	if err := os.MkdirAll(buildDir, 0o755); err != nil {
		return nil, err
	}
	res := &Result{Manifests: map[string]v1.Hash{}, Sizes: map[string]int64{}, Binaries: map[string]string{}, Slim: map[string]string{}}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range o.Archs {
		bin := filepath.Join(buildDir, "calico-rr-autoscaler-full-linux-"+arch)
		slim := filepath.Join(buildDir, "calico-rr-autoscaler-linux-"+arch)
		var exes [2][]byte // the slim build, the full build
		for k, b := range []struct{ path, tags string }{{slim, "slim"}, {bin, ""}} {
			start := time.Now()
			if err := BuildBinary(ctx, o.Root, arch, b.path, b.tags); err != nil {
				return nil, err
			}
			logf(o.Log, "built %s (linux/%s) in %s", b.path, arch, time.Since(start).Round(time.Millisecond))
			if exes[k], err = os.ReadFile(b.path); err != nil {
				return nil, err
			}
		}
		img, err := Image(arch, exes[0], exes[1], ca, o.Created)
		if err != nil {
			return nil, fmt.Errorf("linux/%s: %w", arch, err)
		}
		d, err := img.Digest()
		if err != nil {
			return nil, err
		}
		layers, err := img.Layers()
		if err != nil {
			return nil, err
		}
		size, err := layers[0].Size()
		if err != nil {
			return nil, err
		}
		res.Manifests[arch], res.Sizes[arch], res.Binaries[arch], res.Slim[arch] = d, size, bin, slim
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "linux", Architecture: arch},
		}})
	}
	if res.Index, err = idx.Digest(); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(o.Out); err != nil {
		return nil, err
	}
	p, err := layout.Write(o.Out, empty.Index)
	if err != nil {
		return nil, err
	}
	ann := map[string]string{}
	if o.RefName != "" {
		ann["org.opencontainers.image.ref.name"] = o.RefName
	}
	if o.ImageName != "" {
		ann["io.containerd.image.name"] = o.ImageName
	}
	var opts []layout.Option
	if len(ann) > 0 {
		opts = append(opts, layout.WithAnnotations(ann))
	}
	if err := p.AppendIndex(idx, opts...); err != nil {
		return nil, err
	}
	return res, nil
}

// BuildBinary builds cmd/calico-rr-autoscaler for linux/arch into out, with the build tags tags
// ("slim" for Binary, "" for FullBinary): static (no cgo), no paths of the build machine, no
// build ID, no VCS stamp (the digest follows the sources, not the commit or a dirty tree).
func BuildBinary(ctx context.Context, root, arch, out, tags string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=",
		"-tags="+tags, "-o", out, "./cmd/calico-rr-autoscaler")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build (linux/%s): %v\n%s", arch, err, b)
	}
	return nil
}

// Image is the image of one platform: one layer (Layer), the config of a non-root, shell-less
// container whose entrypoint is the slim binary.
func Image(arch string, slim, full, ca []byte, created time.Time) (v1.Image, error) {
	layer, err := Layer(slim, full, ca, created)
	if err != nil {
		return nil, err
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, History: v1.History{
		Created:   v1.Time{Time: created},
		CreatedBy: "internal/image: " + Binary + ", CA bundle, /etc/passwd, /etc/group",
		Comment:   "built by make image (go-containerregistry, no container engine)",
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: created}
	cf.Config = v1.Config{
		User:       User,
		Entrypoint: []string{Binary},
		WorkingDir: WorkingDir,
		Env:        []string{"SSL_CERT_FILE=" + CABundle},
		Labels: map[string]string{
			"org.opencontainers.image.title":  "calico-rr-autoscaler",
			"org.opencontainers.image.source": "https://github.com/calico-rr-autoscaler/calico-rr-autoscaler",
		},
	}
	return mutate.ConfigFile(img, cf)
}

// file is one entry of the layer.
type file struct {
	name     string // without a leading slash; directories end in "/"
	mode     int64
	uid, gid int
	data     []byte
}

const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\nnonroot:x:65532:\n"
)

// Layer is the image's only layer, an in-memory tar: the slim and the full binary (0755), the CA
// bundle, passwd and group (the user nonroot, 65532, whose shell /sbin/nologin does not exist:
// there is no shell), /tmp and nonroot's home; entries sorted by name, owned by root but for the
// home, all modified at mtime.
func Layer(slim, full, ca []byte, mtime time.Time) (v1.Layer, error) {
	files := []file{
		{name: strings.TrimPrefix(Binary, "/"), mode: 0o755, data: slim},
		{name: strings.TrimPrefix(FullBinary, "/"), mode: 0o755, data: full},
		{name: strings.TrimPrefix(CABundle, "/"), mode: 0o644, data: ca},
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: UID, gid: GID},
		{name: "tmp/", mode: 0o1777},
	}
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: mtime, Format: tar.FormatUSTAR}
		if strings.HasSuffix(f.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}
