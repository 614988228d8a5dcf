package mysqlstore

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"

	"github.com/tasklock/tasklock/ledger"
)

var _ ledger.Ledger = (*Store)(nil)

// Limits of what the ledger tables hold (see migrations/002_ledger.sql).
const (
	maxJob     = 512       // bytes: job VARBINARY(512)
	maxTrigger = 128       // bytes: trigger_id VARBINARY(128)
	maxStatus  = 32        // ASCII characters: status VARCHAR(32)
	maxText    = 1<<24 - 1 // bytes: error, output MEDIUMTEXT
)

// Ledger statements are split so that none gets too big for the server's
// max_allowed_packet, as renewals are.
const (
	ledgerMaxRows  = 1000
	ledgerMaxBytes = 4 << 20
)

// dtLayout is how times are written to and read from DATETIME(6) columns,
// in UTC: DATE_FORMAT(col, dtFormat) reads them whatever the DSN's
// parseTime says.
const (
	dtLayout = "2006-01-02 15:04:05.000000"
	dtFormat = "'%Y-%m-%d %H:%i:%s.%f'"
)

// ledgerTable returns the quoted name of the ledger table with suffix.
func (s *Store) ledgerTable(suffix string) string { return "`" + s.table + suffix + "`" }

// wrapLedger adds the operation to err and, when a ledger table is
// missing, what to do.
func (s *Store) wrapLedger(op string, err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == erNoSuchTable {
		return fmt.Errorf("mysqlstore: %s: the ledger tables of %s are missing; run mysqlstore.Migrate or set Options.Migrate: %w", op, s.qt, err)
	}
	return fmt.Errorf("mysqlstore: %s: %w", op, err)
}

// unsupported is an ErrUnsupported error of op.
func unsupported(op, format string, args ...any) error {
	return fmt.Errorf("mysqlstore: %s: %s: %w", op, fmt.Sprintf(format, args...), ledger.ErrUnsupported)
}

// checkBytes checks a VARBINARY name's length.
func checkBytes(op, field, s string, max int) error {
	if len(s) > max {
		return unsupported(op, "%s is %d bytes long, the maximum is %d", field, len(s), max)
	}
	return nil
}

// checkNode checks a node's name against node VARCHAR(256) utf8mb4.
func checkNode(op, node string) error {
	if !utf8.ValidString(node) || utf8.RuneCountInString(node) > MaxOwnerLength {
		return unsupported(op, "Node %q is not UTF-8 of at most %d characters", node, MaxOwnerLength)
	}
	return nil
}

// appendTime appends t as a DATETIME(6) literal in UTC, truncated to the
// microsecond. DATETIME holds the years 1000 to 9999.
func appendTime(b []byte, op, field string, t time.Time) ([]byte, error) {
	t = t.UTC()
	if y := t.Year(); y < 1000 || y > 9999 {
		return b, unsupported(op, "%s %v is outside the years 1000 to 9999", field, t)
	}
	b = append(b, '\'')
	b = t.AppendFormat(b, dtLayout)
	return append(b, '\''), nil
}

// parseTime parses a time read with DATE_FORMAT(col, dtFormat).
func parseTime(s string) (time.Time, error) {
	return time.ParseInLocation(dtLayout, s, time.UTC)
}

// parseNullTime parses a nullable time; NULL is the zero time.
func parseNullTime(s sql.NullString) (time.Time, error) {
	if !s.Valid {
		return time.Time{}, nil
	}
	return parseTime(s.String)
}

// claimKey is a claim's key as the database keeps it: the tick to the
// microsecond.
type claimKey struct {
	job, tick, trigger string
	shard              int
}

func newClaimKey(p *ledger.ClaimParams) claimKey {
	return claimKey{p.Job, p.Tick.UTC().Format(dtLayout), p.Trigger, p.Shard}
}

// checkClaim validates one claim.
func checkClaim(p *ledger.ClaimParams) error {
	if err := p.Check(); err != nil {
		return fmt.Errorf("mysqlstore: %w", err)
	}
	if err := checkBytes("claim", "Job", p.Job, maxJob); err != nil {
		return err
	}
	if err := checkBytes("claim", "Trigger", p.Trigger, maxTrigger); err != nil {
		return err
	}
	if err := checkBytes("claim", "Token", p.Token, MaxTokenLength); err != nil {
		return err
	}
	return checkNode("claim", p.Node)
}

// Claim implements ledger.Ledger. Each chunk of up to 1,000 distinct keys
// (or 4 MiB of SQL) is one multi-row INSERT ... ON DUPLICATE KEY UPDATE,
// sorted by key so that concurrent batches lock rows in one order. A key is
// taken when it is new, when its claim has expired by the server's clock,
// or when the same token holds it; for any other key the update calls
// LAST_INSERT_ID(1), so the OK packet's insert id is 0 exactly when every
// claim of the chunk is ours. Only otherwise does one SELECT of the chunk's
// keys read who holds each: one round trip for a chunk this node wins
// whole, two when another node holds some of it.
func (s *Store) Claim(ctx context.Context, ps []ledger.ClaimParams) ([]error, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(ps) == 0 {
		return nil, nil
	}
	for i := range ps {
		if err := checkClaim(&ps[i]); err != nil {
			return nil, err
		}
	}
	// Distinct keys, sorted; each remembers the claims that named it.
	first := make(map[claimKey]int, len(ps))
	var keys []int // indexes into ps of each key's first claim
	for i := range ps {
		k := newClaimKey(&ps[i])
		if _, ok := first[k]; !ok {
			first[k] = i
			keys = append(keys, i)
		}
	}
	slices.SortFunc(keys, func(a, b int) int {
		return compareClaimKeys(newClaimKey(&ps[a]), newClaimKey(&ps[b]))
	})
	res := make([]error, len(ps))
	for start := 0; start < len(keys); {
		end, size := start, 0
		for end < len(keys) && end-start < ledgerMaxRows && (size < ledgerMaxBytes || end == start) {
			p := &ps[keys[end]]
			size += 200 + 2*(len(p.Job)+len(p.Trigger)+len(p.Token)+len(p.Node))
			end++
		}
		if err := s.claimChunk(ctx, ps, keys[start:end], res); err != nil {
			return nil, err
		}
		start = end
	}
	// A key named again in the batch shares its first claim's result, or
	// lost to it when its token differs.
	for i, p := range ps {
		j := first[newClaimKey(&p)]
		switch {
		case j == i:
		case ps[j].Token == p.Token:
			res[i] = res[j]
		case res[j] == nil:
			res[i] = &ledger.ClaimedError{Node: ps[j].Node}
		default:
			res[i] = res[j]
		}
	}
	return res, nil
}

func compareClaimKeys(a, b claimKey) int {
	return cmp.Or(strings.Compare(a.job, b.job), strings.Compare(a.tick, b.tick), strings.Compare(a.trigger, b.trigger),
		cmp.Compare(a.shard, b.shard))
}

// claimChunk claims ps[i] for i in idx (distinct keys) and sets res[i].
func (s *Store) claimChunk(ctx context.Context, ps []ledger.ClaimParams, idx []int, res []error) error {
	const expired = "expires_at <= UTC_TIMESTAMP(6)"
	b := make([]byte, 0, 600+len(idx)*300)
	b = append(b, "INSERT INTO "...)
	b = append(b, s.ledgerTable("_claims")...)
	b = append(b, " (job, tick, trigger_id, shard, token, node, claimed_at, expires_at) VALUES "...)
	var err error
	for n, i := range idx {
		p := &ps[i]
		if n > 0 {
			b = append(b, ", "...)
		}
		if b, err = appendClaimKey(b, p); err != nil {
			return err
		}
		b = append(b, ", "...)
		b = appendHex(b, p.Token)
		b = append(b, ", "...)
		b = appendText(b, p.Node)
		b = append(b, ", UTC_TIMESTAMP(6), "...)
		b = appendExpiry(b, p.Retain)
		b = append(b, ')')
	}
	// Assignments run left to right, each seeing those before it: token
	// and expires_at, which the conditions read, go last.
	b = append(b, " ON DUPLICATE KEY UPDATE"+
		" node = IF("+expired+", VALUES(node), IF(token = VALUES(token), node, IF(LAST_INSERT_ID(1), node, node))),"+
		" claimed_at = IF("+expired+", VALUES(claimed_at), claimed_at),"+
		" token = IF("+expired+", VALUES(token), token),"+
		" expires_at = IF("+expired+", VALUES(expires_at), expires_at)"...)
	r, err := s.db.ExecContext(ctx, string(b))
	if err != nil {
		return s.wrapLedger("claim", err)
	}
	lost, err := r.LastInsertId()
	if err != nil {
		return s.wrapLedger("claim", err)
	}
	if lost == 0 {
		return nil
	}

	b = append(b[:0], "SELECT job, DATE_FORMAT(tick, "+dtFormat+"), trigger_id, shard, token, node, DATE_FORMAT(claimed_at, "+dtFormat+") FROM "...)
	b = append(b, s.ledgerTable("_claims")...)
	b = append(b, " WHERE (job, tick, trigger_id, shard) IN ("...)
	for n, i := range idx {
		p := &ps[i]
		if n > 0 {
			b = append(b, ", "...)
		}
		b, _ = appendClaimKey(b, p) // checked above
		b = append(b, ')')
	}
	b = append(b, ')')
	rows, err := s.db.QueryContext(ctx, string(b))
	if err != nil {
		return s.wrapLedger("claim", err)
	}
	defer rows.Close()
	type holder struct {
		token, node string
		at          time.Time
	}
	held := make(map[claimKey]holder, len(idx))
	for rows.Next() {
		var k claimKey
		var h holder
		var at string
		if err := rows.Scan(&k.job, &k.tick, &k.trigger, &k.shard, &h.token, &h.node, &at); err != nil {
			return s.wrapLedger("claim", err)
		}
		if h.at, err = parseTime(at); err != nil {
			return s.wrapLedger("claim", err)
		}
		held[k] = h
	}
	if err := rows.Err(); err != nil {
		return s.wrapLedger("claim", err)
	}
	for _, i := range idx {
		p := &ps[i]
		h, ok := held[newClaimKey(p)]
		switch {
		case !ok: // held by another token at the INSERT, pruned since
			res[i] = &ledger.ClaimedError{}
		case h.token != p.Token:
			res[i] = &ledger.ClaimedError{Node: h.node, At: h.at}
		}
	}
	return nil
}

// appendClaimKey appends "(job, tick, trigger_id, shard" of p: the start
// of a row of the claims table.
func appendClaimKey(b []byte, p *ledger.ClaimParams) ([]byte, error) {
	b = append(b, '(')
	b = appendHex(b, p.Job)
	b = append(b, ", "...)
	b, err := appendTime(b, "claim", "Tick", p.Tick)
	b = append(b, ", "...)
	b = appendHex(b, p.Trigger)
	b = append(b, ", "...)
	return strconv.AppendInt(b, int64(p.Shard), 10), err
}

// checkRun validates one run record.
func checkRun(r *ledger.RunRecord) error {
	const op = "record runs"
	switch {
	case r.Job == "" || r.Tick.IsZero():
		return errors.New("mysqlstore: record runs: empty Job or zero Tick")
	case r.Attempt < 0 || int64(r.Attempt) > 1<<31-1:
		return unsupported(op, "Attempt %d is out of range", r.Attempt)
	case r.Shard < 0 || r.Shard >= ledger.MaxShards:
		return fmt.Errorf("mysqlstore: record runs %q: Shard %d is not in [0, %d)", r.Job, r.Shard, ledger.MaxShards)
	case r.Shards < 0 || r.Shards > ledger.MaxShards:
		return fmt.Errorf("mysqlstore: record runs %q: Shards %d is not in [0, %d]", r.Job, r.Shards, ledger.MaxShards)
	case len(r.Status) > maxStatus:
		return unsupported(op, "Status %q is longer than %d bytes", r.Status, maxStatus)
	case len(r.Error) > maxText || len(r.Output) > maxText:
		return unsupported(op, "Error or Output longer than %d bytes", maxText)
	}
	for _, c := range r.Status {
		if c >= utf8.RuneSelf {
			return unsupported(op, "Status %q is not ASCII", r.Status)
		}
	}
	if err := checkBytes(op, "Job", r.Job, maxJob); err != nil {
		return err
	}
	if err := checkBytes(op, "Trigger", r.Trigger, maxTrigger); err != nil {
		return err
	}
	return checkNode(op, r.Node)
}

// runOrder orders records as their keys are stored: job, rev_tick (tick
// descending), trigger_id, shard, rev_attempt (attempt descending).
func runOrder(a, b *ledger.RunRecord) int {
	return cmp.Or(strings.Compare(a.Job, b.Job), -cmp.Compare(a.Tick.UnixMicro(), b.Tick.UnixMicro()),
		strings.Compare(a.Trigger, b.Trigger), cmp.Compare(a.Shard, b.Shard), -cmp.Compare(a.Attempt, b.Attempt))
}

// RecordRuns implements ledger.Ledger: one multi-row INSERT ... ON
// DUPLICATE KEY UPDATE per chunk of up to 1,000 records (or 4 MiB of SQL),
// in key order. Error and Output are stored as utf8mb4 text: invalid UTF-8
// in them becomes U+FFFD.
func (s *Store) RecordRuns(ctx context.Context, rs []ledger.RunRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(rs) == 0 {
		return nil
	}
	sorted := make([]*ledger.RunRecord, len(rs))
	for i := range rs {
		if err := checkRun(&rs[i]); err != nil {
			return err
		}
		sorted[i] = &rs[i]
	}
	// Stable: of two records with one key, the later still wins.
	slices.SortStableFunc(sorted, runOrder)
	for start := 0; start < len(sorted); {
		end, size := start, 0
		for end < len(sorted) && end-start < ledgerMaxRows && (size < ledgerMaxBytes || end == start) {
			r := sorted[end]
			size += 400 + 2*(len(r.Job)+len(r.Trigger)+len(r.Node)+len(r.Error)+len(r.Output))
			end++
		}
		q, err := s.recordSQL(sorted[start:end])
		if err != nil {
			return err
		}
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return s.wrapLedger("record runs", err)
		}
		start = end
	}
	return nil
}

func (s *Store) recordSQL(rs []*ledger.RunRecord) (string, error) {
	const op = "record runs"
	b := make([]byte, 0, 800+len(rs)*400)
	b = append(b, "INSERT INTO "...)
	b = append(b, s.ledgerTable("_runs")...)
	b = append(b, " (job, rev_tick, trigger_id, shard, rev_attempt, tick, attempt, shards, node, fence,"+
		" started_at, ended_at, status, error, output, recorded_at) VALUES "...)
	var err error
	for n, r := range rs {
		if n > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '(')
		b = appendHex(b, r.Job)
		b = append(b, ", "...)
		b = strconv.AppendInt(b, -r.Tick.UnixMicro(), 10)
		b = append(b, ", "...)
		b = appendHex(b, r.Trigger)
		b = append(b, ", "...)
		b = strconv.AppendInt(b, int64(r.Shard), 10)
		b = append(b, ", "...)
		b = strconv.AppendInt(b, -int64(r.Attempt), 10)
		b = append(b, ", "...)
		if b, err = appendTime(b, op, "Tick", r.Tick); err != nil {
			return "", err
		}
		b = append(b, ", "...)
		b = strconv.AppendInt(b, int64(r.Attempt), 10)
		b = append(b, ", "...)
		b = strconv.AppendInt(b, int64(r.Shards), 10)
		b = append(b, ", "...)
		b = appendText(b, r.Node)
		b = append(b, ", "...)
		b = strconv.AppendUint(b, r.Fence, 10)
		for _, t := range []struct {
			name string
			t    time.Time
		}{{"Start", r.Start}, {"End", r.End}} {
			b = append(b, ", "...)
			if t.t.IsZero() {
				b = append(b, "NULL"...)
			} else if b, err = appendTime(b, op, t.name, t.t); err != nil {
				return "", err
			}
		}
		b = append(b, ", "...)
		b = appendHex(b, string(r.Status))
		b = append(b, ", "...)
		b = appendText(b, strings.ToValidUTF8(r.Error, "\uFFFD"))
		b = append(b, ", "...)
		b = appendText(b, strings.ToValidUTF8(r.Output, "\uFFFD"))
		b = append(b, ", UTC_TIMESTAMP(6))"...)
	}
	b = append(b, " ON DUPLICATE KEY UPDATE tick = VALUES(tick), attempt = VALUES(attempt), shards = VALUES(shards), node = VALUES(node),"+
		" fence = VALUES(fence), started_at = VALUES(started_at), ended_at = VALUES(ended_at),"+
		" status = VALUES(status), error = VALUES(error), output = VALUES(output), recorded_at = VALUES(recorded_at)"...)
	return string(b), nil
}

// runColumns are the columns Runs reads, rev_tick and rev_attempt last
// (the UNION ALL of a continued listing sorts by them).
const runColumns = runColumnsHead + "output" + runColumnsTail

// latestColumns are runColumns with an empty output, for LatestRuns.
const latestColumns = runColumnsHead + "''" + runColumnsTail

const (
	runColumnsHead = "job, DATE_FORMAT(tick, " + dtFormat + "), trigger_id, shard, attempt, shards, node, fence," +
		" DATE_FORMAT(started_at, " + dtFormat + "), DATE_FORMAT(ended_at, " + dtFormat + "), status, error, "
	runColumnsTail = ", DATE_FORMAT(recorded_at, " + dtFormat + "), rev_tick, rev_attempt"
)

// Runs implements ledger.Ledger in one SELECT. The indexes of the runs
// table are in the listing order, ascending on (rev_tick, job, trigger_id,
// shard, rev_attempt); with q.Before the statement is a UNION ALL of five
// index ranges (the rest of Before's attempts, shards, triggers and jobs at
// its tick, and older ticks), each limited, so that a page deep in a million records costs
// what the first page does.
func (s *Store) Runs(ctx context.Context, q ledger.RunQuery) ([]ledger.RunRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if q.Limit < 0 {
		return nil, fmt.Errorf("mysqlstore: runs: negative Limit %d", q.Limit)
	}
	rows, err := s.db.QueryContext(ctx, s.runsSQL(q))
	if err != nil {
		return nil, s.wrapLedger("runs", err)
	}
	out, err := scanRuns(rows, nil)
	if err != nil {
		return nil, s.wrapLedger("runs", err)
	}
	return out, nil
}

// scanRuns appends the rows of runColumns to out, to the end, and closes
// rows.
func scanRuns(rows *sql.Rows, out []ledger.RunRecord) ([]ledger.RunRecord, error) {
	defer rows.Close()
	for rows.Next() {
		var (
			r               ledger.RunRecord
			tick, recorded  string
			start, end      sql.NullString
			status          string
			revTick, revAtt int64
		)
		if err := rows.Scan(&r.Job, &tick, &r.Trigger, &r.Shard, &r.Attempt, &r.Shards, &r.Node, &r.Fence, &start, &end, &status,
			&r.Error, &r.Output, &recorded, &revTick, &revAtt); err != nil {
			return nil, err
		}
		r.Status = ledger.RunStatus(status)
		var errs [4]error
		r.Tick, errs[0] = parseTime(tick)
		r.Recorded, errs[1] = parseTime(recorded)
		r.Start, errs[2] = parseNullTime(start)
		r.End, errs[3] = parseNullTime(end)
		if err := errors.Join(errs[:]...); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// runsSQL builds the statement of Runs(q).
func (s *Store) runsSQL(q ledger.RunQuery) string {
	var where []string
	if q.Job != "" {
		where = append(where, "job = "+string(appendHex(nil, q.Job)))
	}
	// Ticks at or after From have rev_tick at most -From; before To, more
	// than -To.
	if !q.From.IsZero() {
		where = append(where, "rev_tick <= "+strconv.FormatInt(-q.From.UnixMicro(), 10))
	}
	if !q.To.IsZero() {
		where = append(where, "rev_tick > "+strconv.FormatInt(-q.To.UnixMicro(), 10))
	}
	if q.Status != "" {
		// In the column's character set, so that by_status serves it.
		where = append(where, "status = _ascii "+string(appendHex(nil, string(q.Status))))
	}
	const order = " ORDER BY rev_tick, job, trigger_id, shard, rev_attempt"
	limit := ""
	if q.Limit > 0 {
		limit = " LIMIT " + strconv.Itoa(q.Limit)
	}
	// The index in listing order, forced: for a range that covers much of
	// the table the optimizer would rather sort it whole, even for a page.
	// One status's records (the sweep's running ones, few among many) have
	// a key of their own in that order.
	table := s.ledgerTable("_runs") + " FORCE INDEX (by_tick)"
	switch {
	case q.Job != "":
		table = s.ledgerTable("_runs") + " FORCE INDEX (PRIMARY)"
	case q.Status != "":
		table = s.ledgerTable("_runs") + " FORCE INDEX (by_status)"
	}
	selectWhere := func(extra ...string) string {
		conds := append(where[:len(where):len(where)], extra...)
		sql := "SELECT " + runColumns + " FROM " + table
		if len(conds) > 0 {
			sql += " WHERE " + strings.Join(conds, " AND ")
		}
		return sql
	}
	var query string
	if k := q.Before; k == nil {
		query = selectWhere() + order + limit
	} else {
		kt := "rev_tick = " + strconv.FormatInt(-k.Tick.UnixMicro(), 10)
		kj := string(appendHex(nil, k.Job))
		ktr := string(appendHex(nil, k.Trigger))
		ks := strconv.Itoa(k.Shard)
		branches := [][]string{
			{kt, "job = " + kj, "trigger_id = " + ktr, "shard = " + ks, "rev_attempt > " + strconv.Itoa(-k.Attempt)},
			{kt, "job = " + kj, "trigger_id = " + ktr, "shard > " + ks},
			{kt, "job = " + kj, "trigger_id > " + ktr},
			{kt, "job > " + kj},
			{"rev_tick > " + strconv.FormatInt(-k.Tick.UnixMicro(), 10)},
		}
		parts := make([]string, len(branches))
		for i, br := range branches {
			parts[i] = "(" + selectWhere(br...) + order + limit + ")"
		}
		query = strings.Join(parts, " UNION ALL ") + order + limit
	}
	return query
}

// SetJobState implements ledger.Ledger: one statement makes the change,
// a second reads the job's state. JobForget is one transaction of three
// DELETEs. Since is kept to the microsecond, and must be within the years
// 1000 to 9999 (ErrUnsupported otherwise).
func (s *Store) SetJobState(ctx context.Context, p ledger.JobStateParams) (ledger.JobState, error) {
	if err := ctx.Err(); err != nil {
		return ledger.JobState{}, err
	}
	const op = "set job state"
	if err := p.Check(); err != nil {
		return ledger.JobState{}, fmt.Errorf("mysqlstore: %w", err)
	}
	if err := checkBytes(op, "Job", p.Job, maxJob); err != nil {
		return ledger.JobState{}, err
	}
	b := make([]byte, 0, 300+2*len(p.Job)+2*len(p.Trigger)+2*len(p.Spec))
	switch p.Op {
	case ledger.JobPause, ledger.JobResume:
		paused := "0"
		if p.Op == ledger.JobPause {
			paused = "1"
		}
		b = append(b, "INSERT INTO "...)
		b = append(b, s.ledgerTable("_jobs")...)
		b = append(b, " (job, paused, updated_at) VALUES ("...)
		b = appendHex(b, p.Job)
		b = append(b, ", "+paused+", UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE"+
			" updated_at = IF(paused = VALUES(paused), updated_at, VALUES(updated_at)), paused = VALUES(paused)"...)
	case ledger.JobTrigger, ledger.JobTriggerDone, ledger.JobCancel:
		if err := checkBytes(op, "Trigger", p.Trigger, maxTrigger); err != nil {
			return ledger.JobState{}, err
		}
		if err := checkBytes(op, "RunTrigger", p.RunTrigger, maxTrigger); err != nil {
			return ledger.JobState{}, err
		}
		if p.Op != ledger.JobTriggerDone {
			tr := p.Request()
			b = append(b, "INSERT INTO "...)
			b = append(b, s.ledgerTable("_triggers")...)
			b = append(b, " (job, trigger_id, requested_at, tick, rerun, cancel) VALUES ("...)
			b = appendHex(b, p.Job)
			b = append(b, ", "...)
			b = appendHex(b, p.Trigger)
			b = append(b, ", UTC_TIMESTAMP(6), "...)
			if tr.Tick.IsZero() {
				b = append(b, "NULL, 0"...)
			} else {
				var err error
				if b, err = appendTime(b, "trigger job", "Tick", tr.Tick); err != nil {
					return ledger.JobState{}, err
				}
				b = append(b, ", "...)
				b = strconv.AppendBool(b, tr.Rerun)
			}
			b = append(b, ", "...)
			b = appendHex(b, tr.CancelField())
			b = append(b, ") ON DUPLICATE KEY UPDATE requested_at = requested_at"...)
		} else {
			b = append(b, "DELETE FROM "...)
			b = append(b, s.ledgerTable("_triggers")...)
			b = append(b, " WHERE job = "...)
			b = appendHex(b, p.Job)
			b = append(b, " AND trigger_id = "...)
			b = appendHex(b, p.Trigger)
		}
	case ledger.JobRegister:
		// since is assigned first, while spec is still the stored one.
		b = append(b, "INSERT INTO "...)
		b = append(b, s.ledgerTable("_specs")...)
		b = append(b, " (job, spec, since) VALUES ("...)
		b = appendHex(b, p.Job)
		b = append(b, ", "...)
		b = appendHex(b, p.Spec)
		b = append(b, ", "...)
		var err error
		if b, err = appendTime(b, "register job", "Since", p.Since); err != nil {
			return ledger.JobState{}, err
		}
		b = append(b, ") ON DUPLICATE KEY UPDATE since = IF(spec = VALUES(spec), since, VALUES(since)), spec = VALUES(spec)"...)
	case ledger.JobForget:
		if err := s.forgetJob(ctx, p.Job); err != nil {
			return ledger.JobState{}, s.wrapLedger(fmt.Sprintf("forget job %q", p.Job), err)
		}
		return ledger.JobState{Job: p.Job}, nil
	}
	if _, err := s.db.ExecContext(ctx, string(b)); err != nil {
		return ledger.JobState{}, s.wrapLedger(fmt.Sprintf("set job state %q", p.Job), err)
	}
	sts, err := s.jobStates(ctx, p.Job, true)
	if err != nil {
		return ledger.JobState{}, s.wrapLedger(fmt.Sprintf("set job state %q", p.Job), err)
	}
	if len(sts) == 0 {
		return ledger.JobState{Job: p.Job}, nil
	}
	return sts[0], nil
}

// forgetJob deletes job's rows from the jobs, specs and triggers tables in
// one transaction.
func (s *Store) forgetJob(ctx context.Context, job string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	j := string(appendHex(nil, job))
	for _, table := range []string{"_jobs", "_specs", "_triggers"} {
		if _, err := tx.ExecContext(ctx, "DELETE FROM "+s.ledgerTable(table)+" WHERE job = "+j); err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}

// JobStates implements ledger.Ledger in one SELECT over the paused jobs
// and the pending triggers.
func (s *Store) JobStates(ctx context.Context) ([]ledger.JobState, error) {
	return s.listStates(ctx, "job states", false)
}

// Jobs implements ledger.Ledger in one SELECT over the paused jobs, the
// registered ones and the pending triggers.
func (s *Store) Jobs(ctx context.Context) ([]ledger.JobState, error) {
	return s.listStates(ctx, "jobs", true)
}

// listStates is JobStates and Jobs: jobStates over every job, its error
// that of ledger operation op.
func (s *Store) listStates(ctx context.Context, op string, registered bool) ([]ledger.JobState, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sts, err := s.jobStates(ctx, "", registered)
	if err != nil {
		return nil, s.wrapLedger(op, err)
	}
	return sts, nil
}

// jobStates reads the state of job, or of every job not in the default
// state when job is "", with the registrations when registered is set
// (always for one job). Rows come sorted by job, a job's paused and spec
// rows (whose trigger columns are NULL) before its triggers, oldest first.
func (s *Store) jobStates(ctx context.Context, job string, registered bool) ([]ledger.JobState, error) {
	jobCond, trigCond := " WHERE paused", ""
	if job != "" {
		j := string(appendHex(nil, job))
		jobCond, trigCond = " WHERE job = "+j, " WHERE job = "+j
	}
	q := "SELECT job, paused, NULL, NULL, 0, NULL, NULL, NULL, 0, NULL FROM " + s.ledgerTable("_jobs") + jobCond
	if registered || job != "" {
		q += " UNION ALL SELECT job, 0, NULL, NULL, 0, spec, DATE_FORMAT(since, " + dtFormat + "), NULL, 0, NULL FROM " + s.ledgerTable("_specs") + trigCond
	}
	q += " UNION ALL SELECT job, 0, trigger_id, DATE_FORMAT(requested_at, " + dtFormat + "), seq, NULL, NULL, DATE_FORMAT(tick, " + dtFormat + "), rerun, cancel FROM " +
		s.ledgerTable("_triggers") + trigCond + " ORDER BY 1, 4, 5"
	rows, err := s.db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ledger.JobState
	for rows.Next() {
		var (
			name        []byte
			paused      bool
			id, at      sql.NullString
			seq         uint64
			spec, since sql.NullString
			tick        sql.NullString
			rerun       bool
			cancel      sql.NullString
		)
		if err := rows.Scan(&name, &paused, &id, &at, &seq, &spec, &since, &tick, &rerun, &cancel); err != nil {
			return nil, err
		}
		if len(out) == 0 || !bytes.Equal([]byte(out[len(out)-1].Job), name) {
			out = append(out, ledger.JobState{Job: string(name)})
		}
		st := &out[len(out)-1]
		st.Paused = st.Paused || paused
		if spec.Valid && since.Valid {
			t, err := parseTime(since.String)
			if err != nil {
				return nil, err
			}
			st.Spec, st.Since = spec.String, t
		}
		if id.Valid {
			t, err := parseTime(at.String)
			if err != nil {
				return nil, err
			}
			tr := ledger.TriggerRequest{ID: id.String, At: t, Rerun: rerun}
			if tr.Tick, err = parseNullTime(tick); err != nil {
				return nil, err
			}
			if err := tr.SetCancelField(cancel.String); err != nil {
				return nil, err
			}
			st.Triggers = append(st.Triggers, tr)
		}
	}
	return out, rows.Err()
}

// pruneBatch bounds each DELETE of Prune, so that none holds locks on, or
// keeps undo for, a whole table.
const pruneBatch = 10000

// Prune implements ledger.Ledger: DELETEs of expired claims, of records by
// age and then by rank within their job (one multi-table DELETE joined
// with a ROW_NUMBER() ranking along the primary key), and of old trigger
// requests. Deletes by time run in batches of 10,000 rows.
func (s *Store) Prune(ctx context.Context, p ledger.PruneParams) (ledger.PruneResult, error) {
	if err := ctx.Err(); err != nil {
		return ledger.PruneResult{}, err
	}
	if p.RunsOlderThan < 0 || p.KeepPerJob < 0 || p.TriggersOlderThan < 0 {
		return ledger.PruneResult{}, errors.New("mysqlstore: prune: negative parameter")
	}
	var res ledger.PruneResult
	batched := func(n *int, q string) error {
		for {
			d, err := s.execRows(ctx, q+" LIMIT "+strconv.Itoa(pruneBatch))
			if err != nil {
				return s.wrapLedger("prune", err)
			}
			*n += int(d)
			if d < pruneBatch {
				return nil
			}
		}
	}
	if err := batched(&res.Claims, "DELETE FROM "+s.ledgerTable("_claims")+" WHERE expires_at <= UTC_TIMESTAMP(6)"); err != nil {
		return res, err
	}
	if p.RunsOlderThan > 0 {
		if err := batched(&res.Runs, "DELETE FROM "+s.ledgerTable("_runs")+" WHERE recorded_at < "+
			string(appendAgo(nil, p.RunsOlderThan))); err != nil {
			return res, err
		}
	}
	if p.KeepPerJob > 0 {
		runs := s.ledgerTable("_runs")
		n, err := s.execRows(ctx, "DELETE r FROM "+runs+" r JOIN (SELECT job, rev_tick, trigger_id, shard, rev_attempt FROM ("+
			"SELECT job, rev_tick, trigger_id, shard, rev_attempt,"+
			" ROW_NUMBER() OVER (PARTITION BY job ORDER BY rev_tick, trigger_id, shard, rev_attempt) AS rn FROM "+runs+
			") ranked WHERE rn > "+strconv.Itoa(p.KeepPerJob)+") d"+
			" ON r.job = d.job AND r.rev_tick = d.rev_tick AND r.trigger_id = d.trigger_id AND r.shard = d.shard AND r.rev_attempt = d.rev_attempt")
		if err != nil {
			return res, s.wrapLedger("prune", err)
		}
		res.Runs += int(n)
	}
	if p.TriggersOlderThan > 0 {
		if err := batched(&res.Triggers, "DELETE FROM "+s.ledgerTable("_triggers")+" WHERE requested_at < "+
			string(appendAgo(nil, p.TriggersOlderThan))); err != nil {
			return res, err
		}
	}
	return res, nil
}

// appendAgo appends "UTC_TIMESTAMP(6) - INTERVAL n MICROSECOND".
func appendAgo(b []byte, d time.Duration) []byte {
	b = append(b, "UTC_TIMESTAMP(6) - INTERVAL "...)
	b = strconv.AppendInt(b, micros(d), 10)
	return append(b, " MICROSECOND"...)
}
