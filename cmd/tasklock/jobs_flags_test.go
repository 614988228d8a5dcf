//go:build unix

package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// TestJobsForeignFlags: a jobs subcommand refuses a flag that is another
// subcommand's (one flag set parses them all), exit 64 naming the flag and
// the subcommand, before it opens the store and changes anything; it was
// ignored, unchecked ("jobs pause r --max -5" paused r). The flags each
// subcommand documents, and --store, --json and --timeout, still work.
func TestJobsForeignFlags(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := "sqlite://" + filepath.Join(t.TempDir(), "flags.db")
	l := sqliteLedger(t, url)
	now := time.Now().UTC()
	hour := now.Truncate(time.Hour)
	if _, err := l.SetJobState(ctx, ledger.JobStateParams{Job: "r", Op: ledger.JobRegister, Spec: "@hourly", Since: now.Add(-3 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	running := hour.Add(-time.Hour)
	if err := l.RecordRuns(ctx, []ledger.RunRecord{
		{Job: "r", Tick: hour.Add(-2 * time.Hour), Attempt: 1, Node: "n", Start: hour.Add(-2 * time.Hour), End: hour.Add(-2*time.Hour + time.Second), Status: ledger.RunOK},
		{Job: "r", Tick: running, Attempt: 1, Node: "n", Start: running, Status: ledger.RunRunning},
	}); err != nil {
		t.Fatal(err)
	}
	tick := func(t time.Time) string { return t.Format(time.RFC3339) }
	cfg := writeConfig(t, t.TempDir(), "store: "+url+"\njobs:\n  - name: r\n    schedule: '@hourly'\n    command: [true]\n")

	for _, tt := range []struct {
		args []string
		want []string // in stderr, each
	}{
		{[]string{"list", "--limit", "1"}, []string{"--limit is not a flag of list (history, audit and notifications take it)"}},
		{[]string{"list", "--status", "failed"}, []string{"--status is not a flag of list (history takes it)"}},
		{[]string{"list", "--since", "1s", "--overlap", "allow", "--rerun", "--from", "x"},
			[]string{"--since is not a flag of list", "--overlap is not a flag of list (backfill, rerun, create and update take it)", "--rerun is not a flag of list", "--from is not a flag of list"}},
		{[]string{"history", "--note", "n"}, []string{"--note is not a flag of history (trigger takes it)"}},
		{[]string{"history", "-f", "x.yaml"}, []string{"-f is not a flag of history (create and update take it)"}},
		{[]string{"trigger", "r", "--shard", "1"}, []string{"--shard is not a flag of trigger (cancel takes it)"}},
		{[]string{"cancel", "r", tick(running), "--force"}, []string{"--force is not a flag of cancel"}},
		{[]string{"pause", "r", "--from", "bogus", "--to", "bogus", "--max", "-5", "--cancel", "--shard", "9"},
			[]string{"--from is not a flag of pause", "--to is not a flag of pause", "--max is not a flag of pause", "--cancel is not a flag of pause (delete takes it)", "--shard is not a flag of pause"}},
		{[]string{"resume", "r", "--job", "r"}, []string{"--job is not a flag of resume (history, audit and notifications take it)"}},
		{[]string{"forget", "r", "--force", "--cancel"}, []string{"--cancel is not a flag of forget"}},
		{[]string{"backfill", "r", "--from", tick(hour.Add(-2 * time.Hour)), "--to", tick(hour), "--limit", "5"}, []string{"--limit is not a flag of backfill"}},
		{[]string{"rerun", "r", tick(running), "--max", "5"}, []string{"--max is not a flag of rerun (backfill takes it)"}},
		{[]string{"rerun", "r", tick(running), "--rerun"}, []string{"--rerun is not a flag of rerun (backfill takes it)"}},
		{[]string{"create", "c", "--schedule", "@daily", "--command", "true", "--trigger", "x"}, []string{"--trigger is not a flag of create (cancel takes it)"}},
		{[]string{"update", "c", "--schedule", "@hourly", "--since", "1h"}, []string{"--since is not a flag of update"}},
		{[]string{"delete", "c", "--force"}, []string{"--force is not a flag of delete (trigger, pause, resume, forget, backfill, rerun, create and update take it)"}},
		{[]string{"delete", "c", "--config", cfg}, []string{"--config is not a flag of delete (create and update take it)"}},
		{[]string{"audit", "--status", "ok"}, []string{"--status is not a flag of audit"}},
		{[]string{"notifications", "--from", "x"}, []string{"--from is not a flag of notifications (backfill takes it)"}},
	} {
		args := append([]string{"jobs"}, tt.args...)
		args = append(args, "--store", url)
		code, out, errOut := tl.Run(t, nil, args...)
		if code != exitUsage || out != "" {
			t.Errorf("%q = %d, stdout %q, stderr %q; want 64", args, code, out, errOut)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(errOut, "tasklock jobs "+tt.args[0]+": ") || !strings.Contains(errOut, w) {
				t.Errorf("%q: stderr %q; want it to say %q", args, errOut, w)
			}
		}
	}
	// Nothing was changed: pause r above paused it.
	sts, err := l.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.Paused || len(st.Triggers) > 0 || st.Job != "r" {
			t.Errorf("after the refused commands, the store holds %+v", st)
		}
	}

	// Each subcommand's own flags, in order: create defines c, delete
	// deletes it, pause x makes the state that forget x drops.
	for _, args := range [][]string{
		{"list", "--json", "--timeout", "5s"},
		{"history", "r", "--status", "ok", "--since", "24h", "--limit", "5"},
		{"history", "--job", "r", "--json"},
		{"trigger", "r", "--note", "after the fix"},
		{"pause", "x", "--force"},
		{"resume", "x", "--force", "--json"},
		{"forget", "x", "--force"},
		{"cancel", "r", tick(running), "--shard", "0"},
		{"backfill", "r", "--from", tick(hour.Add(-2 * time.Hour)), "--to", tick(hour.Add(-time.Hour)), "--overlap", "allow", "--max", "10", "--rerun"},
		{"rerun", "r", tick(hour.Add(-2 * time.Hour)), "--overlap", "allow"},
		{"create", "c", "--schedule", "@daily", "--command", "true", "--overlap", "allow", "--config", cfg},
		{"update", "c", "--retries", "2", "--force"},
		{"delete", "c", "--cancel", "--json"},
		{"audit", "--job", "c", "--limit", "5"},
		{"notifications", "--job", "r", "--limit", "5"},
	} {
		args := append([]string{"jobs"}, args...)
		args = append(args, "--store", url)
		if code, out, errOut := tl.Run(t, nil, args...); code != exitOK {
			t.Errorf("%q = %d, stdout %q, stderr %q; want 0", args, code, out, errOut)
		}
	}
}
