package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/ledgertest"
)

func TestLedgerConformance(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			pool := newPool(t, newDB(t), nil)
			ledgertest.Run(t, func(t *testing.T) ledger.Ledger {
				return newStore(t, pool, &Options{Mode: mode})
			})
		})
	}
}

// argTracer records each statement a pool runs, with its arguments.
type argTracer struct {
	mu    sync.Mutex
	stmts []tracedStmt
}

type tracedStmt struct {
	sql  string
	args []any
}

func (a *argTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	a.mu.Lock()
	a.stmts = append(a.stmts, tracedStmt{d.SQL, d.Args})
	a.mu.Unlock()
	return ctx
}

func (a *argTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// take returns the statements run since the last take.
func (a *argTracer) take() []tracedStmt {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stmts
	a.stmts = nil
	return s
}

func argTracedPool(t *testing.T) (*pgxpool.Pool, *argTracer) {
	tr := &argTracer{}
	return newPool(t, newDB(t), func(c *pgxpool.Config) { c.ConnConfig.Tracer = tr }), tr
}

var tick0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// TestLedgerRoundTrips: every ledger call is one statement, however large
// the batch and whoever holds the claims.
func TestLedgerRoundTrips(t *testing.T) {
	t.Parallel()
	pool, tr := argTracedPool(t)
	s := newStore(t, pool, nil)
	ctx := ctxT(t)
	one := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if st := tr.take(); len(st) != 1 {
			t.Fatalf("%s ran %d statements, want 1", what, len(st))
		}
	}
	tr.take() // the migration
	const n = 500
	ps := make([]ledger.ClaimParams, n)
	for i := range ps {
		ps[i] = ledger.ClaimParams{Job: fmt.Sprintf("job-%d", i%50), Tick: tick0.Add(time.Duration(i/50) * time.Second), Node: "a", Token: "ta", Retain: time.Hour}
	}
	res, err := s.Claim(ctx, ps[:n/2])
	one("Claim", err)
	for _, e := range res {
		if e != nil {
			t.Fatal(e)
		}
	}
	for i := range ps {
		ps[i].Node, ps[i].Token = "b", "tb"
	}
	res, err = s.Claim(ctx, ps)
	one("Claim", err)
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
	one("RecordRuns", s.RecordRuns(ctx, rs))
	got, err := s.Runs(ctx, ledger.RunQuery{Job: "job-7", Limit: 3, Before: &ledger.RunKey{Job: "job-7", Tick: tick0.Add(5 * time.Second), Attempt: 1}})
	one("Runs", err)
	if len(got) != 3 || !got[0].Tick.Equal(tick0.Add(4*time.Second)) {
		t.Fatalf("Runs page: %+v", got)
	}
	_, err = s.SetJobState(ctx, ledger.JobStateParams{Job: "job-1", Op: ledger.JobTrigger, Trigger: "x"})
	one("SetJobState", err)
	_, err = s.JobStates(ctx)
	one("JobStates", err)
	_, err = s.SetJobState(ctx, ledger.JobStateParams{Job: "job-1", Op: ledger.JobRegister, Spec: "@hourly", Since: tick0})
	one("SetJobState register", err)
	_, err = s.Jobs(ctx)
	one("Jobs", err)
	_, err = s.SetJobState(ctx, ledger.JobStateParams{Job: "job-1", Op: ledger.JobForget})
	one("SetJobState forget", err)
	_, err = s.Prune(ctx, ledger.PruneParams{RunsOlderThan: time.Hour, KeepPerJob: 5, TriggersOlderThan: time.Hour})
	one("Prune", err)
	for _, p := range []ledger.JobDefParams{
		{Job: "d", Def: "{}", IfVersion: -1}, {Job: "d", Def: "{}", IfVersion: 1}, {Job: "d", Def: "{}"},
		{Job: "d", Delete: true, IfVersion: 3}, {Job: "d", Delete: true},
	} {
		p.Audit = ledger.AuditEntry{Who: "w", Action: "a"}
		_, err = s.PutJobDef(ctx, p)
		if errors.Is(err, ledger.ErrNoJobDef) {
			err = nil
		}
		one(fmt.Sprintf("PutJobDef %+v", p), err)
	}
	_, err = s.JobDefs(ctx)
	one("JobDefs", err)
	one("AppendAudit", s.AppendAudit(ctx, ledger.AuditEntry{Who: "w", Action: "a"}))
	es, err := s.Audit(ctx, ledger.AuditQuery{Job: "d", Before: 1 << 40, Limit: 10})
	one("Audit", err)
	if len(es) != 4 {
		t.Fatalf("%d audit entries of d, want 4: %+v", len(es), es)
	}
	if got, _ := s.Runs(ctx, ledger.RunQuery{}); len(got) != 50*5 {
		t.Fatalf("%d records after keeping 5 per job, want %d", len(got), 50*5)
	}
}

// TestLedgerRunsPages: a page deep in a long history is read from an index
// range, not by sorting the table.
func TestLedgerRunsPages(t *testing.T) {
	t.Parallel()
	pool, tr := argTracedPool(t)
	s := newStore(t, pool, nil)
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
	if _, err := pool.Exec(ctx, "ANALYZE "+s.ledger().runs); err != nil {
		t.Fatal(err)
	}
	for _, q := range []ledger.RunQuery{
		{Limit: 50, Before: &ledger.RunKey{Job: "job-07", Tick: tick0.Add(400 * time.Second), Attempt: 1}},
		{Job: "job-03", Limit: 50, Before: &ledger.RunKey{Job: "job-03", Tick: tick0.Add(400 * time.Second), Attempt: 1}},
	} {
		tr.take()
		page, err := s.Runs(ctx, q)
		if err != nil || len(page) != 50 {
			t.Fatalf("Runs(%+v): %d records, %v", q, len(page), err)
		}
		st := tr.take()
		if len(st) != 1 {
			t.Fatalf("%d statements", len(st))
		}
		rows, err := pool.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) "+st[0].sql, st[0].args...)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		plan := strings.Join(lines, "\n")
		if strings.Contains(plan, "Seq Scan") {
			t.Errorf("job %q: the page is not read from an index range:\n%s", q.Job, plan)
		}
		t.Logf("plan for a page of job %q:\n%s", q.Job, plan)
	}

	// The sweep's query of running records reads their partial index.
	if err := s.RecordRuns(ctx, []ledger.RunRecord{
		{Job: "job-01", Tick: tick0.Add(2000 * time.Second), Attempt: 1, Status: ledger.RunRunning},
		{Job: "job-02", Tick: tick0.Add(3000 * time.Second), Attempt: 1, Status: ledger.RunRunning},
	}); err != nil {
		t.Fatal(err)
	}
	tr.take()
	running, err := s.Runs(ctx, ledger.RunQuery{Status: ledger.RunRunning, Limit: 1000})
	if err != nil || len(running) != 2 || running[0].Job != "job-02" {
		t.Fatalf("Runs(running) = %v, %v; want job-02's and job-01's", running, err)
	}
	st := tr.take()
	rows, err := pool.Query(ctx, "EXPLAIN (COSTS OFF) "+st[0].sql, st[0].args...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if plan := strings.Join(lines, "\n"); !strings.Contains(plan, "_runs_running") {
		t.Errorf("Runs(running) does not read the running index:\n%s", plan)
	}
}

// TestLedgerNames: names PostgreSQL cannot store are ErrUnsupported; free
// text is made storable.
func TestLedgerNames(t *testing.T) {
	t.Parallel()
	s := newStore(t, newPool(t, newDB(t), nil), nil)
	ctx := ctxT(t)
	for name, p := range map[string]ledger.ClaimParams{
		"NUL in Job":     {Job: "a\x00b", Tick: tick0, Token: "t", Retain: time.Hour},
		"long Trigger":   {Job: "j", Trigger: strings.Repeat("x", maxLedgerName+1), Tick: tick0, Token: "t", Retain: time.Hour},
		"non-UTF-8 Node": {Job: "j", Node: "\xff", Tick: tick0, Token: "t", Retain: time.Hour},
	} {
		if _, err := s.Claim(ctx, []ledger.ClaimParams{p}); !errors.Is(err, ledger.ErrUnsupported) {
			t.Errorf("%s: %v, want ErrUnsupported", name, err)
		}
	}
	if _, err := s.Claim(ctx, []ledger.ClaimParams{{Job: "j", Tick: tick0, Token: "t"}}); err == nil || errors.Is(err, ledger.ErrUnsupported) {
		t.Errorf("zero Retain: %v, want a plain error", err)
	}
	long := strings.Repeat("é", maxLedgerName/2)
	r := ledger.RunRecord{Job: long, Tick: tick0, Attempt: 1, Status: ledger.RunFailed, Error: "bad\x00byte", Output: "tail \xff\xfe end", Fence: 1<<64 - 1}
	if err := s.RecordRuns(ctx, []ledger.RunRecord{r}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Runs(ctx, ledger.RunQuery{Job: long})
	if err != nil || len(got) != 1 {
		t.Fatalf("Runs: %+v, %v", got, err)
	}
	if got[0].Error != "bad\uFFFDbyte" || got[0].Output != "tail \uFFFD end" || got[0].Fence != r.Fence || !got[0].Start.IsZero() {
		t.Errorf("stored %+v", got[0])
	}
	if _, err := s.SetJobState(ctx, ledger.JobStateParams{Job: "j", Op: ledger.JobTrigger, Trigger: "a\x00"}); !errors.Is(err, ledger.ErrUnsupported) {
		t.Errorf("NUL in Trigger: %v, want ErrUnsupported", err)
	}
}

// TestLedgerTables: the ledger tables are named after the lease table, in
// its schema; without them every call says to migrate.
func TestLedgerTables(t *testing.T) {
	t.Parallel()
	pool := newPool(t, newDB(t), nil)
	ctx := ctxT(t)
	s := newStore(t, pool, &Options{Schema: "sched", Table: "my_locks"})
	for _, name := range []string{"my_locks_claims", "my_locks_runs", "my_locks_jobs", "my_locks_triggers", "my_locks_defs", "my_locks_audit"} {
		var ok bool
		if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", "sched."+name).Scan(&ok); err != nil || !ok {
			t.Errorf("table sched.%s: %v, %v", name, ok, err)
		}
	}
	if _, err := s.SetJobState(ctx, ledger.JobStateParams{Job: "j", Op: ledger.JobPause}); err != nil {
		t.Fatal(err)
	}
	// Another table's ledger is its own.
	other := newStore(t, pool, &Options{Schema: "sched", Table: "other_locks"})
	if sts, err := other.JobStates(ctx); err != nil || len(sts) != 0 {
		t.Fatalf("JobStates of another table: %+v, %v", sts, err)
	}

	bare, err := New(pool, &Options{Table: "never_migrated"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bare.JobStates(ctx)
	if err == nil || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("JobStates without the tables: %v, want a hint to migrate", err)
	}
}

// TestLedgerMigrateJobSpecs: migration 0004 keeps the pauses and trigger
// requests of a ledger made by 0003, and the migrated ledger registers.
func TestLedgerMigrateJobSpecs(t *testing.T) {
	t.Parallel()
	pool := newPool(t, newDB(t), nil)
	ctx := ctxT(t)
	migrateTo(t, pool, "old_locks", 3)
	if _, err := pool.Exec(ctx, `INSERT INTO old_locks_jobs (job, paused, updated_at) VALUES ('p', true, now()), ('resumed', false, now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO old_locks_triggers (job, trigger_id, requested_at) VALUES ('q', 'r1', now())`); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, pool, &Options{Table: "old_locks"}) // migrates 0004
	sts, err := s.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byJob := map[string]ledger.JobState{}
	for _, st := range sts {
		byJob[st.Job] = st
	}
	if len(sts) != 2 || !byJob["p"].Paused || byJob["p"].Spec != "" || len(byJob["q"].Triggers) != 1 || byJob["q"].Triggers[0].ID != "r1" {
		t.Fatalf("Jobs after migrating = %+v, want p paused and q's trigger", sts)
	}
	since := tick0.Add(1500 * time.Microsecond)
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

// TestLedgerRegisterRace: nodes registering a new job at once all read
// back the one registration that won, even when it committed after their
// statement began.
func TestLedgerRegisterRace(t *testing.T) {
	t.Parallel()
	s := newStore(t, newPool(t, newDB(t), func(c *pgxpool.Config) { c.MaxConns = 16 }), nil)
	ctx := ctxT(t)
	for round := range 20 {
		job := fmt.Sprintf("job-%d", round)
		const n = 8
		got := make([]ledger.JobState, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				got[i], errs[i] = s.SetJobState(ctx, ledger.JobStateParams{Job: job, Op: ledger.JobRegister,
					Spec: "* * * * *", Since: tick0.Add(time.Duration(i) * time.Millisecond)})
			}()
		}
		close(start)
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if got[i].Spec != "* * * * *" || !got[i].Since.Equal(got[0].Since) {
				t.Fatalf("round %d: node %d read %+v, node 0 %+v", round, i, got[i], got[0])
			}
		}
	}
}

// TestLedgerMigrateShards: migration 0007 turns the claims, run records and
// trigger requests of a ledger made by 0006 into shard 0's and trigger-now
// requests, keeps every claim held, and the migrated ledger keeps other
// shards of the same ticks apart and lists them in order.
func TestLedgerMigrateShards(t *testing.T) {
	t.Parallel()
	pool := newPool(t, newDB(t), nil)
	ctx := ctxT(t)
	migrateTo(t, pool, "old_locks", 6)
	for _, sql := range []string{
		`INSERT INTO old_locks_claims (job, tick, trigger_id, token, node, claimed_at, expires_at)
			VALUES ('j', '2030-01-01T00:00:00Z', '', 'old-token', 'old-node', now(), now() + interval '1 hour')`,
		`INSERT INTO old_locks_runs (job, tick, trigger_id, attempt, node, fence, started_at, ended_at, status, error, output, recorded_at) VALUES
			('j', '2030-01-01T00:00:00Z', '', 1, 'old-node', 7, '2030-01-01T00:00:01Z', NULL, 'running', '', '', now()),
			('j', '2029-12-31T23:59:00Z', '', 1, 'old-node', 6, '2029-12-31T23:59:01Z', '2029-12-31T23:59:02Z', 'ok', '', 'out', now()),
			('j', '2029-12-31T23:59:00Z', '', 2, 'old-node', 6, NULL, NULL, 'failed', 'e', '', now())`,
		`INSERT INTO old_locks_triggers (job, trigger_id, requested_at) VALUES ('j', 'r1', now())`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	s := newStore(t, pool, &Options{Table: "old_locks"}) // migrates 0007
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

// TestLedgerMigrateCancel: migration 0009 keeps the trigger requests of a
// ledger made by 0008 as requests to run, and the table then keeps cancel
// requests beside them.
func TestLedgerMigrateCancel(t *testing.T) {
	t.Parallel()
	pool := newPool(t, newDB(t), nil)
	ctx := ctxT(t)
	migrateTo(t, pool, "old_locks", 8)
	if _, err := pool.Exec(ctx, `INSERT INTO old_locks_triggers (job, trigger_id, requested_at, tick, rerun)
		VALUES ('j', 'now', now() - interval '1 second', NULL, false), ('j', 'past', now(), '2030-01-01T00:00:00Z', true)`); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, pool, &Options{Table: "old_locks"}) // migrates 0009
	ledgertest.CheckMigratedCancels(t, s, tick0)
}
