package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tasklock/tasklock/ledger"
)

var _ ledger.Ledger = (*Store)(nil)

// recordChunk is the most run records one INSERT carries (13 parameters
// each). The driver binds a statement's parameters in time quadratic in
// their number, so 500 records a statement spent more CPU binding than
// SQLite spent writing: 100 a statement cut RecordRuns' CPU per record
// from 63 µs to 36 µs (5,000 records a call, 50 was no better).
const recordChunk = 100

// ledgerSQL are the ledger's statements for one lock table's ledger
// tables (migrations 0002, 0003 and 0006).
type ledgerSQL struct {
	claims, runs, jobs, triggers, defs, audit string // quoted table names
	rollup                                    string // the run rollups of migration 0007 (stats.go)

	claim, recordHead, recordTail, runsHead string
	pause, resume, trigger, triggerDone     string
	register, forgetJob, forgetTriggers     string
	state, states, all                      string
	pruneClaims, pruneAge, pruneKeep        string
	pruneTriggers                           string
	// The catalog (catalog.go).
	putDef, deleteDef, tombstone, defExists, allDefs, appendAudit, auditHead string
}

func newLedgerSQL(c config) *ledgerSQL {
	q := func(suffix string) string { return `"` + c.table + suffix + `"` }
	l := &ledgerSQL{claims: q("_claims"), runs: q("_runs"), jobs: q("_jobs"), triggers: q("_triggers"),
		defs: q("_jobdefs"), audit: q("_audit"), rollup: q("_runs_rollup")}
	// One statement claims the whole batch, ?1 a JSON array of
	// {"j": job, "t": tick µs, "g": trigger, "s": shard, "k": token,
	// "n": node, "r": retain µs}. A live claim is written back unchanged, so that
	// RETURNING reports the holder of every key, new or not.
	live := `c.expires_at > excluded.claimed_at`
	l.claim = `INSERT INTO ` + l.claims + ` AS c (job, tick, "trigger", shard, token, node, claimed_at, expires_at)
SELECT r.value ->> '$.j', r.value ->> '$.t', r.value ->> '$.g', r.value ->> '$.s', r.value ->> '$.k', r.value ->> '$.n',
  ` + nowUS + `, ` + nowUS + ` + (r.value ->> '$.r')
FROM json_each(?1) AS r WHERE true
ON CONFLICT (job, tick, "trigger", shard) DO UPDATE SET
  token = iif(` + live + `, c.token, excluded.token),
  node = iif(` + live + `, c.node, excluded.node),
  claimed_at = iif(` + live + `, c.claimed_at, excluded.claimed_at),
  expires_at = iif(` + live + `, c.expires_at, excluded.expires_at)
RETURNING job, tick, "trigger", shard, token, node, claimed_at`
	l.recordHead = `INSERT INTO ` + l.runs + ` (job, tick, "trigger", shard, attempt, shards, node, fence, started_at, ended_at, status, error, output, recorded_at)
VALUES `
	l.recordTail = `
ON CONFLICT (job, tick, "trigger", shard, attempt) DO UPDATE SET
  shards = excluded.shards, node = excluded.node, fence = excluded.fence, started_at = excluded.started_at, ended_at = excluded.ended_at,
  status = excluded.status, error = excluded.error, output = excluded.output, recorded_at = excluded.recorded_at`
	l.runsHead = `SELECT ` + runColumns("output") + `
FROM ` + l.runs
	l.pause = `INSERT INTO ` + l.jobs + ` (job, paused, changed_at) VALUES (?1, 1, ` + nowUS + `)
ON CONFLICT (job) DO UPDATE SET paused = 1, changed_at = excluded.changed_at WHERE paused = 0`
	l.resume = `UPDATE ` + l.jobs + ` SET paused = 0, changed_at = ` + nowUS + ` WHERE job = ?1 AND paused = 1`
	// ?3 the tick in µs (NULL for a trigger-now), ?4 rerun, ?5 the
	// cancel target (NULL for a request to run).
	l.trigger = `INSERT INTO ` + l.triggers + ` (job, id, requested_at, tick, rerun, cancel) VALUES (?1, ?2, ` + nowUS + `, ?3, ?4, ?5)
ON CONFLICT (job, id) DO NOTHING`
	l.triggerDone = `DELETE FROM ` + l.triggers + ` WHERE job = ?1 AND id = ?2`
	l.register = `INSERT INTO ` + l.jobs + ` (job, paused, changed_at, spec, since) VALUES (?1, 0, ` + nowUS + `, ?2, ?3)
ON CONFLICT (job) DO UPDATE SET spec = excluded.spec, since = excluded.since, changed_at = excluded.changed_at
WHERE spec IS NOT excluded.spec`
	l.forgetJob = `DELETE FROM ` + l.jobs + ` WHERE job = ?1`
	l.forgetTriggers = `DELETE FROM ` + l.triggers + ` WHERE job = ?1`
	// The states: one row per paused or registered job (id NULL), one per
	// pending trigger request (with its tick and rerun), in the order they
	// came. JobStates reads
	// only the paused rows (through the partial index of migration 0003),
	// so that it does not grow with the registered jobs.
	states := func(jobsWhere, triggersWhere string) string {
		return `SELECT job, paused, NULL, NULL, 0, spec, since, NULL, 0, NULL FROM ` + l.jobs + ` WHERE ` + jobsWhere + `
UNION ALL
SELECT job, 0, id, requested_at, seq, NULL, NULL, tick, rerun, cancel FROM ` + l.triggers + triggersWhere + `
ORDER BY 5`
	}
	l.state = states(`job = ?1 AND (paused = 1 OR spec IS NOT NULL)`, ` WHERE job = ?1`)
	l.states = states(`paused = 1`, ``)
	l.all = states(`paused = 1 OR spec IS NOT NULL`, ``)
	l.pruneClaims = `DELETE FROM ` + l.claims + ` WHERE expires_at <= ` + nowUS
	l.pruneAge = `DELETE FROM ` + l.runs + ` WHERE recorded_at < ` + nowUS + ` - ?1`
	l.pruneKeep = `DELETE FROM ` + l.runs + ` WHERE rowid IN (
  SELECT rowid FROM (
    SELECT rowid, row_number() OVER (PARTITION BY job ORDER BY tick DESC, "trigger", shard, attempt DESC) AS n FROM ` + l.runs + `
  ) WHERE n > ?1)`
	l.pruneTriggers = `DELETE FROM ` + l.triggers + ` WHERE requested_at < ` + nowUS + ` - ?1`
	l.catalogSQL()
	return l
}

// usec is t as unix microseconds, the unit of every time the ledger keeps.
func usec(t time.Time) int64 { return t.UnixMicro() }

// fromUsec is the UTC time of unix microseconds us.
func fromUsec(us int64) time.Time { return time.UnixMicro(us).UTC() }

// claimEntry is one claim in the JSON array the claim statement reads.
type claimEntry struct {
	J string `json:"j"`
	T int64  `json:"t"`
	G string `json:"g"`
	S int    `json:"s"`
	K string `json:"k"`
	N string `json:"n"`
	R int64  `json:"r"`
}

// claimKey is a claim's key as the claim statement returns it.
type claimKey struct {
	job     string
	tick    int64
	trigger string
	shard   int
}

// claimHolder is who holds a claim, as the claim statement returns it.
type claimHolder struct {
	token, node string
	at          int64
}

// nameOK reports whether s can go through the claim statement's JSON
// unchanged: valid UTF-8 without NUL.
func nameOK(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// Claim implements ledger.Ledger with one INSERT … SELECT FROM json_each(…)
// ON CONFLICT DO UPDATE … RETURNING statement for the whole batch: a claim
// is made when its key has no row or an expired one (by SQLite's clock),
// and the statement returns the holder of every key. Job, Trigger, Token
// and Node must be valid UTF-8 without NUL bytes (ErrUnsupported
// otherwise).
func (s *Store) Claim(ctx context.Context, ps []ledger.ClaimParams) ([]error, error) {
	if err := ctx.Err(); err != nil {
		return nil, wrap(ctx, "claim", "", err)
	}
	if len(ps) == 0 {
		return nil, nil
	}
	entries := make([]claimEntry, len(ps))
	for i, p := range ps {
		if err := p.Check(); err != nil {
			return nil, fmt.Errorf("sqlitestore: %w", err)
		}
		switch {
		case !nameOK(p.Job) || !nameOK(p.Trigger) || !nameOK(p.Token) || !nameOK(p.Node):
			return nil, fmt.Errorf("sqlitestore: claim %q: %w: job, trigger, token and node must be valid UTF-8 without NUL bytes",
				p.Job, ledger.ErrUnsupported)
		}
		entries[i] = claimEntry{J: p.Job, T: usec(p.Tick), G: p.Trigger, S: p.Shard, K: p.Token, N: p.Node, R: micros(p.Retain)}
	}
	arg, err := json.Marshal(entries)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: claim: %w", err)
	}
	holders := make(map[claimKey]claimHolder, len(ps))
	err = s.queryText(ctx, s.ledger.claim, []any{string(arg)}, func(rows *sql.Rows) error {
		var k claimKey
		var h claimHolder
		if err := rows.Scan(&k.job, &k.tick, &k.trigger, &k.shard, &h.token, &h.node, &h.at); err != nil {
			return err
		}
		holders[k] = h
		return nil
	})
	if err != nil {
		return nil, wrap(ctx, "claim", fmt.Sprintf("%d ticks", len(ps)), err)
	}
	out := make([]error, len(ps))
	for i, e := range entries {
		h, ok := holders[claimKey{e.J, e.T, e.G, e.S}]
		switch {
		case !ok:
			return nil, fmt.Errorf("sqlitestore: claim %q: no result for tick %v", e.J, ps[i].Tick)
		case h.token != e.K:
			out[i] = &ledger.ClaimedError{Node: h.node, At: fromUsec(h.at)}
		}
	}
	return out, nil
}

// runsSQL is Runs' statement for q and its arguments.
func (s *Store) runsSQL(q ledger.RunQuery) (string, []any) {
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return "?" + strconv.Itoa(len(args))
	}
	if q.Job != "" {
		where = append(where, "job = "+arg(q.Job))
	}
	if !q.From.IsZero() {
		where = append(where, "tick >= "+arg(usec(q.From)))
	}
	if !q.To.IsZero() {
		where = append(where, "tick < "+arg(usec(q.To)))
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
	if b := q.Before; b != nil {
		// After b in the listing order: tick descending, job, trigger and
		// shard ascending, attempt descending.
		t, j, g, k, a := arg(usec(b.Tick)), arg(b.Job), arg(b.Trigger), arg(b.Shard), arg(b.Attempt)
		where = append(where, `(tick < `+t+` OR tick = `+t+` AND (job > `+j+` OR job = `+j+
			` AND ("trigger" > `+g+` OR "trigger" = `+g+` AND (shard > `+k+` OR shard = `+k+` AND attempt < `+a+`))))`)
	}
	stmt := s.ledger.runsHead
	if len(where) > 0 {
		stmt += "\nWHERE " + strings.Join(where, " AND ")
	}
	stmt += `
ORDER BY tick DESC, job, "trigger", shard, attempt DESC`
	if q.Limit > 0 {
		stmt += "\nLIMIT " + arg(q.Limit)
	}
	return stmt, args
}

// queryText runs the statement q and calls row for each result row, to
// the end, like query does for prepared statements.
func (s *Store) queryText(ctx context.Context, q string, args []any, row func(*sql.Rows) error) error {
	rows, err := s.db.QueryContext(stmtCtx(ctx), q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return rows.Close()
}

// nullTime is t as unix microseconds, or NULL when t is zero.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return usec(t)
}

// RecordRuns implements ledger.Ledger with one INSERT … ON CONFLICT DO
// UPDATE statement per 100 records (recordChunk); Shard must be in [0, ledger.MaxShards); recorded_at is SQLite's now. Strings
// are bound as parameters, so any bytes are kept.
func (s *Store) RecordRuns(ctx context.Context, rs []ledger.RunRecord) error {
	if err := ctx.Err(); err != nil {
		return wrap(ctx, "record runs", "", err)
	}
	for i := range rs {
		if rs[i].Job == "" || rs[i].Tick.IsZero() {
			return errors.New("sqlitestore: record runs: empty Job or zero Tick")
		}
		if rs[i].Shard < 0 || rs[i].Shard >= ledger.MaxShards {
			return fmt.Errorf("sqlitestore: record runs %q: Shard %d is not in [0, %d)", rs[i].Job, rs[i].Shard, ledger.MaxShards)
		}
	}
	for start := 0; start < len(rs); start += recordChunk {
		chunk := rs[start:min(start+recordChunk, len(rs))]
		var b strings.Builder
		b.WriteString(s.ledger.recordHead)
		args := make([]any, 0, 13*len(chunk))
		for i, r := range chunk {
			if i > 0 {
				b.WriteString(",\n")
			}
			b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, " + nowUS + ")")
			args = append(args, r.Job, usec(r.Tick), r.Trigger, r.Shard, r.Attempt, r.Shards, r.Node, int64(r.Fence),
				nullTime(r.Start), nullTime(r.End), string(r.Status), r.Error, r.Output)
		}
		b.WriteString(s.ledger.recordTail)
		if err := ctx.Err(); err != nil { // between statements: see stmtCtx
			return wrap(ctx, "record runs", "", err)
		}
		if _, err := s.db.ExecContext(stmtCtx(ctx), b.String(), args...); err != nil {
			return wrap(ctx, "record runs", fmt.Sprintf("%d records", len(rs)), err)
		}
	}
	return nil
}

// Runs implements ledger.Ledger with one SELECT, which reads the runs
// table through the index in its order (by job with q.Job, by tick
// otherwise) and stops at q.Limit.
func (s *Store) Runs(ctx context.Context, q ledger.RunQuery) ([]ledger.RunRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, wrap(ctx, "runs", "", err)
	}
	if q.Limit < 0 {
		return nil, fmt.Errorf("sqlitestore: runs: negative Limit %d", q.Limit)
	}
	stmt, args := s.runsSQL(q)
	var out []ledger.RunRecord
	err := s.queryText(ctx, stmt, args, func(rows *sql.Rows) error {
		r, err := scanRun(rows)
		out = append(out, r)
		return err
	})
	if err != nil {
		return nil, wrap(ctx, "runs", q.Job, err)
	}
	return out, nil
}

// runColumns lists a run record's columns in scanRun's order, with output
// the expression read for the output.
func runColumns(output string) string {
	return `job, tick, "trigger", shard, attempt, shards, node, fence, started_at, ended_at, status, error, ` + output + `, recorded_at`
}

// scanRun reads a row of runColumns.
func scanRun(rows *sql.Rows) (ledger.RunRecord, error) {
	var (
		r                     ledger.RunRecord
		tick, fence, recorded int64
		started, ended        sql.NullInt64
		status                string
	)
	if err := rows.Scan(&r.Job, &tick, &r.Trigger, &r.Shard, &r.Attempt, &r.Shards, &r.Node, &fence, &started, &ended,
		&status, &r.Error, &r.Output, &recorded); err != nil {
		return r, err
	}
	r.Tick, r.Fence, r.Status, r.Recorded = fromUsec(tick), uint64(fence), ledger.RunStatus(status), fromUsec(recorded)
	if started.Valid {
		r.Start = fromUsec(started.Int64)
	}
	if ended.Valid {
		r.End = fromUsec(ended.Int64)
	}
	return r, nil
}

// SetJobState implements ledger.Ledger with one transaction: the change
// (one INSERT, UPDATE or DELETE; two DELETEs for JobForget) and one SELECT
// of the job's state after it. A trigger request's At is SQLite's now;
// Since is kept in microseconds.
func (s *Store) SetJobState(ctx context.Context, p ledger.JobStateParams) (st ledger.JobState, err error) {
	if err := ctx.Err(); err != nil {
		return st, wrap(ctx, "set job state", p.Job, err)
	}
	if err := p.Check(); err != nil {
		return st, fmt.Errorf("sqlitestore: %w", err)
	}
	var (
		changes []string
		args    = []any{p.Job}
	)
	switch p.Op {
	case ledger.JobPause:
		changes = []string{s.ledger.pause}
	case ledger.JobResume:
		changes = []string{s.ledger.resume}
	case ledger.JobTrigger, ledger.JobCancel:
		tr := p.Request()
		changes = []string{s.ledger.trigger}
		args = append(args, p.Trigger, nullTime(tr.Tick), tr.Rerun, sql.NullString{String: tr.CancelField(), Valid: tr.Cancel})
	case ledger.JobTriggerDone:
		changes = []string{s.ledger.triggerDone}
		args = append(args, p.Trigger)
	case ledger.JobRegister:
		changes = []string{s.ledger.register}
		args = append(args, p.Spec, usec(p.Since))
	case ledger.JobForget:
		changes = []string{s.ledger.forgetJob, s.ledger.forgetTriggers}
	}
	tx, err := s.db.BeginTx(stmtCtx(ctx), nil)
	if err != nil {
		return st, wrap(ctx, "set job state", p.Job, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	for _, change := range changes {
		if err = ctx.Err(); err != nil { // between statements: see stmtCtx
			return st, wrap(ctx, "set job state", p.Job, err)
		}
		if _, err = tx.ExecContext(stmtCtx(ctx), change, args...); err != nil {
			return st, wrap(ctx, "set job state", p.Job, err)
		}
	}
	sts, err := readStates(stmtCtx(ctx), tx, s.ledger.state, p.Job)
	if err != nil {
		return st, wrap(ctx, "set job state", p.Job, err)
	}
	if err = tx.Commit(); err != nil {
		return st, wrap(ctx, "set job state", p.Job, err)
	}
	if len(sts) == 0 {
		return ledger.JobState{Job: p.Job}, nil
	}
	return sts[0], nil
}

// JobStates implements ledger.Ledger with one SELECT over the paused jobs
// and the pending trigger requests.
func (s *Store) JobStates(ctx context.Context) ([]ledger.JobState, error) {
	if err := ctx.Err(); err != nil {
		return nil, wrap(ctx, "job states", "", err)
	}
	sts, err := readStates(stmtCtx(ctx), s.db, s.ledger.states)
	if err != nil {
		return nil, wrap(ctx, "job states", "", err)
	}
	return sts, nil
}

// Jobs implements ledger.Ledger with one SELECT over the paused and
// registered jobs and the pending trigger requests.
func (s *Store) Jobs(ctx context.Context) ([]ledger.JobState, error) {
	if err := ctx.Err(); err != nil {
		return nil, wrap(ctx, "jobs", "", err)
	}
	sts, err := readStates(stmtCtx(ctx), s.db, s.ledger.all)
	if err != nil {
		return nil, wrap(ctx, "jobs", "", err)
	}
	return sts, nil
}

// readStates runs a state query and gathers its rows into one JobState per
// job, in the order the jobs first appear.
func readStates(ctx context.Context, q queryer, stmt string, args ...any) ([]ledger.JobState, error) {
	rows, err := q.QueryContext(ctx, stmt, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ledger.JobState
	index := make(map[string]int)
	for rows.Next() {
		var (
			job    string
			paused bool
			id     sql.NullString
			at     sql.NullInt64
			seq    int64
			spec   sql.NullString
			since  sql.NullInt64
			tick   sql.NullInt64
			rerun  bool
			cancel sql.NullString
		)
		if err := rows.Scan(&job, &paused, &id, &at, &seq, &spec, &since, &tick, &rerun, &cancel); err != nil {
			return nil, err
		}
		i, ok := index[job]
		if !ok {
			i = len(out)
			index[job] = i
			out = append(out, ledger.JobState{Job: job})
		}
		st := &out[i]
		st.Paused = st.Paused || paused
		if spec.Valid && since.Valid {
			st.Spec, st.Since = spec.String, fromUsec(since.Int64)
		}
		if id.Valid {
			tr := ledger.TriggerRequest{ID: id.String, At: fromUsec(at.Int64), Rerun: rerun}
			if tick.Valid {
				tr.Tick = fromUsec(tick.Int64)
			}
			if err := tr.SetCancelField(cancel.String); err != nil {
				return nil, err
			}
			st.Triggers = append(st.Triggers, tr)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, rows.Close()
}

// Prune implements ledger.Ledger with one DELETE for the expired claims and
// one for each kind of pruning p asks for, each its own transaction, so
// that the write lock is never held for all of them at once. SQLite's now
// decides every age.
func (s *Store) Prune(ctx context.Context, p ledger.PruneParams) (ledger.PruneResult, error) {
	var res ledger.PruneResult
	if err := ctx.Err(); err != nil {
		return res, wrap(ctx, "prune", "", err)
	}
	if p.RunsOlderThan < 0 || p.KeepPerJob < 0 || p.TriggersOlderThan < 0 {
		return res, errors.New("sqlitestore: prune: negative parameter")
	}
	steps := []struct {
		on    bool
		what  string
		stmt  string
		arg   []any
		count *int
	}{
		{true, "claims", s.ledger.pruneClaims, nil, &res.Claims},
		{p.RunsOlderThan > 0, "runs by age", s.ledger.pruneAge, []any{micros(p.RunsOlderThan)}, &res.Runs},
		{p.KeepPerJob > 0, "runs by count", s.ledger.pruneKeep, []any{p.KeepPerJob}, &res.Runs},
		{p.TriggersOlderThan > 0, "trigger requests", s.ledger.pruneTriggers, []any{micros(p.TriggersOlderThan)}, &res.Triggers},
	}
	for _, st := range steps {
		if !st.on {
			continue
		}
		if err := ctx.Err(); err != nil { // between statements: see stmtCtx
			return res, wrap(ctx, "prune", st.what, err)
		}
		r, err := s.db.ExecContext(stmtCtx(ctx), st.stmt, st.arg...)
		if err == nil {
			var n int64
			if n, err = r.RowsAffected(); err == nil {
				*st.count += int(n)
			}
		}
		if err != nil {
			return res, wrap(ctx, "prune", st.what, err)
		}
	}
	return res, nil
}
