//go:build unix && !linux

package testenv

import "syscall"

// sysProcAttr puts a child in its own process group so Stop can kill the
// whole group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
