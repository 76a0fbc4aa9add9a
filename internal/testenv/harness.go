package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// EnvAll is the environment variable `make test-all` sets: the slow proofs run too.
const EnvAll = "RRA_TEST_ALL"

// SlowProof skips the calling test unless `make test-all` runs it (RRA_TEST_ALL set). A slow
// proof is a larger size of a proof that `make test` already runs at the size that shows its
// failure modes (or a proof too slow for make test's budget); `.ci/run` runs make test, and make
// test-all is run before a release and when touching what a slow proof covers.
func SlowProof(t testing.TB) {
	t.Helper()
	if os.Getenv(EnvAll) == "" {
		t.Skip("a slow proof: make test-all runs it (" + EnvAll + "=1)")
	}
}

// RepoRoot is the module root (the directory holding go.mod), found from the working directory up.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testenv: no go.mod above the working directory")
		}
		dir = parent
	}
}

// RepoPath is rel (slash-separated) under the module root; it fails the test when there is none.
func RepoPath(t testing.TB, rel string) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, filepath.FromSlash(rel))
}

// FreePorts returns n distinct TCP ports free on 127.0.0.1 when asked (held together while
// chosen, so that they differ).
func FreePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// FreePort is one free TCP port on 127.0.0.1; it fails the test when there is none.
func FreePort(t testing.TB) int {
	t.Helper()
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}

// Eventually calls f every interval until it returns nil, and fails the test with what and f's
// last error when timeout passes (or the test's context ends) first.
func Eventually(t testing.TB, what string, timeout, interval time.Duration, f func() error) {
	t.Helper()
	if err := Poll(t.Context(), timeout, interval, f); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Poll calls f every interval until it returns nil; past timeout, or when ctx ends, it returns an
// error that carries f's last error.
func Poll(ctx context.Context, timeout, interval time.Duration, f func() error) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(context.Context) (bool, error) {
		last = f()
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%w (last: %v)", err, last)
	}
	return nil
}

// Tail returns the last n lines of a file (a process's log), or why it cannot be read.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Every calls f every interval on a goroutine of its own (a sampler watching a cluster while the
// test acts on it) until the returned stop is called; stop waits for the last call to return, so
// what f collected can be read after it without a race.
func Every(interval time.Duration, f func()) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-time.After(interval):
			}
			f()
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-finished
	}
}
