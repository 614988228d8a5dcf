package etcdfault

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/etcdstore"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/storetest/faulttest"
	"github.com/tasklock/tasklock/systest/internal/proxy"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m, proxy.IgnoreToxics)) }

// quietLogger drops the Locker's warnings (an expected loss is not news).
var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

func newClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var prefixSeq atomic.Int64

// freshPrefix gives every store of the test binary keys of its own.
func freshPrefix() string {
	return fmt.Sprintf("/test-%d-%d/", os.Getpid(), prefixSeq.Add(1))
}

// newStore returns a Store on a fresh prefix (unless opts names one),
// closed at cleanup.
func newStore(t testing.TB, c *clientv3.Client, opts *etcdstore.Options) *etcdstore.Store {
	t.Helper()
	var o etcdstore.Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = freshPrefix()
	}
	s, err := etcdstore.New(c, &o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func newLocker(t *testing.T, s *etcdstore.Store, owner string) *tasklock.Locker {
	t.Helper()
	return faulttest.NewLocker(t, s, tasklock.Config{Owner: owner, Logger: quietLogger})
}

func token() string { return rand.Text() }

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t testing.TB, s *etcdstore.Store, key, tok, owner string, ttl time.Duration) uint64 {
	t.Helper()
	g, err := s.Acquire(ctxT(t), driver.AcquireParams{Key: key, Token: tok, Owner: owner, TTL: ttl})
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return g.Fence
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// held reports whether an entry of token's lock on key is at etcd under
// prefix: as the package documentation of etcdstore lays it out, an etcd
// key under Prefix + K + "/" (named by the token or by the Store) whose
// value starts with the token's line, for a key that needs no escaping.
func held(t testing.TB, c *clientv3.Client, prefix, key, token string) bool {
	t.Helper()
	resp, err := c.Get(ctxT(t), prefix+key+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if strings.HasPrefix(string(kv.Value), token+"\n") {
			return true
		}
	}
	return false
}

// faultTTL is both the session TTL and the lock TTL of the fault tests:
// etcd's smallest lease with the test server's raft timings.
const faultTTL = time.Second

// TestFaults runs the fault tests, in parallel, each on a server of its
// own.
func TestFaults(t *testing.T) {
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"NetworkBlackholed", testBlackholed},
		{"DeleteRetried", testDeleteRetried},
		{"PermitBlackholed", func(t *testing.T) { testKindBlackholed(t, tasklock.ModePermit) }},
		{"WriterBlackholed", func(t *testing.T) { testKindBlackholed(t, tasklock.ModeWrite) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

// testBlackholed: the holder's traffic to etcd is blackholed by a proxy
// between its client and the server (gRPC keeps its connection, so the
// proxy must carry it from the start). Its Done closes before its session
// could expire at etcd, and another, connected directly, obtains only
// after that.
func testBlackholed(t *testing.T) {
	b := newBlackhole(t)
	l1, err := b.holder.Obtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: faultTTL})
	if err != nil {
		t.Fatal(err)
	}
	work, cut := b.cut(t, l1)
	tk := work.AwaitTakeover(t, l1, b.other, "job", &tasklock.ObtainOptions{TTL: faultTTL, Wait: 10 * time.Second},
		cut, faultTTL+time.Second, "TTL + 1s")
	// Done closes at the lease's local validity, before one TTL from the
	// cut; seeing it may take a scheduling delay more on a loaded machine.
	// (What safety needs — no write of the holder after the other
	// obtained — is checked by tk.Check.)
	if tk.DoneAt.Sub(cut) > faultTTL+200*time.Millisecond {
		t.Errorf("the holder's Done closed %v after the cut, later than one TTL", tk.DoneAt.Sub(cut))
	}
	if tk.ObtainedAt.Sub(cut) > faultTTL+time.Second+500*time.Millisecond {
		t.Errorf("the other obtained %v after the cut, want ≤ SessionTTL + 1.5s", tk.ObtainedAt.Sub(cut))
	}
	tk.Check(t, work, "")
}

// testDeleteRetried: when the reaper cannot delete an expired lock's key
// (its Store is cut off), it retries until it can; the session, which
// outlives the fault, does not do it for it.
func testDeleteRetried(t *testing.T) {
	srv := testserver.StartEtcd(t)
	proxy := proxy.Start(t, srv.Addr())
	c := newClient(t, srv.Endpoints())
	prefix := freshPrefix()
	s := newStore(t, newClient(t, []string{"http://" + proxy.Addr()}), &etcdstore.Options{Prefix: prefix}) // 11 s session
	tok := token()
	mustAcquire(t, s, "k", tok, "a", 300*time.Millisecond)
	acquired := time.Now()
	proxy.Blackhole(t)
	time.Sleep(time.Until(acquired.Add(600 * time.Millisecond))) // the fault lasts past the deadline
	if !held(t, c, prefix, "k", tok) {
		t.Fatal("the key went while its Store was cut off")
	}
	proxy.Restore(t)
	restored := time.Now()
	waitFor(t, 8*time.Second, "the reaper deleting the key after the fault", func() bool {
		return !held(t, c, prefix, "k", tok)
	})
	t.Logf("deleted %v after the network came back (the session had %v left)", time.Since(restored).Round(time.Millisecond),
		(etcdstore.DefaultSessionTTL - time.Since(acquired)).Round(time.Millisecond))
	if time.Since(acquired) >= 9*time.Second {
		t.Fatal("the key may have gone with the session, not the reaper")
	}
}

// blackhole is a holder's Locker whose Store reaches etcd through a proxy,
// and another's, on the same Prefix, connected directly.
type blackhole struct {
	proxy         *proxy.Proxy
	direct        *etcdstore.Store // the other's Store
	holder, other *tasklock.Locker
}

func newBlackhole(t *testing.T) *blackhole {
	t.Helper()
	srv := testserver.StartEtcd(t)
	b := &blackhole{proxy: proxy.Start(t, srv.Addr())}
	prefix := freshPrefix()
	hs := newStore(t, newClient(t, []string{"http://" + b.proxy.Addr()}), &etcdstore.Options{Prefix: prefix, SessionTTL: faultTTL})
	b.direct = newStore(t, newClient(t, srv.Endpoints()), &etcdstore.Options{Prefix: prefix, SessionTTL: faultTTL})
	b.holder = newLocker(t, hs, "holder")
	b.other = newLocker(t, b.direct, "other")
	return b
}

// cut starts l's work and then blackholes the holder's traffic, until the
// test ends; it returns the work and the time of the cut.
func (b *blackhole) cut(t *testing.T, l *tasklock.Lock) (*faulttest.Work, time.Time) {
	t.Helper()
	work := faulttest.StartWork(t, l)
	b.proxy.Blackhole(t)
	cut := time.Now()
	t.Cleanup(func() { b.proxy.Restore(t) }) // before the Lockers close
	return work, cut
}

// testKindBlackholed: as testBlackholed, for a semaphore's permit (of
// two, the other held throughout by a Locker connected directly, so that
// the permit the other gets is the holder's) and for a read-write lock's
// writer. The holder's Done closes before one TTL from the cut, and the
// other obtains after it, with a higher fence that the register then
// prefers.
func testKindBlackholed(t *testing.T, mode tasklock.Mode) {
	b := newBlackhole(t)
	opts := &tasklock.ObtainOptions{TTL: faultTTL}
	obtain := func(ctx context.Context, lk *tasklock.Locker) (*tasklock.Lock, error) {
		if mode == tasklock.ModePermit {
			return lk.Semaphore("job", 2).Acquire(ctx, opts)
		}
		return lk.RWMutex("job").Lock(ctx, opts)
	}
	var co *tasklock.Lock
	if mode == tasklock.ModePermit {
		var err error
		if co, err = obtain(ctxT(t), newLocker(t, b.direct, "co")); err != nil {
			t.Fatal(err)
		}
	}
	l1, err := obtain(ctxT(t), b.holder)
	if err != nil {
		t.Fatal(err)
	}
	work, cut := b.cut(t, l1)

	type result struct {
		l   *tasklock.Lock
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		l, err := obtain(ctxT(t), b.other)
		got <- result{l, err, time.Now()}
	}()
	select {
	case <-l1.Done():
	case <-time.After(faultTTL + time.Second):
		t.Fatal("the blackholed holder's Done did not close within TTL + 1s")
	}
	tk := &faulttest.Takeover{Old: l1, Cut: cut, DoneAt: time.Now(), LastWrite: work.Wait()}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	tk.New, tk.ObtainedAt = r.l, r.at
	if tk.DoneAt.Sub(cut) > faultTTL+200*time.Millisecond {
		t.Errorf("the holder's Done closed %v after the cut, later than one TTL", tk.DoneAt.Sub(cut))
	}
	if tk.ObtainedAt.Sub(cut) > faultTTL+time.Second+500*time.Millisecond {
		t.Errorf("the other obtained %v after the cut, want ≤ SessionTTL + 1.5s", tk.ObtainedAt.Sub(cut))
	}
	tk.Check(t, work, mode.String()+": ")
	if co != nil {
		select {
		case <-co.Done():
			t.Errorf("the other permit, held directly, was lost: %v", co.Err())
		default:
		}
	}
}
