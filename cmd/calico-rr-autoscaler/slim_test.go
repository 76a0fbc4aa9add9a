package main

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// TestSlimBuild runs the slim build (-tags slim, the image's entrypoint and what the chart runs by
// default): it plans, and refuses Calico's etcd datastore and the verify command in one line that
// names the full binary, with a failing exit code.
func TestSlimBuild(t *testing.T) {
	bin, err := testenv.BuildProduct(t.Context(), t.TempDir())
	require.NoError(t, err)
	run := func(args ...string) (string, string, int) {
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(t.Context(), bin, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return stdout.String(), stderr.String(), exit.ExitCode()
		}
		require.NoError(t, err)
		return stdout.String(), stderr.String(), 0
	}
	out, stderr, code := run("plan", "--simulate", "40")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "topology DualPlane")
	for _, args := range [][]string{
		{"serve", "--datastore=etcdv3", "--etcd-endpoints=http://127.0.0.1:1"},
		{"plan", "--datastore=etcdv3", "--etcd-endpoints=http://127.0.0.1:1"},
		{"status", "--datastore=etcdv3", "--etcd-endpoints=http://127.0.0.1:1"},
		{"verify", "--simulate", "40"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			_, stderr, code := run(args...)
			require.NotZero(t, code)
			require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
			require.Contains(t, stderr, "slim build")
			require.Contains(t, stderr, "calico-rr-autoscaler-full")
		})
	}
}
