//go:build unix

package main

import (
	"cmp"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/redisstore"
)

// TestLocksCommands holds a lock through the library and looks at it, and
// releases it, through the CLI.
func TestLocksCommands(t *testing.T) {
	url, c := redisFor(t)
	store, err := redisstore.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	lk, err := tasklock.New(store, &tasklock.Config{Owner: "holder-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	l, err := lk.Obtain(context.Background(), "reports/nightly", nil)
	if err != nil {
		t.Fatal(err)
	}

	code, out, errOut := tl.Run(t, nil, "locks", "list", "--store", url)
	if code != exitOK || !strings.Contains(out, "reports/nightly") || !strings.Contains(out, "holder-1") || !strings.Contains(out, "EXPIRES_IN") {
		t.Fatalf("locks list = %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = tl.Run(t, nil, "locks", "show", "reports/nightly", "--store", url, "--json")
	var shown struct {
		Locks []lockJSON `json:"locks"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &shown) != nil || len(shown.Locks) != 1 {
		t.Fatalf("locks show --json = %d\n%s%s", code, out, errOut)
	}
	if got := shown.Locks[0]; got.Owner != "holder-1" || got.Fence != l.Fence() || got.ExpiresInMS <= 0 {
		t.Fatalf("locks show: %+v, want owner holder-1, fence %d, time left", got, l.Fence())
	}
	if code, _, errOut = tl.Run(t, nil, "locks", "show", "reports", "--store", url); code != exitMissing || !strings.Contains(errOut, "not held") {
		t.Fatalf("locks show of a key nobody holds = %d, %q; want 1", code, errOut)
	}
	if code, _, errOut = tl.Run(t, nil, "locks", "release", "reports/nightly", "--store", url); code != exitUsage || !strings.Contains(errOut, "--force") {
		t.Fatalf("locks release without --force = %d, %q; want 64 naming --force", code, errOut)
	}
	assertHeld(t, l)
	if code, out, errOut = tl.Run(t, nil, "locks", "release", "--force", "reports/nightly", "--store", url); code != exitOK {
		t.Fatalf("locks release --force = %d\n%s%s", code, out, errOut)
	}
	select { // the holder learns at its next renewal
	case <-l.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the holder was not told its lock was released by force")
	}
	if code, _, _ = tl.Run(t, nil, "locks", "release", "--force", "reports/nightly", "--store", url); code != exitMissing {
		t.Fatalf("second release --force = %d, want 1", code)
	}
	if code, out, _ = tl.Run(t, nil, "locks", "list", "--store", url); code != exitOK || !strings.Contains(out, "no locks held") {
		t.Fatalf("locks list after the release = %d\n%s", code, out)
	}
}

func assertHeld(t *testing.T, l *tasklock.Lock) {
	t.Helper()
	select {
	case <-l.Done():
		t.Fatalf("lock lost: %v", l.Err())
	default:
	}
}

// TestJobsCommands writes run records through the ledger API and reads and
// changes the job state through the CLI.
func TestJobsCommands(t *testing.T) {
	url, c := redisFor(t)
	store, err := redisstore.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, ok := any(store).(ledger.Ledger)
	if !ok {
		t.Fatal("redisstore keeps no ledger")
	}
	ctx := context.Background()
	tick := time.Date(2030, 1, 1, 2, 30, 0, 0, time.UTC)
	start := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	// A skip's reason names the holder, at its end: history shows it whole.
	const skipReason = `schedule: the previous run is still in progress: tasklock: not obtained: "tasklock/sync/shard/2" is held by web-1:4242 for another 9.5s`
	err = l.RecordRuns(ctx, []ledger.RunRecord{
		{Job: "report", Tick: tick, Attempt: 1, Node: "web-1", Fence: 7, Start: start, End: start.Add(1500 * time.Millisecond), Status: ledger.RunOK},
		{Job: "report", Tick: tick.Add(24 * time.Hour), Attempt: 1, Node: "web-2", Fence: 8, Start: start, End: start.Add(time.Second), Status: ledger.RunFailed, Error: "exit status 3"},
		{Job: "cleanup", Tick: tick, Attempt: 1, Node: "web-1", Fence: 3, Start: start, End: start.Add(time.Second), Status: ledger.RunOK},
		// A sharded tick whose shard 2 was skipped: the tick is skipped,
		// whichever shard's record is the newest.
		{Job: "sync", Tick: tick, Shard: 2, Shards: 3, Attempt: 1, Node: "web-2", Start: start, End: start, Status: ledger.RunSkipped, Error: skipReason},
		{Job: "sync", Tick: tick, Shard: 1, Shards: 3, Attempt: 1, Node: "web-2", Fence: 5, Start: start, End: start.Add(time.Second), Status: ledger.RunOK},
		{Job: "sync", Tick: tick, Shard: 0, Shards: 3, Attempt: 1, Node: "web-1", Fence: 6, Start: start.Add(time.Second), End: start.Add(2 * time.Second), Status: ledger.RunOK},
	})
	if err != nil {
		t.Fatal(err)
	}

	for _, job := range []string{"report", "cleanup", "sync"} { // as serve does
		if _, err := l.SetJobState(ctx, ledger.JobStateParams{Job: job, Op: ledger.JobRegister, Spec: "@daily", Since: start}); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := tl.Run(t, nil, "jobs", "pause", "report", "--store", url)
	if code != exitOK || !strings.Contains(out, `paused "report"`) {
		t.Fatalf("jobs pause = %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut = tl.Run(t, nil, "jobs", "trigger", "cleanup", "--store", url); code != exitOK || !strings.Contains(out, "trigger") {
		t.Fatalf("jobs trigger = %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = tl.Run(t, nil, "jobs", "list", "--json", "--store", url)
	var list struct {
		Jobs []jobJSON `json:"jobs"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &list) != nil || len(list.Jobs) != 3 {
		t.Fatalf("jobs list --json = %d\n%s%s", code, out, errOut)
	}
	cleanup, report, sync := list.Jobs[0], list.Jobs[1], list.Jobs[2]
	if sync.Job != "sync" || sync.LastRun == nil || sync.LastRun.TickStatus != "skipped" {
		t.Fatalf("sync in jobs list: %+v (last run %+v), want the last tick's status skipped", sync, sync.LastRun)
	}
	if report.Job != "report" || !report.Paused || report.LastRun == nil || report.LastRun.Fence != 8 || report.LastRun.Status != "failed" {
		t.Fatalf("report in jobs list: %+v (last run %+v), want paused, last run fence 8 failed", report, report.LastRun)
	}
	if cleanup.Job != "cleanup" || cleanup.Paused || len(cleanup.Triggers) != 1 {
		t.Fatalf("cleanup in jobs list: %+v, want active with one pending trigger", cleanup)
	}
	if code, out, _ = tl.Run(t, nil, "jobs", "list", "--store", url); code != exitOK || !strings.Contains(out, "paused") || !strings.Contains(out, "web-2") {
		t.Fatalf("jobs list = %d\n%s", code, out)
	}
	if row := strings.Fields(lineWith(out, "sync ")); len(row) != 7 || row[4] != "skipped" || row[5] != "-" || row[6] != "-" {
		t.Fatalf("jobs list: sync's row %q, want LAST_STATUS skipped (its tick's status), no one shard's NODE and FENCE\n%s", row, out)
	}

	code, out, errOut = tl.Run(t, nil, "jobs", "history", "--job", "report", "--store", url)
	// JOB, as trigger and pause take it, is --job.
	if c2, out2, _ := tl.Run(t, nil, "jobs", "history", "report", "--store", url); c2 != code || out2 != out {
		t.Errorf("jobs history report = %d\n%s\nwant what --job report gives (%d)\n%s", c2, out2, code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 3 || !strings.Contains(lines[1], "failed") || !strings.Contains(lines[1], "exit status 3") || !strings.Contains(lines[2], "1.5s") {
		t.Fatalf("jobs history --job report = %d (want a header and 2 rows, newest first)\n%s%s", code, out, errOut)
	}
	// A skipped run took no lock: no fence, not "0".
	code, out, _ = tl.Run(t, nil, "jobs", "history", "--job", "sync", "--status", "skipped", "--store", url)
	if row := strings.Fields(lineWith(out, "2030-01-01T02:30:00Z  sync ")); code != exitOK || len(row) < 7 || row[5] != "-" || row[6] != "skipped" {
		t.Fatalf("jobs history: sync's skipped shard %q, want FENCE -\n%s", row, out)
	}
	if !strings.HasSuffix(lineWith(out, "2030-01-01T02:30:00Z  sync "), skipReason) {
		t.Errorf("jobs history: sync's skipped shard, want its whole reason %q\n%s", skipReason, out)
	}
	code, out, _ = tl.Run(t, nil, "jobs", "history", "--status", "ok", "--json", "--store", url)
	var hist struct {
		Runs []runRecordJSON `json:"runs"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &hist) != nil || len(hist.Runs) != 4 { // report, cleanup, sync's shards 0 and 1
		t.Fatalf("jobs history --status ok --json = %d\n%s", code, out)
	}

	if code, out, _ = tl.Run(t, nil, "jobs", "resume", "report", "--store", url); code != exitOK || !strings.Contains(out, "resumed") {
		t.Fatalf("jobs resume = %d\n%s", code, out)
	}
	// --json answers with the job as jobs list shows it, last run included
	// (a sharded job's with its tick's status).
	for job, want := range map[string]string{"cleanup": "ok", "sync": "skipped"} {
		var j jobJSON
		code, out, _ = tl.Run(t, nil, "jobs", "resume", job, "--json", "--store", url)
		if code != exitOK || json.Unmarshal([]byte(out), &j) != nil || j.LastRun == nil || cmp.Or(j.LastRun.TickStatus, j.LastRun.Status) != want {
			t.Fatalf("jobs resume %s --json = %d, want its last run with status %s\n%s", job, code, want, out)
		}
	}
	states, err := l.JobStates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range states {
		if st.Job == "report" && st.Paused {
			t.Fatal("report still paused after jobs resume")
		}
	}

	for _, bad := range [][]string{
		{"jobs", "history", "--status", "great", "--store", url},
		{"jobs", "history", "--limit", "0", "--store", url},
		{"jobs", "pause", "--store", url},
		{"jobs", "pause", "a", "b", "--store", url},
		{"jobs", "create", "a", "b", "--store", url}, // panicked: index out of range [-1]
		{"jobs", "history", "a", "b", "--store", url},
		{"jobs", "history", "report", "--job", "other", "--store", url},
		{"jobs", "frobnicate", "--store", url},
		{"jobs", "list"},
		{"locks", "list", "--store", "redis://:secret@[bad"},
	} {
		code, out, errOut := tl.Run(t, nil, bad...)
		if code != exitUsage || out != "" || errOut == "" || strings.Contains(errOut, "secret") {
			t.Errorf("%v = %d, stdout %q, stderr %q; want 64 with a message and no password", bad, code, out, errOut)
		}
	}
}

// lineWith returns the first line of out that starts with prefix, or "".
func lineWith(out, prefix string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}

// TestAdminUsageBeforeStore: the jobs and locks commands find a usage
// error before they open the store, so that it is 64 naming the flag or
// argument whether the store answers or not, and jobs create makes no
// SQLite file for a job it refuses.
func TestAdminUsageBeforeStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "new.db")
	for _, store := range []string{"redis://:s3cret@" + testserver.ClosedAddr(t), "sqlite://" + db} {
		for _, tt := range []struct {
			args []string
			want string
		}{
			{[]string{"jobs", "history", "--limit", "0"}, "--limit"},
			{[]string{"jobs", "history", "--since", "-1s"}, "--since"},
			{[]string{"jobs", "history", "--status", "great"}, "--status"},
			{[]string{"jobs", "audit", "--limit", "-1"}, "--limit"},
			{[]string{"jobs", "notifications", "--limit", "0"}, "--limit"},
			{[]string{"jobs", "trigger", "j", "--note", strings.Repeat("n", 1001)}, "--note"},
			{[]string{"jobs", "cancel", "j", "yesterday"}, "TICK"},
			{[]string{"jobs", "cancel", "j", "2026-11-27T02:00:00Z", "--shard", "-1"}, "--shard"},
			{[]string{"jobs", "backfill", "j", "--to", "2026-11-27"}, "--from"},
			{[]string{"jobs", "backfill", "j", "--from", "2026-11-28", "--to", "2026-11-27"}, "--to"},
			{[]string{"jobs", "backfill", "j", "--from", "2026-11-27", "--to", "2026-11-28", "--max", "0"}, "--max"},
			{[]string{"jobs", "rerun", "j", "2026-11-27", "--overlap", "never"}, "--overlap"},
			{[]string{"jobs", "create", "j"}, "-f FILE"},
			{[]string{"jobs", "create", "--schedule", "@daily", "--command", "true"}, "the job's name"},
			{[]string{"jobs", "create", "j", "--schedule", "bogus", "--command", "true"}, "--schedule"},
			{[]string{"jobs", "create", "j", "--schedule", "@daily", "--command", "true", "--retries", "x"}, "--retries"},
			{[]string{"jobs", "create", "j", "--schedule", "@daily", "--command", "true", "--cancel"}, "--cancel"},
			{[]string{"jobs", "update", "j", "-f", filepath.Join(dir, "missing.yaml")}, "-f"},
			// Read to the end, as -f - is not: gigabytes a second, then a hang.
			{[]string{"jobs", "create", "j", "-f", "/dev/zero"}, "larger than"},
			{[]string{"jobs", "create", "j", "--schedule", "@daily", "--command", "true", "--config", filepath.Join(dir, "missing.yaml")}, "--config"},
			{[]string{"jobs", "delete", "j", "--schedule", "@daily"}, "delete takes no -f"},
			{[]string{"locks", "release", "k"}, "--force"},
			// No lock has an empty key: it was "not held", exit 1.
			{[]string{"locks", "show", ""}, "KEY is empty"},
			{[]string{"locks", "release", "--force", ""}, "KEY is empty"},
		} {
			args := append(tt.args, "--store", store)
			code, out, errOut := tl.Run(t, nil, args...)
			if code != exitUsage || out != "" || !strings.Contains(errOut, tt.want) || strings.Contains(errOut, "s3cret") {
				t.Errorf("%q = %d, stdout %q, stderr %q; want 64 naming %s", args, code, out, errOut, tt.want)
			}
			if fileExists(db) {
				t.Fatalf("%q created %s", args, db)
			}
		}
	}
}

// TestAdminTimeoutNamed: a store that does not answer within --timeout
// is exit 69 with a message naming --timeout, not a bare "context
// deadline exceeded".
func TestAdminTimeoutNamed(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "t.db")
	if code, _, errOut := tl.Run(t, nil, "migrate", "up", "--store", "sqlite://"+db); code != exitOK {
		t.Fatalf("migrate up: %d %s", code, errOut)
	}
	for _, args := range [][]string{{"locks", "list", "--store", "mem://"}, {"jobs", "list", "--store", "mem://"}, {"migrate", "status", "--store", "sqlite://" + db}} {
		args = append(args, "--timeout", "1ns")
		code, out, errOut := tl.Run(t, nil, args...)
		if code != exitUnavailable || out != "" || !strings.Contains(errOut, "no answer within --timeout 1ns") {
			t.Errorf("%q = %d, stdout %q, stderr %q; want 69 naming --timeout", args, code, out, errOut)
		}
	}
}

// TestAdminRefusesChangesToMem: mem:// is the command's own memory, which
// no serve shares. jobs create, trigger, pause ... and locks release on it
// said they were done ("every serve node applies it within a second") and
// the change was gone when the command ended. They are refused (64); the
// read-only subcommands still answer (empty).
func TestAdminRefusesChangesToMem(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"jobs", "create", "j", "--schedule", "@daily", "--command", "true"},
		{"jobs", "trigger", "j", "--force"},
		{"jobs", "pause", "j", "--force"},
		{"jobs", "resume", "j", "--force"},
		{"jobs", "forget", "j", "--force"},
		{"jobs", "delete", "j"},
		{"jobs", "backfill", "j", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-01T01:00:00Z"},
		{"locks", "release", "--force", "k"},
	} {
		args = append(args, "--store", "mem://")
		code, out, errOut := tl.Run(t, nil, args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, "mem:// is this command's own memory") {
			t.Errorf("%q = %d, stdout %q, stderr %q; want 64 saying mem:// is this command's own memory", args, code, out, errOut)
		}
	}
	for _, args := range [][]string{{"jobs", "list"}, {"jobs", "history"}, {"jobs", "audit"}, {"jobs", "notifications"}, {"locks", "list"}} {
		args = append(args, "--store", "mem://")
		if code, out, errOut := tl.Run(t, nil, args...); code != exitOK {
			t.Errorf("%q = %d, stdout %q, stderr %q; want 0", args, code, out, errOut)
		}
	}
}

// TestAdminStoreFromEnvNamed: a store URL taken from $TASKLOCK_STORE that
// is bad or unreachable is named as $TASKLOCK_STORE's, as serve does: the
// user gave no --store and may have forgotten the variable. One given
// with --store is not.
func TestAdminStoreFromEnvNamed(t *testing.T) {
	t.Parallel()
	addr := testserver.ClosedAddr(t)
	for _, tt := range []struct {
		args        []string
		code        int
		unreachable string
	}{
		{[]string{"jobs", "list"}, exitUsage, "redis://:s3cret@" + addr},
		{[]string{"locks", "list"}, exitUsage, "redis://:s3cret@" + addr},
		{[]string{"migrate", "status"}, exitUsage, "postgres://u:s3cret@" + addr + "/db"},
	} {
		code, _, errOut := tl.Run(t, []string{"TASKLOCK_STORE=foo://x"}, tt.args...)
		if code != tt.code || !strings.Contains(errOut, `unknown scheme "foo"`) || !strings.Contains(errOut, "(the store of $TASKLOCK_STORE)") {
			t.Errorf("%q with a bad $TASKLOCK_STORE = %d, %q; want %d naming $TASKLOCK_STORE", tt.args, code, errOut, tt.code)
		}
		code, _, errOut = tl.Run(t, []string{"TASKLOCK_STORE=" + tt.unreachable}, tt.args...)
		if code != exitUnavailable || !strings.Contains(errOut, "(the store of $TASKLOCK_STORE)") || strings.Contains(errOut, "s3cret") {
			t.Errorf("%q with an unreachable $TASKLOCK_STORE = %d, %q; want 69 naming $TASKLOCK_STORE, no password", tt.args, code, errOut)
		}
		code, _, errOut = tl.Run(t, nil, append(tt.args, "--store", "foo://x")...)
		if code != tt.code || strings.Contains(errOut, "TASKLOCK_STORE") {
			t.Errorf("%q --store foo://x = %d, %q; want %d, not naming $TASKLOCK_STORE", tt.args, code, errOut, tt.code)
		}
	}
}
