package image_test

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico/crds"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/image"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// One build of both platforms serves every test of the package (the reproducibility test
// builds a second one). With Go's build cache warm for these flags (a previous `make image` or
// run of these tests) a build of both is 9 to 15 s and the package about 40 s; with it cold, the
// first build compiles everything for linux/amd64 and linux/arm64 without cgo: 17 min 40 s on 2
// loaded cores (BENCHMARKS.md, Image).
var shared struct {
	once sync.Once
	dir  string
	res  *image.Result
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.dir != "" {
		_ = os.RemoveAll(filepath.Dir(shared.dir))
	}
	os.Exit(code)
}

func build(t *testing.T, out string) *image.Result {
	t.Helper()
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	start := time.Now()
	res, err := image.Build(context.Background(), image.Options{Root: root, Out: out, RefName: "test"})
	require.NoError(t, err)
	t.Logf("built %s in %s: index %s", out, time.Since(start).Round(time.Millisecond), res.Index)
	return res
}

// built is the package's shared build: the layout directory and its result.
func built(t *testing.T) (string, *image.Result) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the image (two cross-compiled binaries)")
	}
	shared.once.Do(func() {
		d, err := os.MkdirTemp("", "rra-image-")
		if err != nil {
			shared.err = err
			return
		}
		shared.dir = filepath.Join(d, "image")
		root, err := testenv.RepoRoot()
		if err != nil {
			shared.err = err
			return
		}
		start := time.Now()
		shared.res, shared.err = image.Build(context.Background(), image.Options{Root: root, Out: shared.dir, RefName: "test"})
		t.Logf("built the image in %s", time.Since(start).Round(time.Millisecond))
	})
	require.NoError(t, shared.err)
	return shared.dir, shared.res
}

// TestReproducible builds this machine's platform's image again, in another directory: the same
// sources give the same manifest digest (and so the same config and layer: the slim and the full
// binary byte for byte). One platform, not both: the second build's four links and layer are
// most of the package's CPU; the arm64 build runs the same code with another GOARCH, and
// TestReproducibleLarge (make test-all) builds both again and compares the index.
func TestReproducible(t *testing.T) {
	_, first := built(t)
	arch := runtime.GOARCH
	if _, ok := first.Manifests[arch]; !ok {
		arch = image.DefaultArchs[0]
	}
	root, err := testenv.RepoRoot()
	require.NoError(t, err)
	start := time.Now()
	second, err := image.Build(context.Background(), image.Options{Root: root, Out: filepath.Join(t.TempDir(), "again"), RefName: "test", Archs: []string{arch}})
	require.NoError(t, err)
	t.Logf("built linux/%s again in %s: manifest %s", arch, time.Since(start).Round(time.Millisecond), second.Manifests[arch])
	require.Equal(t, first.Manifests[arch], second.Manifests[arch], "linux/%s manifest digest", arch)
	require.Equal(t, first.Sizes[arch], second.Sizes[arch], "linux/%s layer size", arch)
}

// TestReproducibleLarge (make test-all) builds the whole image twice: the same sources give the
// same index digest (and so the same manifests, configs and layers of both platforms), whatever
// the build directory.
func TestReproducibleLarge(t *testing.T) {
	testenv.SlowProof(t)
	dir, first := built(t)
	again := filepath.Join(t.TempDir(), "again")
	second := build(t, again)
	require.Equal(t, first.Index, second.Index, "index digest")
	require.Equal(t, first.Manifests, second.Manifests, "manifest digests")
	a, err := os.ReadFile(filepath.Join(dir, "index.json"))
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(again, "index.json"))
	require.NoError(t, err)
	require.Equal(t, string(a), string(b), "index.json")
}

// layerFiles reads an image's only layer: its tar headers and the contents of its files.
func layerFiles(t *testing.T, img v1.Image) ([]*tar.Header, map[string][]byte) {
	t.Helper()
	layers, err := img.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1)
	rc, err := layers[0].Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	var hs []*tar.Header
	data := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		hs = append(hs, h)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		data["/"+strings.TrimSuffix(h.Name, "/")] = b
	}
	return hs, data
}

// TestLayout reads the OCI layout back as a registry client would: one index under the
// layout's index.json, an image for linux/amd64 and linux/arm64, each valid (digests and sizes
// match their contents), run as 65532:65532 with the slim binary as entrypoint, holding the slim
// and the full static binaries of its architecture, the build machine's CA bundle and the user,
// and no shell.
func TestLayout(t *testing.T) {
	dir, res := built(t)
	p, err := layout.FromPath(dir)
	require.NoError(t, err)
	top, err := p.ImageIndex()
	require.NoError(t, err)
	tm, err := top.IndexManifest()
	require.NoError(t, err)
	require.Len(t, tm.Manifests, 1)
	require.Equal(t, res.Index, tm.Manifests[0].Digest)
	require.Equal(t, "test", tm.Manifests[0].Annotations["org.opencontainers.image.ref.name"])
	idx, err := top.ImageIndex(res.Index)
	require.NoError(t, err)
	require.NoError(t, validate.Index(idx))
	im, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Equal(t, "application/vnd.oci.image.index.v1+json", string(im.MediaType))
	hostCA, err := os.ReadFile(image.HostCABundle)
	require.NoError(t, err)
	var platforms []string
	for _, d := range im.Manifests {
		require.NotNil(t, d.Platform)
		arch := d.Platform.Architecture
		platforms = append(platforms, d.Platform.OS+"/"+arch)
		require.Equal(t, res.Manifests[arch], d.Digest, arch)
		img, err := idx.Image(d.Digest)
		require.NoError(t, err)
		cf, err := img.ConfigFile()
		require.NoError(t, err)
		require.Equal(t, "linux", cf.OS)
		require.Equal(t, arch, cf.Architecture)
		require.Equal(t, "65532:65532", cf.Config.User)
		require.Equal(t, []string{"/calico-rr-autoscaler"}, cf.Config.Entrypoint)
		require.Empty(t, cf.Config.Cmd)
		require.Equal(t, "/", cf.Config.WorkingDir)
		require.True(t, cf.Created.Equal(time.Unix(0, 0)), "created %s", cf.Created)

		hs, files := layerFiles(t, img)
		var names []string
		for _, h := range hs {
			names = append(names, h.Name)
			require.True(t, h.ModTime.Equal(time.Unix(0, 0)), "%s mtime %s", h.Name, h.ModTime)
			if h.Name == "calico-rr-autoscaler" || h.Name == "calico-rr-autoscaler-full" {
				require.Equal(t, int64(0o755), h.Mode)
				require.Equal(t, 0, h.Uid)
				require.Equal(t, 0, h.Gid)
			}
		}
		require.IsIncreasing(t, names, "tar entries sorted")
		for name := range files {
			require.False(t, strings.HasPrefix(name, "/bin") || strings.HasPrefix(name, "/sbin") || strings.HasPrefix(name, "/usr"),
				"%s: no shell, no other programs", name)
		}
		require.NotContains(t, files, "/bin/sh")
		require.Equal(t, hostCA, files["/etc/ssl/certs/ca-certificates.crt"], "CA bundle")
		require.Contains(t, string(files["/etc/passwd"]), "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")
		require.Contains(t, string(files["/etc/group"]), "nonroot:x:65532:\n")

		for _, bin := range []string{image.Binary, image.FullBinary} {
			exe, err := elf.NewFile(bytes.NewReader(files[bin]))
			require.NoError(t, err, bin)
			want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
			require.Equal(t, want, exe.Machine, arch)
			for _, prog := range exe.Progs {
				require.NotEqual(t, elf.PT_INTERP, prog.Type, "%s %s: a static binary has no interpreter", arch, bin)
			}
			require.Nil(t, exe.Section(".dynamic"), "%s %s: static", arch, bin)
		}
		// The entrypoint is the slim build: no etcd client, gRPC or GoBGP linked in; the full
		// build has them (Calico's etcd datastore, the verify command).
		for bin, slim := range map[string]bool{image.Binary: true, image.FullBinary: false} {
			bi, err := buildinfo.Read(bytes.NewReader(files[bin]))
			require.NoError(t, err, bin)
			tags := ""
			for _, st := range bi.Settings {
				if st.Key == "-tags" {
					tags = st.Value
				}
			}
			var heavy []string
			for _, d := range bi.Deps {
				for _, m := range []string{"go.etcd.io/etcd/client/v3", "google.golang.org/grpc", "github.com/osrg/gobgp/v3"} {
					if d.Path == m {
						heavy = append(heavy, m)
					}
				}
			}
			if slim {
				require.Equal(t, "slim", tags, bin)
				require.Empty(t, heavy, "%s links them", bin)
			} else {
				require.Empty(t, tags, bin)
				require.Len(t, heavy, 3, "%s: %v", bin, heavy)
			}
		}
		t.Logf("linux/%s: manifest %s, layer %.1f MiB compressed", arch, d.Digest, float64(res.Sizes[arch])/(1<<20))
	}
	require.ElementsMatch(t, []string{"linux/amd64", "linux/arm64"}, platforms)
}

// unpack extracts an image's layer under root as the container runtime would (owners and modes
// from the tar headers).
// renderDeployment renders the chart with Helm's Go code (as `helm template` would) and returns
// the manifest and its Deployment.
func renderDeployment(t *testing.T, values string) (string, *appsv1.Deployment) {
	t.Helper()
	dir, err := testenv.ChartDir()
	require.NoError(t, err)
	ch, err := loader.Load(dir)
	require.NoError(t, err)
	vals := map[string]any{}
	require.NoError(t, yaml.Unmarshal([]byte(values), &vals))
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = testenv.ChartRelease, testenv.ChartNamespace
	inst.KubeVersion, err = chartutil.ParseKubeVersion(testenv.KubernetesVersion)
	require.NoError(t, err)
	rel, err := inst.Run(ch, vals)
	require.NoError(t, err)
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(rel.Manifest), 4096)
	for {
		var d appsv1.Deployment
		if err := dec.Decode(&d); err != nil {
			require.ErrorIs(t, err, io.EOF)
			break
		}
		if d.Kind == "Deployment" {
			return rel.Manifest, &d
		}
	}
	t.Fatal("the chart rendered no Deployment")
	return "", nil
}

// TestEntrypointAsChartRunsIt unpacks the image of this machine's architecture and runs its
// entrypoint as the chart's Deployment runs it, against a real kube-apiserver: chrooted in the
// unpacked root (only the image's files: its CA bundle, its passwd, no shell), as the pod's
// user (podSecurityContext.runAsUser/runAsGroup, 65532), with the container's args and env from
// the rendered Deployment (self-managed certificates, leader election, the chart's ports moved to
// free ones), and the service account's token, CA and namespace where the kubelet mounts them,
// with the chart's RBAC only. The product must write its certificate, become ready (/readyz on
// the chart's health port), take the leader Lease, and stop cleanly on SIGTERM.
func TestEntrypointAsChartRunsIt(t *testing.T) {
	_, res := built(t)
	if os.Getuid() != 0 {
		t.Skip("runs the entrypoint as uid 65532 in a chroot: needs root")
	}
	if _, ok := res.Manifests[runtime.GOARCH]; !ok {
		t.Skipf("no image for this machine's architecture %s", runtime.GOARCH)
	}
	dir, _ := built(t)
	p, err := layout.FromPath(dir)
	require.NoError(t, err)
	idx, err := p.ImageIndex()
	require.NoError(t, err)
	idx, err = idx.ImageIndex(res.Index)
	require.NoError(t, err)
	img, err := idx.Image(res.Manifests[runtime.GOARCH])
	require.NoError(t, err)

	// The container's root: under a directory the unprivileged user can traverse.
	root, cleanup, err := image.UnpackRoot(img)
	require.NoError(t, err)
	t.Cleanup(cleanup)
	cf, err := img.ConfigFile()
	require.NoError(t, err)

	env := testenv.Start(t, testenv.WithChartRBAC())
	env.CreateNamespace(t, testenv.ChartNamespace)
	calicoCRDs, err := crds.Dir()
	require.NoError(t, err)
	testenv.InstallCRDs(t, env.Config, filepath.Join(calicoCRDs, "crd.projectcalico.org_bgppeers.yaml"),
		filepath.Join(calicoCRDs, "crd.projectcalico.org_bgpconfigurations.yaml"), testenv.RepoPath(t, "policy/crd"))

	ports, err := testenv.FreePorts(3)
	require.NoError(t, err)
	manifest, dep := renderDeployment(t, fmt.Sprintf(
		"certManager: {enabled: false}\npolicy: {create: false}\nwebhook: {port: %d}\nhealth: {port: %d}\nmetrics: {port: %d}\n",
		ports[0], ports[1], ports[2]))
	_, stderr, err := env.KubectlStdin(t, testenv.UserAdmin, manifest, "apply", "--server-side", "-f", "-")
	require.NoError(t, err, "applying the rendered chart: %s", stderr)

	pod := dep.Spec.Template.Spec
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	require.NotNil(t, pod.SecurityContext)
	uid, gid := *pod.SecurityContext.RunAsUser, *pod.SecurityContext.RunAsGroup
	require.Equal(t, fmt.Sprintf("%d:%d", uid, gid), cf.Config.User, "the chart runs the image's user")
	require.Empty(t, c.Command, "the chart runs the image's entrypoint")
	require.True(t, *pod.AutomountServiceAccountToken)

	// What the kubelet gives the pod: the service account's credentials and the API server's
	// address (in-cluster config), the emptyDir at the cert dir, the env of the container.
	sa := filepath.Join(root, "var/run/secrets/kubernetes.io/serviceaccount")
	require.NoError(t, os.MkdirAll(sa, 0o755))
	for name, data := range map[string]string{"token": env.Token(testenv.UserServiceAccount), "ca.crt": string(env.CAData),
		"namespace": testenv.ChartNamespace} {
		require.NoError(t, os.WriteFile(filepath.Join(sa, name), []byte(data), 0o644))
	}
	var certDir string
	for _, m := range c.VolumeMounts {
		if m.Name == "serving-cert" {
			certDir = m.MountPath
		}
	}
	require.NotEmpty(t, certDir)
	require.NoError(t, os.MkdirAll(filepath.Join(root, certDir), 0o777))
	require.NoError(t, os.Chown(filepath.Join(root, certDir), 0, int(*pod.SecurityContext.FSGroup)))
	require.NoError(t, os.Chmod(filepath.Join(root, certDir), 0o2777))
	host, port, ok := strings.Cut(strings.TrimPrefix(env.URL, "https://"), ":")
	require.True(t, ok, env.URL)
	const podName = "calico-rr-autoscaler-7d9f8b6c5d-x2x4z"
	environ := []string{"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port}
	environ = append(environ, cf.Config.Env...)
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			environ = append(environ, e.Name+"="+testenv.ChartNamespace)
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			environ = append(environ, e.Name+"="+podName)
		case e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory":
			// What the kubelet gives: the container's memory limit in bytes (divisor 1).
			lim, ok := c.Resources.Limits[corev1.ResourceMemory]
			require.True(t, ok, "env %s: no memory limit", e.Name)
			environ = append(environ, fmt.Sprintf("%s=%d", e.Name, lim.Value()))
		case e.ValueFrom == nil:
			environ = append(environ, e.Name+"="+e.Value)
		default:
			t.Fatalf("env %s: a source the test does not provide", e.Name)
		}
	}

	logPath := filepath.Join(filepath.Dir(root), "serve.log")
	logf, err := os.Create(logPath)
	require.NoError(t, err)
	defer logf.Close()
	cmd := exec.Command(cf.Config.Entrypoint[0], c.Args...)
	cmd.Path = cf.Config.Entrypoint[0] // resolved inside the chroot
	cmd.Dir = cf.Config.WorkingDir
	cmd.Env = environ
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Setpgid: true,
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{uint32(*pod.SecurityContext.FSGroup)}}}
	t.Logf("running %s %s as %d:%d in %s", cmd.Path, strings.Join(c.Args, " "), uid, gid, root)
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			t.Logf("product log (tail):\n%s", testenv.Tail(logPath, 40))
		}
	})

	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	require.NoError(t, err)
	require.Contains(t, string(status), fmt.Sprintf("\nUid:\t%d\t%d\t%d\t%d\n", uid, uid, uid, uid))

	ready := func(path string) error {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("the entrypoint exited: %v", err)
		default:
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", ports[1], path))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %d", path, resp.StatusCode)
		}
		return nil
	}
	start := time.Now()
	testenv.Eventually(t, "/healthz", time.Minute, 200*time.Millisecond, func() error { return ready("/healthz") })
	testenv.Eventually(t, "/readyz", time.Minute, 200*time.Millisecond, func() error { return ready("/readyz") })
	t.Logf("ready in %s", time.Since(start).Round(time.Millisecond))

	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	// controller-runtime's identity is the host name (in a pod, the pod's name) and a UUID; the
	// process shares this machine's host name.
	hostname, err := os.Hostname()
	require.NoError(t, err)
	testenv.Eventually(t, "the leader Lease", 30*time.Second, 200*time.Millisecond, func() error {
		l, err := cs.CoordinationV1().Leases(testenv.ChartNamespace).Get(t.Context(), "calico-rr-autoscaler", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil || !strings.HasPrefix(*l.Spec.HolderIdentity, hostname+"_") {
			return fmt.Errorf("holder %v", l.Spec.HolderIdentity)
		}
		t.Logf("leader: %s", *l.Spec.HolderIdentity)
		return nil
	})
	sec, err := cs.CoreV1().Secrets(testenv.ChartNamespace).Get(t.Context(), dep.Name+"-tls", metav1.GetOptions{})
	require.NoError(t, err, "the self-managed certificate's Secret")
	crt, err := os.ReadFile(filepath.Join(root, certDir, "tls.crt"))
	require.NoError(t, err, "the certificate in the cert dir")
	require.Equal(t, string(sec.Data[corev1.TLSCertKey]), string(crt))

	require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM))
	select {
	case err := <-exited:
		stopped = true
		require.NoError(t, err, "exit after SIGTERM")
	case <-time.After(30 * time.Second):
		t.Fatal("the entrypoint did not stop within 30 s of SIGTERM")
	}
	l, err := cs.CoordinationV1().Leases(testenv.ChartNamespace).Get(t.Context(), "calico-rr-autoscaler", metav1.GetOptions{})
	require.NoError(t, err)
	require.True(t, l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "", "the Lease released on stop")
}
