package bgpverify

import (
	"syscall"
	"time"
	"unsafe"
)

// procAttr puts a speaker process in its own process group and has the kernel kill it when the
// process that started it dies first (a test binary killed by its timeout leaves no BIRD behind).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// monotonic reads CLOCK_MONOTONIC, the clock BIRD 1.6's timers run on (in whole seconds).
func monotonic() time.Duration {
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1 /* CLOCK_MONOTONIC */, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return time.Duration(time.Now().UnixNano())
	}
	return time.Duration(ts.Nano())
}
