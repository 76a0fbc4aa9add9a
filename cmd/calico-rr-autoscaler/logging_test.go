package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/serve"
)

// parseLogging parses serve's logging flags alone.
func parseLogging(t *testing.T, args ...string) (*loggingFlags, error) {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var l loggingFlags
	l.register(fs)
	return &l, fs.Parse(args)
}

// TestLoggingJSON: --logging-format=json makes serve's logger, and klog's (client-go's), write
// one JSON object a line with ts, msg and the key/value pairs, at the -v asked for.
func TestLoggingJSON(t *testing.T) {
	t.Cleanup(func() { require.NoError(t, logsapi.ResetForTest(nil)) })
	l, err := parseLogging(t, "--logging-format=json", "-v=2")
	require.NoError(t, err)
	var out bytes.Buffer
	log, err := l.setup(&out)
	require.NoError(t, err)
	log.Info("route reflector added", "node", "n1", "policy", "default", "reason", "Scale")
	log.V(2).Info("at -v=2", "node", "n2")
	log.V(3).Info("not at -v=2")
	log.Error(errors.New("boom"), "reconcile failed", "policy", "default")
	klog.InfoS("from klog", "node", "n3")
	klog.Flush()

	var lines []map[string]any
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		m := map[string]any{}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "not one JSON object a line: %q", sc.Text())
		lines = append(lines, m)
	}
	require.Len(t, lines, 4, "%s", out.String())
	first := lines[0]
	require.Equal(t, "route reflector added", first["msg"])
	require.Equal(t, "n1", first["node"])
	require.Equal(t, "default", first["policy"])
	require.Equal(t, "Scale", first["reason"])
	require.Contains(t, first, "ts")
	require.EqualValues(t, 0, first["v"])
	require.EqualValues(t, 2, lines[1]["v"])
	require.Equal(t, "boom", lines[2]["err"])
	require.Equal(t, "from klog", lines[3]["msg"])
	require.Equal(t, "n3", lines[3]["node"])
}

// TestLoggingText: the default stays klog's text format.
func TestLoggingText(t *testing.T) {
	t.Cleanup(func() { require.NoError(t, logsapi.ResetForTest(nil)) })
	l, err := parseLogging(t)
	require.NoError(t, err)
	require.Equal(t, "text", l.format)
	var out bytes.Buffer
	log, err := l.setup(&out)
	require.NoError(t, err)
	log.Info("route reflector added", "node", "n1")
	klog.Flush()
	require.Regexp(t, `^I\d{4} .*"route reflector added" node="n1"\n$`, out.String())
}

// TestLoggingFormatInvalid: an unknown format is a one-line usage error (exit status 2) naming
// the flag and the formats.
func TestLoggingFormatInvalid(t *testing.T) {
	t.Setenv(serve.EnvWatchListClient, "true") // runServe sets it for the process otherwise
	err := runServe([]string{"--logging-format=xml"}, io.Discard)
	require.Error(t, err)
	var ue usageError
	require.True(t, errors.As(err, &ue))
	require.Equal(t, 2, exitCode(err))
	require.Equal(t, `invalid value "xml" for flag -logging-format: "xml" is not one of text, json`, err.Error())
	require.NotContains(t, err.Error(), "\n")
	require.True(t, strings.Contains(err.Error(), "logging-format"))
}
