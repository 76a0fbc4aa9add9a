package release_test

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/cli"
	"helm.sh/helm/v3/pkg/registry"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico/crds"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/image"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/release"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

const repository = "calico-rr-autoscaler/calico-rr-autoscaler"

// TestReleaseInstallFromOCIRegistryLarge builds a release (package release: the image, the chart
// package with the image's digest pinned, the SBOM, the kubectl-rr archives and the krew
// manifest), pushes the image index and the chart to an in-process OCI registry
// (go-containerregistry's pkg/registry), signs and verifies both with cosign's Go module
// (hack/sign), installs the chart from oci://… with Helm's own code
// (action.Push, then action.Install locating the chart by its version, as `helm install
// oci://… --version`) into a real kube-apiserver, pulls the image back by the digest the
// installed Deployment names and runs its entrypoint from the image's own files, chrooted, as the
// Deployment's user with its args, as the installed ServiceAccount with the chart's RBAC. The
// product must make its certificate, and the API server must call its webhooks through the
// installed webhook configurations and Service. The SBOM must list the product's modules at the
// versions linked into this test, and the krew manifest's sha256s must be the archives'.
//
// Over a minute: 56 to 98 s on 2 loaded cores (77 s to 2 min 33 s with its compilation), 31 to
// 69 s of it the release (the image's two cross-compiled builds, Go's build cache warm; cold, as
// internal/image's shared build says, much longer), 10 to 18 s building hack/sign (6 min 30 s cold:
// cosign's dependencies), 5 to 10 s the API server's start, under 2.5 s from the entrypoint's start
// to the webhooks answering. The test builds the linux plugin archives
// only (they reuse the image's binaries); `make release` also builds darwin's. It runs in make
// test-all (the name ends in Large): make test keeps its time budget, and internal/image's tests
// already run the shipped image's entrypoint in make test.
func TestReleaseInstallFromOCIRegistryLarge(t *testing.T) {
	testenv.SlowProof(t)
	if testing.Short() {
		t.Skip("builds the image and needs kube-apiserver and etcd")
	}
	root, err := testenv.RepoRoot()
	require.NoError(t, err)

	reg := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")

	out := filepath.Join(t.TempDir(), "release")
	start := time.Now()
	res, err := release.Build(t.Context(), release.Options{Root: root, Out: out, Version: "0.1.0-test.1",
		Registry: host, Repository: repository, PluginPlatforms: []string{"linux/amd64", "linux/arm64"}})
	require.NoError(t, err)
	t.Logf("release built in %s: %s", time.Since(start).Round(time.Millisecond), res.ImageRef)

	checkSBOM(t, res.SBOM, res.Version)
	checkKrew(t, res)

	// Push the image index as built (its digest unchanged) and the chart, as `helm push` does.
	p, err := layout.FromPath(res.ImageLayout)
	require.NoError(t, err)
	top, err := p.ImageIndex()
	require.NoError(t, err)
	idx, err := top.ImageIndex(res.Image.Index)
	require.NoError(t, err)
	tag, err := name.NewTag(host+"/"+repository+":"+res.Version, name.Insecure)
	require.NoError(t, err)
	require.NoError(t, remote.WriteIndex(tag, idx))

	helmHome := t.TempDir()
	settings := cli.New()
	settings.RepositoryCache = filepath.Join(helmHome, "cache")
	settings.RepositoryConfig = filepath.Join(helmHome, "repositories.yaml")
	settings.RegistryConfig = filepath.Join(helmHome, "registry.json")
	rc, err := registry.NewClient(registry.ClientOptPlainHTTP(), registry.ClientOptWriter(io.Discard),
		registry.ClientOptCredentialsFile(settings.RegistryConfig))
	require.NoError(t, err)
	pushCfg := &action.Configuration{RegistryClient: rc, Log: t.Logf}
	push := action.NewPushWithOpts(action.WithPushConfig(pushCfg), action.WithPlainHTTP(true))
	push.Settings = settings
	_, err = push.Run(res.Chart, "oci://"+host+"/charts")
	require.NoError(t, err, "helm push")
	signAndVerify(t, host+"/"+repository+"@"+res.Image.Index.String(), host+"/charts/"+release.ChartName+":"+res.Version)

	// helm install calico-rr-autoscaler oci://HOST/charts/calico-rr-autoscaler --version V,
	// into a real API server: the product's service account has the chart's RBAC only.
	env := testenv.Start(t, testenv.WithChartRBAC())
	env.CreateNamespace(t, testenv.ChartNamespace)
	calicoCRDs, err := crds.Dir()
	require.NoError(t, err)
	testenv.InstallCRDs(t, env.Config, filepath.Join(calicoCRDs, "crd.projectcalico.org_bgppeers.yaml"),
		filepath.Join(calicoCRDs, "crd.projectcalico.org_bgpconfigurations.yaml"))
	ports, err := testenv.FreePorts(3)
	require.NoError(t, err)

	flags := genericclioptions.NewConfigFlags(false)
	kubeconfig, ns := env.KubeconfigPath(testenv.UserAdmin), testenv.ChartNamespace
	flags.KubeConfig, flags.Namespace = &kubeconfig, &ns
	cfg := new(action.Configuration)
	require.NoError(t, cfg.Init(flags, ns, "secret", t.Logf))
	cfg.RegistryClient = rc
	inst := action.NewInstall(cfg)
	inst.SetRegistryClient(rc)
	inst.ReleaseName, inst.Namespace, inst.Version, inst.PlainHTTP = testenv.ChartRelease, ns, res.Version, true
	inst.Timeout = time.Minute
	chartRef := "oci://" + host + "/charts/" + release.ChartName
	located, err := inst.LocateChart(chartRef, settings)
	require.NoError(t, err, "locating %s --version %s", chartRef, res.Version)
	ch, err := loader.Load(located)
	require.NoError(t, err)
	require.Equal(t, res.Version, ch.Metadata.Version)
	require.Equal(t, res.Version, ch.Metadata.AppVersion)
	// The Service's port is the webhook's: the test points the Service at 127.0.0.1 (an
	// ExternalName), where the API server then calls the product on the Service's port.
	vals := map[string]any{}
	require.NoError(t, yaml.Unmarshal(fmt.Appendf(nil,
		"certManager: {enabled: false}\npolicy: {create: false}\nwebhook: {port: %d}\nservice: {port: %d}\nhealth: {port: %d}\nmetrics: {port: %d}\n",
		ports[0], ports[0], ports[1], ports[2]), &vals))
	rel, err := inst.Run(ch, vals)
	require.NoError(t, err, "helm install")
	t.Logf("installed %s %s from %s", rel.Name, rel.Chart.Metadata.Version, chartRef)

	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	dep, err := cs.AppsV1().Deployments(ns).Get(t.Context(), "calico-rr-autoscaler", metav1.GetOptions{})
	require.NoError(t, err)
	pod := dep.Spec.Template.Spec
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	require.Equal(t, res.ImageRef, c.Image, "the installed Deployment names the image by its digest")
	require.Equal(t, host+"/"+repository+"@"+res.Image.Index.String(), c.Image)

	if os.Getuid() != 0 {
		t.Skip("runs the entrypoint as uid 65532 in a chroot: needs root")
	}
	if _, ok := res.Image.Manifests[runtime.GOARCH]; !ok {
		t.Skipf("no image for this machine's architecture %s", runtime.GOARCH)
	}
	// The image, pulled by the reference the Deployment names (a kubelet's pull).
	ref, err := name.ParseReference(c.Image, name.Insecure)
	require.NoError(t, err)
	pulled, err := remote.Index(ref)
	require.NoError(t, err)
	d, err := pulled.Digest()
	require.NoError(t, err)
	require.Equal(t, res.Image.Index, d)
	img, err := pulled.Image(platformManifest(t, pulled))
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)

	rootfs, cleanup, err := image.UnpackRoot(img)
	require.NoError(t, err)
	t.Cleanup(cleanup)

	// The API server calls the webhooks at the chart's Service: here, 127.0.0.1.
	svc, err := cs.CoreV1().Services(ns).Get(t.Context(), "calico-rr-autoscaler", metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, cs.CoreV1().Services(ns).Delete(t.Context(), svc.Name, metav1.DeleteOptions{}))
	_, err = cs.CoreV1().Services(ns).Create(t.Context(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "127.0.0.1"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	cmd, logPath := startContainer(t, env, rootfs, cf, &pod)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			t.Logf("product log (tail):\n%s", testenv.Tail(logPath, 40))
		}
	})
	start = time.Now()
	testenv.Eventually(t, "/readyz", 2*time.Minute, 200*time.Millisecond, func() error {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("the entrypoint exited: %v", err)
		default:
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1]))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz %d", resp.StatusCode)
		}
		return nil
	})
	t.Logf("ready in %s", time.Since(start).Round(time.Millisecond))
	// The validating webhook rejects a policy the CRD's schema accepts (min > max), through the
	// installed configuration, the Service and the product's own certificate.
	env.AwaitWebhooks(t, time.Minute)
	// The mutating node webhook answers a node's creation (a server-side dry run).
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "release-probe", Labels: map[string]string{"kubernetes.io/hostname": "release-probe"}}}
	_, err = cs.CoreV1().Nodes().Create(t.Context(), node, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err, "a node's creation through the mutating webhook")
	require.Positive(t, webhookRequests(t, ports[2], "/mutate-v1-node"), "the mutating webhook answered the node's creation")
	require.Positive(t, webhookRequests(t, ports[2], "/validate-routereflectorpolicy"), "the policy webhook answered")
	t.Logf("the webhooks answer %s after start", time.Since(start).Round(time.Millisecond))
}

// webhookRequests is how many requests the product's webhook at path answered with 200, from
// its metrics (controller-runtime's controller_runtime_webhook_requests_total).
func webhookRequests(t *testing.T, port int, path string) float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var n float64
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "controller_runtime_webhook_requests_total{") && strings.Contains(l, `code="200"`) &&
			strings.Contains(l, `webhook="`+path+`"`) {
			var v float64
			_, err := fmt.Sscan(l[strings.LastIndex(l, " ")+1:], &v)
			require.NoError(t, err, l)
			n += v
		}
	}
	return n
}

// platformManifest is the digest of this machine's linux image in an index.
func platformManifest(t *testing.T, idx v1.ImageIndex) v1.Hash {
	t.Helper()
	im, err := idx.IndexManifest()
	require.NoError(t, err)
	for _, d := range im.Manifests {
		if d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == runtime.GOARCH {
			return d.Digest
		}
	}
	t.Fatalf("no linux/%s image in the index", runtime.GOARCH)
	return v1.Hash{}
}

// startContainer runs the image's entrypoint as the kubelet runs the Deployment's container:
// chrooted in rootfs, as the pod's user and fsGroup, with the container's args and env, the
// service account's token, CA and namespace where the kubelet mounts them (the token of the
// chart's ServiceAccount), and the cert dir an emptyDir.
func startContainer(t *testing.T, env *testenv.Env, rootfs string, cf *v1.ConfigFile, pod *corev1.PodSpec) (*exec.Cmd, string) {
	t.Helper()
	c := pod.Containers[0]
	sc := pod.SecurityContext
	require.NotNil(t, sc)
	uid, gid, fsGroup := *sc.RunAsUser, *sc.RunAsGroup, *sc.FSGroup
	require.Equal(t, fmt.Sprintf("%d:%d", uid, gid), cf.Config.User, "the chart runs the image's user")
	require.Empty(t, c.Command, "the chart runs the image's entrypoint")
	sa := filepath.Join(rootfs, "var/run/secrets/kubernetes.io/serviceaccount")
	require.NoError(t, os.MkdirAll(sa, 0o755))
	for n, data := range map[string]string{"token": env.Token(testenv.UserServiceAccount), "ca.crt": string(env.CAData),
		"namespace": testenv.ChartNamespace} {
		require.NoError(t, os.WriteFile(filepath.Join(sa, n), []byte(data), 0o644))
	}
	for _, m := range c.VolumeMounts {
		if m.Name == "serving-cert" {
			dir := filepath.Join(rootfs, m.MountPath)
			require.NoError(t, os.MkdirAll(dir, 0o777))
			require.NoError(t, os.Chown(dir, 0, int(fsGroup)))
			require.NoError(t, os.Chmod(dir, 0o2777))
		}
	}
	host, port, ok := strings.Cut(strings.TrimPrefix(env.URL, "https://"), ":")
	require.True(t, ok, env.URL)
	environ := append([]string{"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port}, cf.Config.Env...)
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			environ = append(environ, e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			environ = append(environ, e.Name+"="+testenv.ChartNamespace)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			environ = append(environ, e.Name+"=calico-rr-autoscaler-5c8d7f9b6-r2x7q")
		case e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory":
			lim, ok := c.Resources.Limits[corev1.ResourceMemory]
			require.True(t, ok, "env %s: no memory limit", e.Name)
			environ = append(environ, fmt.Sprintf("%s=%d", e.Name, lim.Value()))
		default:
			t.Fatalf("env %s: a source the test does not provide", e.Name)
		}
	}
	logPath := filepath.Join(filepath.Dir(rootfs), "serve.log")
	logf, err := os.Create(logPath)
	require.NoError(t, err)
	t.Cleanup(func() { logf.Close() })
	cmd := exec.Command(cf.Config.Entrypoint[0], c.Args...)
	cmd.Path = cf.Config.Entrypoint[0] // resolved inside the chroot
	cmd.Dir, cmd.Env = cf.Config.WorkingDir, environ
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs, Setpgid: true,
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{uint32(fsGroup)}}}
	t.Logf("running %s %s as %d:%d from the pulled image", cmd.Path, strings.Join(c.Args, " "), uid, gid)
	require.NoError(t, cmd.Start())
	return cmd, logPath
}

// checkSBOM reads the SBOM: CycloneDX 1.5, the product at the release's version, and the
// modules the product links at the versions go.mod selects (go list -m).
func checkSBOM(t *testing.T, path, version string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var bom release.BOM
	require.NoError(t, json.Unmarshal(b, &bom))
	require.Equal(t, "CycloneDX", bom.BOMFormat)
	require.Equal(t, "1.5", bom.SpecVersion)
	require.Regexp(t, `^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, bom.SerialNumber)
	require.Equal(t, release.Module, bom.Metadata.Component.Name)
	require.Equal(t, version, bom.Metadata.Component.Version)
	got := map[string]release.Component{}
	for _, c := range bom.Components {
		require.Equal(t, "library", c.Type)
		require.NotEmpty(t, c.Version, c.Name)
		require.Equal(t, "pkg:golang/"+c.Name+"@"+c.Version, strings.ReplaceAll(c.PURL, "%2B", "+"))
		got[c.Name] = c
	}
	// Modules the product links (helm.sh/helm/v3 is in go.mod for the tests and this package, not
	// in the binary: the SBOM is the shipped binary's).
	mods := []string{"k8s.io/api", "k8s.io/apimachinery", "k8s.io/client-go", "sigs.k8s.io/controller-runtime",
		"github.com/projectcalico/api", "github.com/projectcalico/calico", "github.com/prometheus/client_golang"}
	list := exec.Command("go", append([]string{"list", "-m", "-f", "{{.Path}} {{.Version}}"}, mods...)...)
	list.Dir = testenv.RepoPath(t, ".")
	b, err = list.Output()
	require.NoError(t, err, "go list -m")
	want := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		p, v, _ := strings.Cut(l, " ")
		want[p] = v
	}
	for _, mod := range mods {
		_, ok := got[mod]
		require.True(t, ok, "the SBOM lists %s", mod)
		require.NotEmpty(t, want[mod], mod)
		require.Equal(t, want[mod], got[mod].Version, mod)
		require.Len(t, got[mod].Hashes, 1, "%s: its go.sum hash", mod)
		require.Len(t, got[mod].Hashes[0].Content, 64, mod)
	}
	require.Equal(t, runtime.Version(), got["stdlib"].Version)
	t.Logf("SBOM: %d components, k8s.io/api %s, sigs.k8s.io/controller-runtime %s, github.com/projectcalico/api %s",
		len(bom.Components), got["k8s.io/api"].Version, got["sigs.k8s.io/controller-runtime"].Version,
		got["github.com/projectcalico/api"].Version)
}

// checkKrew reads the krew manifest: one platform per archive, its sha256 the archive's, its
// bin the archive's only file, an executable named kubectl-rr.
func checkKrew(t *testing.T, res *release.Result) {
	t.Helper()
	b, err := os.ReadFile(res.Krew)
	require.NoError(t, err)
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version   string `json:"version"`
			Platforms []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				SHA256 string `json:"sha256"`
				Bin    string `json:"bin"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(b, &m), "%s", b)
	require.Equal(t, "krew.googlecontainertools.github.com/v1alpha2", m.APIVersion)
	require.Equal(t, "Plugin", m.Kind)
	require.Equal(t, "rr", m.Metadata.Name)
	require.Equal(t, "v"+res.Version, m.Spec.Version)
	require.Len(t, m.Spec.Platforms, len(res.Plugins))
	for i, p := range m.Spec.Platforms {
		pl := res.Plugins[i]
		require.Equal(t, map[string]string{"os": pl.OS, "arch": pl.Arch}, p.Selector.MatchLabels)
		require.True(t, strings.HasSuffix(p.URI, "/"+filepath.Base(pl.Path)), p.URI)
		data, err := os.ReadFile(pl.Path)
		require.NoError(t, err)
		sum := sha256.Sum256(data)
		require.Equal(t, hex.EncodeToString(sum[:]), p.SHA256, pl.Path)
		zr, err := gzip.NewReader(strings.NewReader(string(data)))
		require.NoError(t, err)
		tr := tar.NewReader(zr)
		h, err := tr.Next()
		require.NoError(t, err)
		require.Equal(t, p.Bin, h.Name)
		require.Equal(t, "kubectl-rr", h.Name)
		require.Equal(t, int64(0o755), h.Mode)
		_, err = tr.Next()
		require.ErrorIs(t, err, io.EOF, "one file")
	}
}

// signAndVerify signs the pushed image index and chart by digest with cosign's Go module
// (hack/sign, its own module: cosign's dependencies stay out of the product's), verifies both
// with the public key, and requires the verification with another key to fail.
func signAndVerify(t *testing.T, imageRef, chartTag string) {
	t.Helper()
	tag, err := name.NewTag(chartTag, name.Insecure)
	require.NoError(t, err)
	desc, err := remote.Head(tag)
	require.NoError(t, err)
	chartRef := tag.Context().Name() + "@" + desc.Digest.String()

	dir := t.TempDir()
	bin := filepath.Join(dir, "sign")
	start := time.Now()
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = testenv.RepoPath(t, "hack/sign")
	b, err := build.CombinedOutput()
	require.NoError(t, err, "building hack/sign: %s", b)
	t.Logf("built hack/sign (cosign %s) in %s", cosignVersion(t, bin), time.Since(start).Round(time.Millisecond))
	run := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "COSIGN_PASSWORD=release-test")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, d := range []string{"a", "b"} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, d), 0o700))
		out, err := run("keys", "-out", filepath.Join(dir, d))
		require.NoError(t, err, out)
	}
	out, err := run("sign", "-insecure", "-key", filepath.Join(dir, "a", "cosign.key"), imageRef, chartRef)
	require.NoError(t, err, "cosign sign: %s", out)
	out, err = run("verify", "-insecure", "-key", filepath.Join(dir, "a", "cosign.pub"), imageRef, chartRef)
	require.NoError(t, err, "cosign verify: %s", out)
	t.Logf("signed and verified with cosign's Go module: %s", strings.TrimSpace(out))
	for _, ref := range []string{imageRef, chartRef} {
		out, err = run("verify", "-insecure", "-key", filepath.Join(dir, "b", "cosign.pub"), ref)
		require.Error(t, err, "%s verified with another key: %s", ref, out)
	}
}

// cosignVersion is the cosign module's version linked into a binary.
func cosignVersion(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", bin).Output()
	require.NoError(t, err)
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "dep" && f[1] == "github.com/sigstore/cosign/v2" {
			return f[2]
		}
	}
	return "?"
}
