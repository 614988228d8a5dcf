package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procAttr puts a server in its own process group, so that stop can
// kill it and anything it forks, and has the kernel kill it if lockbench
// dies without running stop.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// selfCPU returns the CPU time (user + system) this process has used.
func selfCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// processCPU returns the CPU time (user + system) process pid has used,
// from /proc/<pid>/stat, in clock ticks of 10 ms.
func processCPU(pid int) (time.Duration, bool) {
	f, ok := procStatFields(pid)
	if !ok {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, true
}

// processTreeCPU returns the CPU time of pid, of its children it has
// reaped, and of its live children with theirs: a PostgreSQL server's, whose
// backends come and go with connections.
func processTreeCPU(pid int) (time.Duration, bool) {
	total, ok := ticksWithChildren(pid)
	if !ok {
		return 0, false
	}
	for _, kid := range childPids(pid) {
		if t, ok := ticksWithChildren(kid); ok {
			total += t
		}
	}
	return time.Duration(total) * 10 * time.Millisecond, true
}

// ticksWithChildren returns utime + stime + cutime + cstime of pid.
func ticksWithChildren(pid int) (int64, bool) {
	f, ok := procStatFields(pid)
	if !ok {
		return 0, false
	}
	var sum int64
	for _, i := range []int{11, 12, 13, 14} {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, false
		}
		sum += v
	}
	return sum, true
}

// procStatFields returns the fields of /proc/<pid>/stat after the command
// name: f[0] is the state, f[1] the parent pid, f[11] utime.
func procStatFields(pid int) ([]string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return nil, false
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 15 {
		return nil, false
	}
	return f, true
}

// childPids lists the live processes whose parent is ppid.
func childPids(ppid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := strconv.Itoa(ppid)
	var kids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f, ok := procStatFields(pid); ok && f[1] == want {
			kids = append(kids, pid)
		}
	}
	return kids
}
