package redisstore

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tasklock/tasklock/ledger"
)

// testCatalogRoundTrips: each catalog call is one command, and the keys of
// a script call are in one Cluster hash slot, also with the job's audit
// index.
func testCatalogRoundTrips(t *testing.T, d deployment) {
	c := d.newClient(t)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	audit := ledger.AuditEntry{Who: "w", Action: "create"}
	// Warm the script caches, so the counts below are of one call.
	if _, err := s.PutJobDef(ctx, ledger.JobDefParams{Job: "warm", Def: "d", Audit: audit}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Audit(ctx, ledger.AuditQuery{}); err != nil {
		t.Fatal(err)
	}
	hook, cmds := &countHook{}, &cmdHook{}
	c.AddHook(hook)
	c.AddHook(cmds)
	one := func(what string) {
		t.Helper()
		if got, _ := cmds.take(); len(got) != 1 {
			t.Errorf("%s sent %v, want one command", what, got)
		}
	}
	for j := range 20 {
		job := fmt.Sprintf("job-%d", j)
		if _, err := s.PutJobDef(ctx, ledger.JobDefParams{Job: job, Def: "d", IfVersion: -1, Audit: audit}); err != nil {
			t.Fatal(err)
		}
		one("PutJobDef")
		if err := s.AppendAudit(ctx, ledger.AuditEntry{Who: "w", Job: job, Action: "pause"}); err != nil {
			t.Fatal(err)
		}
		one("AppendAudit")
	}
	if err := s.AppendAudit(ctx, ledger.AuditEntry{Who: "w", Action: "login"}); err != nil {
		t.Fatal(err)
	}
	one("AppendAudit without a job")
	_, eval, _, keys := hook.snapshot()
	if eval != 0 || len(keys) != 41 {
		t.Errorf("%d EVAL and %d script calls, want 0 and 41", eval, len(keys))
	}
	for _, ks := range keys {
		for _, k := range ks[1:] {
			if slot(k) != slot(ks[0]) {
				t.Fatalf("one catalog call spans slots %d (%q) and %d (%q)", slot(ks[0]), ks[0], slot(k), k)
			}
		}
	}
	defs, err := s.JobDefs(ctx)
	if err != nil || len(defs) != 21 {
		t.Fatalf("JobDefs = %d definitions, %v; want 21", len(defs), err)
	}
	one("JobDefs")
	es, err := s.Audit(ctx, ledger.AuditQuery{Job: "job-7"})
	if err != nil || len(es) != 2 || es[0].Action != "pause" || es[1].Action != "create" {
		t.Fatalf("Audit of job-7 = %+v, %v", es, err)
	}
	one("Audit")
	es, err = s.Audit(ctx, ledger.AuditQuery{Limit: 3})
	if err != nil || len(es) != 3 || es[0].Action != "login" || es[0].Job != "" || es[1].Job != "job-19" {
		t.Fatalf("newest 3 audit entries = %+v, %v", es, err)
	}
	one("Audit")
	// The ledger's catalog keys are not leases.
	if ls, err := s.Leases(ctx, ""); err != nil || len(ls) != 0 {
		t.Fatalf("Leases with only catalog keys = %+v, %v", ls, err)
	}
}

// testCatalogOddNames: job names, definitions and audit fields with
// braces, colons, newlines and bytes that are not UTF-8 are kept exactly,
// and one job's audit entries are not another's.
func testCatalogOddNames(t *testing.T, d deployment) {
	s := newStore(t, d.newClient(t), nil)
	ctx := ctxT(t)
	names := []string{"}lead", "a}b{c", "x{y}", "{}", "catalog", "{catalog}", "with:colons:", "nl\nnl", "\xff\xfe", "é", "2:ab"}
	for i, job := range names {
		def := "3:" + names[(i+1)%len(names)] + ":\x00"
		e := ledger.AuditEntry{Who: names[(i+2)%len(names)], Action: names[(i+3)%len(names)], Detail: names[(i+4)%len(names)] + "\n:"}
		got, err := s.PutJobDef(ctx, ledger.JobDefParams{Job: job, Def: def, IfVersion: -1, Audit: e})
		if err != nil || got.Def != def || got.Job != job || got.Version != 1 {
			t.Fatalf("create %q: %+v, %v", job, got, err)
		}
		es, err := s.Audit(ctx, ledger.AuditQuery{Job: job})
		if err != nil || len(es) != 1 {
			t.Fatalf("audit of %q: %+v, %v", job, es, err)
		}
		if g := es[0]; g.Who != e.Who || g.Action != e.Action || g.Detail != e.Detail || g.Job != job {
			t.Fatalf("audit entry of %q:\n got  %+v\n want %+v", job, g, e)
		}
	}
	defs, err := s.JobDefs(ctx)
	if err != nil || len(defs) != len(names) {
		t.Fatalf("JobDefs = %+v, %v", defs, err)
	}
	for _, d := range defs {
		i := indexOf(names, d.Job)
		if i < 0 || d.Def != "3:"+names[(i+1)%len(names)]+":\x00" {
			t.Fatalf("JobDefs lists %+v", d)
		}
	}
	if _, err := s.PutJobDef(ctx, ledger.JobDefParams{Job: "{}", Delete: true, IfVersion: 1, Audit: ledger.AuditEntry{Who: "w", Action: "delete"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutJobDef(ctx, ledger.JobDefParams{Job: "{}", Delete: true, Audit: ledger.AuditEntry{Who: "w", Action: "delete"}}); !errors.Is(err, ledger.ErrNoJobDef) {
		t.Fatalf("second delete of {}: %v, want ErrNoJobDef", err)
	}
	if d, err := s.PutJobDef(ctx, ledger.JobDefParams{Job: "{}", Def: "again", IfVersion: -1, Audit: ledger.AuditEntry{Who: "w", Action: "create"}}); err != nil || d.Version != 2 {
		t.Fatalf("create of {} after its delete: %+v, %v; want version 2", d, err)
	}
	all, err := s.Audit(ctx, ledger.AuditQuery{})
	if err != nil || len(all) != len(names)+2 {
		t.Fatalf("audit: %d entries, %v; want %d", len(all), err, len(names)+2)
	}
}
