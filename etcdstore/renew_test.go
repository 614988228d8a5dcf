package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
)

// quietLogger drops the Locker's warnings (an expected loss is not news).
var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// acquireMany acquires n locks key-0..key-(n-1) through s, 16 at a time,
// and returns their tokens.
func acquireMany(t *testing.T, s *Store, n int, ttl time.Duration) []string {
	t.Helper()
	toks := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				toks[i] = token()
				if _, err := s.Acquire(context.Background(), driver.AcquireParams{Key: fmt.Sprintf("key-%d", i), Token: toks[i], Owner: "many", TTL: ttl}); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return toks
}

// TestRenewCost: renewing 1,000 leases costs a constant number of etcd
// requests, counted at the client's gRPC layer: a LeaseTimeToLive, a
// LeaseKeepAlive when due, and one Txn to confirm a missing key; 100
// leases, a Txn and the LeaseKeepAlive.
func TestRenewCost(t *testing.T) {
	t.Parallel()
	srv := testserver.StartEtcd(t)
	var cnt counter
	// A session as long as the lock TTL: each renewal needs a keepalive.
	s := newStore(t, newClient(t, srv.Endpoints(), &cnt), &Options{SessionTTL: 10 * time.Second})
	const n = 1000
	start := time.Now()
	toks := acquireMany(t, s, n, 10*time.Second)
	acq := cnt.take()
	t.Logf("%d Acquires in %v: %v", n, time.Since(start).Round(time.Millisecond), acq)

	ps := make([]driver.RenewParams, n)
	for i := range ps {
		ps[i] = driver.RenewParams{Key: fmt.Sprintf("key-%d", i), Token: toks[i], TTL: 10 * time.Second}
	}
	ps[7].Token = "someone else's"
	if err := s.ForceRelease(ctxT(t), "key-500"); err != nil {
		t.Fatal(err)
	}
	cnt.take()
	start = time.Now()
	res, err := s.Renew(ctxT(t), ps)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if (i == 7 || i == 500) != errors.Is(r, driver.ErrNotHeld) || (i != 7 && i != 500 && r != nil) {
			t.Errorf("lease %d: %v", i, r)
		}
	}
	got := cnt.take()
	t.Logf("Renew of %d leases (one force-released): %v in %v", n, got, took)
	if got["LeaseTimeToLive"] != 1 || got["LeaseKeepAlive"] != 1 || got["Txn"] != 1 || total(got) != 3 {
		t.Errorf("Renew of %d leases sent %v, want one LeaseTimeToLive, one LeaseKeepAlive and one Txn (the confirmation)", n, got)
	}

	res, err = s.Renew(ctxT(t), ps[:100])
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if (i == 7) != errors.Is(r, driver.ErrNotHeld) {
			t.Errorf("lease %d: %v", i, r)
		}
	}
	got = cnt.take()
	t.Logf("Renew of 100 leases: %v", got)
	if got["Txn"] != 1 || total(got) > 2 {
		t.Errorf("Renew of 100 leases sent %v, want one Txn (and at most a LeaseKeepAlive)", got)
	}
}

// countingStore counts Renew calls and the leases in them.
type countingStore struct {
	*Store
	calls, leases atomic.Int64
}

func (c *countingStore) Renew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	c.calls.Add(1)
	c.leases.Add(int64(len(ps)))
	return c.Store.Renew(ctx, ps)
}

// TestLockerRenewCost: a Locker keeping 1,000 locks renews them in one or
// two batches per cycle, and each batch costs at most two etcd requests.
func TestLockerRenewCost(t *testing.T) {
	t.Parallel()
	srv := testserver.StartEtcd(t)
	var cnt counter
	cs := &countingStore{Store: newStore(t, newClient(t, srv.Endpoints(), &cnt), nil)}
	var renewed atomic.Int64
	lk, err := tasklock.New(cs, &tasklock.Config{Owner: "many", Logger: quietLogger, OnEvent: func(ev tasklock.Event) {
		if ev.Type == tasklock.EventRenewed {
			renewed.Add(1)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	const n = 1000
	const ttl = 9 * time.Second // renewal 3 s after the grant, batching window 1.5 s
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				if _, err := lk.TryObtain(context.Background(), fmt.Sprintf("lk-%d", i), &tasklock.ObtainOptions{TTL: ttl}); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d obtains failed", failed.Load())
	}
	obtained := time.Since(start)
	cnt.take()
	waitFor(t, 2*ttl, "1000 renewals", func() bool { return renewed.Load() >= n })
	got := cnt.take()
	calls, leases := cs.calls.Load(), cs.leases.Load()
	t.Logf("%d locks obtained in %v; first renewal cycle: %d Renew calls for %d leases, etcd requests %v",
		n, obtained.Round(time.Millisecond), calls, leases, got)
	if int64(total(got)) > 2*calls {
		t.Errorf("%d etcd requests for %d Renew calls, want at most two each", total(got), calls)
	}
	if obtained < ttl/6 && calls > 2 {
		t.Errorf("%d Renew calls to renew %d leases obtained within one batching window (%v)", calls, n, obtained)
	}
}

// TestTxnLimit: against a server with a lower --max-txn-ops the Store
// shrinks its Txns until they fit.
func TestTxnLimit(t *testing.T) {
	t.Parallel()
	srv := testserver.StartEtcd(t, testserver.WithEtcdArgs("--max-txn-ops", "16"))
	s := newStore(t, newClient(t, srv.Endpoints(), nil), nil)
	toks := acquireMany(t, s, 60, 2*time.Second)
	ps := make([]driver.RenewParams, len(toks))
	for i := range ps {
		ps[i] = driver.RenewParams{Key: fmt.Sprintf("key-%d", i), Token: toks[i], TTL: 300 * time.Millisecond}
	}
	res, err := s.Renew(ctxT(t), ps)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r != nil {
			t.Fatalf("lease %d: %v", i, r)
		}
	}
	if got := s.txnOps.Load(); got > 16 {
		t.Fatalf("Txn size %d after ErrTooManyOps, want ≤ 16", got)
	}
	// The reaper deletes all 60 at their new deadline, in Txns that fit.
	waitFor(t, 5*time.Second, "the reaper deleting 60 keys", func() bool {
		resp, err := s.c.Get(ctxT(t), s.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 0
	})
}

// TestExtendPastSession: an Extend longer than the session, which the
// Store refuses (ErrTTL), is the caller's mistake: Extend returns the
// refusal, the lock stays held with the lease length it had, and its
// renewals go on.
func TestExtendPastSession(t *testing.T) {
	t.Parallel()
	srv := testserver.StartEtcd(t)
	s := newStore(t, newClient(t, srv.Endpoints(), nil), &Options{SessionTTL: 3 * time.Second})
	renewed := make(chan struct{}, 16)
	lk, err := tasklock.New(s, &tasklock.Config{Owner: "a", Logger: quietLogger, OnEvent: func(ev tasklock.Event) {
		if ev.Type == tasklock.EventRenewed {
			select {
			case renewed <- struct{}{}:
			default:
			}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	const ttl = 900 * time.Millisecond
	l, err := lk.TryObtain(ctxT(t), "k", &tasklock.ObtainOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	err = l.Extend(ctxT(t), 10*time.Second)
	if !errors.Is(err, ErrTTL) || errors.Is(err, tasklock.ErrNotHeld) {
		t.Fatalf("Extend past the session = %v, want ErrTTL, not ErrNotHeld", err)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("the lock ended after a refused Extend: %v", err)
	}
	// Renewed with its old length, several times: still held well past
	// its TTL.
	deadline := time.After(10 * time.Second)
	for range 4 {
		select {
		case <-renewed:
		case <-l.Done():
			t.Fatalf("the lock ended after a refused Extend: %v", l.Err())
		case <-deadline:
			t.Fatal("no renewals within 10s after a refused Extend")
		}
	}
	if err := l.Err(); err != nil {
		t.Fatalf("the lock ended after a refused Extend: %v", err)
	}
	if err := l.Extend(ctxT(t), 2*time.Second); err != nil {
		t.Fatalf("a valid Extend after a refused one: %v", err)
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
}
