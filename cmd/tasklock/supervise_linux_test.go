package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock/internal/clitest"
	"github.com/tasklock/tasklock/internal/testserver"
)

// newMarker returns a NAME=value environment entry unique to the test;
// every process a command starts inherits it, so markedProcs finds them
// whatever process group or session they moved to.
func newMarker(t *testing.T) string {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	m := "TL_TREE_MARK=" + hex.EncodeToString(b[:])
	// Whatever a failing test leaves behind is killed, by pid.
	t.Cleanup(func() {
		for _, p := range markedProcs(m) {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	})
	return m
}

// markedProc is a live process that carries a marker.
type markedProc struct {
	pid  int
	comm string
}

func (p markedProc) String() string { return fmt.Sprintf("%d (%s)", p.pid, p.comm) }

// markedProcs lists the live (not zombie) processes whose environment
// holds marker.
func markedProcs(marker string) []markedProc {
	names, _ := filepath.Glob("/proc/[0-9]*")
	var out []markedProc
	for _, dir := range names {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		env, err := os.ReadFile(dir + "/environ")
		if err != nil || !bytes.Contains(append([]byte{0}, env...), []byte("\x00"+marker+"\x00")) || !clitest.Alive(pid) {
			continue
		}
		comm, _ := os.ReadFile(dir + "/comm")
		out = append(out, markedProc{pid, strings.TrimSpace(string(comm))})
	}
	return out
}

// countComm counts the processes named comm.
func countComm(ps []markedProc, comm string) int {
	n := 0
	for _, p := range ps {
		if p.comm == comm {
			n++
		}
	}
	return n
}

// waitTreeGone waits until no process carries marker, and reports how long
// that took from since.
func waitTreeGone(t *testing.T, marker string, since time.Time) {
	t.Helper()
	var left []markedProc
	deadline := time.Now().Add(10 * time.Second)
	for {
		if left = markedProcs(marker); len(left) == 0 {
			t.Logf("every process of the command gone %v after", time.Since(since).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still running 10s later: %v", left)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

// treeCases are commands that leave a `sleep 41` behind in ways that
// escape COMMAND's process group, each with the number of sleeps it
// starts.
var treeCases = []struct {
	name   string
	argv   []string
	sleeps int
}{
	{"grandchild", []string{"sh", "-c", "sleep 41 & wait"}, 1},
	{"new-process-group", []string{"bash", "-c", "set -m; sleep 41 & wait"}, 1},
	{"setsid", []string{"sh", "-c", "setsid sleep 41 & wait"}, 1},
	{"nohup", []string{"sh", "-c", "nohup sleep 41 >/dev/null 2>&1 & wait"}, 1},
	{"double-fork", []string{"sh", "-c", "(setsid sleep 41 &); sleep 41"}, 2},
}

func requireTools(t *testing.T, argv []string) {
	t.Helper()
	for _, tool := range []string{argv[0], "setsid", "nohup", "sleep"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
}

// waitSleeps waits until n processes named sleep carry marker, while p
// runs.
func waitSleeps(t *testing.T, p *proc, marker string, n int) {
	t.Helper()
	clitest.WaitFor(t, 20*time.Second, func() bool {
		select {
		case <-p.Done():
			t.Fatalf("tasklock exited (%v)\nstdout:\n%s\nstderr:\n%s", p.State(), p.Stdout(), p.Stderr())
		default:
		}
		return countComm(markedProcs(marker), "sleep") >= n
	}, fmt.Sprintf("%d sleep processes to run", n))
}

// SIGKILLing tasklock exec kills every process of COMMAND's tree: the
// supervisor sees its control pipe close and kills what is reparented to
// it, however it detached.
func TestExecSigkillKillsTree(t *testing.T) {
	t.Parallel()
	testSigkillKillsTree(t, "tasklock", func(t *testing.T, argv []string) []string {
		return append([]string{"exec", "--store", "mem://", "--key", "tree", "--"}, argv...)
	})
}

// The same for a command job of a serve that is SIGKILLed.
func TestServeSigkillKillsTree(t *testing.T) {
	t.Parallel()
	testSigkillKillsTree(t, "serve", func(t *testing.T, argv []string) []string {
		quoted := make([]string, len(argv))
		for i, a := range argv {
			quoted[i] = strconv.Quote(a)
		}
		cfg := writeConfig(t, t.TempDir(), memConfig(`  - name: tree
    schedule: "@every 1s"
    command: [`+strings.Join(quoted, ", ")+`]
`))
		return []string{"serve", "--config", cfg, "--http", ""}
	})
}

// testSigkillKillsTree runs, for every tree case, tasklock with the
// arguments args gives for the case's command, SIGKILLs it once the
// command's sleeps run, and waits for all of them to go; what names the
// tasklock command in the failure message.
func testSigkillKillsTree(t *testing.T, what string, args func(t *testing.T, argv []string) []string) {
	for _, tc := range treeCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			requireTools(t, tc.argv)
			marker := newMarker(t)
			p := tl.Start(t, []string{marker}, args(t, tc.argv)...)
			waitSleeps(t, p, marker, tc.sleeps)
			if err := p.Process().Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			if code := p.Wait(10 * time.Second); code != -1 {
				t.Fatalf("%s exit %d after SIGKILL", what, code)
			}
			waitTreeGone(t, marker, killed)
		})
	}
}

// When COMMAND exits, what it left running goes too, in its process group
// or not: nothing runs on after the lock is released.
func TestExecCommandEndKillsLeftovers(t *testing.T) {
	t.Parallel()
	requireTools(t, []string{"sh"})
	marker := newMarker(t)
	code, out, errOut := tl.Run(t, []string{marker}, "exec", "--store", "mem://", "--key", "left", "--",
		"sh", "-c", "sleep 41 & setsid sleep 41 & (setsid sleep 41 &); echo done")
	if code != 0 || out != "done\n" {
		t.Fatalf("exit %d, stdout %q\nstderr:\n%s", code, out, errOut)
	}
	waitTreeGone(t, marker, time.Now())
}

// The same for a serve command job: the run ends, and so does all it
// started, while serve runs on.
func TestServeCommandEndKillsLeftovers(t *testing.T) {
	t.Parallel()
	requireTools(t, []string{"sh"})
	marker := newMarker(t)
	// env puts the marker on the job's processes only, not on serve's.
	cfg := writeConfig(t, t.TempDir(), memConfig(`  - name: left
    schedule: "@every 1s"
    command: ["env", "`+marker+`", "sh", "-c", "[ -e \"$DIR/ran\" ] && exit 0; touch \"$DIR/ran\"; setsid sleep 41 & (setsid sleep 41 &); echo started"]
`))
	dir := t.TempDir()
	p := tl.Start(t, []string{"DIR=" + dir}, "serve", "--config", cfg, "--http", "")
	p.WaitOutput("[left] started\n", 20*time.Second)
	waitTreeGone(t, marker, time.Now())
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\nstderr:\n%s", code, p.Stderr())
	}
}

// The supervisor is internal: run by hand, it says so.
func TestSuperviseByHand(t *testing.T) {
	t.Parallel()
	code, _, errOut := tl.Run(t, nil, superviseCmd, "--", "true")
	if code != exitUsage || !strings.Contains(errOut, "internal to exec and serve") {
		t.Errorf("exit %d, stderr %q; want %d", code, errOut, exitUsage)
	}
}

// A tasklock exec that is stopped (SIGSTOP, Ctrl-Z) or starved cannot stop
// COMMAND when its lease runs out: COMMAND and what it started used to run
// on beside the next holder. The supervisor now kills them all by itself
// when the lease's local validity (plus --kill-grace) ends, before the
// store lets another holder in; the resumed exec exits 70.
func TestExecStoppedKillsTreeAtLeaseEnd(t *testing.T) {
	t.Parallel()
	requireTools(t, []string{"sh"})
	url, _ := redisFor(t)
	marker := newMarker(t)
	a := tl.Start(t, []string{marker}, "exec", "--store", url, "--key", "paused", "--ttl", "2s", "--kill-grace", "500ms", "--",
		"sh", "-c", "setsid sleep 41 & echo started; sleep 41")
	waitSleeps(t, a, marker, 2)
	if err := a.Process().Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Cleanup(func() { _ = a.Process().Signal(syscall.SIGCONT) })

	// The next holder's COMMAND starts once the store let A's lease go:
	// by then nothing of A's COMMAND may run.
	stop := filepath.Join(t.TempDir(), "stop")
	b := tl.Start(t, []string{"STOP=" + stop}, "exec", "--store", url, "--key", "paused", "--wait", "20s", "--",
		"sh", "-c", `echo entered; while [ ! -e "$STOP" ]; do sleep 0.02; done`)
	b.WaitOutput("entered", 30*time.Second)
	var left []markedProc // but tasklock itself, stopped, and its supervisor ("exe")
	for _, p := range markedProcs(marker) {
		if p.comm != "tasklock" && p.comm != "exe" {
			left = append(left, p)
		}
	}
	if len(left) > 0 {
		t.Errorf("the next holder runs %v after tasklock was stopped, and the stopped holder's COMMAND still runs: %v",
			time.Since(stopped).Round(time.Millisecond), left)
	}
	if err := os.WriteFile(stop, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_ = b.Wait(10 * time.Second)

	if err := a.Process().Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := a.Wait(10 * time.Second); code != exitSoftware {
		t.Errorf("the resumed holder exited %d, want %d\nstderr:\n%s", code, exitSoftware, a.Stderr())
	}
	if !strings.Contains(a.Stderr(), "has neither renewed it nor stopped the command") {
		t.Errorf("stderr does not say why COMMAND was killed:\n%s", a.Stderr())
	}
	waitTreeGone(t, marker, stopped)
}

// When the store stops answering, tasklock itself stops COMMAND at the end
// of the lease: the supervisor, which kills at that time too, must not
// blame a stopped tasklock for it.
func TestExecFrozenStoreOneStoryOfTheKill(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t)
	p := tl.Start(t, nil, "exec", "--store", "redis://"+srv.Addr(), "--key", "frozen", "--ttl", "2s", "--kill-grace", "500ms",
		"--", "sh", "-c", `trap "" TERM; echo started; while :; do sleep 0.05; done`)
	p.WaitOutput("started", 20*time.Second)
	srv.Stop(t)
	defer srv.Cont(t)
	if code := p.Wait(20 * time.Second); code != exitSoftware {
		t.Fatalf("exit %d, want %d\nstderr:\n%s", code, exitSoftware, p.Stderr())
	}
	if errOut := p.Stderr(); !strings.Contains(errOut, "SIGTERM now") || strings.Contains(errOut, "stopped or starved") {
		t.Errorf("stderr should tell the loss and the SIGTERM, and not blame a stopped tasklock:\n%s", errOut)
	}
}

// childPids lists pid's live children, from /proc.
func childPids(pid int) []int {
	names, _ := filepath.Glob("/proc/[0-9]*")
	var out []int
	for _, dir := range names {
		p, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		if ppid, ok := liveParent(p); ok && ppid == pid {
			out = append(out, p)
		}
	}
	return out
}

// A supervisor stopped or starved past the lease's end while tasklock
// renewed the lease must read tasklock's renewals, waiting in its control
// pipe, before it decides the lease ended: it killed COMMAND under a lock
// that was held all along.
func TestExecStoppedSupervisorReadsRenewalsFirst(t *testing.T) {
	t.Parallel()
	url, c := redisFor(t)
	p := tl.Start(t, nil, "exec", "--store", url, "--key", "supstop", "--ttl", "1s", "--kill-grace", "200ms",
		"--", "sh", "-c", `trap "echo got-hup; exit 0" HUP; echo started; while :; do sleep 0.05; done`)
	p.WaitOutput("started", 20*time.Second)
	sup := childPids(p.Process().Pid)
	if len(sup) != 1 {
		t.Fatalf("tasklock's children %v, want its supervisor", sup)
	}
	if err := syscall.Kill(sup[0], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Cleanup(func() { _ = syscall.Kill(sup[0], syscall.SIGCONT) })
	// Past the first lease's end, the lock is still held: renewed.
	clitest.WaitFor(t, 20*time.Second, func() bool {
		return time.Since(stopped) > 2*time.Second && exists(t, c, lockKey("supstop"))
	}, "the lease to be renewed past its first end")
	if err := syscall.Kill(sup[0], syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// The SIGHUP tasklock passes on reaches the supervisor behind the
	// renewals: COMMAND gets it unless it was killed first.
	p.Signal(syscall.SIGHUP)
	if code := p.Wait(20 * time.Second); code != 0 || !strings.Contains(p.Stdout(), "got-hup") {
		t.Errorf("exit %d, want 0 (COMMAND's, on the SIGHUP)\nstdout:\n%s\nstderr:\n%s", code, p.Stdout(), p.Stderr())
	}
}
