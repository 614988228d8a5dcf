//go:build unix

package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
	"github.com/tasklock/tasklock/schedule"
)

// registerRunning registers job with spec on store, as a node of serve
// does, with a run of its tick at, so that it looks configured.
func registerRunning(t *testing.T, store *memstore.Store, job, spec string, at time.Time) {
	t.Helper()
	ctx := context.Background()
	if _, err := store.SetJobState(ctx, ledger.JobStateParams{Job: job, Op: ledger.JobRegister, Spec: spec, Since: at.Add(-2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := store.RecordRuns(ctx, []ledger.RunRecord{{Job: job, Tick: at, Attempt: 1, Node: "n", Start: at, End: at.Add(time.Second), Status: ledger.RunOK}}); err != nil {
		t.Fatal(err)
	}
}

// pendingRequests counts job's pending trigger requests in store.
func pendingRequests(t *testing.T, store *memstore.Store, job string) int {
	t.Helper()
	sts, err := store.Jobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.Job == job {
			return len(st.Triggers)
		}
	}
	return 0
}

// TestJobsBackfillMaxBounded: --max above schedule.MaxBackfill is refused,
// exit 64 naming --max and the bound, before anything is requested; a
// range of a per-second cron schedule with more ticks than --max is
// refused as holding more than --max ticks, without counting them all.
func TestJobsBackfillMaxBounded(t *testing.T) {
	store := memstore.New(nil)
	useStore(t, store)
	now := time.Now().UTC().Truncate(time.Second)
	registerRunning(t, store, "m", "@every 1m", now.Truncate(time.Minute))
	registerRunning(t, store, "s", "* * * * * *", now.Add(-time.Second))
	from, to := now.Add(-time.Hour).Format(time.RFC3339), now.Add(-time.Minute).Format(time.RFC3339)
	over := schedule.MaxBackfill + 1
	code, _, errOut := runJobsOn(t, store, "jobs", "backfill", "m", "--from", from, "--to", to, "--max", strconv.Itoa(over))
	if want := "--max " + strconv.Itoa(over) + " is more than " + strconv.Itoa(schedule.MaxBackfill); code != exitUsage || !strings.Contains(errOut, want) {
		t.Errorf("--max %d: exit %d, want %d and %q in\n%s", over, code, exitUsage, want, errOut)
	}
	if n := pendingRequests(t, store, "m"); n != 0 {
		t.Errorf("--max %d: %d requests added", over, n)
	}

	from = now.Add(-25 * time.Hour).Format(time.RFC3339)
	code, _, errOut = runJobsOn(t, store, "jobs", "backfill", "s", "--from", from, "--to", to, "--max", "10")
	if want := "holds more than --max 10 ticks: ask for a shorter range or a larger --max"; code != exitUsage || !strings.Contains(errOut, want) {
		t.Errorf("a day of seconds, --max 10: exit %d, want %d and %q in\n%s", code, exitUsage, want, errOut)
	}
	code, _, errOut = runJobsOn(t, store, "jobs", "backfill", "s", "--from", from, "--to", to, "--max", strconv.Itoa(schedule.MaxBackfill))
	if want := "holds more than --max " + strconv.Itoa(schedule.MaxBackfill) + " ticks: ask for a shorter range or several backfills (--max is at most " + strconv.Itoa(schedule.MaxBackfill) + ")"; code != exitUsage || !strings.Contains(errOut, want) {
		t.Errorf("a day of seconds, --max %d: exit %d, want %d and %q in\n%s", schedule.MaxBackfill, code, exitUsage, want, errOut)
	}
	if n := pendingRequests(t, store, "s"); n != 0 {
		t.Errorf("%d requests added by refused backfills", n)
	}
	if want := "ticks (default " + strconv.Itoa(schedule.DefaultBackfillMax) + ", at most " + strconv.Itoa(schedule.MaxBackfill) + ")"; !strings.Contains(jobsUsage, want) {
		t.Errorf("jobs help does not say %q", want)
	}
}

// TestJobsRequestsOfRemovedJob: rerun and backfill refuse, as trigger
// does, a job no node of serve seems to have any more (exit 1, nothing
// requested; --force asks anyway): one whose next tick is long past with
// nothing recorded, and one deleted at run time (jobs delete), which all
// three refuse at once, before its next tick is due. A deleted job that a
// node runs again is no longer refused.
func TestJobsRequestsOfRemovedJob(t *testing.T) {
	store := memstore.New(nil)
	useStore(t, store)
	now := time.Now().UTC()
	minute := now.Truncate(time.Minute)
	tick := minute.Add(-time.Minute).Format(time.RFC3339)
	from, to := minute.Add(-3*time.Minute).Format(time.RFC3339), minute.Add(-time.Minute).Format(time.RFC3339)

	// gone: removed from every node's file an hour ago.
	registerRunning(t, store, "gone", "@every 1m", minute.Add(-time.Hour))
	// rt: defined at run time, running (its latest tick is this minute's),
	// then deleted.
	if code, out, errOut := runJobsOn(t, store, "jobs", "create", "rt", "--schedule", "@every 1m", "--command", "true"); code != exitOK {
		t.Fatalf("create rt: exit %d\n%s%s", code, out, errOut)
	}
	registerRunning(t, store, "rt", "@every 1m", minute)
	if code, out, errOut := runJobsOn(t, store, "jobs", "delete", "rt", "--cancel"); code != exitOK {
		t.Fatalf("delete rt: exit %d\n%s%s", code, out, errOut)
	}

	for _, c := range []struct {
		job, want string
	}{
		{"gone", "looks removed from the configuration of every node of serve"},
		{"rt", `job "rt" looks removed from the configuration of every node of serve: it was deleted at run time by cli:`},
	} {
		for _, args := range [][]string{
			{"jobs", "rerun", c.job, tick},
			{"jobs", "backfill", c.job, "--from", from, "--to", to},
			{"jobs", "trigger", c.job},
		} {
			args = append(args, "--timeout", "5s")
			code, out, errOut := runJobsOn(t, store, args...)
			if code != exitMissing || !strings.Contains(errOut, c.want) || !strings.Contains(errOut, "--force to ask for it anyway") {
				t.Errorf("%q: exit %d, want %d and %q in\n%s%s", args, code, exitMissing, c.want, out, errOut)
			}
			if n := pendingRequests(t, store, c.job); n != 0 {
				t.Fatalf("%q: %d requests pending, want none", args, n)
			}
		}
		for i, args := range [][]string{
			{"jobs", "rerun", c.job, tick, "--force"},
			{"jobs", "backfill", c.job, "--from", from, "--to", to, "--force"},
		} {
			if code, out, errOut := runJobsOn(t, store, args...); code != exitOK || !strings.Contains(out, "requested") {
				t.Errorf("%q: exit %d, want 0\n%s%s", args, code, out, errOut)
			}
			if n, want := pendingRequests(t, store, c.job), []int{1, 4}[i]; n != want {
				t.Errorf("%q: %d requests pending, want %d", args, n, want)
			}
		}
	}

	// A node runs rt again (a file names it): its run started after the
	// delete, and a re-run is taken.
	if err := store.RecordRuns(context.Background(), []ledger.RunRecord{{Job: "rt", Tick: minute.Add(time.Minute), Attempt: 1, Node: "n",
		Start: time.Now().Add(time.Millisecond), Status: ledger.RunRunning}}); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runJobsOn(t, store, "jobs", "rerun", "rt", tick); code != exitOK {
		t.Errorf("rerun rt run again since its delete: exit %d, want 0\n%s%s", code, out, errOut)
	}
}

// TestJobsUpdateFileJob: update by flags of a job of serve's configuration
// file refuses it as delete does, saying it is changed in the file, not
// "use create", which refuses it too; a job nobody has is sent to create.
func TestJobsUpdateFileJob(t *testing.T) {
	store := memstore.New(nil)
	useStore(t, store)
	registerRunning(t, store, "filejob", "@every 1m", time.Now().UTC().Truncate(time.Minute))
	want := `no job named "filejob" was defined at run time (a job of the configuration file is changed there)`
	for _, args := range [][]string{
		{"jobs", "update", "filejob", "--schedule", "@every 10s"},
		{"jobs", "delete", "filejob"},
	} {
		code, out, errOut := runJobsOn(t, store, args...)
		if code != exitMissing || !strings.Contains(errOut, want) || strings.Contains(errOut, "use create") {
			t.Errorf("%q: exit %d, want %d and %q in\n%s%s", args, code, exitMissing, want, out, errOut)
		}
	}
	code, out, errOut := runJobsOn(t, store, "jobs", "update", "nosuch", "--schedule", "@every 10s")
	if want := `no job named "nosuch" was defined at run time: use create`; code != exitMissing || !strings.Contains(errOut, want) {
		t.Errorf("update nosuch: exit %d, want %d and %q in\n%s%s", code, exitMissing, want, out, errOut)
	}
}
