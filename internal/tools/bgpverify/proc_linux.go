package bgpverify

import "syscall"

// procAttr puts a speaker process in its own process group and has the kernel kill it when the
// process that started it dies first (a test binary killed by its timeout leaves no BIRD behind).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
