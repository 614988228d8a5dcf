package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/ledgertest"
)

// TestLedgerConformance runs the ledger suite, a fresh database file per
// test, on pools that fail it when a statement could be interrupted
// (openWatched).
func TestLedgerConformance(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) ledger.Ledger {
		return newStoreT(t, openWatched(t))
	})
}

var ledgerTick = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// TestLedgerTables: the ledger's tables take their names from the lock
// table, so two lock tables in one file have two ledgers.
func TestLedgerTables(t *testing.T) {
	db := openT(t, dbPath(t), nil)
	ctx := ctxT(t)
	a, err := New(db, &Options{Table: "alpha", Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(db, &Options{Table: "beta", Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type IN ('table', 'index') AND name NOT LIKE 'sqlite_%' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	rows.Close()
	for _, want := range []string{"alpha_claims", "alpha_runs", "alpha_jobs", "alpha_triggers", "alpha_runs_job_idx", "beta_claims", "beta_runs_tick_idx"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Fatalf("no %s among %v", want, names)
		}
	}
	p := ledger.ClaimParams{Job: "j", Tick: ledgerTick, Node: "a", Token: "ta", Retain: time.Hour}
	if res, err := a.Claim(ctx, []ledger.ClaimParams{p}); err != nil || res[0] != nil {
		t.Fatal(res, err)
	}
	p.Token = "tb"
	if res, err := b.Claim(ctx, []ledger.ClaimParams{p}); err != nil || res[0] != nil {
		t.Fatalf("a claim in alpha's ledger held in beta's: %v, %v", res, err)
	}
}

// TestLedgerQueryPlans: Runs reads the runs table through an index in the
// listing order, without sorting, with and without a job.
func TestLedgerQueryPlans(t *testing.T) {
	db := openT(t, dbPath(t), nil)
	s := newStoreT(t, db)
	ctx := ctxT(t)
	for _, q := range []struct {
		where, index string
	}{
		{`job = 'j' AND tick >= 1 AND tick < 2`, "tasklock_locks_runs_job_idx"},
		{`tick < 2`, "tasklock_locks_runs_tick_idx"},
	} {
		var plan []string
		rows, err := db.QueryContext(ctx, `EXPLAIN QUERY PLAN `+s.ledger.runsHead+` WHERE `+q.where+
			` ORDER BY tick DESC, job, "trigger", shard, attempt DESC LIMIT 10`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		p := strings.Join(plan, "; ")
		if !strings.Contains(p, q.index) || strings.Contains(p, "TEMP B-TREE") {
			t.Errorf("plan for %s: %s; want %s without a sort", q.where, p, q.index)
		}
	}
}

// TestLedgerNames: names the claim statement's JSON cannot carry are
// refused as unsupported; run records keep any bytes.
func TestLedgerNames(t *testing.T) {
	s := newStoreT(t, openT(t, dbPath(t), nil))
	ctx := ctxT(t)
	for _, bad := range []string{"\xff", "a\x00b"} {
		_, err := s.Claim(ctx, []ledger.ClaimParams{{Job: bad, Tick: ledgerTick, Token: "t", Retain: time.Hour}})
		if !errors.Is(err, ledger.ErrUnsupported) {
			t.Errorf("claim of job %q: %v, want ErrUnsupported", bad, err)
		}
	}
	odd := "é:}{\n\"'\\"
	res, err := s.Claim(ctx, []ledger.ClaimParams{{Job: odd, Tick: ledgerTick, Trigger: odd, Node: odd, Token: odd, Retain: time.Hour}})
	if err != nil || res[0] != nil {
		t.Fatalf("claim of %q: %v, %v", odd, res, err)
	}
	res, err = s.Claim(ctx, []ledger.ClaimParams{{Job: odd, Tick: ledgerTick, Trigger: odd, Token: "other", Retain: time.Hour}})
	var ce *ledger.ClaimedError
	if err != nil || !errors.As(res[0], &ce) || ce.Node != odd {
		t.Fatalf("second claim of %q: %v, %v", odd, res, err)
	}
	r := ledger.RunRecord{Job: odd, Tick: ledgerTick, Trigger: odd, Attempt: 1, Node: odd, Fence: 1<<64 - 1,
		End: ledgerTick.Add(time.Millisecond), Status: ledger.RunFailed, Error: "\xff\x00", Output: "tail \xe2\x82"}
	if err := s.RecordRuns(ctx, []ledger.RunRecord{r}); err != nil {
		t.Fatal(err)
	}
	rs, err := s.Runs(ctx, ledger.RunQuery{Job: odd})
	if err != nil || len(rs) != 1 {
		t.Fatalf("Runs = %+v, %v", rs, err)
	}
	g := rs[0]
	if g.Trigger != r.Trigger || g.Node != r.Node || g.Fence != r.Fence || !g.Start.IsZero() || !g.End.Equal(r.End) ||
		g.Error != r.Error || g.Output != r.Output {
		t.Fatalf("record:\n got  %+v\n want %+v", g, r)
	}
}

// TestLedgerRecordChunks: a batch larger than one INSERT carries is
// stored whole.
func TestLedgerRecordChunks(t *testing.T) {
	s := newStoreT(t, openT(t, dbPath(t), nil))
	ctx := ctxT(t)
	rs := make([]ledger.RunRecord, recordChunk+7)
	for i := range rs {
		rs[i] = ledger.RunRecord{Job: fmt.Sprintf("j%d", i%3), Tick: ledgerTick.Add(time.Duration(i) * time.Second), Attempt: 1, Status: ledger.RunOK}
	}
	if err := s.RecordRuns(ctx, rs); err != nil {
		t.Fatal(err)
	}
	got, err := s.Runs(ctx, ledger.RunQuery{})
	if err != nil || len(got) != len(rs) {
		t.Fatalf("Runs = %d records, %v; want %d", len(got), err, len(rs))
	}
}

// migrateTo applies the first n migrations to db, as a build that had
// only those did.
func migrateTo(t *testing.T, ctx context.Context, db *sql.DB, n int) {
	t.Helper()
	c, err := resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	all := migrations
	migrations = all[:n]
	err = migrate(ctx, db, c)
	migrations = all
	if err != nil {
		t.Fatal(err)
	}
}

// TestLedgerMigrateJobSpecs: migration 0003 keeps the pauses and trigger
// requests of a ledger made by 0002, and the migrated ledger registers.
func TestLedgerMigrateJobSpecs(t *testing.T) {
	db := openT(t, dbPath(t), nil)
	ctx := ctxT(t)
	// Apply 0001 and 0002 only, as an older build did.
	migrateTo(t, ctx, db, 2)
	if _, err := db.ExecContext(ctx, `INSERT INTO tasklock_locks_jobs (job, paused, changed_at) VALUES ('p', 1, 1), ('resumed', 0, 1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO tasklock_locks_triggers (job, id, requested_at) VALUES ('q', 'r1', 1000)`); err != nil {
		t.Fatal(err)
	}
	s := newStoreT(t, db) // migrates 0003
	sts, err := s.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 2 || sts[0].Job != "p" || !sts[0].Paused || sts[0].Spec != "" ||
		sts[1].Job != "q" || len(sts[1].Triggers) != 1 || sts[1].Triggers[0].ID != "r1" {
		t.Fatalf("Jobs after migrating = %+v, want p paused and q's trigger", sts)
	}
	since := ledgerTick.Add(1500 * time.Microsecond)
	st, err := s.SetJobState(ctx, ledger.JobStateParams{Job: "p", Op: ledger.JobRegister, Spec: "@hourly", Since: since})
	if err != nil || !st.Paused || st.Spec != "@hourly" || !st.Since.Equal(since) {
		t.Fatalf("register p = %+v, %v", st, err)
	}
	st, err = s.SetJobState(ctx, ledger.JobStateParams{Job: "resumed", Op: ledger.JobRegister, Spec: "@daily", Since: since})
	if err != nil || st.Paused || st.Spec != "@daily" {
		t.Fatalf("register resumed = %+v, %v", st, err)
	}
	if sts, err := s.JobStates(ctx); err != nil || len(sts) != 2 {
		t.Fatalf("JobStates = %+v, %v; want p and q only", sts, err)
	}
}

// TestLedgerStatesPlan: JobStates reads the paused jobs through the
// partial index, not every registered job.
func TestLedgerStatesPlan(t *testing.T) {
	db := openT(t, dbPath(t), nil)
	s := newStoreT(t, db)
	if p := queryPlan(t, db, s.ledger.states); !strings.Contains(p, "tasklock_locks_jobs_paused_idx") {
		t.Fatalf("plan of JobStates: %s; want the paused index", p)
	}
}

// TestLedgerRunningPlan: the sweep's query of running records reads the
// partial index of them, not the whole history.
func TestLedgerRunningPlan(t *testing.T) {
	db := openT(t, dbPath(t), nil)
	s := newStoreT(t, db)
	stmt, args := s.runsSQL(ledger.RunQuery{Status: ledger.RunRunning, Limit: 1000})
	if p := queryPlan(t, db, stmt, args...); !strings.Contains(p, "tasklock_locks_runs_running_idx") {
		t.Fatalf("plan of Runs(running): %s; want the running index", p)
	}
}

// queryPlan returns SQLite's plan for stmt, its steps joined by "; ".
func queryPlan(t *testing.T, db *sql.DB, stmt string, args ...any) string {
	t.Helper()
	rows, err := db.QueryContext(ctxT(t), `EXPLAIN QUERY PLAN `+stmt, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "; ")
}

// TestLedgerMigrateShards: migration 0006 keeps the claims, run records
// and trigger requests of a ledger made by 0005, as shard 0 and requests
// without a tick, and the migrated tables take the new keys.
func TestLedgerMigrateShards(t *testing.T) {
	db := openT(t, dbPath(t), nil)
	ctx := ctxT(t)
	// Apply 0001 to 0005 only, as the previous build did.
	migrateTo(t, ctx, db, 5)
	tick := usec(ledgerTick)
	for _, q := range []string{
		// A live claim and an expired one.
		fmt.Sprintf(`INSERT INTO tasklock_locks_claims (job, tick, "trigger", token, node, claimed_at, expires_at)
VALUES ('j', %d, '', 'old-token', 'old-node', 1, %d), ('j', %d, '', 'gone', 'gone-node', 1, 2)`, tick, int64(1)<<62, tick+1e6),
		fmt.Sprintf(`INSERT INTO tasklock_locks_runs (job, tick, "trigger", attempt, node, fence, started_at, ended_at, status, error, output, recorded_at)
VALUES ('j', %d, '', 1, 'old-node', 7, NULL, NULL, 'ok', '', 'out', 5),
       ('j', %d, '', 1, 'old-node', 8, NULL, NULL, 'running', '', '', 5),
       ('j', %d, 'tr', 2, 'old-node', 9, NULL, NULL, 'failed', 'boom', '', 5)`, tick, tick+1e6, tick),
		`INSERT INTO tasklock_locks_triggers (job, id, requested_at) VALUES ('j', 'r1', 1000)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	s := newStoreT(t, db) // migrates 0006

	keys := func(rs []ledger.RunRecord) string {
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = fmt.Sprintf("%d/%s/s%d/%d/%d:%s", r.Tick.Sub(ledgerTick)/time.Second, r.Trigger, r.Shard, r.Shards, r.Attempt, r.Status)
		}
		return strings.Join(out, " ")
	}
	rs, err := s.Runs(ctx, ledger.RunQuery{Job: "j"})
	if want := "1//s0/0/1:running 0//s0/0/1:ok 0/tr/s0/0/2:failed"; err != nil || keys(rs) != want {
		t.Fatalf("Runs after migrating = %s, %v; want %s", keys(rs), err, want)
	}
	if rs[1].Fence != 7 || rs[1].Output != "out" || rs[2].Error != "boom" {
		t.Fatalf("migrated records lost data: %+v", rs)
	}
	if rs, err := s.Runs(ctx, ledger.RunQuery{Status: ledger.RunRunning}); err != nil || keys(rs) != "1//s0/0/1:running" {
		t.Fatalf("running records after migrating = %s, %v", keys(rs), err)
	}
	// The old record's key is shard 0's: recording it again replaces it;
	// shard 1 of the same tick is a record of its own.
	again := ledger.RunRecord{Job: "j", Tick: ledgerTick, Attempt: 1, Shards: 2, Status: ledger.RunLost}
	other := again
	other.Shard = 1
	if err := s.RecordRuns(ctx, []ledger.RunRecord{again, other}); err != nil {
		t.Fatal(err)
	}
	rs, err = s.Runs(ctx, ledger.RunQuery{Job: "j"})
	if want := "1//s0/0/1:running 0//s0/2/1:lost 0//s1/2/1:lost 0/tr/s0/0/2:failed"; err != nil || keys(rs) != want {
		t.Fatalf("Runs after recording shards 0 and 1 = %s, %v; want %s", keys(rs), err, want)
	}

	// The live claim is shard 0's; shard 1 of that tick is free.
	p := ledger.ClaimParams{Job: "j", Tick: ledgerTick, Node: "new-node", Token: "new-token", Retain: time.Hour}
	p1 := p
	p1.Shard = 1
	res, err := s.Claim(ctx, []ledger.ClaimParams{p, p1})
	var ce *ledger.ClaimedError
	if err != nil || !errors.As(res[0], &ce) || ce.Node != "old-node" || res[1] != nil {
		t.Fatalf("claims of shards 0 and 1 after migrating = %v, %v; want shard 0 held by old-node, shard 1 made", res, err)
	}
	// The expired claim is still found by expiry.
	if pr, err := s.Prune(ctx, ledger.PruneParams{}); err != nil || pr.Claims != 1 {
		t.Fatalf("Prune after migrating = %+v, %v; want the expired claim", pr, err)
	}

	sts, err := s.Jobs(ctx)
	if err != nil || len(sts) != 1 || len(sts[0].Triggers) != 1 {
		t.Fatalf("Jobs after migrating = %+v, %v; want j's trigger", sts, err)
	}
	if tr := sts[0].Triggers[0]; tr.ID != "r1" || !tr.At.Equal(fromUsec(1000)) || !tr.Tick.IsZero() || tr.Rerun {
		t.Fatalf("migrated trigger = %+v, want r1 as a trigger-now", tr)
	}

	// The rebuilt claims table took the old name and left nothing behind.
	var names []string
	err = s.queryText(ctx, `SELECT name FROM sqlite_master WHERE name LIKE 'tasklock_locks_claims%' ORDER BY name`, nil,
		func(rows *sql.Rows) error {
			var n string
			names = append(names, n)
			return rows.Scan(&names[len(names)-1])
		})
	if got := strings.Join(names, " "); err != nil || got != "tasklock_locks_claims tasklock_locks_claims_expires_idx" {
		t.Fatalf("claims objects = %q, %v", got, err)
	}
}

// TestLedgerMigrateCancel: migration 0008 keeps the trigger requests of a
// ledger made by 0007 as requests to run, and the table then keeps cancel
// requests beside them.
func TestLedgerMigrateCancel(t *testing.T) {
	db := openT(t, dbPath(t), nil)
	ctx := ctxT(t)
	migrateTo(t, ctx, db, 7)
	q := fmt.Sprintf(`INSERT INTO tasklock_locks_triggers (job, id, requested_at, tick, rerun) VALUES ('j', 'now', 1000, NULL, 0), ('j', 'past', 2000, %d, 1)`, usec(ledgerTick))
	if _, err := db.ExecContext(ctx, q); err != nil {
		t.Fatal(err)
	}
	s := newStoreT(t, db) // migrates 0008
	ledgertest.CheckMigratedCancels(t, s, ledgerTick)
}
