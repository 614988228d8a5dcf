package pgstore

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tasklock/tasklock/ledger"
)

// putDef calls PutJobDef with an audit entry by "tester".
func putDef(t *testing.T, c ledger.Catalog, p ledger.JobDefParams) (ledger.JobDef, error) {
	t.Helper()
	p.Audit = ledger.AuditEntry{Who: "tester", Action: "change"}
	return c.PutJobDef(ctxT(t), p)
}

// TestCatalogGuards: what IfVersion and Delete refuse, around a delete;
// refused changes append nothing.
func TestCatalogGuards(t *testing.T) {
	t.Parallel()
	c := newStore(t, newPool(t, newDB(t), nil), nil)
	steps := []struct {
		p       ledger.JobDefParams
		want    error
		version int64
	}{
		{ledger.JobDefParams{Job: "a", Def: "1", IfVersion: -1}, nil, 1},
		{ledger.JobDefParams{Job: "a", Delete: true, IfVersion: -1}, ledger.ErrVersion, 0},
		{ledger.JobDefParams{Job: "a", Delete: true}, nil, 1},
		{ledger.JobDefParams{Job: "a", Delete: true, IfVersion: -1}, ledger.ErrNoJobDef, 0},
		{ledger.JobDefParams{Job: "a", Delete: true, IfVersion: 1}, ledger.ErrVersion, 0},
		{ledger.JobDefParams{Job: "a", Def: "2", IfVersion: 1}, ledger.ErrVersion, 0},
		{ledger.JobDefParams{Job: "never", Def: "x", IfVersion: 1}, ledger.ErrVersion, 0},
		{ledger.JobDefParams{Job: "never", Delete: true}, ledger.ErrNoJobDef, 0},
		{ledger.JobDefParams{Job: "a", Def: "2", IfVersion: -1}, nil, 2},
		{ledger.JobDefParams{Job: "a", Def: "3", IfVersion: 2}, nil, 3},
		{ledger.JobDefParams{Job: "b", Def: "1"}, nil, 1},
	}
	for i, s := range steps {
		d, err := putDef(t, c, s.p)
		switch {
		case s.want != nil && !errors.Is(err, s.want):
			t.Fatalf("step %d %+v: %v, want %v", i, s.p, err, s.want)
		case s.want == nil && err != nil:
			t.Fatalf("step %d %+v: %v", i, s.p, err)
		case s.want == nil && (d.Version != s.version || d.Deleted != s.p.Delete):
			t.Fatalf("step %d %+v: %+v, want version %d", i, s.p, d, s.version)
		case s.want == nil && s.p.Delete && d.Def != "1":
			t.Fatalf("step %d: deleted %+v, want the deleted definition", i, d)
		}
	}
	es, err := c.Audit(ctxT(t), ledger.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 5 || es[0].Job != "b" || es[4].Job != "a" {
		t.Fatalf("audit %+v, want the 5 changes made", es)
	}
	ds, err := c.JobDefs(ctxT(t))
	if err != nil || len(ds) != 2 {
		t.Fatalf("JobDefs = %+v, %v", ds, err)
	}
}

// TestCatalogCreateRace: of creators of one new job racing (and writers
// at a version it never had), exactly one wins, the others are told
// ErrVersion, and one change is audited.
func TestCatalogCreateRace(t *testing.T) {
	t.Parallel()
	c := newStore(t, newPool(t, newDB(t), func(c *pgxpool.Config) { c.MaxConns = 16 }), nil)
	for round := range 10 {
		job := fmt.Sprintf("race-%d", round)
		const creators, strays = 8, 4
		errs := make([]error, creators+strays)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := ledger.JobDefParams{Job: job, Def: fmt.Sprint(i), IfVersion: -1}
				if i >= creators {
					p.IfVersion = 3
				}
				<-start
				_, errs[i] = putDef(t, c, p)
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		for i, err := range errs {
			switch {
			case err == nil && i < creators:
				won++
			case !errors.Is(err, ledger.ErrVersion):
				t.Fatalf("round %d, writer %d: %v, want nil or ErrVersion", round, i, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d creators won", round, won)
		}
		es, err := c.Audit(ctxT(t), ledger.AuditQuery{Job: job})
		if err != nil || len(es) != 1 {
			t.Fatalf("round %d: audit %+v, %v; want one entry", round, es, err)
		}
	}
}

// TestCatalogText: a definition and an audit entry are text: a Def
// PostgreSQL cannot store is ErrUnsupported and changes nothing; a Detail
// is made storable.
func TestCatalogText(t *testing.T) {
	t.Parallel()
	s := newStore(t, newPool(t, newDB(t), nil), nil)
	if _, err := putDef(t, s, ledger.JobDefParams{Job: "j", Def: "a\x00b"}); !errors.Is(err, ledger.ErrUnsupported) {
		t.Fatalf("Def with NUL: %v, want ErrUnsupported", err)
	}
	if _, err := putDef(t, s, ledger.JobDefParams{Job: strings.Repeat("j", maxLedgerName+1), Def: "{}"}); !errors.Is(err, ledger.ErrUnsupported) {
		t.Fatalf("long Job: %v, want ErrUnsupported", err)
	}
	if err := s.AppendAudit(ctxT(t), ledger.AuditEntry{Who: "w\xff", Action: "a"}); !errors.Is(err, ledger.ErrUnsupported) {
		t.Fatalf("Who not UTF-8: %v, want ErrUnsupported", err)
	}
	if err := s.AppendAudit(ctxT(t), ledger.AuditEntry{Who: "w", Action: "a", Detail: "x\x00y\xff"}); err != nil {
		t.Fatal(err)
	}
	es, err := s.Audit(ctxT(t), ledger.AuditQuery{})
	if err != nil || len(es) != 1 || es[0].Detail != "x\uFFFDy\uFFFD" {
		t.Fatalf("audit %+v, %v; want only the entry with its Detail made text", es, err)
	}
}
