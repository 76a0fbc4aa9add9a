package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/tools/bgpverify"
)

// The acceptance line of the BGPPeer settings: `verify --speaker calico --policy FILE` with a
// policy that sets a password (a Secret's key) and maxRestartTime shows both in the configuration
// confd rendered, on every BGP protocol, and every session Established (with the password).
func TestVerifyCalicoPolicyBGPPeerSettings(t *testing.T) {
	if testing.Short() {
		t.Skip("confd on a kube-apiserver and BIRD in network namespaces run without -short")
	}
	if err := bgpverify.NetnsAvailable(); errors.Is(err, bgpverify.ErrNoNetns) {
		t.Skipf("the calico speaker needs network namespaces: %v", err)
	}
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(pol, []byte(`apiVersion: routereflector.io/v1alpha1
kind: RouteReflectorPolicy
metadata:
  name: secure
spec:
  bgpPeer:
    password:
      secretKeyRef: {name: bgp-secrets, key: rr-password}
    maxRestartTime: 5m
`), 0o644))
	var out, errb bytes.Buffer
	err := runVerify([]string{"--simulate", "9", "--zones", "3", "--speaker", "calico", "--policy", pol}, &out, &errb)
	require.NoError(t, err, "verify: %s\n%s", out.String(), errb.String())
	m := regexp.MustCompile(`(?m)^# of sessions\s+\| (\d+) \((\d+) established\)`).FindStringSubmatch(out.String())
	require.NotNil(t, m, "no session count in:\n%s", out.String())
	require.Equal(t, m[1], m[2], "sessions not all Established:\n%s", out.String())
	m = regexp.MustCompile(`confd rendered .*: (\d+) of (\d+) BGP protocols with a password, (\d+) with graceful restart time 300 s`).FindStringSubmatch(out.String())
	require.NotNil(t, m, "no password and restart time line in:\n%s", out.String())
	require.Equal(t, m[2], m[1], "protocols without the password:\n%s", out.String())
	require.Equal(t, m[2], m[3], "protocols without the restart time:\n%s", out.String())
	t.Logf("%s", regexp.MustCompile(`(?m)^(# of sessions|Session settings).*$`).FindAllString(out.String(), -1))
}
