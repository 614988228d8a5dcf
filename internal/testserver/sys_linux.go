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

// holdsPort reports an error unless a process of p's group holds the
// socket listening on TCP port on this host. A readiness check that got an
// answer on the port may have got it from another server: one of another
// test, or test binary, that picked the same free port and bound it first,
// while p fails to bind and shuts down. It returns nil when it cannot tell
// (a /proc it may not read).
func holdsPort(p *Process, port int) error {
	inodes := listenInodes(port)
	if len(inodes) == 0 {
		return fmt.Errorf("testserver: nothing listens on port %d", port)
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	for _, d := range procs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || procGroup(pid) != p.pid {
			continue
		}
		fdDir := "/proc/" + d.Name() + "/fd/"
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			return nil // not ours to read: cannot tell
		}
		for _, fd := range fds {
			link, err := os.Readlink(fdDir + fd.Name())
			if err == nil && inodes[link] {
				return nil
			}
		}
	}
	return fmt.Errorf("testserver: port %d answers, but no process of %s (pid %d) listens on it: another server holds it", port, p.name, p.pid)
}

// listenInodes returns the sockets listening on TCP port, IPv4 or IPv6, as
// the links /proc/<pid>/fd shows them ("socket:[inode]").
func listenInodes(port int) map[string]bool {
	want := fmt.Sprintf(":%04X", port)
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range bytes.Split(b, []byte("\n"))[1:] {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			f := bytes.Fields(line)
			if len(f) < 10 || string(f[3]) != "0A" || !bytes.HasSuffix(f[1], []byte(want)) {
				continue
			}
			inodes["socket:["+string(f[9])+"]"] = true
		}
	}
	return inodes
}

// procGroup returns the process group of pid from /proc/<pid>/stat, 0 when
// it cannot be read.
func procGroup(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// "pid (comm) state ppid pgrp ...": comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 {
		return 0
	}
	g, _ := strconv.Atoi(string(f[2]))
	return g
}
