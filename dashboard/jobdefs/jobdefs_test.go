package jobdefs_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tasklock/tasklock/dashboard/apijson"
	"github.com/tasklock/tasklock/dashboard/jobdefs"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/memstore"
)

// stale is a catalog whose JobDefs answers what it read first: another
// change lands between Apply's read and its write.
type stale struct {
	ledger.Catalog
	defs []ledger.JobDef
}

func (s *stale) JobDefs(ctx context.Context) ([]ledger.JobDef, error) {
	if s.defs == nil {
		d, err := s.Catalog.JobDefs(ctx)
		if err != nil {
			return nil, err
		}
		s.defs = d
	}
	return s.defs, nil
}

func TestApply(t *testing.T) {
	ctx := context.Background()
	st := memstore.New(nil)
	apply := func(cat ledger.Catalog, c jobdefs.Change) (jobdefs.Result, error) {
		c.Who = "test"
		return jobdefs.Apply(ctx, cat, c)
	}
	if _, err := apply(st, jobdefs.Change{Op: jobdefs.Update, Job: "x", Def: `{"a":1}`}); !errors.Is(err, jobdefs.ErrNotDefined) || !errors.Is(err, ledger.ErrNoJobDef) {
		t.Fatalf("update of nothing: %v", err)
	}
	r, err := apply(st, jobdefs.Change{Op: jobdefs.Create, Job: "x", Def: `{"a":1}`})
	if err != nil || r.Def.Version != 1 || !r.Changed || r.Detail != "a: (unset) -> 1" {
		t.Fatalf("create: %+v %v", r, err)
	}
	if _, err := apply(st, jobdefs.Change{Op: jobdefs.Create, Job: "x", Def: `{"a":2}`}); !errors.Is(err, jobdefs.ErrExists) {
		t.Fatalf("second create: %v", err)
	}
	// The same definition again changes nothing and writes no audit.
	if r, err := apply(st, jobdefs.Change{Op: jobdefs.Update, Job: "x", Def: `{"a":1}`}); err != nil || r.Changed || r.Def.Version != 1 {
		t.Fatalf("no-op update: %+v %v", r, err)
	}
	// A change between the read and the write: refused, nothing written.
	s := &stale{Catalog: st}
	if _, err := s.JobDefs(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(st, jobdefs.Change{Op: jobdefs.Update, Job: "x", Def: `{"a":2}`}); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(s, jobdefs.Change{Op: jobdefs.Update, Job: "x", Def: `{"a":3}`}); !errors.Is(err, jobdefs.ErrChanged) || !errors.Is(err, ledger.ErrVersion) {
		t.Fatalf("update on a stale version: %v", err)
	}
	if _, err := apply(s, jobdefs.Change{Op: jobdefs.Delete, Job: "x"}); !errors.Is(err, jobdefs.ErrChanged) {
		t.Fatalf("delete on a stale version: %v", err)
	}
	defs, _ := st.JobDefs(ctx)
	if len(defs) != 1 || defs[0].Def != `{"a":2}` || defs[0].Version != 2 {
		t.Fatalf("defs %+v", defs)
	}
	if _, err := apply(st, jobdefs.Change{Op: jobdefs.Delete, Job: "x", Cancel: true}); err != nil {
		t.Fatal(err)
	}
	es, err := st.Audit(ctx, ledger.AuditQuery{Job: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 3 || es[0].Action != "delete" || !apijson.DeleteCancels(es[0]) || es[1].Detail != "a: 1 -> 2" || es[2].Action != "create" {
		t.Fatalf("audit %+v", es)
	}
}

func TestDefDiffHidesHTTP(t *testing.T) {
	d := apijson.DefDiff(`{"http":{"url":"https://x","headers":{"Authorization":"Bearer s3cret"}},"schedule":"@hourly"}`,
		`{"http":{"url":"https://y","headers":{"Authorization":"Bearer n3w"}},"schedule":"@daily"}`)
	if d != "http: changed\nschedule: \"@hourly\" -> \"@daily\"" {
		t.Fatalf("diff %q", d)
	}
	if d := apijson.DefDiff("", `{"http":{"headers":{"Authorization":"Bearer s3cret"}}}`); d != "http: (unset) -> (set)" {
		t.Fatalf("create diff %q", d)
	}
}
