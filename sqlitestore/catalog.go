package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/tasklock/tasklock/ledger"
)

var _ ledger.Catalog = (*Store)(nil)

// catalogSQL sets the catalog's statements (migration 0006).
func (l *ledgerSQL) catalogSQL() {
	// ?1 job, ?2 def, ?3 IfVersion. Creates the job's row (version 1) or
	// sets its definition and raises its version, when IfVersion allows:
	// 0 always; -1 when no row or a deleted one is there; n when the
	// stored definition's version is n (the SELECT's WHERE keeps a row
	// from being created then). It returns nothing when it changed
	// nothing.
	l.putDef = `INSERT INTO ` + l.defs + ` AS d (job, def, version, updated_at)
SELECT ?1, ?2, 1, ` + nowUS + `
WHERE ?3 <= 0 OR EXISTS (SELECT 1 FROM ` + l.defs + ` WHERE job = ?1)
ON CONFLICT (job) DO UPDATE SET def = excluded.def, version = d.version + 1, updated_at = excluded.updated_at
WHERE ?3 = 0 OR ?3 = -1 AND d.def IS NULL OR ?3 > 0 AND d.def IS NOT NULL AND d.version = ?3
RETURNING version, updated_at`
	// ?1 job, ?2 IfVersion (never -1 here). Deletes the stored
	// definition, returning it; tombstone then writes the row back
	// without it, keeping the version for the job's next create.
	l.deleteDef = `DELETE FROM ` + l.defs + `
WHERE job = ?1 AND def IS NOT NULL AND (?2 = 0 OR version = ?2)
RETURNING def, version, updated_at`
	l.tombstone = `INSERT INTO ` + l.defs + ` (job, def, version, updated_at) VALUES (?1, NULL, ?2, ` + nowUS + `)`
	l.defExists = `SELECT count(*) FROM ` + l.defs + ` WHERE job = ?1 AND def IS NOT NULL`
	l.allDefs = `SELECT job, def, version, updated_at FROM ` + l.defs + ` WHERE def IS NOT NULL`
	l.appendAudit = `INSERT INTO ` + l.audit + ` (at, who, job, action, detail) VALUES (` + nowUS + `, ?1, ?2, ?3, ?4)`
	l.auditHead = `SELECT seq, at, who, job, action, detail FROM ` + l.audit
}

// PutJobDef implements ledger.Catalog with one transaction: one INSERT …
// ON CONFLICT DO UPDATE … RETURNING that makes the change only when
// IfVersion allows (for a delete, a DELETE … RETURNING and an INSERT of the
// row without its definition, which keeps the job's version), then one
// INSERT of the audit entry. Both are SQLite's write, so the change and its
// entry commit together or not at all, and the first statement takes the
// write lock before anything is read. Updated and the entry's At are
// SQLite's now.
func (s *Store) PutJobDef(ctx context.Context, p ledger.JobDefParams) (d ledger.JobDef, err error) {
	if err := ctx.Err(); err != nil {
		return d, wrap(ctx, "put job definition", p.Job, err)
	}
	if err := p.Check(); err != nil {
		return d, fmt.Errorf("sqlitestore: %w", err)
	}
	tx, err := s.db.BeginTx(stmtCtx(ctx), nil)
	if err != nil {
		return d, wrap(ctx, "put job definition", p.Job, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	sctx := stmtCtx(ctx)
	var (
		updated int64
		found   bool
	)
	d = ledger.JobDef{Job: p.Job, Def: p.Def}
	if p.Delete {
		var def sql.NullString
		found, err = scanOne(sctx, tx, s.ledger.deleteDef, []any{p.Job, p.IfVersion}, &def, &d.Version, &updated)
		d.Def, d.Deleted = def.String, true
	} else {
		found, err = scanOne(sctx, tx, s.ledger.putDef, []any{p.Job, p.Def, p.IfVersion}, &d.Version, &updated)
	}
	if err != nil {
		return d, wrap(ctx, "put job definition", p.Job, err)
	}
	if !found {
		// Nothing changed: say why.
		err = fmt.Errorf("sqlitestore: job %q: %w", p.Job, ledger.ErrVersion)
		if p.Delete && p.IfVersion <= 0 {
			var n int
			if _, qerr := scanOne(sctx, tx, s.ledger.defExists, []any{p.Job}, &n); qerr != nil {
				err = wrap(ctx, "put job definition", p.Job, qerr)
			} else if n == 0 {
				err = fmt.Errorf("sqlitestore: job %q: %w", p.Job, ledger.ErrNoJobDef)
			}
		}
		return ledger.JobDef{}, err
	}
	d.Updated = fromUsec(updated)
	if err = ctx.Err(); err != nil { // between statements: see stmtCtx
		return d, wrap(ctx, "put job definition", p.Job, err)
	}
	if p.Delete {
		if _, err = tx.ExecContext(sctx, s.ledger.tombstone, p.Job, d.Version); err != nil {
			return d, wrap(ctx, "put job definition", p.Job, err)
		}
	}
	e := p.Audit
	if _, err = tx.ExecContext(sctx, s.ledger.appendAudit, e.Who, p.Job, e.Action, e.Detail); err != nil {
		return d, wrap(ctx, "put job definition", p.Job, err)
	}
	if err = ctx.Err(); err != nil {
		return d, wrap(ctx, "put job definition", p.Job, err)
	}
	if err = tx.Commit(); err != nil {
		return d, wrap(ctx, "put job definition", p.Job, err)
	}
	return d, nil
}

// scanOne runs stmt in tx and scans its first row into dest, reading the
// rest to the end (a statement with RETURNING finishes its change only
// then). It reports whether there was a row.
func scanOne(ctx context.Context, tx *sql.Tx, stmt string, args []any, dest ...any) (bool, error) {
	rows, err := tx.QueryContext(ctx, stmt, args...)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	found := false
	for rows.Next() {
		if !found {
			if err := rows.Scan(dest...); err != nil {
				return false, err
			}
			found = true
		}
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	return found, rows.Close()
}

// JobDefs implements ledger.Catalog with one SELECT.
func (s *Store) JobDefs(ctx context.Context) ([]ledger.JobDef, error) {
	if err := ctx.Err(); err != nil {
		return nil, wrap(ctx, "job definitions", "", err)
	}
	var out []ledger.JobDef
	err := s.queryText(ctx, s.ledger.allDefs, nil, func(rows *sql.Rows) error {
		var (
			d       ledger.JobDef
			updated int64
		)
		if err := rows.Scan(&d.Job, &d.Def, &d.Version, &updated); err != nil {
			return err
		}
		d.Updated = fromUsec(updated)
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, wrap(ctx, "job definitions", "", err)
	}
	return out, nil
}

// AppendAudit implements ledger.Catalog with one INSERT; At is SQLite's
// now.
func (s *Store) AppendAudit(ctx context.Context, e ledger.AuditEntry) error {
	if err := ctx.Err(); err != nil {
		return wrap(ctx, "append audit", e.Job, err)
	}
	if err := e.Check(); err != nil {
		return fmt.Errorf("sqlitestore: %w", err)
	}
	if _, err := s.db.ExecContext(stmtCtx(ctx), s.ledger.appendAudit, e.Who, e.Job, e.Action, e.Detail); err != nil {
		return wrap(ctx, "append audit", e.Job, err)
	}
	return nil
}

// auditSQL is Audit's statement for q and its arguments.
func (s *Store) auditSQL(q ledger.AuditQuery) (string, []any) {
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
	if q.Before > 0 {
		where = append(where, "seq < "+arg(q.Before))
	}
	stmt := s.ledger.auditHead
	if len(where) > 0 {
		stmt += "\nWHERE " + strings.Join(where, " AND ")
	}
	stmt += "\nORDER BY seq DESC"
	if q.Limit > 0 {
		stmt += "\nLIMIT " + arg(q.Limit)
	}
	return stmt, args
}

// Audit implements ledger.Catalog with one SELECT, which reads the audit
// table backwards (through the job index with q.Job) and stops at q.Limit.
func (s *Store) Audit(ctx context.Context, q ledger.AuditQuery) ([]ledger.AuditEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, wrap(ctx, "audit", q.Job, err)
	}
	switch {
	case q.Limit < 0:
		return nil, fmt.Errorf("sqlitestore: audit: negative Limit %d", q.Limit)
	case q.Before < 0:
		return nil, fmt.Errorf("sqlitestore: audit: negative Before %d", q.Before)
	}
	stmt, args := s.auditSQL(q)
	var out []ledger.AuditEntry
	err := s.queryText(ctx, stmt, args, func(rows *sql.Rows) error {
		var (
			e  ledger.AuditEntry
			at int64
		)
		if err := rows.Scan(&e.Seq, &at, &e.Who, &e.Job, &e.Action, &e.Detail); err != nil {
			return err
		}
		e.At = fromUsec(at)
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, wrap(ctx, "audit", q.Job, err)
	}
	return out, nil
}
