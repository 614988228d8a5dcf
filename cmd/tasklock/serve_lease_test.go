//go:build unix

package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/cmd/tasklock/internal/config"
	"github.com/tasklock/tasklock/schedule"
)

// quietServer is a server that can run a job's command (runCommand) and
// shows nothing.
func quietServer() *server {
	return &server{stdout: io.Discard, redact: func(s string) string { return s }, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// TestRunCommandSeesTheLeaseEndBeforeItsContext: a command that exits 0
// by itself, seen by serve only once its run's lease has passed (serve was
// paused past it) and before the run's context learnt of that (the
// Locker's goroutine had not run yet), is not taken for a success: the
// handler's error says the command exited by itself after the run had
// ended, and matches tasklock.ErrLockLost. It returned nil, and the run's
// record said only "lock lost" (TestServePausedNodeRecordsLossTruly shows
// it end to end; this pins the order that lost the exit status).
func TestRunCommandSeesTheLeaseEndBeforeItsContext(t *testing.T) {
	t.Parallel()
	exited := filepath.Join(t.TempDir(), "exited")
	s := quietServer()
	j := config.Job{Command: []string{"sh", "-c", `touch "$0"`, exited}, KillGrace: config.DefaultKillGrace}
	start := time.Now()
	r := schedule.Run{
		Job: "j", Tick: start, Node: "n1", Attempt: 1, Output: io.Discard,
		// Valid until the command has exited, then past: as serve, paused
		// right after the exit and longer than the lease, finds it.
		Deadline: func() time.Time {
			if fileExists(exited) {
				return start.Add(-time.Second)
			}
			return start.Add(time.Hour)
		},
	}
	err := s.runCommand(context.Background(), j, r)
	const want = "command exited with status 0 by itself, not signalled, but the run had ended before its exit was seen: tasklock: lock lost"
	if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, tasklock.ErrLockLost) {
		t.Errorf("runCommand: %v; want an error saying %q, matching ErrLockLost", err, want)
	}
}

// TestRunCommandKilledAtLeaseEndSaysWhy: a command its supervisor killed
// at the lease's end by itself, seen by serve before the run's context
// learnt that the lease had ended, is reported as a lost lock, with why.
// The error wrapped the context's cause, nil then, and the record said
// "…(was serve paused?): %!w(<nil>)", status failed.
func TestRunCommandKilledAtLeaseEndSaysWhy(t *testing.T) {
	t.Parallel()
	s := quietServer()
	j := config.Job{Command: []string{"sleep", "30"}, KillGrace: config.DefaultKillGrace}
	end := time.Now().Add(300 * time.Millisecond)
	r := schedule.Run{Job: "j", Tick: end, Node: "n1", Attempt: 1, Output: io.Discard, Deadline: func() time.Time { return end }}
	err := s.runCommand(context.Background(), j, r)
	const want = "at the lock's lease end by its supervisor"
	if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, tasklock.ErrLockLost) || strings.Contains(err.Error(), "%!") {
		t.Errorf("runCommand: %v; want an error saying %q, matching ErrLockLost", err, want)
	}
}
