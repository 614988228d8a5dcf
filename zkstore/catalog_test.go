package zkstore

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/ledger"
)

// Claims and records written before shards existed (their node names
// spelled out here as the Store made them then) are shard 0's: a shard 0
// claim finds the old claim, another shard is free, and the old record
// lists among new shards' records in Runs' order, page by page too.
func TestLedgerShardsKeepOldNodes(t *testing.T) {
	t.Parallel()
	_, c := shared(t)
	s := newStore(t, c, testSession, nil)
	ctx := ctxT(t)
	tick := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	base := s.Root() + "/%ledger"
	for _, dir := range []string{s.Root(), base, base + "/claims", base + "/claims/j", base + "/runs", base + "/runs/j"} {
		if _, err := c.Create(dir, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatal(err)
		}
	}
	acl := zk.WorldACL(zk.PermAll)
	if _, err := c.Create(base+"/claims/j/"+tickHex(tick), []byte(`{"token":"old","node":"old-node","retain_ms":3600000}`), 0, acl); err != nil {
		t.Fatal(err)
	}
	claim := func(shard int, tok string) error {
		t.Helper()
		res, err := s.Claim(ctx, []ledger.ClaimParams{{Job: "j", Tick: tick, Shard: shard, Node: "n-" + tok, Token: tok, Retain: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	var ce *ledger.ClaimedError
	if err := claim(0, "new"); !errors.As(err, &ce) || ce.Node != "old-node" {
		t.Fatalf("shard 0 over an old claim: %v, want claimed by old-node", err)
	}
	if err := claim(1, "new"); err != nil {
		t.Fatalf("shard 1 beside an old claim: %v", err)
	}
	if err := claim(1, "other"); !errors.As(err, &ce) || ce.Node != "n-new" {
		t.Fatalf("shard 1 again: %v, want claimed by n-new", err)
	}

	oldName := invTickHex(tick) + "--fffffffe" // no trigger, attempt 1
	if _, err := c.Create(base+"/runs/j/"+oldName, []byte(`{"node":"old-node","start":"0001-01-01T00:00:00Z","end":"0001-01-01T00:00:00Z","status":"ok"}`), 0, acl); err != nil {
		t.Fatal(err)
	}
	var rs []ledger.RunRecord
	for _, k := range []ledger.RunKey{
		{Tick: tick, Shard: 2, Attempt: 1}, {Tick: tick, Shard: 1, Attempt: 1},
		{Tick: tick, Shard: 1, Attempt: 2}, {Tick: tick, Shard: 1023, Attempt: 1},
		{Tick: tick, Trigger: "x", Attempt: 1}, {Tick: tick.Add(-time.Second), Shard: 5, Attempt: 1},
	} {
		rs = append(rs, ledger.RunRecord{Job: "j", Tick: k.Tick, Trigger: k.Trigger, Shard: k.Shard, Shards: 1024, Attempt: k.Attempt, Status: ledger.RunRunning})
	}
	if err := s.RecordRuns(ctx, rs); err != nil {
		t.Fatal(err)
	}
	want := "[0//s0/1 0//s1/2 0//s1/1 0//s2/1 0//s1023/1 0/x/s0/1 -1//s5/1]"
	keys := func(rs []ledger.RunRecord) string {
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = fmt.Sprintf("%d/%s/s%d/%d", r.Tick.Sub(tick)/time.Second, r.Trigger, r.Shard, r.Attempt)
		}
		return fmt.Sprint(out)
	}
	for _, job := range []string{"j", ""} {
		got, err := s.Runs(ctx, ledger.RunQuery{Job: job})
		if err != nil {
			t.Fatal(err)
		}
		if g := keys(got); g != want {
			t.Fatalf("Runs(job %q):\n got  %s\n want %s", job, g, want)
		}
		if got[0].Node != "old-node" || got[0].Shards != 0 || got[1].Shards != 1024 {
			t.Fatalf("records read as %+v, %+v", got[0], got[1])
		}
		var paged []ledger.RunRecord
		var before *ledger.RunKey
		for range len(want) {
			page, err := s.Runs(ctx, ledger.RunQuery{Job: job, Limit: 2, Before: before})
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			paged = append(paged, page...)
			k := page[len(page)-1].Key()
			before = &k
		}
		if g := keys(paged); g != want {
			t.Fatalf("Runs(job %q) page by page:\n got  %s\n want %s", job, g, want)
		}
	}
	// The sweep of running records finds the shards through their markers.
	running, err := s.Runs(ctx, ledger.RunQuery{Status: ledger.RunRunning})
	if g := keys(running); err != nil || g != "[0//s1/2 0//s1/1 0//s2/1 0//s1023/1 0/x/s0/1 -1//s5/1]" {
		t.Fatalf("running records: %s, %v", g, err)
	}
	// Writing shard 0's record again replaces the old node.
	if err := s.RecordRuns(ctx, []ledger.RunRecord{{Job: "j", Tick: tick, Attempt: 1, Node: "new", Status: ledger.RunFailed}}); err != nil {
		t.Fatal(err)
	}
	if _, st, err := c.Get(base + "/runs/j/" + oldName); err != nil || st.Version != 1 {
		t.Fatalf("old record's node after a rewrite: %v, %v; want version 1", st, err)
	}
}

// The catalog's requests: JobDefs a list and the reads, pipelined;
// PutJobDef two reads (pipelined) and a multi; AppendAudit one create;
// Audit a list and as many reads as Limit asks.
func TestCatalogRoundTrips(t *testing.T) {
	t.Parallel()
	z := testserver.SharedZooKeeper(t)
	var d countingDialer
	// The longest session the server allows: a ping every 20 s, so none
	// falls in the windows counted here.
	c := connectVia(t, z.Addr(), testserver.ZooKeeperMaxSessionTimeout, d.dial)
	s := newStore(t, c, testserver.ZooKeeperMaxSessionTimeout, nil)
	ctx := ctxT(t)
	for i := range 20 {
		if _, err := s.PutJobDef(ctx, ledger.JobDefParams{Job: fmt.Sprint("j", i), Def: "d", Audit: ledger.AuditEntry{Who: "w", Action: "create"}}); err != nil {
			t.Fatal(err)
		}
	}
	count := func(what string, want int64, fn func() error) {
		t.Helper()
		w0 := d.writes.Load()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n := d.writes.Load() - w0; n != want {
			t.Errorf("%s: %d requests, want %d", what, n, want)
		}
	}
	count("PutJobDef", 3, func() error {
		_, err := s.PutJobDef(ctx, ledger.JobDefParams{Job: "j0", Def: "d2", IfVersion: 1, Audit: ledger.AuditEntry{Who: "w", Action: "update"}})
		return err
	})
	count("JobDefs", 21, func() error {
		ds, err := s.JobDefs(ctx)
		if err == nil && len(ds) != 20 {
			err = fmt.Errorf("%d definitions, want 20", len(ds))
		}
		return err
	})
	count("AppendAudit", 1, func() error { return s.AppendAudit(ctx, ledger.AuditEntry{Who: "w", Action: "pause", Job: "j3"}) })
	count("Audit", 3, func() error {
		es, err := s.Audit(ctx, ledger.AuditQuery{Limit: 2})
		if err == nil && (len(es) != 2 || es[0].Action != "pause" || es[1].Action != "update" || es[0].Seq <= es[1].Seq) {
			err = fmt.Errorf("entries %+v, want the pause then the update", es)
		}
		return err
	})
}

// Stores on one root appending at once (alone and with changes of
// definitions) give every entry its own rising Seq; a job with a name too
// long for an entry's node name is listed by its own name, and only its
// entries.
func TestCatalogAuditAcrossStores(t *testing.T) {
	t.Parallel()
	z, c := shared(t)
	s0 := newStore(t, c, testSession, nil)
	const stores, each = 4, 8
	ss := []*Store{s0}
	for range stores - 1 {
		ss = append(ss, newStore(t, connect(t, z.Addr(), testSession), testSession, &Options{Root: s0.Root()}))
	}
	ctx := ctxT(t)
	long := strings.Repeat("λ", 100)
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			job := fmt.Sprint("job", i)
			if i == 0 {
				job = long
			}
			for k := range each {
				var err error
				if k%2 == 0 {
					err = s.AppendAudit(ctx, ledger.AuditEntry{Who: fmt.Sprint("s", i), Action: "pause"})
				} else {
					_, err = s.PutJobDef(ctx, ledger.JobDefParams{Job: job, Def: fmt.Sprint(k),
						Audit: ledger.AuditEntry{Who: fmt.Sprint("s", i), Action: "update", Detail: fmt.Sprint(k)}})
				}
				if err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	all, err := s0.Audit(ctx, ledger.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != stores*each {
		t.Fatalf("%d entries, want %d", len(all), stores*each)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Seq >= all[i-1].Seq {
			t.Fatalf("Seq %d after %d", all[i].Seq, all[i-1].Seq)
		}
	}
	// A job named as the long name's hash shares its entries' node names:
	// Audit tells them apart by the job in the data.
	if err := s0.AppendAudit(ctx, ledger.AuditEntry{Who: "w", Action: "pause", Job: auditJobName(long)}); err != nil {
		t.Fatal(err)
	}
	es, err := s0.Audit(ctx, ledger.AuditQuery{Job: long})
	if err != nil || len(es) != each/2 {
		t.Fatalf("%d entries of the long-named job, %v; want %d", len(es), err, each/2)
	}
	for _, e := range es {
		if e.Job != long || e.Who != "s0" || e.Action != "update" {
			t.Fatalf("long-named job's entry %+v", e)
		}
	}
	ds, err := s0.JobDefs(ctx)
	if err != nil || len(ds) != stores {
		t.Fatalf("JobDefs: %+v, %v", ds, err)
	}
	for _, d := range ds {
		if d.Version != each/2 {
			t.Fatalf("%q at version %d, want %d", d.Job, d.Version, each/2)
		}
	}
}
