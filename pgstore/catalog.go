package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tasklock/tasklock/ledger"
)

var _ ledger.Catalog = (*Store)(nil)

// buildCatalogSQL sets the catalog's statements of l, whose defs and audit
// tables are named. Each change of a definition and its audit row are one
// statement: the audit INSERT is a data-modifying WITH that reads the
// changed row, so it inserts exactly when the change is made.
func buildCatalogSQL(l *ledgerSQL) {
	// $4 who, $5 action, $6 detail in putDef and updateDef; $3..$5 in
	// deleteDef.
	audit := func(who, action, detail string) string {
		return fmt.Sprintf(`a AS (
	INSERT INTO %s (at, who, job, action, detail) SELECT now(), %s, $1, %s, %s FROM d
)`, l.audit, who, action, detail)
	}
	// Create or replace, unguarded (IfVersion 0) or only when no live
	// definition is stored (-1). A deleted job's row keeps its version, so
	// the new definition's is one above the last. The WHERE is evaluated
	// on the newest row version, after waiting for a concurrent writer.
	l.putDef = fmt.Sprintf(`WITH d AS (
	INSERT INTO %[1]s AS d (job, def, version, deleted, updated_at) VALUES ($1, $2, 1, false, now())
	ON CONFLICT (job) DO UPDATE SET
		def = EXCLUDED.def, version = d.version + 1, deleted = false, updated_at = EXCLUDED.updated_at
	WHERE $3::bigint = 0 OR d.deleted
	RETURNING d.version, d.updated_at
), %[2]s
SELECT version, updated_at FROM d`, l.defs, audit("$4", "$5", "$6"))
	// Replace at a version ($3 > 0). READ COMMITTED re-checks the WHERE on
	// the newest row version, so of two writers at one version one wins.
	l.updateDef = fmt.Sprintf(`WITH d AS (
	UPDATE %[1]s SET def = $2, version = version + 1, updated_at = now()
	WHERE job = $1 AND NOT deleted AND version = $3
	RETURNING version, updated_at
), %[2]s
SELECT version, updated_at FROM d`, l.defs, audit("$4", "$5", "$6"))
	// Delete, unguarded ($2 = 0) or at a version. The row stays, marked,
	// with its version and def: RETURNING gives the deleted definition.
	l.deleteDef = fmt.Sprintf(`WITH d AS (
	UPDATE %[1]s SET deleted = true, updated_at = now()
	WHERE job = $1 AND NOT deleted AND ($2::bigint = 0 OR version = $2)
	RETURNING def, version, updated_at
), %[2]s
SELECT def, version, updated_at FROM d`, l.defs, audit("$3", "$4", "$5"))
	l.appendAudit = fmt.Sprintf(`INSERT INTO %s (at, who, job, action, detail) VALUES (now(), $1, $2, $3, $4)`, l.audit)
	l.jobDefs = fmt.Sprintf(`SELECT job, def, version, updated_at FROM %s WHERE NOT deleted`, l.defs)
}

// checkAudit validates an audit entry and returns its Detail made
// storable (invalid UTF-8 and NUL become U+FFFD).
func checkAudit(op string, e *ledger.AuditEntry) (string, error) {
	if err := e.Check(); err != nil {
		return "", fmt.Errorf("pgstore: %s: %w", op, err)
	}
	for _, f := range []struct{ name, s string }{{"Who", e.Who}, {"Job", e.Job}, {"Action", e.Action}} {
		if err := checkName(op, "audit "+f.name, f.s, maxLedgerName); err != nil {
			return "", err
		}
	}
	return cleanText(e.Detail), nil
}

// PutJobDef implements ledger.Catalog in one statement that makes the
// change and inserts its audit row (two for a delete guarded by -1, which
// reads whether the job is defined to say which error it is). Def must be
// UTF-8 text without NUL (ErrUnsupported otherwise).
func (s *Store) PutJobDef(ctx context.Context, p ledger.JobDefParams) (ledger.JobDef, error) {
	if err := ctx.Err(); err != nil {
		return ledger.JobDef{}, err
	}
	if err := p.Check(); err != nil {
		return ledger.JobDef{}, fmt.Errorf("pgstore: %w", err)
	}
	const op = "put job definition"
	if err := checkName(op, "Job", p.Job, maxLedgerName); err != nil {
		return ledger.JobDef{}, err
	}
	if err := checkName(op, "Def", p.Def, ledger.MaxJobDef); err != nil {
		return ledger.JobDef{}, err
	}
	p.Audit.Job = p.Job
	detail, err := checkAudit(op, &p.Audit)
	if err != nil {
		return ledger.JobDef{}, err
	}
	l := s.ledger()
	d := ledger.JobDef{Job: p.Job, Def: p.Def, Deleted: p.Delete}
	var row pgx.Row
	switch {
	case p.Delete && p.IfVersion == -1:
		// Deleting only what is not there never deletes anything.
		var defined bool
		q := "SELECT EXISTS (SELECT 1 FROM " + l.defs + " WHERE job = $1 AND NOT deleted)"
		if err := s.pool.QueryRow(ctx, q, p.Job).Scan(&defined); err != nil {
			return ledger.JobDef{}, s.wrapLedger(op, err)
		}
		if defined {
			return ledger.JobDef{}, fmt.Errorf("pgstore: job %q: %w", p.Job, ledger.ErrVersion)
		}
		return ledger.JobDef{}, fmt.Errorf("pgstore: job %q: %w", p.Job, ledger.ErrNoJobDef)
	case p.Delete:
		row = s.pool.QueryRow(ctx, l.deleteDef, p.Job, p.IfVersion, p.Audit.Who, p.Audit.Action, detail)
		err = row.Scan(&d.Def, &d.Version, &d.Updated)
	case p.IfVersion > 0:
		row = s.pool.QueryRow(ctx, l.updateDef, p.Job, p.Def, p.IfVersion, p.Audit.Who, p.Audit.Action, detail)
		err = row.Scan(&d.Version, &d.Updated)
	default:
		row = s.pool.QueryRow(ctx, l.putDef, p.Job, p.Def, p.IfVersion, p.Audit.Who, p.Audit.Action, detail)
		err = row.Scan(&d.Version, &d.Updated)
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows) && p.Delete && p.IfVersion == 0:
		return ledger.JobDef{}, fmt.Errorf("pgstore: job %q: %w", p.Job, ledger.ErrNoJobDef)
	case errors.Is(err, pgx.ErrNoRows):
		return ledger.JobDef{}, fmt.Errorf("pgstore: job %q: %w", p.Job, ledger.ErrVersion)
	case err != nil:
		return ledger.JobDef{}, s.wrapLedger(fmt.Sprintf("%s %q", op, p.Job), err)
	}
	d.Updated = d.Updated.UTC()
	return d, nil
}

// JobDefs implements ledger.Catalog in one SELECT.
func (s *Store) JobDefs(ctx context.Context) ([]ledger.JobDef, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.ledger().jobDefs)
	if err != nil {
		return nil, s.wrapLedger("job definitions", err)
	}
	var (
		out []ledger.JobDef
		d   ledger.JobDef
	)
	_, err = pgx.ForEachRow(rows, []any{&d.Job, &d.Def, &d.Version, &d.Updated}, func() error {
		def := d
		def.Updated = d.Updated.UTC()
		out = append(out, def)
		return nil
	})
	if err != nil {
		return nil, s.wrapLedger("job definitions", err)
	}
	return out, nil
}

// AppendAudit implements ledger.Catalog in one INSERT. Who, Job and Action
// must be UTF-8 text without NUL (ErrUnsupported otherwise); invalid UTF-8
// and NUL in Detail become U+FFFD.
func (s *Store) AppendAudit(ctx context.Context, e ledger.AuditEntry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	detail, err := checkAudit("append audit", &e)
	if err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, s.ledger().appendAudit, e.Who, e.Job, e.Action, detail); err != nil {
		return s.wrapLedger("append audit", err)
	}
	return nil
}

// Audit implements ledger.Catalog in one SELECT along the audit table's
// primary key (or, for one job, its (job, seq) index). Seq comes from an
// identity column: rising and unique, in the order the entries were
// inserted, which for entries whose transactions overlap need not be the
// order they committed in.
func (s *Store) Audit(ctx context.Context, q ledger.AuditQuery) ([]ledger.AuditEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if q.Limit < 0 {
		return nil, fmt.Errorf("pgstore: audit: negative Limit %d", q.Limit)
	}
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	var where []string
	if q.Job != "" {
		where = append(where, "job = "+arg(q.Job))
	}
	if q.Before > 0 {
		where = append(where, "seq < "+arg(q.Before))
	}
	sql := "SELECT seq, at, who, job, action, detail FROM " + s.ledger().audit
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	sql += " ORDER BY seq DESC"
	if q.Limit > 0 {
		sql += " LIMIT " + arg(q.Limit)
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, s.wrapLedger("audit", err)
	}
	var (
		out []ledger.AuditEntry
		e   ledger.AuditEntry
		at  time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&e.Seq, &at, &e.Who, &e.Job, &e.Action, &e.Detail}, func() error {
		en := e
		en.At = at.UTC()
		out = append(out, en)
		return nil
	})
	if err != nil {
		return nil, s.wrapLedger("audit", err)
	}
	return out, nil
}
