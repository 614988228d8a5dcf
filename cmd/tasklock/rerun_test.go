//go:build unix

package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/cmd/tasklock/internal/storeurl"
	"github.com/tasklock/tasklock/ledger"
)

// TestRerunBeforeJobExisted: jobs rerun refuses a tick from before the
// fleet first ran the job with its schedule (the registration's Since),
// exit 64 saying so and requesting nothing, unless the history holds a
// run of the job at or before that tick; a tick after it is re-run.
func TestRerunBeforeJobExisted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := "sqlite://" + filepath.Join(t.TempDir(), "rerun.db")
	store, closeStore, err := storeurl.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	l := store.(ledger.Ledger)
	now := time.Now().UTC()
	since := now.Add(-2 * time.Hour)
	if _, err := l.SetJobState(ctx, ledger.JobStateParams{Job: "r", Op: ledger.JobRegister, Spec: "@hourly", Since: since}); err != nil {
		t.Fatal(err)
	}
	old := now.Truncate(time.Hour).Add(-30 * 24 * time.Hour)
	// It ran 30 days ago, and a node runs it now (its latest tick, this
	// hour's, is in progress): rerun refuses a job no node seems to have.
	hour := now.Truncate(time.Hour)
	if err := l.RecordRuns(ctx, []ledger.RunRecord{
		{Job: "r", Tick: old, Attempt: 1, Node: "n", Start: old, End: old.Add(time.Second), Status: ledger.RunOK},
		{Job: "r", Tick: hour, Attempt: 1, Node: "n", Start: hour, Status: ledger.RunRunning},
	}); err != nil {
		t.Fatal(err)
	}
	pending := func() int {
		sts, err := l.Jobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, st := range sts {
			if st.Job == "r" {
				n = len(st.Triggers)
			}
		}
		return n
	}
	for _, tt := range []struct {
		tick time.Time
		code int
		want string // in stderr, or stdout when code is 0
	}{
		{now.Truncate(time.Hour).Add(-365 * 24 * time.Hour), exitUsage,
			"the tick " + now.Truncate(time.Hour).Add(-365*24*time.Hour).Format(time.RFC3339) + " is before the job could have run: the fleet runs it with this schedule since " + since.Format(time.RFC3339)},
		{old.Add(-time.Hour), exitUsage, "is before the job could have run"},
		{old, exitOK, "requested a re-run"},
		{old.Add(24 * time.Hour), exitOK, "requested a re-run"},
		{now.Truncate(time.Hour), exitOK, "requested a re-run"},
	} {
		before := pending()
		tick := tt.tick.Format(time.RFC3339)
		code, out, errOut := tl.Run(t, nil, "jobs", "rerun", "--store", url, "r", tick)
		got, added := errOut, 0
		if tt.code == exitOK {
			got, added = out, 1
		}
		if code != tt.code || !strings.Contains(got, tt.want) {
			t.Errorf("jobs rerun r %s = %d, stdout %q, stderr %q; want %d saying %s", tick, code, out, errOut, tt.code, tt.want)
		}
		if n := pending(); n != before+added {
			t.Errorf("jobs rerun r %s: %d trigger requests pending, want %d", tick, n, before+added)
		}
	}
}
