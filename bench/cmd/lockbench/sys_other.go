//go:build !linux

package main

import (
	"syscall"
	"time"
)

// procAttr puts redis-server in its own process group, so that stop can
// kill it and anything it forks.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// selfCPU is not measured on this system.
func selfCPU() (time.Duration, bool) { return 0, false }

// processCPU is not measured on this system.
func processCPU(int) (time.Duration, bool) { return 0, false }
