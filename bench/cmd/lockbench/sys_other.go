//go:build !linux

package main

import (
	"syscall"
	"time"
)

// procAttr puts a server in its own process group, so that stop can
// kill it and anything it forks.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// selfCPU is not measured on this system.
func selfCPU() (time.Duration, bool) { return 0, false }

// processCPU is not measured on this system.
func processCPU(int) (time.Duration, bool) { return 0, false }

// processTreeCPU is not measured on this system.
func processTreeCPU(int) (time.Duration, bool) { return 0, false }

// childPids is not known on this system.
func childPids(int) []int { return nil }
