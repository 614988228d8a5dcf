package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tasklock/tasklock/ledger"
)

var _ ledger.Ledger = (*Store)(nil)

// Limits of the names the ledger stores, in bytes: they keep every index
// entry well within what a B-tree page holds.
const (
	maxLedgerName  = 1024 // Job, Trigger
	maxLedgerToken = 1024 // Token, Node
)

// ledgerSQL are the ledger's fixed statements for one lease table, built
// once (see ledgerFor). Durations are passed as microseconds and every time
// the ledger records of its own is the database's now().
type ledgerSQL struct {
	claims, runs, jobs, triggers string // quoted, schema-qualified tables
	defs, audit                  string // the catalog's (see catalog.go)

	claim      string // $1 jobs[], $2 ticks[], $3 triggers[], $4 shards[], $5 nodes[], $6 tokens[], $7 retains[] µs
	record     string // $1..$13 one array per column
	setPaused  string // $1 job, $2 paused
	trigger    string // $1 job, $2 trigger id, $3 tick (NULL for none), $4 rerun, $5 cancel target ('' for none)
	done       string // $1 job, $2 trigger id
	register   string // $1 job, $2 spec, $3 since
	forget     string // $1 job
	jobStates  string
	allJobs    string
	runColumns string

	// The catalog's statements (catalog.go).
	putDef, updateDef, deleteDef, appendAudit, jobDefs string
}

// ledgerCache holds a *ledgerSQL per lease table (its quoted name).
var ledgerCache sync.Map

// ledger returns the Store's ledger statements.
func (s *Store) ledger() *ledgerSQL {
	if l, ok := ledgerCache.Load(s.o.table); ok {
		return l.(*ledgerSQL)
	}
	l, _ := ledgerCache.LoadOrStore(s.o.table, buildLedgerSQL(s.o.schema, s.o.tableName))
	return l.(*ledgerSQL)
}

func buildLedgerSQL(schema, table string) *ledgerSQL {
	name := func(suffix string) string { return pgx.Identifier{schema, table + suffix}.Sanitize() }
	l := &ledgerSQL{claims: name("_claims"), runs: name("_runs"), jobs: name("_jobs"), triggers: name("_triggers"),
		defs: name("_defs"), audit: name("_audit")}
	buildCatalogSQL(l)

	// The batch is sorted by key, and each key taken once, so that
	// concurrent batches lock rows in one order and never deadlock. The
	// upsert returns the rows this batch now holds: new ones, expired ones
	// it took over, and those its own token held already. The WHERE is
	// evaluated on the newest row version, after waiting for a concurrent
	// claimer to commit, so a key it does not return is held by another
	// token. Who that is comes from the statement's snapshot, when the
	// snapshot has that claim (a claim committed meanwhile is not in it).
	l.claim = fmt.Sprintf(`WITH i AS (
	SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::integer[], $5::text[], $6::text[], $7::bigint[])
		WITH ORDINALITY AS i(job, tick, trigger_id, shard, node, token, retain, n)
), up AS (
	INSERT INTO %[1]s AS c (job, tick, trigger_id, shard, token, node, claimed_at, expires_at)
	SELECT DISTINCT ON (job, tick, trigger_id, shard)
		job, tick, trigger_id, shard, token, node, now(), now() + retain * interval '1 microsecond'
	FROM i ORDER BY job, tick, trigger_id, shard, n
	ON CONFLICT (job, tick, trigger_id, shard) DO UPDATE SET
		token = CASE WHEN c.expires_at <= now() THEN EXCLUDED.token ELSE c.token END,
		node = CASE WHEN c.expires_at <= now() THEN EXCLUDED.node ELSE c.node END,
		claimed_at = CASE WHEN c.expires_at <= now() THEN EXCLUDED.claimed_at ELSE c.claimed_at END,
		expires_at = CASE WHEN c.expires_at <= now() THEN EXCLUDED.expires_at ELSE c.expires_at END
	WHERE c.expires_at <= now() OR c.token = EXCLUDED.token
	RETURNING c.job, c.tick, c.trigger_id, c.shard, c.token, c.node, c.claimed_at
)
SELECT i.n, u.token, u.node, u.claimed_at, s.node, s.claimed_at
FROM i
LEFT JOIN up u ON u.job = i.job AND u.tick = i.tick AND u.trigger_id = i.trigger_id AND u.shard = i.shard
LEFT JOIN %[1]s s ON u.job IS NULL
	AND s.job = i.job AND s.tick = i.tick AND s.trigger_id = i.trigger_id AND s.shard = i.shard
	AND s.expires_at > now() AND s.token <> i.token`, l.claims)

	// The last record of a key in the batch wins, as if each were written
	// in turn; rows are written in key order (see claim).
	l.record = fmt.Sprintf(`INSERT INTO %[1]s AS r
	(job, tick, trigger_id, shard, attempt, shards, node, fence, started_at, ended_at, status, error, output, recorded_at)
SELECT DISTINCT ON (job, tick, trigger_id, shard, attempt)
	job, tick, trigger_id, shard, attempt, shards, node, fence, started_at, ended_at, status, error, output, now()
FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::integer[], $5::integer[], $6::integer[], $7::text[], $8::bigint[],
	$9::timestamptz[], $10::timestamptz[], $11::text[], $12::text[], $13::text[])
	WITH ORDINALITY AS i(job, tick, trigger_id, shard, attempt, shards, node, fence, started_at, ended_at, status, error, output, n)
ORDER BY job, tick, trigger_id, shard, attempt, n DESC
ON CONFLICT (job, tick, trigger_id, shard, attempt) DO UPDATE SET
	shards = EXCLUDED.shards, node = EXCLUDED.node, fence = EXCLUDED.fence,
	started_at = EXCLUDED.started_at, ended_at = EXCLUDED.ended_at,
	status = EXCLUDED.status, error = EXCLUDED.error, output = EXCLUDED.output,
	recorded_at = EXCLUDED.recorded_at`, l.runs)

	// SetJobState: each returns paused, spec, since, and the pending
	// triggers' ids, times, ticks and rerun flags. A data
	// modifying WITH is not visible to the rest of its statement, so the
	// state after the change is computed from the snapshot and the change.
	pending := func(from, extra string) string {
		return fmt.Sprintf(`array(SELECT trigger_id FROM %[1]s WHERE job = $1%[2]s ORDER BY requested_at, seq),
	array(SELECT requested_at FROM %[1]s WHERE job = $1%[2]s ORDER BY requested_at, seq),
	array(SELECT tick FROM %[1]s WHERE job = $1%[2]s ORDER BY requested_at, seq),
	array(SELECT rerun FROM %[1]s WHERE job = $1%[2]s ORDER BY requested_at, seq),
	array(SELECT cancel FROM %[1]s WHERE job = $1%[2]s ORDER BY requested_at, seq)`, from, extra)
	}
	isPaused := fmt.Sprintf(`coalesce((SELECT paused FROM %s WHERE job = $1), false)`, l.jobs)
	spec := fmt.Sprintf(`(SELECT spec FROM %[1]s WHERE job = $1), (SELECT since FROM %[1]s WHERE job = $1)`, l.jobs)
	l.setPaused = fmt.Sprintf(`WITH j AS (
	INSERT INTO %[1]s AS j (job, paused, updated_at) VALUES ($1, $2, now())
	ON CONFLICT (job) DO UPDATE SET paused = EXCLUDED.paused, updated_at = EXCLUDED.updated_at
	WHERE j.paused <> EXCLUDED.paused
)
SELECT $2::boolean, %[3]s, %[2]s`, l.jobs, pending(l.triggers, ""), spec)
	l.trigger = fmt.Sprintf(`WITH ins AS (
	INSERT INTO %[1]s (job, trigger_id, requested_at, tick, rerun, cancel) VALUES ($1, $2, now(), $3, $4, $5)
	ON CONFLICT (job, trigger_id) DO NOTHING
	RETURNING job, trigger_id, requested_at, seq, tick, rerun, cancel
), t AS (
	SELECT job, trigger_id, requested_at, seq, tick, rerun, cancel FROM %[1]s WHERE job = $1
	UNION ALL
	SELECT job, trigger_id, requested_at, seq, tick, rerun, cancel FROM ins
)
SELECT %[2]s, %[4]s, %[3]s`, l.triggers, isPaused, pending("t", ""), spec)
	l.done = fmt.Sprintf(`WITH d AS (
	DELETE FROM %[1]s WHERE job = $1 AND trigger_id = $2
)
SELECT %[2]s, %[4]s, %[3]s`, l.triggers, isPaused, pending(l.triggers, " AND trigger_id <> $2"), spec)
	// The upsert always returns the row, also when it changes nothing: a
	// registration committed by another node after this statement's
	// snapshot is read back from the newest row version.
	l.register = fmt.Sprintf(`WITH j AS (
	INSERT INTO %[1]s AS j (job, paused, updated_at, spec, since) VALUES ($1, false, now(), $2, $3)
	ON CONFLICT (job) DO UPDATE SET
		spec = EXCLUDED.spec,
		since = CASE WHEN j.spec IS DISTINCT FROM EXCLUDED.spec THEN EXCLUDED.since ELSE j.since END,
		updated_at = CASE WHEN j.spec IS DISTINCT FROM EXCLUDED.spec THEN EXCLUDED.updated_at ELSE j.updated_at END
	RETURNING j.paused, j.spec, j.since
)
SELECT paused, spec, since, %[2]s FROM j`, l.jobs, pending(l.triggers, ""))
	l.forget = fmt.Sprintf(`WITH j AS (
	DELETE FROM %[1]s WHERE job = $1
), t AS (
	DELETE FROM %[2]s WHERE job = $1
)
SELECT false, NULL::text, NULL::timestamptz, NULL::text[], NULL::timestamptz[], NULL::timestamptz[], NULL::boolean[], NULL::text[]`, l.jobs, l.triggers)

	// JobStates reads the paused rows through the partial index of
	// migration 0004; Jobs reads the registered ones too.
	states := func(jobsWhere string) string {
		return fmt.Sprintf(`SELECT job, bool_or(paused), max(spec), max(since),
	array_agg(trigger_id ORDER BY requested_at, seq) FILTER (WHERE trigger_id IS NOT NULL),
	array_agg(requested_at ORDER BY requested_at, seq) FILTER (WHERE trigger_id IS NOT NULL),
	array_agg(tick ORDER BY requested_at, seq) FILTER (WHERE trigger_id IS NOT NULL),
	array_agg(rerun ORDER BY requested_at, seq) FILTER (WHERE trigger_id IS NOT NULL),
	array_agg(cancel ORDER BY requested_at, seq) FILTER (WHERE trigger_id IS NOT NULL)
FROM (
	SELECT job, paused, spec, since, NULL::text AS trigger_id, NULL::timestamptz AS requested_at, NULL::bigint AS seq,
		NULL::timestamptz AS tick, NULL::boolean AS rerun, NULL::text AS cancel
	FROM %[1]s WHERE %[3]s
	UNION ALL
	SELECT job, false, NULL, NULL, trigger_id, requested_at, seq, tick, rerun, cancel FROM %[2]s
) s
GROUP BY job`, l.jobs, l.triggers, jobsWhere)
	}
	l.jobStates = states("paused")
	l.allJobs = states("paused OR spec IS NOT NULL")

	l.runColumns = "job, tick, trigger_id, shard, attempt, shards, node, fence, started_at, ended_at, status, error, output, recorded_at"
	return l
}

// wrapLedger adds the operation to err and, when a ledger table is
// missing, what to do.
func (s *Store) wrapLedger(op string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table
		return fmt.Errorf("pgstore: %s: the ledger tables of %s do not exist: run pgstore.Migrate (tasklock migrate up) or set Options.Migrate: %w", op, s.o.table, err)
	}
	return fmt.Errorf("pgstore: %s: %w", op, err)
}

// checkName says whether a name can be stored: PostgreSQL text holds valid
// UTF-8 without NUL, and index entries have a size limit.
func checkName(op, field, s string, max int) error {
	switch {
	case len(s) > max:
		return fmt.Errorf("pgstore: %s: %s is %d bytes long, the maximum is %d: %w", op, field, len(s), max, ledger.ErrUnsupported)
	case !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("pgstore: %s: %s %q is not UTF-8 text without NUL: %w", op, field, s, ledger.ErrUnsupported)
	}
	return nil
}

// cleanText makes free text (a run's error and output) storable: invalid
// UTF-8 and NUL become U+FFFD.
func cleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}

// checkClaim validates one claim.
func checkClaim(p *ledger.ClaimParams) error {
	if err := p.Check(); err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	for _, f := range []struct {
		name, s string
		max     int
	}{{"Job", p.Job, maxLedgerName}, {"Trigger", p.Trigger, maxLedgerName}, {"Node", p.Node, maxLedgerToken}, {"Token", p.Token, maxLedgerToken}} {
		if err := checkName("claim", f.name, f.s, f.max); err != nil {
			return err
		}
	}
	return nil
}

// Claim implements ledger.Ledger in one statement per batch: an INSERT ...
// ON CONFLICT DO UPDATE over unnest()ed arrays that takes each key when it
// is new, its claim has expired by the database's clock, or the same token
// holds it, and that returns one row per claim with who holds the others.
func (s *Store) Claim(ctx context.Context, ps []ledger.ClaimParams) ([]error, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(ps) == 0 {
		return nil, nil
	}
	n := len(ps)
	jobs, ticks, triggers, shards := make([]string, n), make([]time.Time, n), make([]string, n), make([]int32, n)
	nodes, tokens, retains := make([]string, n), make([]string, n), make([]int64, n)
	for i := range ps {
		p := &ps[i]
		if err := checkClaim(p); err != nil {
			return nil, err
		}
		jobs[i], ticks[i], triggers[i], shards[i] = p.Job, p.Tick, p.Trigger, int32(p.Shard)
		nodes[i], tokens[i], retains[i] = p.Node, p.Token, micros(p.Retain)
	}
	rows, err := s.pool.Query(ctx, s.ledger().claim, jobs, ticks, triggers, shards, nodes, tokens, retains)
	if err != nil {
		return nil, s.wrapLedger("claim", err)
	}
	res := make([]error, n)
	seen := make([]bool, n)
	var (
		idx               int64
		winToken, winNode *string
		winAt             *time.Time
		otherNode         *string
		otherAt           *time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&idx, &winToken, &winNode, &winAt, &otherNode, &otherAt}, func() error {
		i := int(idx) - 1
		if i < 0 || i >= n || seen[i] {
			return fmt.Errorf("unexpected row %d", idx)
		}
		seen[i] = true
		switch {
		case winToken != nil && *winToken == tokens[i]:
		case winToken != nil: // the same key twice in the batch, another token first
			res[i] = &ledger.ClaimedError{Node: *winNode, At: winAt.UTC()}
		case otherNode != nil:
			res[i] = &ledger.ClaimedError{Node: *otherNode, At: otherAt.UTC()}
		default:
			res[i] = &ledger.ClaimedError{}
		}
		return nil
	})
	if err != nil {
		return nil, s.wrapLedger("claim", err)
	}
	for i, ok := range seen {
		if !ok {
			return nil, fmt.Errorf("pgstore: claim: no result for claim %d of %d", i+1, n)
		}
	}
	return res, nil
}

// timestamptz is t as a nullable timestamptz: NULL when zero.
func timestamptz(t time.Time) pgtype.Timestamptz {
	return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()}
}

// checkRun validates one run record.
func checkRun(r *ledger.RunRecord) error {
	switch {
	case r.Job == "" || r.Tick.IsZero():
		return errors.New("pgstore: record runs: empty Job or zero Tick")
	case r.Attempt < 0 || int64(r.Attempt) > 1<<31-1:
		return fmt.Errorf("pgstore: record runs %q: Attempt %d out of range: %w", r.Job, r.Attempt, ledger.ErrUnsupported)
	case r.Shard < 0 || r.Shard >= ledger.MaxShards:
		return fmt.Errorf("pgstore: record runs %q: Shard %d is not in [0, %d)", r.Job, r.Shard, ledger.MaxShards)
	case r.Shards < 0 || r.Shards > ledger.MaxShards:
		return fmt.Errorf("pgstore: record runs %q: Shards %d is not in [0, %d]", r.Job, r.Shards, ledger.MaxShards)
	}
	for _, f := range []struct {
		name, s string
		max     int
	}{{"Job", r.Job, maxLedgerName}, {"Trigger", r.Trigger, maxLedgerName}, {"Node", r.Node, maxLedgerToken}, {"Status", string(r.Status), maxLedgerToken}} {
		if err := checkName("record runs", f.name, f.s, f.max); err != nil {
			return err
		}
	}
	return nil
}

// RecordRuns implements ledger.Ledger in one INSERT ... ON CONFLICT DO
// UPDATE over unnest()ed arrays. Error and Output are stored as text:
// invalid UTF-8 and NUL bytes in them become U+FFFD.
func (s *Store) RecordRuns(ctx context.Context, rs []ledger.RunRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(rs) == 0 {
		return nil
	}
	n := len(rs)
	jobs, ticks, triggers, attempts := make([]string, n), make([]time.Time, n), make([]string, n), make([]int32, n)
	shards, counts := make([]int32, n), make([]int32, n)
	nodes, fences := make([]string, n), make([]int64, n)
	starts, ends := make([]pgtype.Timestamptz, n), make([]pgtype.Timestamptz, n)
	statuses, errs, outputs := make([]string, n), make([]string, n), make([]string, n)
	for i := range rs {
		r := &rs[i]
		if err := checkRun(r); err != nil {
			return err
		}
		jobs[i], ticks[i], triggers[i], attempts[i] = r.Job, r.Tick, r.Trigger, int32(r.Attempt)
		shards[i], counts[i] = int32(r.Shard), int32(r.Shards)
		nodes[i], fences[i] = r.Node, int64(r.Fence) // bit for bit: read back as uint64
		starts[i], ends[i] = timestamptz(r.Start), timestamptz(r.End)
		statuses[i], errs[i], outputs[i] = string(r.Status), cleanText(r.Error), cleanText(r.Output)
	}
	_, err := s.pool.Exec(ctx, s.ledger().record, jobs, ticks, triggers, shards, attempts, counts, nodes, fences, starts, ends, statuses, errs, outputs)
	if err != nil {
		return s.wrapLedger("record runs", err)
	}
	return nil
}

// Runs implements ledger.Ledger in one SELECT. Both indexes of the runs
// table are in the listing order; with q.Before the statement is a UNION
// ALL of five index ranges (the rest of Before's attempts, shards,
// triggers, jobs at its tick, and older ticks), each limited, so that a page deep in a
// million records costs what the first page does.
func (s *Store) Runs(ctx context.Context, q ledger.RunQuery) ([]ledger.RunRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if q.Limit < 0 {
		return nil, fmt.Errorf("pgstore: runs: negative Limit %d", q.Limit)
	}
	l := s.ledger()
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	var where []string
	if q.Job != "" {
		where = append(where, "job = "+arg(q.Job))
	}
	if !q.From.IsZero() {
		where = append(where, "tick >= "+arg(q.From))
	}
	if !q.To.IsZero() {
		where = append(where, "tick < "+arg(q.To))
	}
	switch q.Status {
	case "":
	case ledger.RunRunning:
		// A literal, so that the partial index of running records serves
		// the sweep that every scheduler makes every few seconds.
		where = append(where, "status = 'running'")
	default:
		where = append(where, "status = "+arg(string(q.Status)))
	}
	const order = " ORDER BY tick DESC, job, trigger_id, shard, attempt DESC"
	limit := ""
	if q.Limit > 0 {
		limit = " LIMIT " + arg(q.Limit)
	}
	selectWhere := func(extra ...string) string {
		conds := append(where[:len(where):len(where)], extra...)
		sql := "SELECT " + l.runColumns + " FROM " + l.runs
		if len(conds) > 0 {
			sql += " WHERE " + strings.Join(conds, " AND ")
		}
		return sql
	}
	var sql string
	if b := q.Before; b == nil {
		sql = selectWhere() + order + limit
	} else {
		kt, kj, ktr, ks, ka := arg(b.Tick), arg(b.Job), arg(b.Trigger), arg(int32(b.Shard)), arg(int32(b.Attempt))
		branches := [][]string{
			{"tick = " + kt, "job = " + kj, "trigger_id = " + ktr, "shard = " + ks, "attempt < " + ka},
			{"tick = " + kt, "job = " + kj, "trigger_id = " + ktr, "shard > " + ks},
			{"tick = " + kt, "job = " + kj, "trigger_id > " + ktr},
			{"tick = " + kt, "job > " + kj},
			{"tick < " + kt},
		}
		parts := make([]string, len(branches))
		for i, br := range branches {
			parts[i] = "(" + selectWhere(br...) + order + limit + ")"
		}
		sql = "SELECT * FROM (" + strings.Join(parts, " UNION ALL ") + ") r" + order + limit
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, s.wrapLedger("runs", err)
	}
	out, err := scanRuns(rows)
	if err != nil {
		return nil, s.wrapLedger("runs", err)
	}
	return out, nil
}

// scanRuns reads rows of runColumns to the end.
func scanRuns(rows pgx.Rows) ([]ledger.RunRecord, error) {
	var (
		out        []ledger.RunRecord
		r          ledger.RunRecord
		shard      int32
		attempt    int32
		shards     int32
		fence      int64
		start, end *time.Time
		status     string
	)
	_, err := pgx.ForEachRow(rows, []any{&r.Job, &r.Tick, &r.Trigger, &shard, &attempt, &shards, &r.Node, &fence, &start, &end, &status, &r.Error, &r.Output, &r.Recorded}, func() error {
		rec := r
		rec.Tick, rec.Recorded = r.Tick.UTC(), r.Recorded.UTC()
		rec.Shard, rec.Attempt, rec.Shards = int(shard), int(attempt), int(shards)
		rec.Fence, rec.Status = uint64(fence), ledger.RunStatus(status)
		rec.Start, rec.End = time.Time{}, time.Time{}
		if start != nil {
			rec.Start = start.UTC()
		}
		if end != nil {
			rec.End = end.UTC()
		}
		out = append(out, rec)
		return nil
	})
	return out, err
}

// SetJobState implements ledger.Ledger in one statement that makes the
// change and returns the job's state after it. Spec must be UTF-8 text
// without NUL (ErrUnsupported otherwise); Since is kept in microseconds.
func (s *Store) SetJobState(ctx context.Context, p ledger.JobStateParams) (ledger.JobState, error) {
	if err := ctx.Err(); err != nil {
		return ledger.JobState{}, err
	}
	if err := p.Check(); err != nil {
		return ledger.JobState{}, fmt.Errorf("pgstore: %w", err)
	}
	if err := checkName("set job state", "Job", p.Job, maxLedgerName); err != nil {
		return ledger.JobState{}, err
	}
	l := s.ledger()
	var sql string
	var args []any
	switch p.Op {
	case ledger.JobPause, ledger.JobResume:
		sql, args = l.setPaused, []any{p.Job, p.Op == ledger.JobPause}
	case ledger.JobTrigger, ledger.JobTriggerDone, ledger.JobCancel:
		if err := checkName("set job state", "Trigger", p.Trigger, maxLedgerName); err != nil {
			return ledger.JobState{}, err
		}
		if err := checkName("set job state", "RunTrigger", p.RunTrigger, maxLedgerName); err != nil {
			return ledger.JobState{}, err
		}
		tr := p.Request()
		sql, args = l.trigger, []any{p.Job, p.Trigger, timestamptz(tr.Tick), tr.Rerun, tr.CancelField()}
		if p.Op == ledger.JobTriggerDone {
			sql, args = l.done, args[:2]
		}
	case ledger.JobRegister:
		if err := checkName("register job", "Spec", p.Spec, ledger.MaxSpecLen); err != nil {
			return ledger.JobState{}, err
		}
		sql, args = l.register, []any{p.Job, p.Spec, p.Since}
	case ledger.JobForget:
		sql, args = l.forget, []any{p.Job}
	}
	var (
		st    = ledger.JobState{Job: p.Job}
		spec  *string
		since *time.Time
		tr    triggerArrays
	)
	if err := s.pool.QueryRow(ctx, sql, args...).Scan(&st.Paused, &spec, &since, &tr.ids, &tr.ats, &tr.ticks, &tr.reruns, &tr.cancels); err != nil {
		return ledger.JobState{}, s.wrapLedger(fmt.Sprintf("set job state %q", p.Job), err)
	}
	st.Triggers = tr.requests()
	setSpec(&st, spec, since)
	return st, nil
}

// setSpec sets st's registration from nullable columns.
func setSpec(st *ledger.JobState, spec *string, since *time.Time) {
	if spec != nil && since != nil {
		st.Spec, st.Since = *spec, since.UTC()
	}
}

// triggerArrays are a job's pending trigger requests as the statements
// return them: one array per column, in the same order.
type triggerArrays struct {
	ids    []string
	ats    []time.Time
	ticks  []pgtype.Timestamptz
	reruns []bool
	// cancels: the cancel target (ledger.TriggerRequest.CancelField), ""
	// for a request to run (migration 0009).
	cancels []string
}

// requests pairs the arrays up; nil when there are none.
func (a *triggerArrays) requests() []ledger.TriggerRequest {
	n := len(a.ids)
	if n == 0 || len(a.ats) != n || len(a.ticks) != n || len(a.reruns) != n || len(a.cancels) != n {
		return nil
	}
	out := make([]ledger.TriggerRequest, 0, n)
	for i := range a.ids {
		tr := ledger.TriggerRequest{ID: a.ids[i], At: a.ats[i].UTC(), Rerun: a.reruns[i]}
		if a.ticks[i].Valid {
			tr.Tick = a.ticks[i].Time.UTC()
		}
		if tr.SetCancelField(a.cancels[i]) != nil {
			continue // not written by this package: neither a run nor a cancel to act on
		}
		out = append(out, tr)
	}
	return out
}

// JobStates implements ledger.Ledger in one SELECT over the paused jobs
// and the pending triggers.
func (s *Store) JobStates(ctx context.Context) ([]ledger.JobState, error) {
	return s.readStates(ctx, "job states", s.ledger().jobStates)
}

// Jobs implements ledger.Ledger in one SELECT over the paused and
// registered jobs and the pending triggers.
func (s *Store) Jobs(ctx context.Context) ([]ledger.JobState, error) {
	return s.readStates(ctx, "jobs", s.ledger().allJobs)
}

// readStates runs a statement that returns one row per job: job, paused,
// spec, since, and the trigger requests' ids, times, ticks and rerun flags.
func (s *Store) readStates(ctx context.Context, op, sql string) ([]ledger.JobState, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, sql)
	if err != nil {
		return nil, s.wrapLedger(op, err)
	}
	var (
		out    []ledger.JobState
		job    string
		paused bool
		spec   *string
		since  *time.Time
		tr     triggerArrays
	)
	_, err = pgx.ForEachRow(rows, []any{&job, &paused, &spec, &since, &tr.ids, &tr.ats, &tr.ticks, &tr.reruns, &tr.cancels}, func() error {
		st := ledger.JobState{Job: job, Paused: paused, Triggers: tr.requests()}
		setSpec(&st, spec, since)
		out = append(out, st)
		return nil
	})
	if err != nil {
		return nil, s.wrapLedger(op, err)
	}
	return out, nil
}

// Prune implements ledger.Ledger in one statement: a DELETE per table in
// data-modifying WITH clauses, each counted. KeepPerJob ranks each job's
// records (not deleted by age) in listing order, along the job index.
func (s *Store) Prune(ctx context.Context, p ledger.PruneParams) (ledger.PruneResult, error) {
	if err := ctx.Err(); err != nil {
		return ledger.PruneResult{}, err
	}
	if p.RunsOlderThan < 0 || p.KeepPerJob < 0 || p.TriggersOlderThan < 0 {
		return ledger.PruneResult{}, errors.New("pgstore: prune: negative parameter")
	}
	l := s.ledger()
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "WITH c AS (DELETE FROM %s WHERE expires_at <= now() RETURNING 1)", l.claims)
	runs, triggers := "0", "0"
	if p.RunsOlderThan > 0 || p.KeepPerJob > 0 {
		var conds []string
		fresh := ""
		if p.RunsOlderThan > 0 {
			cutoff := "now() - " + arg(micros(p.RunsOlderThan)) + "::bigint * interval '1 microsecond'"
			conds = append(conds, "recorded_at < "+cutoff)
			fresh = " WHERE recorded_at >= " + cutoff
		}
		if p.KeepPerJob > 0 {
			conds = append(conds, fmt.Sprintf(`(job, tick, trigger_id, shard, attempt) IN (
		SELECT job, tick, trigger_id, shard, attempt FROM (
			SELECT job, tick, trigger_id, shard, attempt,
				row_number() OVER (PARTITION BY job ORDER BY tick DESC, trigger_id, shard, attempt DESC) AS rn
			FROM %s%s
		) ranked WHERE rn > %s)`, l.runs, fresh, arg(int64(p.KeepPerJob))))
		}
		fmt.Fprintf(&b, ", r AS (DELETE FROM %s WHERE %s RETURNING 1)", l.runs, strings.Join(conds, " OR "))
		runs = "(SELECT count(*) FROM r)"
	}
	if p.TriggersOlderThan > 0 {
		fmt.Fprintf(&b, ", t AS (DELETE FROM %s WHERE requested_at < now() - %s::bigint * interval '1 microsecond' RETURNING 1)",
			l.triggers, arg(micros(p.TriggersOlderThan)))
		triggers = "(SELECT count(*) FROM t)"
	}
	fmt.Fprintf(&b, " SELECT (SELECT count(*) FROM c), %s, %s", runs, triggers)
	var c, r, t int64
	if err := s.pool.QueryRow(ctx, b.String(), args...).Scan(&c, &r, &t); err != nil {
		return ledger.PruneResult{}, s.wrapLedger("prune", err)
	}
	return ledger.PruneResult{Claims: int(c), Runs: int(r), Triggers: int(t)}, nil
}
