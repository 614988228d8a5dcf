package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// runSupervise is "tasklock __supervise [--kill-by NS] -- COMMAND
// [ARGS...]", which startCommand (proc_linux.go) runs with its control
// pipe as fd 3 and its status pipe as fd 4. It makes itself a child
// subreaper, starts COMMAND in its own process group, passes on the
// signals tasklock writes to the control pipe, and reaps every process
// that is reparented to it. It kills every descendant — COMMAND and all it
// started, in whatever process group or session — when COMMAND exits, when
// tasklock sends SIGKILL, when the control pipe closes because tasklock
// exited or died, and when CLOCK_MONOTONIC passes NS (the end of the lease
// COMMAND runs under, which tasklock moves later on the control pipe as it
// renews): tasklock may be stopped or starved then, and unable to. The
// environment it gets is COMMAND's.
func runSupervise(args []string, stderr io.Writer) int {
	var killBy int64 // CLOCK_MONOTONIC nanoseconds; 0: none
	if len(args) >= 2 && args[0] == "--kill-by" {
		n, err := strconv.ParseInt(args[1], 10, 64)
		if err != nil || n <= 0 {
			args = nil // a usage error below
		} else {
			killBy, args = n, args[2:]
		}
	}
	if len(args) < 2 || args[0] != "--" || !isPipe(3) || !isPipe(4) {
		fmt.Fprintln(stderr, "tasklock: "+superviseCmd+" is internal to exec and serve")
		return exitUsage
	}
	argv := args[1:]
	// Neither pipe may leak into COMMAND: the control pipe's end of file
	// is how the supervisor learns that tasklock is gone.
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	// Non-blocking, so that the control pipe is pollable and takes a read
	// deadline (killBy).
	_ = syscall.SetNonblock(3, true)
	ctl := os.NewFile(3, "control")
	status := os.NewFile(4, "status")
	report := func(format string, args ...any) {
		// Fails only when tasklock is gone, which the control pipe tells.
		_, _ = fmt.Fprintf(status, format+"\n", args...)
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		report("error %d cannot supervise COMMAND: prctl(PR_SET_CHILD_SUBREAPER): %v", exitCannotRun, err)
		return exitCannotRun
	}
	// Signals sent to the supervisor itself are dropped: tasklock passes
	// its signals on through the control pipe. They are handled, not
	// ignored, so that COMMAND starts with their default actions.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)

	if killBy != 0 && monoNow() >= killBy {
		// tasklock was held up between the grant and here for so long
		// that the lease may end at the store any moment.
		report("error %d the lock's lease ended before COMMAND could start", exitSoftware)
		return exitSoftware
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		code := exitCannotRun
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		report("error %d %s", code, strings.ReplaceAll(err.Error(), "\n", " "))
		return code
	}
	pid := cmd.Process.Pid
	// The reaper below waits for every child, COMMAND included.
	_ = cmd.Process.Release()
	report("pid %d", pid)

	exited := make(chan syscall.WaitStatus, 1) // COMMAND's status
	reaped := make(chan struct{}, 1)           // a child was reaped since the last look
	noChild := make(chan struct{})             // closed when no child is left
	go func() {
		defer close(noChild)
		for {
			var ws syscall.WaitStatus
			p, err := syscall.Wait4(-1, &ws, 0, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil {
				return // ECHILD: no child, so no descendant, is left
			}
			if p == pid {
				exited <- ws
			}
			select {
			case reaped <- struct{}{}:
			default:
			}
		}
	}()
	// The reader owns killBy: it reads the control pipe with killBy as
	// its deadline, so that a message tasklock wrote before killBy is
	// always read before the deadline counts, even when the supervisor
	// itself was stopped or starved past it.
	sigc := make(chan syscall.Signal)
	moved := make(chan struct{}) // killBy moved later
	ended := make(chan struct{}) // killBy passed with nothing to read
	go func() {
		defer close(sigc)
		var b [9]byte
		pending := false // data waits in the pipe: read it before the deadline counts
		for {
			deadline := time.Time{}
			if killBy != 0 && !pending {
				deadline = time.Now().Add(time.Duration(killBy - monoNow()))
			}
			_ = ctl.SetReadDeadline(deadline)
			_, err := io.ReadFull(ctl, b[:1])
			if errors.Is(err, os.ErrDeadlineExceeded) {
				if n, _ := unix.IoctlGetInt(3, unix.TIOCINQ); n > 0 { // FIONREAD
					pending = true
					continue
				}
				killBy = 0
				ended <- struct{}{}
				continue
			}
			if err != nil {
				return // tasklock is gone
			}
			pending = false
			if b[0] != 0 {
				sigc <- syscall.Signal(b[0])
				continue
			}
			_ = ctl.SetReadDeadline(time.Time{}) // the rest was written with it
			if _, err := io.ReadFull(ctl, b[1:]); err != nil {
				return
			}
			killBy = int64(binary.BigEndian.Uint64(b[1:]))
			moved <- struct{}{}
		}
	}()

	var ws syscall.WaitStatus
	stopping := false   // tasklock passed on a signal since killBy last moved
	atLeaseEnd := false // killed by itself at killBy, unasked
	for running := true; running; {
		select {
		case ws = <-exited:
			running = false
		case sig, ok := <-sigc:
			switch {
			case !ok:
				killTree(reaped, noChild)
				return exitSoftware
			case sig == syscall.SIGKILL:
				killTree(reaped, noChild)
				ws = <-exited
				running = false
			default:
				_ = syscall.Kill(-pid, sig)
				stopping = true
			}
		case <-moved:
			stopping = false
		case <-ended:
			// The lease ends now, and another holder may obtain the lock
			// once the store sees it end. A tasklock that is stopping
			// COMMAND says so itself: it sends SIGKILL at this time too.
			// One that neither renewed nor asked for anything is stopped
			// (SIGSTOP, Ctrl-Z) or starved.
			if !stopping {
				atLeaseEnd = true
				fmt.Fprintf(stderr, "tasklock: the lease of the lock ends now and tasklock (pid %d) has neither renewed it nor stopped the command (is it stopped or starved?): killing the command (pid %d) and all it started\n",
					os.Getppid(), pid)
			}
			killTree(reaped, noChild)
			ws = <-exited
			running = false
		case <-sigs:
		}
	}
	// Nothing COMMAND started runs on without it.
	killTree(reaped, noChild)
	if atLeaseEnd {
		report("exit %d %s", uint32(ws), atLeaseEndWord)
	} else {
		report("exit %d", uint32(ws))
	}
	return exitOK
}

// killTree SIGKILLs every descendant of this process, again and again as
// orphans are reparented to it, until no child is left (noChild closes),
// or only processes it may not signal (another user's) are left: those
// escape. reaped ticks whenever the reaper reaped a child.
func killTree(reaped, noChild <-chan struct{}) {
	self := os.Getpid()
	for {
		alive, denied := 0, 0
		for _, p := range descendants(self) {
			alive++
			if errors.Is(syscall.Kill(p, syscall.SIGKILL), syscall.EPERM) {
				denied++
			}
		}
		if alive > 0 && alive == denied {
			return
		}
		select {
		case <-noChild:
			return
		case <-reaped:
		}
	}
}

// descendants lists the live (not zombie) processes whose chain of parents
// leads to root, from /proc.
func descendants(root int) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	children := map[int][]int{}
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if ppid, ok := liveParent(pid); ok {
			children[ppid] = append(children[ppid], pid)
		}
	}
	var out []int
	for queue := children[root]; len(queue) > 0; queue = queue[1:] {
		p := queue[0]
		out = append(out, p)
		queue = append(queue, children[p]...)
	}
	return out
}

// liveParent is pid's parent, from /proc/PID/stat; false when pid is gone
// or a zombie (whose children have been reparented already).
func liveParent(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// "pid (comm) S ppid ...": comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 || f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// monoNow is CLOCK_MONOTONIC in nanoseconds (see monoNs).
func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// isPipe reports whether fd is an open pipe.
func isPipe(fd int) bool {
	var st syscall.Stat_t
	return syscall.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFIFO
}
