//go:build unix

package main

import (
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// envPrefix starts the name of every variable tasklock reads or sets
// (TASKLOCK_STORE, TASKLOCK_TOKEN, TASKLOCK_KEY, ...). None of them is
// passed on to a command: the store URL may hold a password and the token
// unlocks the dashboard, and a job that prints its environment would put
// them into its output, its log and the run history.
const envPrefix = "TASKLOCK_"

// childEnv is environ without any TASKLOCK_* variable, followed by set
// ("NAME=value" entries, the variables tasklock gives the command).
func childEnv(environ []string, set ...string) []string {
	env := make([]string, 0, len(environ)+len(set))
	for _, kv := range environ {
		if !strings.HasPrefix(kv, envPrefix) {
			env = append(env, kv)
		}
	}
	return append(env, set...)
}

// commandSpec is a command for startCommand to run.
type commandSpec struct {
	argv   []string
	env    []string
	stdin  io.Reader // nil: /dev/null
	stdout io.Writer
	stderr io.Writer
	// waitDelay bounds how long output is copied after the command (and
	// everything it started) is gone, as exec.Cmd.WaitDelay.
	waitDelay time.Duration
	// killBy, when set, is when the supervisor (Linux) kills the command
	// and all it started by itself, unless command.moveKillBy moves it
	// later: the end of the lease the command runs under, enforced even
	// when tasklock is stopped or starved and cannot. Zero: no such end.
	killBy time.Time
}

// command is a COMMAND of exec or a command job of serve once started (see
// startCommand in proc_linux.go and proc_unix.go).
type command struct {
	pid    int                // COMMAND's process id, which is also its process group id
	done   chan struct{}      // closed once COMMAND has ended and been reaped
	status syscall.WaitStatus // how COMMAND ended; set before done is closed
	// atLeaseEnd: the supervisor killed COMMAND by itself when its killBy
	// passed, tasklock having neither renewed nor stopped it (Linux); set
	// before done is closed.
	atLeaseEnd bool
	// send delivers a signal: see signal.
	send func(sig syscall.Signal) bool
	// limit moves the supervisor's killBy (commandSpec); nil where there
	// is no supervisor.
	limit func(killBy time.Time)
}

// moveKillBy moves the time at which the supervisor kills the command and
// all it started by itself (commandSpec.killBy) to t. It does nothing
// where there is no supervisor, or once the command has ended.
func (c *command) moveKillBy(t time.Time) {
	if c.limit != nil {
		c.limit(t)
	}
}

// signal sends sig to COMMAND's process group. SIGKILL goes further where
// the system allows (Linux): it kills every process COMMAND started, in
// any group or session. After done is closed it does nothing harmful. It
// reports false when the signal reached nothing because COMMAND has ended
// already (on Linux: its supervisor is gone), even before done is closed.
func (c *command) signal(sig syscall.Signal) bool { return c.send(sig) }

// ask sends sig, as signal does, then SIGCONT: a stopped process (SIGSTOP,
// or SIGTTIN when COMMAND reads the terminal from its own process group)
// gets a signal only once it runs again, so, as systemd does, it is
// continued. It reports what signal reported for sig.
func (c *command) ask(sig syscall.Signal) bool {
	if !c.signal(sig) {
		return false
	}
	c.signal(syscall.SIGCONT)
	return true
}

// exitStatus is COMMAND's exit code, or 128+N when signal N killed it.
func exitStatus(st *os.ProcessState) int { return statusCode(waitStatus(st)) }

// describeExit says how a process ended.
func describeExit(st *os.ProcessState) string { return describeStatus(waitStatus(st)) }

// waitStatus is st's wait status.
func waitStatus(st *os.ProcessState) syscall.WaitStatus {
	ws, _ := st.Sys().(syscall.WaitStatus)
	return ws
}

// statusCode is the exit code for ws, or 128+N when signal N killed the
// process.
func statusCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// sigName names a signal as the system does ("SIGTERM").
func sigName(s os.Signal) string {
	if n, ok := s.(syscall.Signal); ok {
		if name := unix.SignalName(n); name != "" {
			return name
		}
	}
	return s.String()
}

// describeStatus says how a process ended, as a verb phrase: "exited with
// status 3", "was killed by signal SIGTERM".
func describeStatus(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "was killed by signal " + sigName(ws.Signal())
	}
	return "exited with status " + strconv.Itoa(ws.ExitStatus())
}

// child is a process tasklock started directly: a serve node of the demo,
// or COMMAND where there is no supervisor (proc_unix.go).
type child struct {
	pid   int
	done  chan struct{}    // closed once the process has been reaped
	state *os.ProcessState // set before done is closed
}

// startChild starts cmd on a goroutine locked to its OS thread, which stays
// alive until cmd has exited: on Linux the parent-death signal fires when
// the thread that started the child ends, not only when the process does.
func startChild(cmd *exec.Cmd) (*child, error) {
	ch := &child{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		ch.pid = cmd.Process.Pid
		started <- nil
		_ = cmd.Wait() // the status is in ProcessState
		ch.state = cmd.ProcessState
		close(ch.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return ch, nil
}
