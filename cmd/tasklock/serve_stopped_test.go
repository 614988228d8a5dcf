//go:build unix

package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tasklock/tasklock/internal/clitest"
)

// A command that is stopped (SIGSTOP, or SIGTTIN from reading a terminal)
// when its run times out gets the SIGTERM only once it runs again: it used
// to be SIGKILLed kill_grace later without ever seeing it. serve now sends
// SIGCONT after the SIGTERM, as exec does, so it can end cleanly.
func TestServeStoppedCommandGetsSIGTERM(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := "sqlite://" + filepath.Join(dir, "s.db")
	cfg := writeConfig(t, dir, "store: "+store+"\njobs:\n"+`  - name: stopped
    schedule: "@every 2s"
    timeout: 1s
    kill_grace: 3s
    command: ["sh", "-c", "trap 'echo got-term; exit 0' TERM; echo started; kill -STOP $$; echo resumed-by-itself"]
`)
	p := tl.Start(t, nil, "serve", "--config", cfg, "--http", "")
	var history string
	clitest.WaitFor(t, 30*time.Second, func() bool {
		select {
		case <-p.Done():
			t.Fatalf("serve exited (%v)\nstderr:\n%s", p.State(), p.Stderr())
		default:
		}
		code, out, _ := tl.Run(t, []string{"TASKLOCK_STORE=" + store}, "jobs", "history", "--job", "stopped", "--json")
		history = out
		return code == 0 && strings.Contains(out, `"status": "timeout"`)
	}, "a run of stopped to time out")
	p.Signal(syscall.SIGTERM)
	p.Wait(30 * time.Second)
	if !strings.Contains(history, "got-term") || strings.Contains(history, "resumed-by-itself") {
		t.Errorf("the stopped command did not handle SIGTERM:\n%s", history)
	}
}

// TestServePausedNodeCommandStopsAtLeaseEnd: a serve node stopped
// (SIGSTOP) while its job's command runs cannot renew the job's lock nor
// stop the command, and the lock's lease runs out: another node may then
// run the job. The command used to run on meanwhile, beside the other
// node's run (seen by hand: two runs of one job overlapping by 1.6 s).
// The command's supervisor now kills it, and all it started, when the
// lease ends as serve last knew it (the lock's validity plus kill_grace,
// when serve would send SIGKILL itself), before another node can take
// the lock. The attempt is recorded lost.
func TestServePausedNodeCommandStopsAtLeaseEnd(t *testing.T) {
	t.Parallel()
	url, _ := redisFor(t)
	dir := t.TempDir()
	// The command runs once: later ticks' runs find the marker and end.
	script := `[ -e "$OUT.ran" ] && exit 0; echo $$ > "$OUT.ran"; while :; do sleep 0.02; done`
	cfg := writeConfig(t, dir, "store: "+url+"\njobs:\n"+
		indent(fmt.Sprintf("name: paused\nschedule: \"@every 1s\"\nlock_ttl: 2s\nkill_grace: 500ms\ncommand: [sh, -c, %q]\n", script)))
	out := filepath.Join(dir, "out")
	nodes := startNodes(t, 1, cfg, out)
	node := nodes[0]
	paused := false
	defer func() {
		if paused {
			node.Signal(syscall.SIGCONT)
		}
	}()
	node.WaitUntil(30*time.Second, func() bool { return fileExists(out + ".ran") }, "running the command")
	pid := clitest.ReadPid(t, out+".ran")
	node.Signal(syscall.SIGSTOP)
	paused = true
	// The lease is 2s: the command is killed within it, while serve is
	// still stopped.
	clitest.WaitFor(t, 15*time.Second, func() bool { return !clitest.Alive(pid) }, "the command to be killed while serve is stopped")
	node.Signal(syscall.SIGCONT)
	paused = false

	r := waitLostRun(t, url, "paused")
	stopNodes(t, nodes)
	if !strings.Contains(r.Error, "killed by signal SIGKILL") || !strings.Contains(r.Error, "lock lost") {
		t.Errorf("recorded %s: %q; want the command killed by SIGKILL and the lock lost", r.Status, r.Error)
	}
	// Who killed it: its supervisor, at the lease's end. The error used
	// to say it was killed "by itself, not signalled".
	if !strings.Contains(r.Error, "by its supervisor") || strings.Contains(r.Error, "not signalled") {
		t.Errorf("recorded %s: %q; want it to say the supervisor killed the command at the lease's end", r.Status, r.Error)
	}
}
