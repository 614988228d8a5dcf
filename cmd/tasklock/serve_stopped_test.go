//go:build unix

package main

import (
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
