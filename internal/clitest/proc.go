package clitest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Proc is a tasklock process under test. Its stdout and stderr go to files,
// so that nothing it leaves behind can hold a pipe open.
type Proc struct {
	t       *testing.T
	cmd     *exec.Cmd
	outPath string
	errPath string
	done    chan struct{}
	state   *os.ProcessState // set before done is closed
}

// Start starts the binary with args, in an environment without TASKLOCK_*
// variables plus env. The process is killed at t's cleanup if it still
// runs.
func (b *Binary) Start(t *testing.T, env []string, args ...string) *Proc {
	t.Helper()
	return b.StartIn(t, "", env, args...)
}

// StartIn is Start with wd as the working directory ("": the test's).
func (b *Binary) StartIn(t *testing.T, wd string, env []string, args ...string) *Proc {
	t.Helper()
	dir := t.TempDir()
	p := &Proc{t: t, outPath: filepath.Join(dir, "stdout"), errPath: filepath.Join(dir, "stderr"), done: make(chan struct{})}
	out, err := os.Create(p.outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	errf, err := os.Create(p.errPath)
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	p.cmd = exec.Command(b.Path, args...)
	p.cmd.Dir = wd
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TASKLOCK_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	// A race-enabled binary otherwise sleeps a second before it exits.
	p.cmd.Env = append(p.cmd.Env, "GORACE=atexit_sleep_ms=0")
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = out, errf
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.state = p.cmd.ProcessState
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// Run runs the binary to completion (at most 30 seconds) and returns its
// exit code and output. env and args are as for Start.
func (b *Binary) Run(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := b.Start(t, env, args...)
	code = p.Wait(30 * time.Second)
	return code, p.Stdout(), p.Stderr()
}

// Stdout returns what the process printed to stdout so far.
func (p *Proc) Stdout() string { b, _ := os.ReadFile(p.outPath); return string(b) }

// Stderr returns what the process printed to stderr so far.
func (p *Proc) Stderr() string { b, _ := os.ReadFile(p.errPath); return string(b) }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// State is the process's exit state once Done is closed (nil before).
func (p *Proc) State() *os.ProcessState { return p.state }

// Process is the running process, to signal or kill it directly.
func (p *Proc) Process() *os.Process { return p.cmd.Process }

// Signal sends sig to the process, failing the test if it cannot.
func (p *Proc) Signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// Wait waits for the process to exit and returns its exit code (-1 when a
// signal killed it), failing the test after timeout.
func (p *Proc) Wait(timeout time.Duration) int {
	p.t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		p.t.Fatalf("tasklock %s still running after %v\nstdout:\n%s\nstderr:\n%s",
			strings.Join(p.cmd.Args[1:], " "), timeout, p.Stdout(), p.Stderr())
	}
	return p.state.ExitCode()
}
