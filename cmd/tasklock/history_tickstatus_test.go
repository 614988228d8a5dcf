//go:build unix

package main

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// TestJobsHistoryTickStatusWithoutShards: jobs history's TICK STATUS of a
// job without shards is the status of its tick's latest attempt, on every
// row of the tick, also when --status or --limit leaves that attempt out of
// the listing. Before, it was "-" for every job without shards.
func TestJobsHistoryTickStatusWithoutShards(t *testing.T) {
	t.Parallel()
	url := "sqlite://" + filepath.Join(t.TempDir(), "ledger.db")
	l := sqliteLedger(t, url)
	ctx := context.Background()
	t1 := time.Date(2030, 1, 1, 1, 0, 0, 0, time.UTC)
	t2, t3 := t1.Add(time.Hour), t1.Add(2*time.Hour)
	start := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	rec := func(tick time.Time, trigger string, attempt int, status ledger.RunStatus) ledger.RunRecord {
		r := ledger.RunRecord{Job: "report", Tick: tick, Trigger: trigger, Attempt: attempt, Node: "web-1", Start: start, End: start.Add(time.Second), Status: status}
		switch status {
		case ledger.RunMissed:
			r.Start = time.Time{}
			r.Error = "schedule: tick missed"
		case ledger.RunFailed:
			r.Error = "exit status 3"
		case ledger.RunRunning:
			r.End = time.Time{}
		}
		return r
	}
	err := l.RecordRuns(ctx, []ledger.RunRecord{
		// t1 was missed, backfilled (failed) and re-run (ok): the tick is ok.
		rec(t1, "", 0, ledger.RunMissed),
		rec(t1, "", 1, ledger.RunFailed),
		rec(t1, "", 2, ledger.RunOK),
		rec(t2, "", 1, ledger.RunFailed),
		rec(t3, "", 1, ledger.RunRunning),
		rec(t2, "trig-1", 1, ledger.RunTimeout), // a trigger-now in t2's second: a tick of its own
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.SetJobState(ctx, ledger.JobStateParams{Job: "report", Op: ledger.JobRegister, Spec: "@hourly", Since: t1}); err != nil {
		t.Fatal(err)
	}
	tickStatus := map[string]string{ // by the TICK column
		t1.Format(time.RFC3339):                "ok",
		t2.Format(time.RFC3339):                "failed",
		t3.Format(time.RFC3339):                "running",
		t2.Format(time.RFC3339) + " (trigger)": "timeout",
	}
	for _, args := range [][]string{
		{"report"},
		{"report", "--status", "failed"}, // t1's attempt 1 only: its tick is ok
		{"report", "--status", "missed"},
		{"report", "--limit", "5"}, // t1's attempt 0 cut
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errOut := tl.Run(t, nil, append([]string{"jobs", "history", "--store", url}, args...)...)
			if code != exitOK {
				t.Fatalf("jobs history = %d\n%s%s", code, out, errOut)
			}
			rows := historyRows(t, out)
			if len(rows) == 0 {
				t.Fatalf("no rows:\n%s", out)
			}
			for _, r := range rows {
				if want := tickStatus[r["TICK"]]; r["TICK STATUS"] != want {
					t.Errorf("tick %s attempt %s (%s): TICK STATUS %q, want %q\n%s", r["TICK"], r["ATTEMPT"], r["STATUS"], r["TICK STATUS"], want, out)
				}
			}
		})
	}
}

// historyRows parses jobs history's table, each row by its column names.
func historyRows(t *testing.T, out string) []map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	cols := regexp.MustCompile(`\S+( \S+)*`) // cells: words one blank apart
	header := lines[0]
	names := cols.FindAllString(header, -1)
	at := cols.FindAllStringIndex(header, -1)
	var rows []map[string]string
	for _, line := range lines[1:] {
		row := map[string]string{}
		for i, name := range names {
			from, to := at[i][0], len(line)
			if i+1 < len(at) {
				to = min(at[i+1][0], len(line))
			}
			if from > len(line) {
				t.Fatalf("row %q is shorter than the header %q", line, header)
			}
			row[name] = strings.TrimSpace(line[from:to])
		}
		rows = append(rows, row)
	}
	if len(names) == 0 || names[len(names)-1] != "ERROR" {
		t.Fatalf("header %q: %s", header, fmt.Sprint(names))
	}
	return rows
}
