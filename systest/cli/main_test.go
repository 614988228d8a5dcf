//go:build unix

package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/systest/internal/proxy"
)

// Exit statuses of the tasklock command that these tests check (the
// command's own constants, in cmd/tasklock/main.go).
const (
	exitOK       = 0
	exitSoftware = 70 // EX_SOFTWARE: the lock was lost while COMMAND ran
)

// binPath is the tasklock binary TestMain builds.
var binPath string

// TestMain builds the tasklock binary once for every test here (from this
// module, so with the library the replace directive points at), runs the
// tests and removes the binary.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tasklock-systest-cli")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "tasklock")
	args := []string{"build", "-o", binPath}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "github.com/tasklock/tasklock/cmd/tasklock")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building tasklock:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := testserver.Main(m, proxy.IgnoreToxics)
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a tasklock process under test. Its stdout and stderr go to files,
// so that nothing it leaves behind can hold a pipe open.
type proc struct {
	t       *testing.T
	cmd     *exec.Cmd
	outPath string
	errPath string
	done    chan struct{}
	state   *os.ProcessState // set before done is closed
}

// startTL starts the tasklock binary with args, in an environment without
// TASKLOCK_* variables plus env. The process is killed at t.Cleanup if it
// still runs.
func startTL(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	dir := t.TempDir()
	p := &proc{t: t, outPath: filepath.Join(dir, "stdout"), errPath: filepath.Join(dir, "stderr"), done: make(chan struct{})}
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
	p.cmd = exec.Command(binPath, args...)
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

// runTL runs tasklock to completion and returns its exit code and output.
func runTL(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := startTL(t, env, args...)
	code = p.wait(30 * time.Second)
	return code, p.stdout(), p.stderr()
}

func (p *proc) stdout() string { b, _ := os.ReadFile(p.outPath); return string(b) }
func (p *proc) stderr() string { b, _ := os.ReadFile(p.errPath); return string(b) }

// wait waits for the process to exit and returns its exit code (-1 when a
// signal killed it).
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		p.t.Fatalf("tasklock %s still running after %v\nstdout:\n%s\nstderr:\n%s",
			strings.Join(p.cmd.Args[1:], " "), timeout, p.stdout(), p.stderr())
	}
	return p.state.ExitCode()
}

// waitOutput waits until stdout contains s.
func (p *proc) waitOutput(s string, timeout time.Duration) {
	p.t.Helper()
	p.waitUntil(timeout, func() bool { return strings.Contains(p.stdout(), s) }, "printing "+strconv.Quote(s))
}

// waitStderr waits until stderr matches the regular expression re.
func (p *proc) waitStderr(re string, timeout time.Duration) {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	p.waitUntil(timeout, func() bool { return rx.MatchString(p.stderr()) }, "logging "+strconv.Quote(re))
}

// waitUntil polls cond until it holds, failing the test if the process
// exits first or after timeout.
func (p *proc) waitUntil(timeout time.Duration, cond func() bool, what string) {
	p.t.Helper()
	waitFor(p.t, timeout, func() bool {
		select {
		case <-p.done:
			p.t.Fatalf("tasklock exited (%v) before %s\nstdout:\n%s\nstderr:\n%s", p.state, what, p.stdout(), p.stderr())
		default:
		}
		return cond()
	}, "tasklock "+what)
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

// lockKey is the Redis key of a lock (redisstore's default layout).
func lockKey(key string) string { return "tasklock:{" + key + "}" }

func exists(t *testing.T, c *redis.Client, key string) bool {
	t.Helper()
	n, err := c.Exists(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// alive reports whether pid is a live process (not gone, not a zombie).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) S ...: the state follows the last ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// readPid waits for a pid file and returns the pid in it.
func readPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	waitFor(t, 10*time.Second, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	}, "pid file "+path)
	return pid
}
