//go:build unix

package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
)

// useStore makes the jobs commands of this test use store. Tests calling
// it are not parallel: it replaces openStore.
func useStore(t *testing.T, store *memstore.Store) {
	t.Helper()
	openStore = func(context.Context, string, string) (driver.Store, func() error, error) {
		return store, func() error { return nil }, nil
	}
	t.Cleanup(func() { openStore = defaultOpenStore })
}

// TestJobsDefineFlagErrorsNameTheFlag: a bad value given to a flag of jobs
// create or update is reported under the flag's name (--run-timeout), not
// the configuration key it sets (timeout), and not as line 1 of a file
// called "flags".
func TestJobsDefineFlagErrorsNameTheFlag(t *testing.T) {
	store := memstore.New(nil)
	useStore(t, store)
	for _, tc := range []struct{ flag, value string }{
		{"schedule", "every tuesday"},
		{"timezone", "Mars/Olympus_Mons"},
		{"http-url", "ftp://example.invalid/"},
		{"run-timeout", "5q"},
		{"overlap", "sometimes"},
		{"misfire", "never"},
		{"jitter", "5q"},
		{"lock-ttl", "5q"},
		{"kill-grace", "5q"},
		{"max-hold", "5q"},
		{"min-hold", "5q"},
		{"run-on", "everywhere"},
		{"retries", "-1"},
	} {
		args := []string{"jobs", "create", "beat", "--schedule", "@every 5s", "--command", "true", "--" + tc.flag, tc.value}
		if tc.flag == "http-url" {
			args = []string{"jobs", "create", "beat", "--schedule", "@every 5s", "--http-url", tc.value}
		}
		code, _, errOut := runJobsOn(t, store, args...)
		if code != exitUsage {
			t.Errorf("--%s %s: exit %d, want %d\n%s", tc.flag, tc.value, code, exitUsage, errOut)
			continue
		}
		if !strings.Contains(errOut, "\n  --"+tc.flag+": ") || strings.Contains(errOut, "flags:1:") {
			t.Errorf("--%s %s: the mistake is not reported under --%s:\n%s", tc.flag, tc.value, tc.flag, errOut)
		}
	}
	// update changes a stored definition by flags: the same.
	if code, _, errOut := runJobsOn(t, store, "jobs", "create", "beat", "--schedule", "@every 5s", "--command", "true"); code != exitOK {
		t.Fatalf("create: exit %d\n%s", code, errOut)
	}
	code, _, errOut := runJobsOn(t, store, "jobs", "update", "beat", "--run-timeout", "5q")
	if want := "\n  --run-timeout: invalid duration \"5q\""; code != exitUsage || !strings.Contains(errOut, want) {
		t.Errorf("update --run-timeout 5q: exit %d, want %d and %q in\n%s", code, exitUsage, want, errOut)
	}
}

// TestJobsBackfillTooManyTicksNamesMax: a range with more ticks than --max
// is refused naming --max and its value, with the count.
func TestJobsBackfillTooManyTicksNamesMax(t *testing.T) {
	store := memstore.New(nil)
	useStore(t, store)
	now := time.Now().UTC().Truncate(time.Minute)
	if _, err := store.SetJobState(context.Background(), ledger.JobStateParams{Job: "m", Op: ledger.JobRegister, Spec: "@every 1m", Since: now.Add(-2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// A node runs it: backfill refuses a job no node seems to have.
	if err := store.RecordRuns(context.Background(), []ledger.RunRecord{{Job: "m", Tick: now, Attempt: 1, Node: "n", Start: now, End: now, Status: ledger.RunOK}}); err != nil {
		t.Fatal(err)
	}
	from, to := now.Add(-time.Hour).Format(time.RFC3339), now.Add(-time.Minute).Format(time.RFC3339)
	code, _, errOut := runJobsOn(t, store, "jobs", "backfill", "m", "--from", from, "--to", to, "--max", "10")
	if want := "holds 60 ticks, more than --max 10: ask for a shorter range or a larger --max"; code != exitUsage || !strings.Contains(errOut, want) {
		t.Errorf("exit %d, want %d and %q in\n%s", code, exitUsage, want, errOut)
	}
	if code, _, errOut := runJobsOn(t, store, "jobs", "backfill", "m", "--from", from, "--to", to, "--max", "60"); code != exitOK {
		t.Errorf("--max 60: exit %d\n%s", code, errOut)
	}
}
