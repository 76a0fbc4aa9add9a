//go:build !linux

package bgpverify

import (
	"syscall"
	"time"
)

// procAttr puts a speaker process in its own process group.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

var monoStart = time.Now()

// monotonic stands for CLOCK_MONOTONIC, the clock BIRD 1.6's timers run on, where there is none.
func monotonic() time.Duration { return time.Since(monoStart) }
