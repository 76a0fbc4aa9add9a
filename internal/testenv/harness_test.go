package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRepoPath(t *testing.T) {
	_, err := os.Stat(RepoPath(t, "go.mod"))
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(RepoPath(t, "."), "charts", "calico-rr-autoscaler"), RepoPath(t, "charts/calico-rr-autoscaler"))
}

func TestFreePorts(t *testing.T) {
	ports, err := FreePorts(3)
	require.NoError(t, err)
	require.Len(t, ports, 3)
	assert.NotEqual(t, ports[0], ports[1])
	assert.NotEqual(t, ports[1], ports[2])
	assert.NotEqual(t, ports[0], ports[2])
}

func TestPoll(t *testing.T) {
	calls := 0
	require.NoError(t, Poll(t.Context(), time.Second, time.Millisecond, func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	}))
	assert.Equal(t, 3, calls)
	err := Poll(t.Context(), 20*time.Millisecond, time.Millisecond, func() error { return errors.New("never") })
	require.Error(t, err)
	assert.Contains(t, err.Error(), "never", "the last error is kept")
}

func TestEvery(t *testing.T) {
	var n atomic.Int64
	stop := Every(time.Millisecond, func() { n.Add(1) })
	require.NoError(t, Poll(t.Context(), 5*time.Second, time.Millisecond, func() error {
		if n.Load() < 3 {
			return errors.New("fewer than 3 calls")
		}
		return nil
	}))
	stop()
	after := n.Load()
	time.Sleep(20 * time.Millisecond)
	assert.Equal(t, after, n.Load(), "no call after stop returned")
	stop() // a second stop is harmless
}

func TestTail(t *testing.T) {
	f := filepath.Join(t.TempDir(), "log")
	require.NoError(t, os.WriteFile(f, []byte("a\nb\nc\n"), 0o600))
	assert.Equal(t, "b\nc", Tail(f, 2))
	assert.Equal(t, "a\nb\nc", Tail(f, 10))
	assert.Contains(t, Tail(filepath.Join(t.TempDir(), "none"), 2), "cannot read")
}

func TestFolderName(t *testing.T) {
	for _, tt := range []struct{ name, want string }{
		{"", ""},
		{"TestX", "TestX-"},
		{"TestX/two,_both migrate", "TestX_two__both_migrate-"},
		{strings.Repeat("a", 70), strings.Repeat("a", 60) + "-"},
	} {
		t.Run(tt.want, func(t *testing.T) {
			if got := folderName(tt.name); got != tt.want {
				t.Errorf("folderName(%q) = %q, want %q", tt.name, got, tt.want)
			}
		})
	}
}
