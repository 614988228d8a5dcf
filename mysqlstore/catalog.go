package mysqlstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

var _ ledger.Catalog = (*Store)(nil)

// Limits of what the catalog tables hold (see migrations/006_shards_catalog.sql).
const (
	maxAuditWho    = 512 // bytes: who VARBINARY(512)
	maxAuditAction = 128 // bytes: action VARBINARY(128)
)

// errCatalogRefused carries PutJobDef's ErrVersion or ErrNoJobDef out of
// its transaction, which is then rolled back.
type errCatalogRefused struct{ err error }

func (e errCatalogRefused) Error() string { return e.err.Error() }

// checkAudit validates an audit entry against the audit table's columns.
func checkAudit(op string, e *ledger.AuditEntry) error {
	if err := e.Check(); err != nil {
		return fmt.Errorf("mysqlstore: %s: %w", op, err)
	}
	if err := checkBytes(op, "audit Who", e.Who, maxAuditWho); err != nil {
		return err
	}
	if err := checkBytes(op, "audit Job", e.Job, maxJob); err != nil {
		return err
	}
	return checkBytes(op, "audit Action", e.Action, maxAuditAction)
}

// appendAuditRow appends "(at, who, job, action, detail)" values of e,
// with at the literal given.
func appendAuditRow(b []byte, at string, e *ledger.AuditEntry) []byte {
	b = append(b, " (at, who, job, action, detail) VALUES ("...)
	b = append(b, at...)
	for _, v := range []string{e.Who, e.Job, e.Action, e.Detail} {
		b = append(b, ", "...)
		b = appendHex(b, v)
	}
	return append(b, ')')
}

// PutJobDef implements ledger.Catalog in one transaction: an INSERT ... ON
// DUPLICATE KEY UPDATE that makes sure the job's row exists and locks it
// (a job never defined gets a placeholder, version 0 and deleted), a
// SELECT of the row and the server's clock, then, when the change is
// allowed, an UPDATE of the row and the INSERT of the audit entry, both
// with that clock's time. A refused change is rolled back, placeholder and
// all. Concurrent changes of one job queue on its row lock; a deadlock or
// lock wait timeout is tried again, up to catalogTries times in all, after
// a jittered pause that grows with each try. Job and Def are kept byte for
// byte.
func (s *Store) PutJobDef(ctx context.Context, p ledger.JobDefParams) (ledger.JobDef, error) {
	if err := ctx.Err(); err != nil {
		return ledger.JobDef{}, err
	}
	const op = "put job definition"
	if err := p.Check(); err != nil {
		return ledger.JobDef{}, fmt.Errorf("mysqlstore: %w", err)
	}
	if err := checkBytes(op, "Job", p.Job, maxJob); err != nil {
		return ledger.JobDef{}, err
	}
	p.Audit.Job = p.Job
	if err := checkAudit(op, &p.Audit); err != nil {
		return ledger.JobDef{}, err
	}
	for attempt := 1; ; attempt++ {
		d, err := s.putJobDefTx(ctx, &p)
		var refused errCatalogRefused
		switch {
		case err == nil:
			return d, nil
		case errors.As(err, &refused):
			return ledger.JobDef{}, fmt.Errorf("mysqlstore: job %q: %w", p.Job, refused.err)
		case lockConflict(err) && attempt < catalogTries && ctx.Err() == nil:
			// Writers that deadlocked together would meet again at once.
			t := time.NewTimer(time.Duration(1+rand.IntN(attempt*2000)) * time.Microsecond)
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
			}
		}
		return ledger.JobDef{}, s.wrapLedger(fmt.Sprintf("%s %q", op, p.Job), err)
	}
}

// catalogTries bounds PutJobDef's attempts when InnoDB reports a deadlock
// or a lock wait timeout. A dozen writers creating one new job at once
// (TestCatalogCreateRace) deadlocked three times in a row under a loaded
// CI run, when the bound was 3.
const catalogTries = 8

func (s *Store) putJobDefTx(ctx context.Context, p *ledger.JobDefParams) (ledger.JobDef, error) {
	defs := s.ledgerTable("_defs")
	job := string(appendHex(nil, p.Job))
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return ledger.JobDef{}, err
	}
	defer func() { _ = tx.Rollback() }() // after Commit it does nothing
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+defs+" (job, def, version, deleted, updated_at) VALUES ("+
		job+", X'', 0, 1, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE job = job"); err != nil {
		return ledger.JobDef{}, err
	}
	var (
		cur     ledger.JobDef
		deleted bool
		now     string
	)
	err = tx.QueryRowContext(ctx, "SELECT def, version, deleted, DATE_FORMAT(UTC_TIMESTAMP(6), "+dtFormat+") FROM "+
		defs+" WHERE job = "+job+" FOR UPDATE").Scan(&cur.Def, &cur.Version, &deleted, &now)
	if err != nil {
		return ledger.JobDef{}, err
	}
	exists := !deleted
	switch {
	case p.IfVersion == -1 && exists, p.IfVersion > 0 && (!exists || cur.Version != p.IfVersion):
		return ledger.JobDef{}, errCatalogRefused{ledger.ErrVersion}
	case p.Delete && !exists:
		return ledger.JobDef{}, errCatalogRefused{ledger.ErrNoJobDef}
	}
	at, err := parseTime(now)
	if err != nil {
		return ledger.JobDef{}, err
	}
	atLit := "'" + now + "'"
	d := ledger.JobDef{Job: p.Job, Def: p.Def, Version: cur.Version + 1, Updated: at}
	b := make([]byte, 0, 200+2*len(p.Def)+2*len(p.Job))
	b = append(b, "UPDATE "...)
	b = append(b, defs...)
	if p.Delete {
		d.Def, d.Version, d.Deleted = cur.Def, cur.Version, true
		b = append(b, " SET deleted = 1"...)
	} else {
		b = append(b, " SET deleted = 0, def = "...)
		b = appendHex(b, p.Def)
		b = append(b, ", version = "...)
		b = strconv.AppendInt(b, d.Version, 10)
	}
	b = append(b, ", updated_at = "+atLit+" WHERE job = "+job...)
	if _, err := tx.ExecContext(ctx, string(b)); err != nil {
		return ledger.JobDef{}, err
	}
	b = append(b[:0], "INSERT INTO "+s.ledgerTable("_audit")...)
	b = appendAuditRow(b, atLit, &p.Audit)
	if _, err := tx.ExecContext(ctx, string(b)); err != nil {
		return ledger.JobDef{}, err
	}
	if err := tx.Commit(); err != nil {
		return ledger.JobDef{}, err
	}
	return d, nil
}

// JobDefs implements ledger.Catalog in one SELECT.
func (s *Store) JobDefs(ctx context.Context) ([]ledger.JobDef, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	const op = "job definitions"
	rows, err := s.db.QueryContext(ctx, "SELECT job, def, version, DATE_FORMAT(updated_at, "+dtFormat+") FROM "+
		s.ledgerTable("_defs")+" WHERE deleted = 0")
	if err != nil {
		return nil, s.wrapLedger(op, err)
	}
	defer rows.Close()
	var out []ledger.JobDef
	for rows.Next() {
		var (
			d  ledger.JobDef
			at string
		)
		if err := rows.Scan(&d.Job, &d.Def, &d.Version, &at); err != nil {
			return nil, s.wrapLedger(op, err)
		}
		if d.Updated, err = parseTime(at); err != nil {
			return nil, s.wrapLedger(op, err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrapLedger(op, err)
	}
	return out, nil
}

// AppendAudit implements ledger.Catalog in one INSERT. Every field is kept
// byte for byte.
func (s *Store) AppendAudit(ctx context.Context, e ledger.AuditEntry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	const op = "append audit"
	if err := checkAudit(op, &e); err != nil {
		return err
	}
	b := make([]byte, 0, 200+2*(len(e.Who)+len(e.Job)+len(e.Action)+len(e.Detail)))
	b = append(b, "INSERT INTO "+s.ledgerTable("_audit")...)
	b = appendAuditRow(b, "UTC_TIMESTAMP(6)", &e)
	if _, err := s.db.ExecContext(ctx, string(b)); err != nil {
		return s.wrapLedger(op, err)
	}
	return nil
}

// Audit implements ledger.Catalog in one SELECT along the audit table's
// primary key (or, for one job, its (job, seq) key), newest first. Seq is
// an AUTO_INCREMENT: rising and unique, in the order the entries were
// inserted, which for entries whose transactions overlap need not be the
// order they committed in.
func (s *Store) Audit(ctx context.Context, q ledger.AuditQuery) ([]ledger.AuditEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	const op = "audit"
	if q.Limit < 0 {
		return nil, fmt.Errorf("mysqlstore: audit: negative Limit %d", q.Limit)
	}
	var where []string
	if q.Job != "" {
		where = append(where, "job = "+string(appendHex(nil, q.Job)))
	}
	if q.Before > 0 {
		where = append(where, "seq < "+strconv.FormatInt(q.Before, 10))
	}
	query := "SELECT seq, DATE_FORMAT(at, " + dtFormat + "), who, job, action, detail FROM " + s.ledgerTable("_audit")
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY seq DESC"
	if q.Limit > 0 {
		query += " LIMIT " + strconv.Itoa(q.Limit)
	}
	rows, err := s.db.QueryContext(ctx, query)
	if err != nil {
		return nil, s.wrapLedger(op, err)
	}
	defer rows.Close()
	var out []ledger.AuditEntry
	for rows.Next() {
		var (
			e  ledger.AuditEntry
			at string
		)
		if err := rows.Scan(&e.Seq, &at, &e.Who, &e.Job, &e.Action, &e.Detail); err != nil {
			return nil, s.wrapLedger(op, err)
		}
		if e.At, err = parseTime(at); err != nil {
			return nil, s.wrapLedger(op, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrapLedger(op, err)
	}
	return out, nil
}
