//go:build unix

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// exec --permits N runs at most N COMMANDs at once across processes: the
// third holder of two permits is refused (exit 75, naming the semaphore),
// a holder asking with another number is refused as a usage mistake
// (exit 64), and once a permit returns the next holder gets it.
func TestExecPermits(t *testing.T) {
	t.Parallel()
	url, _ := redisFor(t)
	stop := filepath.Join(t.TempDir(), "stop")
	env := []string{"STOP=" + stop}
	a := tl.Start(t, env, "exec", "--store", url, "--key", "pool", "--permits", "2", "--ttl", "30s", "--", "sh", "-c", `echo "mode=$TASKLOCK_MODE"; `+waitingChild)
	b := tl.Start(t, env, "exec", "--store", url, "--key", "pool", "--permits", "2", "--ttl", "30s", "--", "sh", "-c", waitingChild)
	a.WaitOutput("started", 20*time.Second)
	b.WaitOutput("started", 20*time.Second)
	if !strings.Contains(a.Stdout(), "mode=permit") {
		t.Errorf("TASKLOCK_MODE not permit: %q", a.Stdout())
	}

	code, out, errOut := tl.Run(t, nil, "exec", "--store", url, "--key", "pool", "--permits", "2", "--", "echo", "must-not-run")
	if code != exitTempFail || out != "" || !strings.Contains(errOut, `all 2 permits of semaphore "pool" are held`) {
		t.Errorf("third holder: exit %d, stdout %q, stderr %q; want %d naming the semaphore", code, out, errOut, exitTempFail)
	}
	code, out, errOut = tl.Run(t, nil, "exec", "--store", url, "--key", "pool", "--permits", "3", "--", "echo", "must-not-run")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "another kind of lock") {
		t.Errorf("other permit count: exit %d, stdout %q, stderr %q; want %d", code, out, errOut, exitUsage)
	}
	// The plain lock "pool" is another lock: free.
	if code, out, errOut := tl.Run(t, nil, "exec", "--store", url, "--key", "pool", "--", "echo", "plain"); code != 0 || out != "plain\n" {
		t.Errorf("plain lock of the same name: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	waiter := tl.Start(t, nil, "exec", "--store", url, "--key", "pool", "--permits", "2", "--wait", "20s", "--", "echo", "third")
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*proc{a, b, waiter} {
		if code := p.Wait(20 * time.Second); code != 0 {
			t.Errorf("exit %d\nstderr:\n%s", code, p.Stderr())
		}
	}
	if waiter.Stdout() != "third\n" {
		t.Errorf("waiter stdout %q", waiter.Stdout())
	}
}

// exec --shared holders run together; an --exclusive one is refused while
// they run and runs after them, with a fence above theirs; the readers see
// the last writer's fence.
func TestExecSharedExclusive(t *testing.T) {
	t.Parallel()
	url, _ := redisFor(t)
	fence := regexp.MustCompile(`fence=(\d+) mode=(\w+)`)
	code, out, errOut := tl.Run(t, nil, "exec", "--store", url, "--key", "doc", "--exclusive", "--", "sh", "-c", `echo "fence=$TASKLOCK_FENCE mode=$TASKLOCK_MODE"`)
	w1 := fence.FindStringSubmatch(out)
	if code != 0 || w1 == nil || w1[2] != "write" {
		t.Fatalf("first writer: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	stop := filepath.Join(t.TempDir(), "stop")
	env := []string{"STOP=" + stop}
	r1 := tl.Start(t, env, "exec", "--store", url, "--key", "doc", "--shared", "--ttl", "30s", "--", "sh", "-c", `echo "fence=$TASKLOCK_FENCE mode=$TASKLOCK_MODE"; `+waitingChild)
	r2 := tl.Start(t, env, "exec", "--store", url, "--key", "doc", "--shared", "--ttl", "30s", "--", "sh", "-c", waitingChild)
	r1.WaitOutput("started", 20*time.Second)
	r2.WaitOutput("started", 20*time.Second) // two readers at once
	if m := fence.FindStringSubmatch(r1.Stdout()); m == nil || m[1] != w1[1] || m[2] != "read" {
		t.Errorf("reader's fence and mode %q, want the last writer's fence %s and read", r1.Stdout(), w1[1])
	}
	code, out, errOut = tl.Run(t, nil, "exec", "--store", url, "--key", "doc", "--exclusive", "--", "echo", "must-not-run")
	if code != exitTempFail || out != "" || !strings.Contains(errOut, `read-write lock "doc" is held`) {
		t.Errorf("writer beside readers: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	writer := tl.Start(t, nil, "exec", "--store", url, "--key", "doc", "--exclusive", "--wait", "20s", "--", "sh", "-c", `echo "fence=$TASKLOCK_FENCE mode=$TASKLOCK_MODE"`)
	// Once the writer waits, a new reader is refused, and told that a
	// writer holds or waits for the lock, not that its lease ends in
	// "unknown".
	for deadline := time.Now().Add(20 * time.Second); ; {
		_, out, _ := tl.Run(t, nil, "locks", "list", "--store", url)
		if strings.Contains(out, "write (waiting)") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the writer never waited: locks list\n%s", out)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}
	code, out, errOut = tl.Run(t, nil, "exec", "--store", url, "--key", "doc", "--shared", "--", "echo", "must-not-run")
	if code != exitTempFail || out != "" || !strings.Contains(errOut, `read-write lock "doc" has a writer`) || strings.Contains(errOut, "unknown") {
		t.Errorf("reader behind a waiting writer: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*proc{r1, r2, writer} {
		if code := p.Wait(20 * time.Second); code != 0 {
			t.Errorf("exit %d\nstderr:\n%s", code, p.Stderr())
		}
	}
	m := fence.FindStringSubmatch(writer.Stdout())
	if m == nil {
		t.Fatalf("second writer's output %q", writer.Stdout())
	}
	if f2, _ := strconv.ParseUint(m[1], 10, 64); f2 <= mustUint(t, w1[1]) {
		t.Errorf("second writer's fence %d, want above %s", f2, w1[1])
	}
}

func mustUint(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
