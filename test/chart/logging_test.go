package chart

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// TestRenderLoggingFormat: logging.format is serve's --logging-format (text by default); the
// schema takes text or json only.
func TestRenderLoggingFormat(t *testing.T) {
	args := func(vals map[string]any) []string {
		r := render(t, vals)
		dep := typed[appsv1.Deployment](t, r.get(t, "Deployment", "calico-rr-autoscaler"))
		return dep.Spec.Template.Spec.Containers[0].Args
	}
	require.Contains(t, args(nil), "--logging-format=text")
	a := args(valuesYAML(t, "logging: {format: json}"))
	require.Contains(t, a, "--logging-format=json")
	require.NotContains(t, a, "--logging-format=text")
	fs, _ := serveFlags()
	require.NoError(t, fs.Parse(a[1:]))

	for _, bad := range []string{"logging: {format: xml}", "logging: {format: JSON}", "logging: {fromat: json}"} {
		_, err := renderErr(t, releaseNamespace, valuesYAML(t, bad))
		require.Error(t, err, bad)
		require.ErrorContains(t, err, "logging", bad)
	}
}

// TestServeJSONToTheLastLine runs the product's binary (the image's slim build) with
// --logging-format=json where it cannot start: against a real kube-apiserver without Calico (the
// fatal "is Calico installed?"), and with a bad flag before and after --logging-format. Every line
// it writes, on stdout and stderr, must be one JSON object, the fatal error included (msg
// "command failed", err its text), with its exit status (1, or 2 for bad input). The same start
// with the text format ends with the plain line (the check can fail).
func TestServeJSONToTheLastLine(t *testing.T) {
	if testing.Short() {
		t.Skip("needs kube-apiserver and etcd")
	}
	binc := make(chan error, 1)
	var bin string
	go func() { // beside the API server's start
		var err error
		bin, err = testenv.BuildProduct(context.Background(), t.TempDir())
		binc <- err
	}()
	env := testenv.Start(t)
	require.NoError(t, <-binc)
	kubeconfig := env.KubeconfigPath(testenv.UserAdmin)
	port := func() string { return strconv.Itoa(testenv.FreePort(t)) }
	run := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), bin, args...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "serve %v exits with an error: %v\n%s%s", args, err, o.String(), e.String())
		return o.String(), e.String(), ee.ExitCode()
	}
	start := func(format string) []string {
		return []string{"serve", "--kubeconfig=" + kubeconfig, "--webhook-host=127.0.0.1", "--webhook-port=" + port(),
			"--cert-dir=" + t.TempDir(), "--metrics-bind-address=0", "--health-probe-bind-address=0", "--logging-format=" + format}
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"no Calico", start("json"), 1, calico.ErrNotServed.Error()},
		{"bad flag after", append(start("json"), "--webhook-port=0"), 2, "--webhook-port: 0 is not a port"},
		{"bad flag before", []string{"serve", "--calico-api=nope", "--logging-format", "json"}, 2, "--calico-api"},
	} {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, code := run(c.args...)
			require.Equal(t, c.code, code, "%s%s", stdout, stderr)
			var lines []map[string]any
			for _, out := range []string{stdout, stderr} {
				for l := range strings.Lines(out) {
					m := map[string]any{}
					require.NoError(t, json.Unmarshal([]byte(l), &m), "not one JSON object a line: %q\n%s", l, out)
					lines = append(lines, m)
				}
			}
			require.NotEmpty(t, lines)
			last := lines[len(lines)-1]
			require.Equal(t, "command failed", last["msg"], "the last line: %v", last)
			require.Contains(t, last["err"], c.err)
			require.Contains(t, last, "ts")
			t.Logf("%d JSON lines; the last: %v", len(lines), last)
		})
	}
	_, stderr, code := run(start("text")...)
	require.Equal(t, 1, code)
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	require.Equal(t, "calico-rr-autoscaler: "+calico.ErrNotServed.Error(), lines[len(lines)-1], "the text format's last line")
}
