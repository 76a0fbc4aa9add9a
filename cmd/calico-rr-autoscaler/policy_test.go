package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestJSONRequested: --logging-format=json is read from serve's flags before they are parsed, the
// last occurrence winning, in each spelling the flag package takes; not past the flags.
func TestJSONRequested(t *testing.T) {
	for args, want := range map[string]bool{
		"--logging-format=json":                       true,
		"-logging-format=json":                        true,
		"--logging-format json":                       true,
		"--bad --logging-format=json":                 true,
		"--logging-format=json --logging-format=text": false,
		"--logging-format=text --logging-format=json": true,
		"":                              false,
		"-- --logging-format=json":      false,
		"arg --logging-format=json":     false,
		"--logging-format=JSON":         false,
		"--logging-formats=json":        false,
		"--v=2 --logging-format json x": true,
	} {
		require.Equal(t, want, jsonRequested(strings.Fields(args)), args)
	}
}

// TestPolicyBadInput: the policy command's bad input is a one-line usage error (exit status 2),
// before any API server is asked.
func TestPolicyBadInput(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n"+
		"contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\ncurrent-context: c\n"), 0o600))
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"), 0o644))
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "policy: want the subcommand apply or keep"},
		{[]string{"delete"}, "policy: want the subcommand apply or keep"},
		{[]string{"apply", "--kubeconfig=" + kubeconfig}, "policy apply: -f is required"},
		{[]string{"apply", "-f=/nonexistent", "--kubeconfig=" + kubeconfig}, "-f: open /nonexistent"},
		{[]string{"apply", "-f=" + bad, "--kubeconfig=" + kubeconfig}, "is not a named routereflector.io/v1alpha1 RouteReflectorPolicy"},
		{[]string{"apply", "-f=" + bad, "--timeout=0s"}, "--timeout: 0s is not positive"},
		{[]string{"keep", "--name=default", "--kubeconfig=" + kubeconfig}, "policy keep: --release is required"},
		{[]string{"keep", "extra"}, "unexpected argument"},
	} {
		err := runPolicy(c.args, io.Discard)
		require.Error(t, err, "%v", c.args)
		require.Equal(t, 2, exitCode(err), "%v: %v", c.args, err)
		require.ErrorContains(t, err, c.want, "%v", c.args)
		require.NotContains(t, err.Error(), "\n")
	}
}
