package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/ledgertest"
)

func TestLedgerConformance(t *testing.T) {
	srv := testserver.StartEtcd(t)
	c := newClient(t, srv.Endpoints(), nil)
	ledgertest.Run(t, func(t *testing.T) ledger.Ledger { return newStore(t, c, nil) })
}

var ledgerTick = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// fillLedger writes one of everything the ledger keeps, with job and
// trigger names that look like lock keys.
func fillLedger(t *testing.T, s *Store) {
	t.Helper()
	ctx := ctxT(t)
	for _, job := range []string{"k", "k/x", "%", "\x00j\x01"} {
		if _, err := s.Claim(ctx, []ledger.ClaimParams{{Job: job, Tick: ledgerTick, Trigger: "t/1", Node: "n", Token: "tok", Retain: time.Hour}}); err != nil {
			t.Fatal(err)
		}
		if err := s.RecordRuns(ctx, []ledger.RunRecord{{Job: job, Tick: ledgerTick, Trigger: "t/1", Attempt: 1, Status: ledger.RunOK}}); err != nil {
			t.Fatal(err)
		}
		for _, op := range []ledger.JobStateOp{ledger.JobPause, ledger.JobTrigger, ledger.JobRegister} {
			if _, err := s.SetJobState(ctx, ledger.JobStateParams{Job: job, Op: op, Trigger: "t/1", Spec: "k/x", Since: ledgerTick}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// The ledger's keys are none of the lock API's business: Leases does not
// list them, ForceRelease cannot delete them, a Subscribe is not woken by
// their deletion, and a lock key of any name is free beside them.
func TestLedgerApartFromLocks(t *testing.T) {
	srv := testserver.StartEtcd(t)
	c := newClient(t, srv.Endpoints(), nil)
	s := newStore(t, c, nil)
	ctx := ctxT(t)

	var mu sync.Mutex
	var woken []string
	stop, err := s.Subscribe(ctx, func(key string) {
		mu.Lock()
		woken = append(woken, key)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	fillLedger(t, s)
	all, err := c.Get(ctx, s.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Kvs) < 16 {
		t.Fatalf("%d ledger keys, want at least 16", len(all.Kvs))
	}
	for _, kv := range all.Kvs {
		if key, tok, ok := s.parseKey(kv.Key); ok {
			t.Errorf("ledger key %q parses as lock %q token %q", kv.Key, key, tok)
		}
	}
	ls, err := s.Leases(ctx, "")
	if err != nil || len(ls) != 0 {
		t.Fatalf("Leases = %v, %v; want none", ls, err)
	}
	// Lock keys are valid UTF-8 (the Locker validates them), which never
	// holds the byte 0xff the ledger's keys start with.
	for _, key := range []string{"k", "%", "ÿledger", "ledger", "j", "c", "\U0010ffff"} {
		if err := s.ForceRelease(ctx, key); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("ForceRelease(%q) = %v, want ErrNotHeld", key, err)
		}
		if _, err := s.Acquire(ctx, driver.AcquireParams{Key: key, Token: token(), Owner: "o", TTL: time.Second}); err != nil {
			t.Errorf("Acquire(%q) beside the ledger: %v", key, err)
		}
	}
	// Deleting ledger keys (as Prune and lease expiry do) wakes nobody.
	if _, err := s.Prune(ctx, ledger.PruneParams{KeepPerJob: 1, TriggersOlderThan: time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
	for _, job := range []string{"k", "%"} {
		if _, err := s.SetJobState(ctx, ledger.JobStateParams{Job: job, Op: ledger.JobResume}); err != nil {
			t.Fatal(err)
		}
	}
	// A lock's release is seen after them, so they would have been too.
	mustAcquire(t, s, "probe", "tok", "o", time.Second)
	if err := s.Release(ctx, driver.ReleaseParams{Key: "probe", Token: "tok"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the probe's release", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(woken) > 0 && woken[len(woken)-1] == "probe"
	})
	mu.Lock()
	defer mu.Unlock()
	if len(woken) != 1 {
		t.Fatalf("Subscribe reported %q, want only the probe", woken)
	}
}

// Claims share leases: a thousand claims of one retention cost one
// LeaseGrant and one Txn per 126 claims, and each lease covers Retain.
func TestLedgerClaimRoundTrips(t *testing.T) {
	srv := testserver.StartEtcd(t)
	var cnt counter
	c := newClient(t, srv.Endpoints(), &cnt)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	ps := make([]ledger.ClaimParams, 1000)
	for i := range ps {
		ps[i] = ledger.ClaimParams{Job: "j", Tick: ledgerTick.Add(time.Duration(i) * time.Second), Node: "n", Token: "tok", Retain: time.Hour}
	}
	cnt.take()
	res, err := s.Claim(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r != nil {
			t.Fatalf("claim %d: %v", i, r)
		}
	}
	n := cnt.take()
	if n["LeaseGrant"] != 1 || n["Txn"] != 8 || total(n) != 9 {
		t.Fatalf("requests %v, want 1 LeaseGrant and 8 Txns", n)
	}
	// Another token is refused, with the holder's node.
	ps[0].Token, ps[0].Node = "other", "m"
	res, err = s.Claim(ctx, ps[:1])
	var ce *ledger.ClaimedError
	if err != nil || !errors.As(res[0], &ce) || ce.Node != "n" {
		t.Fatalf("Claim by another token = %v, %v", res, err)
	}
	if n := cnt.take(); total(n) != 1 {
		t.Fatalf("second Claim: requests %v, want one Txn", n)
	}
	// The lease lives at least Retain.
	kv, err := c.Get(ctx, s.claimKey("j", ledgerTick, "", 0))
	if err != nil || len(kv.Kvs) != 1 || kv.Kvs[0].Lease == 0 {
		t.Fatalf("claim key: %v, %v", kv, err)
	}
	ttl, err := c.TimeToLive(ctx, clientv3.LeaseID(kv.Kvs[0].Lease))
	if err != nil || time.Duration(ttl.TTL)*time.Second < time.Hour-time.Minute || time.Duration(ttl.GrantedTTL)*time.Second > time.Hour+3*time.Minute {
		t.Fatalf("claim lease: %+v, %v; want about an hour", ttl, err)
	}
	// A batch with the same key twice: one claim, two answers.
	q := []ledger.ClaimParams{
		{Job: "d", Tick: ledgerTick, Node: "a", Token: "ta", Retain: time.Hour},
		{Job: "d", Tick: ledgerTick, Node: "b", Token: "tb", Retain: time.Hour},
		{Job: "d", Tick: ledgerTick, Node: "a", Token: "ta", Retain: time.Hour},
	}
	res, err = s.Claim(ctx, q)
	if err != nil || res[0] != nil || !errors.As(res[1], &ce) || ce.Node != "a" || res[2] != nil {
		t.Fatalf("duplicate keys in a batch: %v, %v", res, err)
	}
}

// Records go in and come out equal, whatever their names hold, and a
// listing of one job reads only that job's range.
func TestLedgerRunsRoundTrip(t *testing.T) {
	srv := testserver.StartEtcd(t)
	var cnt counter
	c := newClient(t, srv.Endpoints(), &cnt)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	start := ledgerTick.Add(1234567 * time.Microsecond)
	r := ledger.RunRecord{Job: "a\x00b/c%", Tick: ledgerTick.Add(time.Millisecond), Trigger: "\x01x", Attempt: 3, Node: "n",
		Fence: 1 << 60, Start: start, End: start.Add(time.Second), Status: ledger.RunLost, Error: "e", Output: "o\n"}
	other := r
	other.Job = "a"
	if err := s.RecordRuns(ctx, []ledger.RunRecord{r, other}); err != nil {
		t.Fatal(err)
	}
	cnt.take()
	rs, err := s.Runs(ctx, ledger.RunQuery{Job: r.Job, Limit: 5})
	if err != nil || len(rs) != 1 {
		t.Fatalf("Runs = %v, %v", rs, err)
	}
	if n := cnt.take(); total(n) != 1 {
		t.Fatalf("Runs of one job: requests %v, want one Range", n)
	}
	got := rs[0]
	if !got.Tick.Equal(r.Tick) || !got.Start.Equal(r.Start) || !got.End.Equal(r.End) || got.Recorded.IsZero() {
		t.Fatalf("times changed: %+v", got)
	}
	got.Tick, got.Start, got.End, got.Recorded = r.Tick, r.Start, r.End, time.Time{}
	if got != r {
		t.Fatalf("record changed:\n got  %+v\n want %+v", got, r)
	}
}

// Registrations: one Txn when the spec is stored already, two when it is
// new; kept apart from the keys JobStates reads; Since to the nanosecond;
// nodes registering a new job at once all read back the one that won.
func TestLedgerRegistrations(t *testing.T) {
	srv := testserver.StartEtcd(t)
	var cnt counter
	c := newClient(t, srv.Endpoints(), &cnt)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	since := ledgerTick.Add(123456789 * time.Nanosecond)
	reg := func(job, spec string, since time.Time) ledger.JobState {
		t.Helper()
		st, err := s.SetJobState(ctx, ledger.JobStateParams{Job: job, Op: ledger.JobRegister, Spec: spec, Since: since})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	cnt.take()
	if st := reg("a\x00b", "\xff:*", since); st.Spec != "\xff:*" || !st.Since.Equal(since) {
		t.Fatalf("first register: %+v", st)
	}
	if n := cnt.take(); n["Txn"] != 2 || total(n) != 2 {
		t.Fatalf("first register: requests %v, want 2 Txns", n)
	}
	if st := reg("a\x00b", "\xff:*", since.Add(time.Hour)); !st.Since.Equal(since) {
		t.Fatalf("second register: %+v", st)
	}
	if n := cnt.take(); total(n) != 1 {
		t.Fatalf("second register: requests %v, want 1 Txn", n)
	}
	old := time.Date(1960, 5, 1, 0, 0, 0, 7, time.UTC)
	if st := reg("old", "@yearly", old); !st.Since.Equal(old) {
		t.Fatalf("register before 1970: %+v", st)
	}
	for i := range 20 {
		reg(fmt.Sprint("job-", i), "* * * * *", since)
	}
	if r, err := c.Get(ctx, s.ledgerKey(jobsDir), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || r.Count != 0 {
		t.Fatalf("%v job state keys after registering, %v; want none", r.Count, err)
	}
	cnt.take()
	sts, err := s.Jobs(ctx)
	if err != nil || len(sts) != 22 {
		t.Fatalf("Jobs = %d jobs, %v; want 22", len(sts), err)
	}
	if n := cnt.take(); total(n) != 1 {
		t.Fatalf("Jobs: requests %v, want 1 Txn", n)
	}

	for round := range 10 {
		job := fmt.Sprint("race-", round)
		const n = 8
		got := make([]ledger.JobState, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				got[i], errs[i] = s.SetJobState(ctx, ledger.JobStateParams{Job: job, Op: ledger.JobRegister,
					Spec: "@hourly", Since: since.Add(time.Duration(i) * time.Millisecond)})
			}()
		}
		close(start)
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if got[i].Spec != "@hourly" || !got[i].Since.Equal(got[0].Since) {
				t.Fatalf("round %d: node %d read %+v, node 0 %+v", round, i, got[i], got[0])
			}
		}
	}
}

// rangeLog records the range reads a client sends, alone or in Txns, and
// how many keys they return.
type rangeLog struct {
	mu     sync.Mutex
	calls  int      // requests sent
	ranges []string // "key..end" of each range read
	keys   int      // keys returned
}

func (l *rangeLog) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.calls++
		switch r := req.(type) {
		case *pb.RangeRequest:
			l.ranges = append(l.ranges, string(r.Key)+".."+string(r.RangeEnd))
		case *pb.TxnRequest:
			l.txnRanges(r)
		}
		switch r := reply.(type) {
		case *pb.RangeResponse:
			l.keys += len(r.Kvs)
		case *pb.TxnResponse:
			l.txnKeys(r)
		}
		return err
	})}
}

func (l *rangeLog) txnRanges(t *pb.TxnRequest) {
	for _, op := range append(slices.Clone(t.Success), t.Failure...) {
		if r := op.GetRequestRange(); r != nil {
			l.ranges = append(l.ranges, string(r.Key)+".."+string(r.RangeEnd))
		}
		if n := op.GetRequestTxn(); n != nil {
			l.txnRanges(n)
		}
	}
}

func (l *rangeLog) txnKeys(t *pb.TxnResponse) {
	for _, r := range t.Responses {
		l.keys += len(r.GetResponseRange().GetKvs())
		if n := r.GetResponseTxn(); n != nil {
			l.txnKeys(n)
		}
	}
}

// take returns the requests, range reads and keys read so far, and starts
// again from zero.
func (l *rangeLog) take() (calls int, ranges []string, keys int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	calls, ranges, keys = l.calls, l.ranges, l.keys
	l.calls, l.ranges, l.keys = 0, nil, 0
	return calls, ranges, keys
}

// The schedulers' sweep, Runs of every job's running records, reads the
// running markers and the records they name, not every job's history; it
// deletes markers whose record is gone or final, and Prune deletes a
// pruned record's marker.
func TestLedgerRunningIndex(t *testing.T) {
	srv := testserver.StartEtcd(t)
	var log rangeLog
	c, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second,
		Logger: zap.NewNop(), DialOptions: log.dialOptions()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	run := func(job string, k int, st ledger.RunStatus) ledger.RunRecord {
		return ledger.RunRecord{Job: job, Tick: ledgerTick.Add(time.Duration(k) * time.Second), Attempt: 1, Status: st}
	}
	const jobs = 200
	var rs []ledger.RunRecord
	for j := range jobs {
		for k := range 5 {
			rs = append(rs, run(fmt.Sprintf("job-%d", j), k, ledger.RunOK))
		}
	}
	rs = append(rs, run("job-7", 10, ledger.RunRunning), run("job-9", 11, ledger.RunRunning),
		run("job-9", 12, ledger.RunRunning), run("gone", 1, ledger.RunRunning))
	if err := s.RecordRuns(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordRuns(ctx, []ledger.RunRecord{run("job-9", 11, ledger.RunInterrupted)}); err != nil {
		t.Fatal(err)
	}
	// A record deleted without its marker, and a marker whose record is
	// final (as if written by hand): both stale.
	if _, err := c.Delete(ctx, s.runKey(run("gone", 1, "").Key())); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, s.markerKey(s.runKey(run("job-3", 1, "").Key())), ""); err != nil {
		t.Fatal(err)
	}
	markers := func() int {
		t.Helper()
		r, err := c.Get(ctx, s.ledgerKey(runningDir), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return int(r.Count)
	}
	if n := markers(); n != 4 {
		t.Fatalf("%d running markers before the sweep, want 4", n)
	}

	log.take()
	got, err := s.Runs(ctx, ledger.RunQuery{Status: ledger.RunRunning, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	calls, ranges, keys := log.take()
	t.Logf("Runs(running) over %d records: %d requests, %d keys read, ranges %q", len(rs), calls, keys, ranges)
	if len(got) != 2 || got[0].Key() != run("job-9", 12, "").Key() || got[1].Key() != run("job-7", 10, "").Key() {
		t.Fatalf("Runs(running) = %+v, want job-9's at 12 s and job-7's at 10 s", got)
	}
	runs := s.ledgerKey(runsDir)
	for _, r := range ranges {
		if k, end, _ := strings.Cut(r, ".."); strings.HasPrefix(k, runs) && end != "" {
			t.Errorf("Runs(running) read a range of run records, %q", r)
		}
	}
	// The 4 markers, then the 3 records still there; one Get of the
	// markers, one Txn of record Gets, one Txn of marker deletes.
	if keys != 7 || calls != 3 {
		t.Errorf("Runs(running): %d requests read %d keys, want 3 requests and 7 keys (4 markers, 3 records)", calls, keys)
	}
	if n := markers(); n != 2 {
		t.Errorf("%d running markers after the sweep, want the 2 running records'", n)
	}
	// Limit, and the other queries as before.
	if got, err := s.Runs(ctx, ledger.RunQuery{Status: ledger.RunRunning, Limit: 1}); err != nil || len(got) != 1 || got[0].Job != "job-9" {
		t.Fatalf("Runs(running, Limit 1) = %+v, %v", got, err)
	}
	if got, err := s.Runs(ctx, ledger.RunQuery{Status: ledger.RunInterrupted}); err != nil || len(got) != 1 || got[0].Job != "job-9" {
		t.Fatalf("Runs(interrupted) = %+v, %v", got, err)
	}

	// Prune deletes a pruned running record's marker with it: job-7's
	// running record is no longer its newest.
	if err := s.RecordRuns(ctx, []ledger.RunRecord{run("job-7", 20, ledger.RunOK)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prune(ctx, ledger.PruneParams{KeepPerJob: 1}); err != nil {
		t.Fatal(err)
	}
	if n := markers(); n != 1 {
		t.Errorf("%d running markers after Prune(KeepPerJob 1), want 1 (job-7's at 10 s is pruned)", n)
	}
	if got, err := s.Runs(ctx, ledger.RunQuery{Status: ledger.RunRunning}); err != nil || len(got) != 1 || got[0].Job != "job-9" {
		t.Fatalf("Runs(running) after Prune = %+v, %v", got, err)
	}
}
