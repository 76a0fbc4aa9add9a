//go:build !linux

package bgpverify

import "syscall"

// procAttr puts a speaker process in its own process group.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
