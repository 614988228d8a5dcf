package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// childAttr puts a child in its own process group, so that signals reach
// everything it started, and has the kernel SIGKILL it when the thread that
// started it dies: tasklock dying, even by SIGKILL, takes the child with it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// selfExe is this program, for starting the supervisor: it names the
// running binary even when its file was replaced or removed since.
const selfExe = "/proc/self/exe"

// startCommand starts COMMAND under a supervisor, "tasklock __supervise"
// (supervise_linux.go), so that nothing COMMAND starts outlives it or
// tasklock. The supervisor is a child subreaper: every process COMMAND
// starts, however it detaches, stays its descendant, and it kills them all
// when COMMAND ends, when told to (SIGKILL), or when tasklock dies.
//
// Two pipes connect them. On the control pipe tasklock writes one byte per
// signal to pass on; its end closes when tasklock exits or dies, even by
// SIGKILL, and the supervisor then kills everything. On the status pipe the
// supervisor writes "pid N" once COMMAND runs (or "error CODE MESSAGE" when
// it cannot start) and "exit WAITSTATUS" once COMMAND and all it started
// are gone. With sp.killBy set, tasklock writes a 0 byte and 8 bytes of
// a CLOCK_MONOTONIC time to move it (killByMessage), and the supervisor
// kills everything by itself when that time passes: tasklock, stopped or
// starved, may not be there to do it before the lease ends.
func startCommand(sp commandSpec) (*command, error) {
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("starting the supervisor: %w", err)
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, fmt.Errorf("starting the supervisor: %w", err)
	}
	args := []string{superviseCmd}
	if !sp.killBy.IsZero() {
		args = append(args, "--kill-by", strconv.FormatInt(monoNs(sp.killBy), 10))
	}
	cmd := exec.Command(selfExe, append(append(args, "--"), sp.argv...)...)
	cmd.Args[0] = os.Args[0]
	cmd.Env = sp.env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = sp.stdin, sp.stdout, sp.stderr
	cmd.ExtraFiles = []*os.File{ctlR, stW} // fds 3 and 4
	// Its own process group: a Ctrl-C at the terminal reaches tasklock,
	// which decides what COMMAND gets.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = sp.waitDelay
	err = cmd.Start()
	ctlR.Close()
	stW.Close()
	if err != nil {
		ctlW.Close()
		stR.Close()
		return nil, fmt.Errorf("starting the supervisor: %w", err)
	}
	status := bufio.NewReader(stR)
	line, _ := status.ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "pid ")))
	if !strings.HasPrefix(line, "pid ") || perr != nil || pid <= 0 {
		ctlW.Close()
		_ = cmd.Wait()
		stR.Close()
		return nil, startFailure(line, cmd.ProcessState)
	}
	c := &command{pid: pid, done: make(chan struct{})}
	var mu sync.Mutex // guards ctl
	ctl := ctlW
	c.send = func(sig syscall.Signal) bool {
		mu.Lock()
		defer mu.Unlock()
		if ctl == nil {
			return false
		}
		// Fails (EPIPE) only once the supervisor is gone, with COMMAND.
		_, err := ctl.Write([]byte{byte(sig)})
		return err == nil
	}
	c.limit = func(t time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if ctl != nil {
			_, _ = ctl.Write(killByMessage(monoNs(t)))
		}
	}
	go func() {
		_ = cmd.Wait() // the status is in ProcessState
		rest, _ := io.ReadAll(status)
		stR.Close()
		mu.Lock()
		ctl.Close()
		ctl = nil
		mu.Unlock()
		ws, atLeaseEnd, ok := parseExit(string(rest))
		if !ok {
			// The supervisor itself was killed: what it could not clean
			// up, at least COMMAND's process group, goes now.
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			ws = waitStatus(cmd.ProcessState)
		}
		c.status, c.atLeaseEnd = ws, atLeaseEnd
		close(c.done)
	}()
	return c, nil
}

// monoNs is t on CLOCK_MONOTONIC, in nanoseconds: the clock the
// supervisor, another process, reads too (Go's monotonic readings are
// private to a process). It errs early: a pause between its two clock
// reads moves the result earlier, never later.
func monoNs(t time.Time) int64 { return monoNow() + int64(time.Until(t)) }

// killByMessage is the control pipe's message that moves the supervisor's
// kill time to ns (CLOCK_MONOTONIC): a 0 byte, which is no signal, then ns
// in 8 bytes, big-endian. Nine bytes are written to a pipe at once.
func killByMessage(ns int64) []byte {
	b := make([]byte, 9)
	binary.BigEndian.PutUint64(b[1:], uint64(ns))
	return b
}

// atLeaseEndWord follows the wait status in the supervisor's exit line
// when it killed COMMAND by itself at its kill-by time.
const atLeaseEndWord = "lease-end"

// parseExit reads the supervisor's "exit WAITSTATUS [lease-end]" line.
func parseExit(s string) (ws syscall.WaitStatus, atLeaseEnd, ok bool) {
	v, ok := strings.CutPrefix(strings.TrimSpace(s), "exit ")
	if !ok {
		return 0, false, false
	}
	v, atLeaseEnd = strings.CutSuffix(v, " "+atLeaseEndWord)
	n, err := strconv.ParseUint(v, 10, 32)
	return syscall.WaitStatus(n), atLeaseEnd, err == nil
}

// startError is COMMAND failing to start, as the supervisor reported it.
type startError struct {
	msg        string
	notFound   bool // exec's exit status 127
	leaseEnded bool // the supervisor's kill-by time had passed: 70
}

func (e *startError) Error() string { return e.msg }

// Is makes a command that was not found match exec.ErrNotFound, and one
// refused because the lease had ended match errLeaseEnded.
func (e *startError) Is(target error) bool {
	return e.notFound && target == exec.ErrNotFound || e.leaseEnded && target == errLeaseEnded
}

// startFailure is the error for the supervisor's first status line when it
// is not "pid N": "error CODE MESSAGE", or nothing when the supervisor
// died first.
func startFailure(line string, st *os.ProcessState) error {
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), "error ")
	if !ok {
		return fmt.Errorf("the supervisor %s before starting COMMAND", describeExit(st))
	}
	code, msg, _ := strings.Cut(rest, " ")
	return &startError{msg: msg, notFound: code == strconv.Itoa(exitNotFound), leaseEnded: code == strconv.Itoa(exitSoftware)}
}
