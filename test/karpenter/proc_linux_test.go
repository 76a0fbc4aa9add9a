package karpenter

import "syscall"

// sysProcAttr: Karpenter dies with the test (a killed test leaves no controller behind).
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
