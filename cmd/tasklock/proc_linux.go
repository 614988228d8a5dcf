package main

import "syscall"

// childAttr puts COMMAND in its own process group, so that signals reach
// everything it started, and has the kernel SIGKILL it when the thread that
// started it dies: tasklock dying, even by SIGKILL, takes COMMAND with it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
