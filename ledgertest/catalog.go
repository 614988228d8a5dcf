package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// catalogOf returns l's ledger.Catalog: every ledger in this repository
// keeps job definitions.
func catalogOf(t *testing.T, l ledger.Ledger) ledger.Catalog {
	t.Helper()
	c, ok := l.(ledger.Catalog)
	if !ok {
		t.Fatalf("%T does not implement ledger.Catalog", l)
	}
	return c
}

func put(t *testing.T, c ledger.Catalog, p ledger.JobDefParams) (ledger.JobDef, error) {
	t.Helper()
	if p.Audit.Who == "" {
		p.Audit.Who = "tester"
	}
	if p.Audit.Action == "" {
		p.Audit.Action = "update"
	}
	return c.PutJobDef(ctxT(t, 10*time.Second), p)
}

func defsOf(t *testing.T, c ledger.Catalog) map[string]ledger.JobDef {
	t.Helper()
	ds, err := c.JobDefs(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatalf("JobDefs: %v", err)
	}
	m := make(map[string]ledger.JobDef, len(ds))
	for _, d := range ds {
		if _, dup := m[d.Job]; dup {
			t.Fatalf("JobDefs lists %q twice", d.Job)
		}
		m[d.Job] = d
	}
	return m
}

// testCatalogVersions: create, update and delete, guarded by versions that
// rise by one with each change, also across a delete.
func testCatalogVersions(t *testing.T, l ledger.Ledger) {
	c := catalogOf(t, l)
	before := time.Now()
	def := `{"schedule":"@every 1s","command":["echo","ünïcode ✓"]}`
	d, err := put(t, c, ledger.JobDefParams{Job: "cv", Def: def, IfVersion: -1})
	if err != nil || d.Version != 1 || d.Def != def || d.Job != "cv" || d.Deleted {
		t.Fatalf("create: %+v, %v; want version 1", d, err)
	}
	if d.Updated.Before(before.Add(-time.Minute)) || d.Updated.After(time.Now().Add(time.Minute)) {
		t.Fatalf("Updated = %v, want the store's now (about %v)", d.Updated, before)
	}
	if _, err := put(t, c, ledger.JobDefParams{Job: "cv", Def: "x", IfVersion: -1}); !errors.Is(err, ledger.ErrVersion) {
		t.Fatalf("second create: %v, want ErrVersion", err)
	}
	if _, err := put(t, c, ledger.JobDefParams{Job: "cv", Def: "x", IfVersion: 7}); !errors.Is(err, ledger.ErrVersion) {
		t.Fatalf("update at a wrong version: %v, want ErrVersion", err)
	}
	if d, err = put(t, c, ledger.JobDefParams{Job: "cv", Def: "v2", IfVersion: 1}); err != nil || d.Version != 2 || d.Def != "v2" {
		t.Fatalf("update at version 1: %+v, %v", d, err)
	}
	if d, err = put(t, c, ledger.JobDefParams{Job: "cv", Def: "v3"}); err != nil || d.Version != 3 {
		t.Fatalf("unguarded update: %+v, %v", d, err)
	}
	if _, err := put(t, c, ledger.JobDefParams{Job: "other", Def: "o1"}); err != nil {
		t.Fatal(err)
	}
	m := defsOf(t, c)
	if len(m) != 2 || m["cv"].Def != "v3" || m["cv"].Version != 3 || m["other"].Version != 1 || !m["cv"].Updated.Equal(d.Updated) {
		t.Fatalf("JobDefs = %+v, want cv v3 (version 3, Updated %v) and other", m, d.Updated)
	}
	if _, err := put(t, c, ledger.JobDefParams{Job: "cv", Delete: true, IfVersion: 2}); !errors.Is(err, ledger.ErrVersion) {
		t.Fatalf("delete at a wrong version: %v, want ErrVersion", err)
	}
	del, err := put(t, c, ledger.JobDefParams{Job: "cv", Delete: true, IfVersion: 3})
	if err != nil || !del.Deleted || del.Def != "v3" {
		t.Fatalf("delete: %+v, %v; want the deleted v3", del, err)
	}
	if _, ok := defsOf(t, c)["cv"]; ok {
		t.Fatal("cv still listed after its delete")
	}
	if _, err := put(t, c, ledger.JobDefParams{Job: "cv", Delete: true}); !errors.Is(err, ledger.ErrNoJobDef) {
		t.Fatalf("second delete: %v, want ErrNoJobDef", err)
	}
	d, err = put(t, c, ledger.JobDefParams{Job: "cv", Def: "v5", IfVersion: -1})
	if err != nil || d.Version <= 3 {
		t.Fatalf("create after delete: %+v, %v; want a version above 3", d, err)
	}
	big := ledger.JobDefParams{Job: "big", Def: strings.Repeat("x", ledger.MaxJobDef+1), Audit: ledger.AuditEntry{Who: "w", Action: "create"}}
	if err := big.Check(); err == nil {
		t.Fatal("Check accepted a Def over MaxJobDef")
	}
	if _, err := c.PutJobDef(ctxT(t, 10*time.Second), big); err == nil {
		t.Fatal("PutJobDef stored a Def over MaxJobDef")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.JobDefs(ctx); err == nil {
		t.Error("JobDefs with a cancelled ctx succeeded")
	}
	if _, err := c.PutJobDef(ctx, ledger.JobDefParams{Job: "z", Def: "z", Audit: ledger.AuditEntry{Who: "w", Action: "create"}}); err == nil {
		t.Error("PutJobDef with a cancelled ctx succeeded")
	}
}

// testCatalogConcurrent: writers that read a version and write at it never
// both win; every change is counted once.
func testCatalogConcurrent(t *testing.T, l ledger.Ledger) {
	c := catalogOf(t, l)
	if _, err := put(t, c, ledger.JobDefParams{Job: "cc", Def: "0", IfVersion: -1}); err != nil {
		t.Fatal(err)
	}
	const writers, rounds = 6, 5
	var (
		mu   sync.Mutex
		wins = map[int64]string{}
		wg   sync.WaitGroup
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				v := defsOf(t, c)["cc"].Version
				_, err := c.PutJobDef(ctxT(t, 10*time.Second), ledger.JobDefParams{
					Job: "cc", Def: fmt.Sprintf("w%d r%d", w, r), IfVersion: v,
					Audit: ledger.AuditEntry{Who: fmt.Sprintf("w%d", w), Action: "update"},
				})
				switch {
				case err == nil:
					mu.Lock()
					if o, ok := wins[v]; ok {
						t.Errorf("version %d was written over by %s and w%d", v, o, w)
					}
					wins[v] = fmt.Sprintf("w%d", w)
					mu.Unlock()
				case !errors.Is(err, ledger.ErrVersion):
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	final := defsOf(t, c)["cc"].Version
	if int64(len(wins)) != final-1 {
		t.Fatalf("%d updates won, but the version went from 1 to %d", len(wins), final)
	}
	es, err := c.Audit(ctxT(t, 10*time.Second), ledger.AuditQuery{Job: "cc"})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != int(final) {
		t.Fatalf("%d audit entries for %d changes", len(es), final)
	}
}

// testCatalogAudit: every change appends its entry atomically with it,
// AppendAudit adds others, and the list reads newest first, by job and page
// by page.
func testCatalogAudit(t *testing.T, l ledger.Ledger) {
	c := catalogOf(t, l)
	ctx := ctxT(t, 10*time.Second)
	before := time.Now()
	steps := []struct {
		job, action string
		put         bool
	}{
		{"a1", "create", true}, {"a2", "create", true}, {"a1", "pause", false},
		{"a1", "update", true}, {"", "login", false}, {"a2", "delete", true},
	}
	for i, s := range steps {
		e := ledger.AuditEntry{Who: fmt.Sprintf("who%d", i), Job: s.job, Action: s.action, Detail: fmt.Sprintf("step %d: ✓", i)}
		var err error
		switch {
		case !s.put:
			err = c.AppendAudit(ctx, e)
		case s.action == "delete":
			_, err = c.PutJobDef(ctx, ledger.JobDefParams{Job: s.job, Delete: true, Audit: e})
		default:
			_, err = c.PutJobDef(ctx, ledger.JobDefParams{Job: s.job, Def: "d" + s.action, Audit: e})
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	// A refused change appends nothing.
	if _, err := c.PutJobDef(ctx, ledger.JobDefParams{Job: "a1", Def: "x", IfVersion: 99, Audit: ledger.AuditEntry{Who: "nobody", Action: "update"}}); !errors.Is(err, ledger.ErrVersion) {
		t.Fatalf("stale update: %v", err)
	}
	if err := c.AppendAudit(ctx, ledger.AuditEntry{Action: "x"}); err == nil {
		t.Fatal("AppendAudit took an entry without Who")
	}
	all, err := c.Audit(ctx, ledger.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(steps) {
		t.Fatalf("%d entries, want %d: %+v", len(all), len(steps), all)
	}
	for i, e := range all {
		s := steps[len(steps)-1-i]
		n := len(steps) - 1 - i
		if e.Who != fmt.Sprintf("who%d", n) || e.Job != s.job || e.Action != s.action || e.Detail != fmt.Sprintf("step %d: ✓", n) {
			t.Fatalf("entry %d = %+v, want step %d %+v", i, e, n, s)
		}
		if i > 0 && e.Seq >= all[i-1].Seq {
			t.Fatalf("Seq not falling: %d then %d", all[i-1].Seq, e.Seq)
		}
		if e.At.Before(before.Add(-time.Minute)) || e.At.After(time.Now().Add(time.Minute)) {
			t.Fatalf("At = %v, want the store's now", e.At)
		}
	}
	a1, err := c.Audit(ctx, ledger.AuditQuery{Job: "a1"})
	if err != nil || len(a1) != 3 || a1[0].Action != "update" || a1[2].Action != "create" {
		t.Fatalf("a1's entries: %+v, %v", a1, err)
	}
	page, err := c.Audit(ctx, ledger.AuditQuery{Limit: 2, Before: all[1].Seq})
	if err != nil || len(page) != 2 || page[0].Seq != all[2].Seq || page[1].Seq != all[3].Seq {
		t.Fatalf("page before %d: %+v, %v", all[1].Seq, page, err)
	}
}
