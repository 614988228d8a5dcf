//go:build unix && !linux

package testserver

import (
	"syscall"
	"time"
)

// sysProcAttr puts the child in its own process group, so that signals reach
// everything it starts. Without Linux's parent death signal a child can
// outlive a test binary that is itself SIGKILLed.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// waitStopped cannot observe the process state portably: signals are
// delivered asynchronously and Stop/Cont return at once.
func waitStopped(p *Process, want bool, timeout time.Duration) error { return nil }

// holdsPort cannot tell which process listens on a port without Linux's
// /proc: it trusts the readiness check.
func holdsPort(p *Process, port int) error { return nil }
