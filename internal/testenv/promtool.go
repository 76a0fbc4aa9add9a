package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// PromtoolPath finds Prometheus' promtool: $PROMTOOL when set, else promtool on PATH. hack/tools.sh
// installs it (Debian's package prometheus, as root) and exports PROMTOOL in env.sh. The error says
// how to get it.
func PromtoolPath() (string, error) {
	if p := os.Getenv("PROMTOOL"); p != "" {
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("testenv: PROMTOOL=%s: %v (unset it or run hack/tools.sh promtool)", p, err)
		}
		return p, nil
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		return "", fmt.Errorf("testenv: promtool not found (PROMTOOL unset, none on PATH): run `make tools` or hack/tools.sh promtool (as root it installs Debian's package prometheus, which ships promtool)")
	}
	return p, nil
}

// RequirePromtool is PromtoolPath that fails the test when promtool is missing: the alert tests
// never pass without it.
func RequirePromtool(t testing.TB) string {
	t.Helper()
	p, err := PromtoolPath()
	if err != nil {
		t.Fatal(err.Error())
	}
	return p
}
