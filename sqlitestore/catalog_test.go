package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// TestCatalogChangeAndAuditAtomic fails or cancels PutJobDef at each of its
// statements and checks that nothing of the change stays: the definitions,
// the versions and the audit list are as before, and the next change takes
// the version the failed one would have.
func TestCatalogChangeAndAuditAtomic(t *testing.T) {
	db, cc := openCounting(t, dbPath(t))
	s := newStoreT(t, db)
	failAt := func(n int64, cancel context.CancelFunc) {
		var seen atomic.Int64
		h := func() error {
			if seen.Add(1) != n {
				return nil
			}
			if cancel != nil {
				cancel()
				return nil // the statement runs; the call must notice after it
			}
			return errors.New("injected failure")
		}
		cc.hook.Store(&h)
	}
	audit := func() int {
		t.Helper()
		es, err := s.Audit(ctxT(t), ledger.AuditQuery{})
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	defs := func() string {
		t.Helper()
		ds, err := s.JobDefs(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		out := make([]string, len(ds))
		for i, d := range ds {
			out[i] = fmt.Sprintf("%s v%d %s", d.Job, d.Version, d.Def)
		}
		return strings.Join(out, ", ")
	}
	who := ledger.AuditEntry{Who: "tester", Action: "change"}
	changes := []struct {
		name       string
		p          ledger.JobDefParams
		statements int64
		after      string // JobDefs once it succeeds
	}{
		{"create", ledger.JobDefParams{Job: "j", Def: "d1", IfVersion: -1, Audit: who}, 2, "j v1 d1"},
		{"update", ledger.JobDefParams{Job: "j", Def: "d2", IfVersion: 1, Audit: who}, 2, "j v2 d2"},
		{"delete", ledger.JobDefParams{Job: "j", Delete: true, IfVersion: 2, Audit: who}, 3, ""},
		{"create again", ledger.JobDefParams{Job: "j", Def: "d3", IfVersion: -1, Audit: who}, 2, "j v3 d3"},
	}
	for i, c := range changes {
		before, entries := defs(), audit()
		for n := int64(1); n <= c.statements; n++ {
			for _, how := range []string{"failed statement", "cancelled context"} {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				var cancelAt context.CancelFunc
				if how == "cancelled context" {
					cancelAt = cancel
				}
				failAt(n, cancelAt)
				_, err := s.PutJobDef(ctx, c.p)
				cc.hook.Store(nil)
				cancel()
				if err == nil {
					t.Fatalf("%s: %s at statement %d: PutJobDef succeeded, want an error", c.name, how, n)
				}
				if got := defs(); got != before {
					t.Fatalf("%s: %s at statement %d: JobDefs %q, want %q as before", c.name, how, n, got, before)
				}
				if got := audit(); got != entries {
					t.Fatalf("%s: %s at statement %d: %d audit entries, want %d as before", c.name, how, n, got, entries)
				}
			}
		}
		if _, err := s.PutJobDef(ctxT(t), c.p); err != nil {
			t.Fatalf("%s after the failures: %v", c.name, err)
		}
		if got := defs(); got != c.after {
			t.Fatalf("%s: JobDefs %q, want %q", c.name, got, c.after)
		}
		if got := audit(); got != i+1 {
			t.Fatalf("%s: %d audit entries, want %d", c.name, got, i+1)
		}
	}
}

// TestCatalogStatements counts the statements and transactions of the
// catalog's calls.
func TestCatalogStatements(t *testing.T) {
	db, cc := openCounting(t, dbPath(t))
	s := newStoreT(t, db)
	ctx := ctxT(t)
	who := ledger.AuditEntry{Who: "tester", Action: "change"}
	count := func(name string, stmts, txs int64, wantErr error, fn func() error) {
		t.Helper()
		before, tx0 := cc.stmts.Load(), cc.txs.Load()
		if err := fn(); !errors.Is(err, wantErr) {
			t.Fatalf("%s: %v, want %v", name, err, wantErr)
		}
		if got := cc.stmts.Load() - before; got != stmts {
			t.Fatalf("%s: %d statements, want %d", name, got, stmts)
		}
		if got := cc.txs.Load() - tx0; got != txs {
			t.Fatalf("%s: %d transactions, want %d", name, got, txs)
		}
	}
	put := func(p ledger.JobDefParams) func() error {
		return func() error {
			p.Audit = who
			_, err := s.PutJobDef(ctx, p)
			return err
		}
	}
	count("create", 2, 1, nil, put(ledger.JobDefParams{Job: "j", Def: "d", IfVersion: -1}))
	count("update", 2, 1, nil, put(ledger.JobDefParams{Job: "j", Def: "d2"}))
	count("stale update", 1, 1, ledger.ErrVersion, put(ledger.JobDefParams{Job: "j", Def: "d3", IfVersion: 1}))
	count("delete", 3, 1, nil, put(ledger.JobDefParams{Job: "j", Delete: true}))
	count("delete of none", 2, 1, ledger.ErrNoJobDef, put(ledger.JobDefParams{Job: "j", Delete: true}))
	count("AppendAudit", 1, 0, nil, func() error { return s.AppendAudit(ctx, who) })
	count("Audit", 1, 0, nil, func() error {
		_, err := s.Audit(ctx, ledger.AuditQuery{Job: "j", Limit: 2})
		return err
	})
	count("JobDefs", 1, 0, nil, func() error {
		_, err := s.JobDefs(ctx)
		return err
	})
}

// TestCatalogAuditPlans: Audit reads the audit list in its order, without
// sorting: by rowid for every job, through the job index for one.
func TestCatalogAuditPlans(t *testing.T) {
	db := openT(t, dbPath(t), nil)
	s := newStoreT(t, db)
	for _, c := range []struct {
		q     ledger.AuditQuery
		index string
	}{
		{ledger.AuditQuery{Job: "j", Before: 10, Limit: 5}, "tasklock_locks_audit_job_idx"},
		{ledger.AuditQuery{Before: 10, Limit: 5}, "tasklock_locks_audit"},
	} {
		stmt, args := s.auditSQL(c.q)
		if p := queryPlan(t, db, stmt, args...); !strings.Contains(p, c.index) || strings.Contains(p, "TEMP B-TREE") {
			t.Errorf("plan of Audit(%+v): %s; want %s without a sort", c.q, p, c.index)
		}
	}
}
