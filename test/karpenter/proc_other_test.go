//go:build !linux

package karpenter

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
