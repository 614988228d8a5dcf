package etcdstore

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/ledger"
)

// Claims and records written before shards existed (their keys spelled
// out here as the Store wrote them then) are shard 0's: a shard 0 claim
// finds the old claim, another shard is free, and the old record lists
// among new shards' records in Runs' order, page by page too.
func TestLedgerShardsKeepOldKeys(t *testing.T) {
	srv := testserver.StartEtcd(t)
	c := newClient(t, srv.Endpoints(), nil)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	base := s.prefix + "\xffledger/"
	if _, err := c.Put(ctx, base+"c/j\x00"+tickText(ledgerTick), "old-token\nold-node"); err != nil {
		t.Fatal(err)
	}
	claim := func(shard int, tok string) error {
		t.Helper()
		res, err := s.Claim(ctx, []ledger.ClaimParams{{Job: "j", Tick: ledgerTick, Shard: shard, Node: "n-" + tok, Token: tok, Retain: time.Hour}})
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

	old := fmt.Sprintf(`{"j":"j","t":%q,"a":1,"n":"old-node","s":%[1]q,"e":%[1]q,"st":"ok","r":%[1]q}`, ledgerTick.Format(time.RFC3339Nano))
	oldKey := base + "r/j\x00" + invTickText(ledgerTick) + "\x00" + "fffffffe" // attempt 1
	if _, err := c.Put(ctx, oldKey, old); err != nil {
		t.Fatal(err)
	}
	var rs []ledger.RunRecord
	for _, k := range []ledger.RunKey{
		{Tick: ledgerTick, Shard: 2, Attempt: 1}, {Tick: ledgerTick, Shard: 1, Attempt: 1},
		{Tick: ledgerTick, Shard: 1, Attempt: 2}, {Tick: ledgerTick, Shard: 1023, Attempt: 1},
		{Tick: ledgerTick, Trigger: "x", Attempt: 1}, {Tick: ledgerTick.Add(-time.Second), Shard: 5, Attempt: 1},
	} {
		rs = append(rs, ledger.RunRecord{Job: "j", Tick: k.Tick, Trigger: k.Trigger, Shard: k.Shard, Shards: 1024, Attempt: k.Attempt, Status: ledger.RunOK})
	}
	if err := s.RecordRuns(ctx, rs); err != nil {
		t.Fatal(err)
	}
	want := "[0//s0/1 0//s1/2 0//s1/1 0//s2/1 0//s1023/1 0/x/s0/1 -1//s5/1]"
	keys := func(rs []ledger.RunRecord) string {
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = fmt.Sprintf("%d/%s/s%d/%d", r.Tick.Sub(ledgerTick)/time.Second, r.Trigger, r.Shard, r.Attempt)
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
		if got[0].Node != "old-node" || got[0].Shards != 0 {
			t.Fatalf("old record read as %+v", got[0])
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
	// Writing shard 0's record again replaces the old key.
	if err := s.RecordRuns(ctx, []ledger.RunRecord{{Job: "j", Tick: ledgerTick, Attempt: 1, Node: "new", Status: ledger.RunFailed}}); err != nil {
		t.Fatal(err)
	}
	r, err := c.Get(ctx, oldKey)
	if err != nil || len(r.Kvs) != 1 || r.Kvs[0].Version != 2 {
		t.Fatalf("old record's key after a rewrite: %v, %v; want version 2", r, err)
	}
}

// The catalog's round trips: JobDefs and Audit one range read each,
// PutJobDef and AppendAudit two Txns each when nobody interferes.
func TestCatalogRoundTrips(t *testing.T) {
	srv := testserver.StartEtcd(t)
	var cnt counter
	c := newClient(t, srv.Endpoints(), &cnt)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	for i := range 20 {
		if _, err := s.PutJobDef(ctx, ledger.JobDefParams{Job: fmt.Sprint("j", i), Def: "d", Audit: ledger.AuditEntry{Who: "w", Action: "create"}}); err != nil {
			t.Fatal(err)
		}
	}
	cnt.take()
	if _, err := s.PutJobDef(ctx, ledger.JobDefParams{Job: "j0", Def: "d2", IfVersion: 1, Audit: ledger.AuditEntry{Who: "w", Action: "update"}}); err != nil {
		t.Fatal(err)
	}
	if n := cnt.take(); n["Txn"] != 2 || total(n) != 2 {
		t.Fatalf("PutJobDef: requests %v, want 2 Txns", n)
	}
	ds, err := s.JobDefs(ctx)
	if err != nil || len(ds) != 20 {
		t.Fatalf("JobDefs = %d, %v; want 20", len(ds), err)
	}
	if n := cnt.take(); n["Range"] != 1 || total(n) != 1 {
		t.Fatalf("JobDefs: requests %v, want 1 Range", n)
	}
	if err := s.AppendAudit(ctx, ledger.AuditEntry{Who: "w", Action: "pause", Job: "j3"}); err != nil {
		t.Fatal(err)
	}
	if n := cnt.take(); n["Txn"] != 2 || total(n) != 2 {
		t.Fatalf("AppendAudit: requests %v, want 2 Txns", n)
	}
	es, err := s.Audit(ctx, ledger.AuditQuery{Job: "j3", Limit: 1})
	if err != nil || len(es) != 1 || es[0].Action != "pause" || es[0].Seq != 22 {
		t.Fatalf("Audit(j3) = %+v, %v; want the pause, Seq 22", es, err)
	}
	if n := cnt.take(); n["Range"] != 1 || total(n) != 1 {
		t.Fatalf("Audit: requests %v, want 1 Range", n)
	}
}

// Stores on one prefix appending at once (alone and with changes of
// definitions) give every entry its own Seq, with none skipped.
func TestCatalogAuditSeqAcrossStores(t *testing.T) {
	srv := testserver.StartEtcd(t)
	c := newClient(t, srv.Endpoints(), nil)
	prefix := freshPrefix()
	const stores, each = 4, 8
	ss := make([]*Store, stores)
	for i := range ss {
		ss[i] = newStore(t, newClient(t, srv.Endpoints(), nil), &Options{Prefix: prefix})
	}
	ctx := ctxT(t)
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range each {
				var err error
				if k%2 == 0 {
					err = s.AppendAudit(ctx, ledger.AuditEntry{Who: fmt.Sprint("s", i), Action: "pause", Detail: fmt.Sprint(k)})
				} else {
					_, err = s.PutJobDef(ctx, ledger.JobDefParams{Job: fmt.Sprint("job", i), Def: fmt.Sprint(k),
						Audit: ledger.AuditEntry{Who: fmt.Sprint("s", i), Action: "update", Detail: fmt.Sprint(k)}})
				}
				if err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	all, err := newStore(t, c, &Options{Prefix: prefix}).Audit(ctx, ledger.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != stores*each {
		t.Fatalf("%d entries, want %d", len(all), stores*each)
	}
	for i, e := range all {
		if e.Seq != int64(len(all)-i) {
			t.Fatalf("entry %d has Seq %d, want %d", i, e.Seq, len(all)-i)
		}
	}
	for i := range stores {
		es, err := ss[0].Audit(ctx, ledger.AuditQuery{Job: fmt.Sprint("job", i)})
		if err != nil || len(es) != each/2 {
			t.Fatalf("job%d: %d entries, %v; want %d", i, len(es), err, each/2)
		}
		d, err := ss[0].JobDefs(ctx)
		if err != nil || len(d) != stores {
			t.Fatalf("JobDefs: %+v, %v", d, err)
		}
	}
	// The job's copies are the entries themselves.
	r, err := c.Get(ctx, prefix+"\xffledger/b/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || r.Count != stores*each/2 {
		t.Fatalf("%v job copies, %v; want %d", r.Count, err, stores*each/2)
	}
}
