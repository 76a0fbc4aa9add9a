package release

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// TestPackageChart packages the chart twice (the same bytes: reproducible), loads the package
// back (version, appVersion, the pinned image values with values.yaml's comments kept, the
// schema accepts them) and renders it as `helm template` does: the Deployment and the uninstall
// hook run registry/repository@digest.
func TestPackageChart(t *testing.T) {
	dir, err := testenv.ChartDir()
	require.NoError(t, err)
	const digest = "sha256:3d9220d5b1de00a9d51b74329932781a0657b2104fac2694aabddd60b0ac730a"
	var pkgs [][]byte
	for i := 0; i < 2; i++ {
		ch, err := loader.Load(dir)
		require.NoError(t, err)
		out := t.TempDir()
		p, err := PackageChart(ch, out, "1.2.3", "registry.example.com:5000", "team/rra", digest, time.Unix(1700000000, 0))
		require.NoError(t, err)
		require.Equal(t, filepath.Join(out, "calico-rr-autoscaler-1.2.3.tgz"), p)
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		pkgs = append(pkgs, b)
	}
	require.True(t, bytes.Equal(pkgs[0], pkgs[1]), "the same chart packages to the same bytes")

	ch, err := loader.LoadArchive(bytes.NewReader(pkgs[0]))
	require.NoError(t, err)
	require.Equal(t, "1.2.3", ch.Metadata.Version)
	require.Equal(t, "1.2.3", ch.Metadata.AppVersion)
	img := ch.Values["image"].(map[string]any)
	require.Equal(t, map[string]any{"registry": "registry.example.com:5000", "repository": "team/rra", "tag": "1.2.3",
		"digest": digest, "pullPolicy": "IfNotPresent"}, img)
	for _, f := range ch.Raw {
		if f.Name == chartutil.ValuesfileName {
			require.Contains(t, string(f.Data), "# -- Image digest; when set it is used instead of the tag")
			require.Contains(t, string(f.Data), "  digest: \""+digest+"\"\n")
		}
	}
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = testenv.ChartRelease, testenv.ChartNamespace
	inst.KubeVersion, err = chartutil.ParseKubeVersion(testenv.KubernetesVersion)
	require.NoError(t, err)
	rel, err := inst.Run(ch, map[string]any{})
	require.NoError(t, err, "the schema accepts the pinned values")
	want := `image: "registry.example.com:5000/team/rra@` + digest + `"`
	require.Equal(t, 1, strings.Count(rel.Manifest, want), "the Deployment runs the image by digest")
	hooks := 0
	for _, h := range rel.Hooks {
		if strings.Contains(h.Manifest, "image:") {
			require.Contains(t, h.Manifest, want, h.Name)
			hooks++
		}
	}
	require.Equal(t, 4, hooks, "the hooks' Jobs (crds apply before an upgrade, policy keep and apply, uninstall) run the same image")
}

// TestSetImageValues changes the image block only, and fails when a key is missing.
func TestSetImageValues(t *testing.T) {
	in := "tag: keep\nimage:\n  # -- c\n  registry: ghcr.io\n  tag: \"\"\n  nested:\n    tag: keep\nother:\n  tag: keep\n"
	out, err := setImageValues([]byte(in), map[string]string{"registry": "r", "tag": "1"})
	require.NoError(t, err)
	require.Equal(t, "tag: keep\nimage:\n  # -- c\n  registry: \"r\"\n  tag: \"1\"\n  nested:\n    tag: keep\nother:\n  tag: keep\n", string(out))
	_, err = setImageValues([]byte(in), map[string]string{"digest": "sha256:x"})
	require.ErrorContains(t, err, "no image.digest")
}
