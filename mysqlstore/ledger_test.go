package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/ledgertest"
)

// TestLedgerConformance runs the ledger suite with the default DSN and with
// DSN settings that must make no difference.
func TestLedgerConformance(t *testing.T) {
	for _, dsnName := range []string{"default", "odd"} {
		t.Run(dsnName+"DSN", func(t *testing.T) {
			dsn := testserver.SharedMariaDB(t).CreateDB(t)
			if dsnName == "odd" {
				dsn = strings.Replace(dsn, "parseTime=true", oddDSN, 1)
			}
			db := openDB(t, dsn)
			var n atomic.Int64 // the cases run in parallel
			ledgertest.Run(t, func(t *testing.T) ledger.Ledger {
				return mustNew(t, db, &Options{Table: fmt.Sprintf("ledger_%d", n.Add(1)), Migrate: true})
			})
		})
	}
}

var tick0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// TestLedgerRoundTrips: a claim batch this node wins whole is one
// statement, one that others hold part of is two; every other call but
// SetJobState (two) is one.
func TestLedgerRoundTrips(t *testing.T) {
	t.Parallel()
	var c counter
	dsn := testserver.SharedMariaDB(t).CreateDB(t)
	mustNew(t, openDB(t, dsn), &Options{Migrate: true})
	s := mustNew(t, openCountingDB(t, dsn, &c), nil)
	ctx := ctxT(t)
	rt := func(what string, want int, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if stmts, pings := c.count(); stmts+pings != want {
			t.Fatalf("%s: %d statements and %d pings, want %d round trips", what, stmts, pings, want)
		}
		c.reset()
	}
	const n = 500
	ps := make([]ledger.ClaimParams, n)
	for i := range ps {
		ps[i] = ledger.ClaimParams{Job: fmt.Sprintf("job-%d", i%50), Tick: tick0.Add(time.Duration(i/50) * time.Second), Node: "a", Token: "ta", Retain: time.Hour}
	}
	c.reset()
	res, err := s.Claim(ctx, ps[:n/2])
	rt("Claim of new ticks", 1, err)
	for _, e := range res {
		if e != nil {
			t.Fatal(e)
		}
	}
	res, err = s.Claim(ctx, ps[:n/2])
	rt("Claim again by the same token", 1, err)
	for _, e := range res {
		if e != nil {
			t.Fatal(e)
		}
	}
	for i := range ps {
		ps[i].Node, ps[i].Token = "b", "tb"
	}
	res, err = s.Claim(ctx, ps)
	rt("Claim of partly held ticks", 2, err)
	var ce *ledger.ClaimedError
	for i, e := range res {
		if won := e == nil; won != (i >= n/2) || (!won && (!errors.As(e, &ce) || ce.Node != "a" || ce.At.IsZero())) {
			t.Fatalf("claim %d: %v", i, e)
		}
	}
	rs := make([]ledger.RunRecord, n)
	for i := range rs {
		rs[i] = ledger.RunRecord{Job: ps[i].Job, Tick: ps[i].Tick, Attempt: 1, Status: ledger.RunOK}
	}
	rt("RecordRuns", 1, s.RecordRuns(ctx, rs))
	got, err := s.Runs(ctx, ledger.RunQuery{Job: "job-7", Limit: 3, Before: &ledger.RunKey{Job: "job-7", Tick: tick0.Add(5 * time.Second), Attempt: 1}})
	rt("Runs", 1, err)
	if len(got) != 3 || !got[0].Tick.Equal(tick0.Add(4*time.Second)) {
		t.Fatalf("Runs page: %+v", got)
	}
	_, err = s.SetJobState(ctx, ledger.JobStateParams{Job: "job-1", Op: ledger.JobTrigger, Trigger: "x"})
	rt("SetJobState", 2, err)
	_, err = s.JobStates(ctx)
	rt("JobStates", 1, err)
	_, err = s.SetJobState(ctx, ledger.JobStateParams{Job: "job-1", Op: ledger.JobRegister, Spec: "@hourly", Since: tick0})
	rt("SetJobState register", 2, err)
	_, err = s.Jobs(ctx)
	rt("Jobs", 1, err)
	_, err = s.JobDefs(ctx)
	rt("JobDefs", 1, err)
	rt("AppendAudit", 1, s.AppendAudit(ctx, ledger.AuditEntry{Who: "w", Job: "d", Action: "pause"}))
	_, err = s.PutJobDef(ctx, ledger.JobDefParams{Job: "d", Def: "{}", IfVersion: -1, Audit: ledger.AuditEntry{Who: "w", Action: "create"}})
	rt("PutJobDef", 6, err) // begin, lock the row, read it, update, audit, commit
	_, err = s.PutJobDef(ctx, ledger.JobDefParams{Job: "d", Def: "{}", IfVersion: 9, Audit: ledger.AuditEntry{Who: "w", Action: "update"}})
	if !errors.Is(err, ledger.ErrVersion) {
		t.Fatalf("PutJobDef at a wrong version: %v", err)
	}
	rt("PutJobDef refused", 4, nil) // begin, lock the row, read it, roll back
	es, err := s.Audit(ctx, ledger.AuditQuery{Job: "d", Before: 1 << 40, Limit: 10})
	rt("Audit", 1, err)
	if len(es) != 2 || es[0].Action != "create" || es[1].Action != "pause" {
		t.Fatalf("audit entries of d: %+v", es)
	}
	if _, err := s.Prune(ctx, ledger.PruneParams{KeepPerJob: 5}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Runs(ctx, ledger.RunQuery{}); len(got) != 50*5 {
		t.Fatalf("%d records after keeping 5 per job, want %d", len(got), 50*5)
	}
}

// TestLedgerRunsPages: a page deep in a long history is read from an index
// range, not by sorting the table.
func TestLedgerRunsPages(t *testing.T) {
	t.Parallel()
	s, db, _ := newStore(t, ModeLease)
	ctx := ctxT(t)
	const jobs, ticks = 20, 1000
	rs := make([]ledger.RunRecord, 0, jobs*ticks)
	for i := range ticks {
		for j := range jobs {
			rs = append(rs, ledger.RunRecord{Job: fmt.Sprintf("job-%02d", j), Tick: tick0.Add(time.Duration(i) * time.Second), Attempt: 1, Status: ledger.RunOK})
		}
	}
	if err := s.RecordRuns(ctx, rs); err != nil {
		t.Fatal(err)
	}
	running := make([]ledger.RunRecord, 60)
	for i := range running {
		running[i] = ledger.RunRecord{Job: fmt.Sprintf("job-%02d", i), Tick: tick0.Add(time.Duration(2000+i) * time.Second), Attempt: 1, Status: ledger.RunRunning}
	}
	if err := s.RecordRuns(ctx, running); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "ANALYZE TABLE "+s.ledgerTable("_runs")); err != nil {
		t.Fatal(err)
	}
	for _, q := range []ledger.RunQuery{
		{Limit: 50, Status: ledger.RunRunning}, // the sweep's query: by its key, not the whole history
		{Limit: 50, Before: &ledger.RunKey{Job: "job-07", Tick: tick0.Add(400 * time.Second), Attempt: 1}},
		{Job: "job-03", Limit: 50, Before: &ledger.RunKey{Job: "job-03", Tick: tick0.Add(400 * time.Second), Attempt: 1}},
		{Job: "job-03", Limit: 50},
		{Limit: 50, Status: ledger.RunOK},
	} {
		page, err := s.Runs(ctx, q)
		if err != nil || len(page) != 50 {
			t.Fatalf("Runs(%+v): %d records, %v", q, len(page), err)
		}
		rows, err := db.QueryContext(ctx, "EXPLAIN "+s.runsSQL(q))
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		var plan []string
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			var line []string
			for i, v := range vals {
				if b, ok := v.([]byte); ok {
					v = string(b)
				}
				line = append(line, fmt.Sprintf("%s=%v", cols[i], v))
			}
			plan = append(plan, strings.Join(line, " "))
		}
		rows.Close()
		text := strings.Join(plan, "\n")
		t.Logf("plan for %+v:\n%s", q, text)
		if q.Status == ledger.RunRunning && !strings.Contains(text, "key=by_status") {
			t.Errorf("Runs(running) does not read by_status:\n%s", text)
		}
		for _, line := range plan {
			if strings.Contains(line, "table=`") || strings.Contains(line, "<union") {
				continue
			}
			if strings.Contains(line, "type=ALL") || (strings.Contains(line, "Using filesort") && !strings.Contains(line, "table=<union")) {
				t.Errorf("the page is not read from an index range:\n%s", text)
				break
			}
		}
	}
}

// TestLedgerNames: names the tables cannot hold are ErrUnsupported; free
// text is made storable.
func TestLedgerNames(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, ModeLease)
	ctx := ctxT(t)
	for name, p := range map[string]ledger.ClaimParams{
		"long Job":       {Job: strings.Repeat("x", maxJob+1), Tick: tick0, Token: "t", Retain: time.Hour},
		"long Trigger":   {Job: "j", Trigger: strings.Repeat("x", maxTrigger+1), Tick: tick0, Token: "t", Retain: time.Hour},
		"non-UTF-8 Node": {Job: "j", Node: "\xff", Tick: tick0, Token: "t", Retain: time.Hour},
		"year 10000":     {Job: "j", Tick: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), Token: "t", Retain: time.Hour},
	} {
		if _, err := s.Claim(ctx, []ledger.ClaimParams{p}); !errors.Is(err, ledger.ErrUnsupported) {
			t.Errorf("%s: %v, want ErrUnsupported", name, err)
		}
	}
	if _, err := s.Claim(ctx, []ledger.ClaimParams{{Job: "j", Tick: tick0, Token: "t"}}); err == nil || errors.Is(err, ledger.ErrUnsupported) {
		t.Errorf("zero Retain: %v, want a plain error", err)
	}
	// Any bytes in names; NUL and invalid UTF-8 in free text.
	job := "a\x00b\xff"
	r := ledger.RunRecord{Job: job, Tick: tick0, Attempt: 1, Status: ledger.RunFailed, Error: "bad\x00byte", Output: "tail \xff\xfe end", Fence: 1<<64 - 1}
	if err := s.RecordRuns(ctx, []ledger.RunRecord{r}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Runs(ctx, ledger.RunQuery{Job: job})
	if err != nil || len(got) != 1 {
		t.Fatalf("Runs: %+v, %v", got, err)
	}
	if got[0].Job != job || got[0].Error != "bad\x00byte" || got[0].Output != "tail \uFFFD end" || got[0].Fence != r.Fence || !got[0].Start.IsZero() {
		t.Errorf("stored %+v", got[0])
	}
	if res, err := s.Claim(ctx, []ledger.ClaimParams{{Job: job, Tick: tick0, Trigger: "\x00", Token: "t", Retain: time.Hour}}); err != nil || res[0] != nil {
		t.Errorf("claim with binary names: %v, %v", res, err)
	}
}

// TestLedgerTables: the ledger tables are named after the lock table;
// without them every call says to migrate.
func TestLedgerTables(t *testing.T) {
	t.Parallel()
	db := openDB(t, testserver.SharedMariaDB(t).CreateDB(t))
	ctx := ctxT(t)
	s := mustNew(t, db, &Options{Table: "My_Locks", Migrate: true})
	for _, name := range []string{"My_Locks_claims", "My_Locks_runs", "My_Locks_jobs", "My_Locks_triggers", "My_Locks_specs", "My_Locks_defs", "My_Locks_audit"} {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+name+"`").Scan(&n); err != nil {
			t.Errorf("table %s: %v", name, err)
		}
	}
	if _, err := s.SetJobState(ctx, ledger.JobStateParams{Job: "j", Op: ledger.JobPause}); err != nil {
		t.Fatal(err)
	}
	other := mustNew(t, db, &Options{Table: "other_locks", Migrate: true})
	if sts, err := other.JobStates(ctx); err != nil || len(sts) != 0 {
		t.Fatalf("JobStates of another table: %+v, %v", sts, err)
	}
	bare := mustNew(t, db, &Options{Table: "never_migrated"})
	if _, err := bare.JobStates(ctx); err == nil || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("JobStates without the tables: %v, want a hint to migrate", err)
	}
}

// migrateOld applies the first n migrations to db's table "old_locks", as
// a build that had only those did; next, when not "", is the name the
// migration after them must have. It returns every migration.
func migrateOld(t *testing.T, ctx context.Context, db *sql.DB, n int, next string) []migration {
	t.Helper()
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	if next != "" && ms[n].name != next {
		t.Fatalf("migration %d is %q, want %q", n+1, ms[n].name, next)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := migrateLocked(ctx, conn, "old_locks", ms[:n]); err != nil {
		t.Fatal(err)
	}
	return ms
}

// TestLedgerMigrateJobSpecs: migration 003 keeps the pauses and trigger
// requests of a ledger made by 002, can run again, and the migrated ledger
// registers; specs compare byte for byte.
func TestLedgerMigrateJobSpecs(t *testing.T) {
	t.Parallel()
	db := openDB(t, testserver.SharedMariaDB(t).CreateDB(t))
	ctx := ctxT(t)
	ms := migrateOld(t, ctx, db, 2, "")
	if _, err := db.ExecContext(ctx, "INSERT INTO old_locks_jobs (job, paused, updated_at) VALUES ('p', 1, UTC_TIMESTAMP(6)), ('resumed', 0, UTC_TIMESTAMP(6))"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO old_locks_triggers (job, trigger_id, requested_at) VALUES ('q', 'r1', UTC_TIMESTAMP(6))"); err != nil {
		t.Fatal(err)
	}
	s := mustNew(t, db, &Options{Table: "old_locks", Migrate: true}) // migrates 003
	// MySQL cannot roll DDL back: a migration interrupted before it was
	// recorded runs again.
	for _, stmt := range ms[2].stmts {
		if _, err := db.ExecContext(ctx, expandTable(stmt, "old_locks")); err != nil {
			t.Fatalf("003 again: %v", err)
		}
	}
	sts, err := s.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 2 || sts[0].Job != "p" || !sts[0].Paused || sts[0].Spec != "" ||
		sts[1].Job != "q" || len(sts[1].Triggers) != 1 || sts[1].Triggers[0].ID != "r1" {
		t.Fatalf("Jobs after migrating = %+v, want p paused and q's trigger", sts)
	}
	since := tick0.Add(1500 * time.Microsecond)
	st, err := s.SetJobState(ctx, ledger.JobStateParams{Job: "p", Op: ledger.JobRegister, Spec: "@hourly", Since: since})
	if err != nil || !st.Paused || st.Spec != "@hourly" || !st.Since.Equal(since) {
		t.Fatalf("register p = %+v, %v", st, err)
	}
	// Another case is another spec.
	st, err = s.SetJobState(ctx, ledger.JobStateParams{Job: "p", Op: ledger.JobRegister, Spec: "@HOURLY", Since: since.Add(time.Hour)})
	if err != nil || st.Spec != "@HOURLY" || !st.Since.Equal(since.Add(time.Hour)) {
		t.Fatalf("register p in capitals = %+v, %v", st, err)
	}
	st, err = s.SetJobState(ctx, ledger.JobStateParams{Job: "resumed", Op: ledger.JobRegister, Spec: "@daily", Since: since})
	if err != nil || st.Paused || st.Spec != "@daily" {
		t.Fatalf("register resumed = %+v, %v", st, err)
	}
	if sts, err := s.JobStates(ctx); err != nil || len(sts) != 2 {
		t.Fatalf("JobStates = %+v, %v; want p and q only", sts, err)
	}
	_, err = s.SetJobState(ctx, ledger.JobStateParams{Job: "x", Op: ledger.JobRegister, Spec: "@daily", Since: time.Date(999, 1, 1, 0, 0, 0, 0, time.UTC)})
	if !errors.Is(err, ledger.ErrUnsupported) {
		t.Fatalf("register with Since in the year 999: %v, want ErrUnsupported", err)
	}
}

// TestLedgerMigrateShards: migration 006 turns the claims, run records and
// trigger requests of a ledger made by 005 into shard 0's and trigger-now
// requests, keeps every claim held, can run again, and the migrated ledger
// keeps other shards of the same ticks apart and lists them in order.
func TestLedgerMigrateShards(t *testing.T) {
	t.Parallel()
	db := openDB(t, testserver.SharedMariaDB(t).CreateDB(t))
	ctx := ctxT(t)
	ms := migrateOld(t, ctx, db, 5, "shards_catalog")
	us := func(t time.Time) string { return strconv.FormatInt(-t.UnixMicro(), 10) }
	t1, t2 := tick0, tick0.Add(-time.Minute)
	for _, q := range []string{
		"INSERT INTO old_locks_claims (job, tick, trigger_id, token, node, claimed_at, expires_at) VALUES" +
			" ('j', '2030-01-01 00:00:00', '', 'old-token', 'old-node', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)",
		"INSERT INTO old_locks_runs (job, rev_tick, trigger_id, rev_attempt, tick, attempt, node, fence, started_at, ended_at, status, error, output, recorded_at) VALUES" +
			" ('j', " + us(t1) + ", '', -1, '2030-01-01 00:00:00', 1, 'old-node', 7, '2030-01-01 00:00:01', NULL, 'running', '', '', UTC_TIMESTAMP(6))," +
			" ('j', " + us(t2) + ", '', -1, '2029-12-31 23:59:00', 1, 'old-node', 6, '2029-12-31 23:59:01', '2029-12-31 23:59:02', 'ok', '', 'out', UTC_TIMESTAMP(6))," +
			" ('j', " + us(t2) + ", '', -2, '2029-12-31 23:59:00', 2, 'old-node', 6, NULL, NULL, 'failed', 'e', '', UTC_TIMESTAMP(6))",
		"INSERT INTO old_locks_triggers (job, trigger_id, requested_at) VALUES ('j', 'r1', UTC_TIMESTAMP(6))",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	s := mustNew(t, db, &Options{Table: "old_locks", Migrate: true}) // migrates 006
	// MySQL cannot roll DDL back: a migration interrupted before it was
	// recorded runs again, and Migrate takes what it made already as made.
	for _, stmt := range ms[5].stmts {
		if _, err := db.ExecContext(ctx, expandTable(stmt, "old_locks")); err != nil && !duplicateKey(err) {
			t.Fatalf("006 again: %v", err)
		}
	}
	keys := func(rs []ledger.RunRecord) string {
		var b strings.Builder
		for _, r := range rs {
			fmt.Fprintf(&b, "%s/%s/s%d/%d/%s/n%d ", r.Job, r.Tick.Format("15:04"), r.Shard, r.Attempt, r.Status, r.Shards)
		}
		return b.String()
	}
	got, err := s.Runs(ctx, ledger.RunQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if k := keys(got); k != "j/00:00/s0/1/running/n0 j/23:59/s0/2/failed/n0 j/23:59/s0/1/ok/n0 " {
		t.Fatalf("migrated records: %s", k)
	}
	if got[2].Fence != 6 || got[2].Output != "out" || !got[2].End.Equal(time.Date(2029, 12, 31, 23, 59, 2, 0, time.UTC)) {
		t.Fatalf("migrated record %+v", got[2])
	}
	// The old claim is shard 0's, still held; shard 1 of the tick is free.
	res, err := s.Claim(ctx, []ledger.ClaimParams{
		{Job: "j", Tick: tick0, Node: "new", Token: "new-token", Retain: time.Hour},
		{Job: "j", Tick: tick0, Shard: 1, Node: "new", Token: "new-token", Retain: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	var ce *ledger.ClaimedError
	if !errors.As(res[0], &ce) || ce.Node != "old-node" || res[1] != nil {
		t.Fatalf("claims after migrating: %v, %v; want shard 0 held by old-node and shard 1 won", res[0], res[1])
	}
	// The old running record is shard 0's: a record of shard 1 is another.
	if err := s.RecordRuns(ctx, []ledger.RunRecord{
		{Job: "j", Tick: tick0, Shard: 1, Shards: 2, Attempt: 1, Status: ledger.RunRunning},
		{Job: "j", Tick: tick0, Shard: 0, Shards: 2, Attempt: 1, Status: ledger.RunOK},
	}); err != nil {
		t.Fatal(err)
	}
	running, err := s.Runs(ctx, ledger.RunQuery{Status: ledger.RunRunning})
	if err != nil {
		t.Fatal(err)
	}
	if k := keys(running); k != "j/00:00/s1/1/running/n2 " {
		t.Fatalf("running records: %s", k)
	}
	all, err := s.Runs(ctx, ledger.RunQuery{Job: "j", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if k := keys(all); k != "j/00:00/s0/1/ok/n2 j/00:00/s1/1/running/n2 " {
		t.Fatalf("records after recording shards: %s", k)
	}
	st, err := s.Jobs(ctx)
	if err != nil || len(st) != 1 || len(st[0].Triggers) != 1 {
		t.Fatalf("Jobs = %+v, %v", st, err)
	}
	if tr := st[0].Triggers[0]; tr.ID != "r1" || !tr.Tick.IsZero() || tr.Rerun {
		t.Fatalf("migrated trigger %+v, want a trigger-now", tr)
	}
	d, err := s.PutJobDef(ctx, ledger.JobDefParams{Job: "j", Def: "{}", Audit: ledger.AuditEntry{Who: "w", Action: "create"}})
	if err != nil || d.Version != 1 {
		t.Fatalf("PutJobDef after migrating: %+v, %v", d, err)
	}
}

// TestLedgerMigrateCancel: migration 008 keeps the trigger requests of a
// ledger made by 007 as requests to run, and the table then keeps cancel
// requests beside them.
func TestLedgerMigrateCancel(t *testing.T) {
	t.Parallel()
	db := openDB(t, testserver.SharedMariaDB(t).CreateDB(t))
	ctx := ctxT(t)
	migrateOld(t, ctx, db, 7, "cancel_requests")
	if _, err := db.ExecContext(ctx, "INSERT INTO old_locks_triggers (job, trigger_id, requested_at, tick, rerun) VALUES"+
		" ('j', 'now', UTC_TIMESTAMP(6) - INTERVAL 1 SECOND, NULL, 0), ('j', 'past', UTC_TIMESTAMP(6), '2030-01-01 00:00:00', 1)"); err != nil {
		t.Fatal(err)
	}
	s := mustNew(t, db, &Options{Table: "old_locks", Migrate: true}) // migrates 008
	ledgertest.CheckMigratedCancels(t, s, tick0)
}
