package testserver

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// sysProcAttr puts the child in its own process group, so that signals reach
// everything it starts, and asks the kernel to SIGKILL it if the thread that
// started it dies (Go keeps that thread alive as long as the test binary runs,
// since this package never locks OS threads).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// waitStopped polls /proc until the process is stopped (want) or running
// (!want), so that Stop and Cont return only once the signal took effect.
func waitStopped(p *Process, want bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		state, err := procState(p.pid)
		if err != nil || p.exited() {
			return fmt.Errorf("testserver: %s (pid %d) has exited", p.name, p.pid)
		}
		stopped := state == 'T' || state == 't'
		if stopped == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testserver: %s (pid %d) in state %c after %v, want stopped=%v", p.name, p.pid, state, timeout, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// procState returns the state letter from /proc/<pid>/stat.
func procState(pid int) (byte, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// "pid (comm) S ...": comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, fmt.Errorf("testserver: cannot parse /proc/%d/stat", pid)
	}
	return b[i+2], nil
}
