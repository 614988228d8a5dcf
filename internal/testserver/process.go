package testserver

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// HelperEnv is the environment variable that tells a re-executed test binary
// which helper role to play; see [StartHelper] and [HelperRole].
const HelperEnv = "TASKLOCK_HELPER"

// linesBuffer is how many stdout lines [Process.Lines] buffers before it
// drops the oldest.
const linesBuffer = 4096

// killWait bounds how long Kill and cleanup wait for a killed process to be
// reaped.
const killWait = 10 * time.Second

// HelperRole returns the helper role this process was started with by
// [StartHelper] (os.Getenv("TASKLOCK_HELPER")), or "" in a normal test run.
// A test function that can act as a helper calls it first and, when it is not
// empty, plays the role and calls os.Exit(0).
func HelperRole() string { return os.Getenv(HelperEnv) }

// Process is a child process started by this package: a helper started by
// [StartHelper] or a server. It runs in its own process group; signals go to
// the whole group.
type Process struct {
	name    string
	pid     int
	logPath string // stderr (helpers) or stdout+stderr (servers)
	logFrom int64  // size of logPath before this process started

	done  chan struct{}    // closed once the process has been reaped
	state *os.ProcessState // set before done is closed
	werr  error            // set before done is closed

	// stdout, when captured (helpers only).
	stdout     *os.File
	readerDone chan struct{}
	linesCh    chan string
	mu         sync.Mutex
	lines      []string
	cursor     int           // WaitLine has consumed lines[:cursor]
	eof        bool          // stdout reached EOF
	changed    chan struct{} // closed and replaced when lines or eof change
}

// procSpec says how to start a process.
type procSpec struct {
	name          string
	path          string
	args          []string
	dir           string
	env           []string // nil: inherit
	logPath       string   // appended to; receives stderr, and stdout unless captured
	captureStdout bool
	port          int                 // the port it serves on, checked to be its own once ready (0: not checked)
	cred          *syscall.Credential // nil: run as this process's user
}

// spawn starts a process as described. It never registers a cleanup: the
// caller does, right after it returns.
func spawn(s procSpec) (*Process, error) {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testserver: %s: open log: %w", s.name, err)
	}
	defer logf.Close()
	var from int64
	if fi, err := logf.Stat(); err == nil {
		from = fi.Size()
	}

	cmd := exec.Command(s.path, s.args...)
	cmd.Dir = s.dir
	cmd.Env = s.env
	cmd.Stdin = nil
	cmd.Stderr = logf
	cmd.Stdout = logf
	cmd.SysProcAttr = sysProcAttr()
	cmd.SysProcAttr.Credential = s.cred

	p := &Process{
		name:    s.name,
		logPath: s.logPath,
		logFrom: from,
		done:    make(chan struct{}),
	}
	var stdoutW *os.File
	if s.captureStdout {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("testserver: %s: pipe: %w", s.name, err)
		}
		p.stdout, stdoutW = r, w
		cmd.Stdout = w
		p.readerDone = make(chan struct{})
		p.linesCh = make(chan string, linesBuffer)
		p.changed = make(chan struct{})
	}

	err = cmd.Start()
	if stdoutW != nil {
		stdoutW.Close() // the child holds its own copy
	}
	if err != nil {
		if p.stdout != nil {
			p.stdout.Close()
		}
		return nil, fmt.Errorf("testserver: start %s: %w", s.name, err)
	}
	p.pid = cmd.Process.Pid
	go func() {
		p.werr = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.done)
	}()
	if p.stdout != nil {
		go p.readStdout()
	}
	return p, nil
}

func (p *Process) readStdout() {
	defer close(p.readerDone)
	defer p.stdout.Close()
	sc := bufio.NewScanner(p.stdout)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		p.mu.Lock()
		p.lines = append(p.lines, line)
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
		// Never block: drop the oldest buffered line when the buffer is full.
		// This goroutine is the only sender, so the loop ends.
		for sent := false; !sent; {
			select {
			case p.linesCh <- line:
				sent = true
			default:
				select {
				case <-p.linesCh:
				default:
				}
			}
		}
	}
	p.mu.Lock()
	p.eof = true
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	close(p.linesCh)
}

// Pid returns the process id, which is also its process group id.
func (p *Process) Pid() int { return p.pid }

// exited reports whether the process has been reaped.
func (p *Process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process group while the leader has not been reaped
// (after that its id may belong to someone else).
func (p *Process) signal(sig syscall.Signal) error {
	if p.exited() {
		return fmt.Errorf("testserver: %s (pid %d) has exited", p.name, p.pid)
	}
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("testserver: %s (pid %d): %v: %w", p.name, p.pid, sig, err)
	}
	return nil
}

// kill sends SIGKILL to the process group and waits until the process has
// been reaped and, for helpers, its stdout has been read to the end.
func (p *Process) kill() error {
	if !p.exited() {
		if err := syscall.Kill(-p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("testserver: kill %s (pid %d): %w", p.name, p.pid, err)
		}
	}
	timer := time.NewTimer(killWait)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		return fmt.Errorf("testserver: %s (pid %d) not reaped %v after SIGKILL", p.name, p.pid, killWait)
	}
	if p.readerDone != nil {
		select {
		case <-p.readerDone:
		case <-timer.C:
			// Something outside the group holds the pipe: stop reading.
			p.stdout.Close()
			<-p.readerDone
		}
	}
	return nil
}

// Kill sends SIGKILL to the process group and waits until the process has
// exited. Killing a process that has already exited does nothing.
func (p *Process) Kill(t testing.TB) {
	t.Helper()
	if err := p.kill(); err != nil {
		t.Fatal(err)
	}
}

// Stop sends SIGSTOP to the process group and, on Linux, waits until the
// process is stopped.
func (p *Process) Stop(t testing.TB) {
	t.Helper()
	if err := p.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := waitStopped(p, true, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// Cont sends SIGCONT to the process group and, on Linux, waits until the
// process is no longer stopped.
func (p *Process) Cont(t testing.TB) {
	t.Helper()
	if err := p.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := waitStopped(p, false, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// Wait waits up to timeout for the process to exit and returns its exit
// code: -1 when a signal killed it (as [os.ProcessState.ExitCode]). It fails
// the test on timeout.
func (p *Process) Wait(t testing.TB, timeout time.Duration) (exitCode int) {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		t.Fatalf("testserver: %s (pid %d) still running after %v%s", p.name, p.pid, timeout, p.logTail())
	}
	if p.readerDone != nil {
		// Let the last lines reach Lines and WaitLine.
		select {
		case <-p.readerDone:
		case <-timer.C:
		}
	}
	return p.state.ExitCode()
}

// Lines returns a channel that receives every line the process writes to
// stdout, and is closed when stdout is closed. It buffers 4096 lines and drops
// the oldest when full, so reading it is optional. [Process.WaitLine] reads
// the same lines independently. Only helpers have their stdout captured; for
// other processes the channel is nil.
func (p *Process) Lines() <-chan string { return p.linesCh }

// WaitLine waits up to timeout for a stdout line that starts with prefix and
// returns it. Each call looks only at lines after the one the previous call
// returned. It fails the test on timeout or when stdout closes (the process
// exited) first.
func (p *Process) WaitLine(t testing.TB, prefix string, timeout time.Duration) string {
	t.Helper()
	if p.linesCh == nil { // set before the reader starts; p.changed is not
		t.Fatalf("testserver: %s: stdout is not captured", p.name)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		p.mu.Lock()
		for p.cursor < len(p.lines) {
			line := p.lines[p.cursor]
			p.cursor++
			if strings.HasPrefix(line, prefix) {
				p.mu.Unlock()
				return line
			}
		}
		eof, changed := p.eof, p.changed
		p.mu.Unlock()
		if eof {
			code := "unknown"
			select {
			case <-p.done:
				code = fmt.Sprint(p.state.ExitCode())
			case <-timer.C:
			}
			t.Fatalf("testserver: %s (pid %d) closed stdout (exit code %s) without a line starting with %q%s",
				p.name, p.pid, code, prefix, p.logTail())
		}
		select {
		case <-changed:
		case <-timer.C:
			t.Fatalf("testserver: %s (pid %d): no line starting with %q within %v%s",
				p.name, p.pid, prefix, timeout, p.logTail())
		}
	}
}

// logTail returns the end of the process's log, for error messages.
func (p *Process) logTail() string {
	tail := readTail(p.logPath, p.logFrom, 4096)
	if tail == "" {
		return ""
	}
	return "\n--- " + filepath.Base(p.logPath) + " (tail) ---\n" + tail
}

// readTail returns at most max bytes from the end of path, starting no
// earlier than offset from.
func readTail(path string, from, max int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	start := fi.Size() - max
	if start < from {
		start = from
	}
	if start < 0 {
		start = 0
	}
	b, err := io.ReadAll(io.NewSectionReader(f, start, fi.Size()-start))
	if err != nil {
		return ""
	}
	return strings.TrimRight(string(b), "\n")
}

// StartHelper runs the test binary (os.Args[0]) again as a helper process
// with -test.run matching exactly testName (a test, or test/subtest path), in
// its own process group, with the environment of this process plus
// TASKLOCK_HELPER=role and env ("KEY=value" entries). Its stdout is read line
// by line ([Process.WaitLine], [Process.Lines]); its stderr goes to a file in
// a temp dir and is shown when a wait fails. The helper is killed with its
// process group at cleanup.
func StartHelper(t testing.TB, testName, role string, env ...string) *Process {
	t.Helper()
	if role == "" {
		t.Fatal("testserver: StartHelper: empty role")
	}
	dir := t.TempDir()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatalf("testserver: StartHelper: %v", err)
	}
	args := []string{"-test.run=" + runPattern(testName), "-test.count=1"}
	environ := append(os.Environ(), HelperEnv+"="+role)
	environ = append(environ, env...)
	p, err := spawn(procSpec{
		name:          "helper " + role,
		path:          os.Args[0],
		args:          args,
		dir:           wd,
		env:           environ,
		logPath:       filepath.Join(dir, "helper-"+sanitize(role)+".stderr"),
		captureStdout: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.kill(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// runPattern anchors every level of a test/subtest name for -test.run.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, part := range parts {
		parts[i] = "^" + regexp.QuoteMeta(part) + "$"
	}
	return strings.Join(parts, "/")
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, s)
}
