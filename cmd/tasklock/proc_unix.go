//go:build unix && !linux

package main

import "syscall"

// childAttr puts COMMAND in its own process group, so that signals reach
// everything it started. This system has no parent-death signal: COMMAND
// outlives a tasklock that is SIGKILLed.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
