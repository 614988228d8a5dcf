package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

var _ ledger.Catalog = (*Store)(nil)

// PutJobDef implements ledger.Catalog.
func (s *Store) PutJobDef(ctx context.Context, p ledger.JobDefParams) (ledger.JobDef, error) {
	if err := ctx.Err(); err != nil {
		return ledger.JobDef{}, err
	}
	if err := p.Check(); err != nil {
		return ledger.JobDef{}, fmt.Errorf("memstore: %w", err)
	}
	ls := s.ledger()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	cur, exists := ls.defs[p.Job]
	switch {
	case p.IfVersion == -1 && exists, p.IfVersion > 0 && (!exists || cur.Version != p.IfVersion):
		return ledger.JobDef{}, fmt.Errorf("memstore: job %q: %w", p.Job, ledger.ErrVersion)
	case p.Delete && !exists:
		return ledger.JobDef{}, fmt.Errorf("memstore: job %q: %w", p.Job, ledger.ErrNoJobDef)
	}
	now := s.now()
	var d ledger.JobDef
	if p.Delete {
		delete(ls.defs, p.Job)
		d = cur
		d.Deleted = true
	} else {
		ls.versions[p.Job]++
		d = ledger.JobDef{Job: p.Job, Def: p.Def, Version: ls.versions[p.Job], Updated: now}
		ls.defs[p.Job] = d
	}
	p.Audit.Job = p.Job
	ls.appendAudit(p.Audit, now)
	return d, nil
}

// appendAudit adds e with the next Seq. Callers hold ls.mu.
func (ls *ledgerState) appendAudit(e ledger.AuditEntry, now time.Time) {
	e.Seq, e.At = int64(len(ls.audit))+1, now
	ls.audit = append(ls.audit, e)
}

// JobDefs implements ledger.Catalog.
func (s *Store) JobDefs(ctx context.Context) ([]ledger.JobDef, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ls := s.ledger()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	out := make([]ledger.JobDef, 0, len(ls.defs))
	for _, d := range ls.defs {
		out = append(out, d)
	}
	return out, nil
}

// AppendAudit implements ledger.Catalog.
func (s *Store) AppendAudit(ctx context.Context, e ledger.AuditEntry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := e.Check(); err != nil {
		return fmt.Errorf("memstore: %w", err)
	}
	ls := s.ledger()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.appendAudit(e, s.now())
	return nil
}

// Audit implements ledger.Catalog.
func (s *Store) Audit(ctx context.Context, q ledger.AuditQuery) ([]ledger.AuditEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ls := s.ledger()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	var out []ledger.AuditEntry
	for i := len(ls.audit) - 1; i >= 0; i-- {
		e := ls.audit[i]
		switch {
		case q.Before > 0 && e.Seq >= q.Before, q.Job != "" && e.Job != q.Job:
			continue
		}
		out = append(out, e)
		if q.Limit > 0 && len(out) == q.Limit {
			break
		}
	}
	return out, nil
}
