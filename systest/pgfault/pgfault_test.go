package pgfault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/pgstore"
	"github.com/tasklock/tasklock/storetest/faulttest"
	"github.com/tasklock/tasklock/systest/internal/proxy"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m, proxy.IgnoreToxics)) }

var modes = []pgstore.Mode{pgstore.ModeLease, pgstore.ModeConnection}

// newPool opens a pool on url, closed at cleanup.
func newPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// tableSeq gives every store of the test binary its own table.
var tableSeq atomic.Int64

func freshTable() string { return fmt.Sprintf("locks_%d", tableSeq.Add(1)) }

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// quietLogger drops the Locker's warnings (an expected loss is not news).
var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

func newLocker(t *testing.T, s *pgstore.Store, owner string) *tasklock.Locker {
	t.Helper()
	return faulttest.NewLocker(t, s, tasklock.Config{Owner: owner, Logger: quietLogger})
}

// TestFaults runs the fault tests in both modes.
func TestFaults(t *testing.T) {
	tests := []struct {
		name string
		fn   func(t *testing.T, mode pgstore.Mode)
	}{
		{"NetworkBlackholed", testBlackholed},
		{"KindsNetworkBlackholed", testKindsBlackholed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, mode := range modes {
				t.Run(string(mode), func(t *testing.T) {
					t.Parallel()
					tc.fn(t, mode)
				})
			}
		})
	}
}

// cutOff is a table with a store on it connected directly, and one
// connected through a proxy that can blackhole it.
type cutOff struct {
	proxy           *proxy.Proxy
	direct, proxied *pgstore.Store
}

func newCutOff(t *testing.T, mode pgstore.Mode) *cutOff {
	t.Helper()
	srv := testserver.StartPostgres(t)
	url := srv.CreateDB(t)
	table := freshTable()
	ds, err := pgstore.New(newPool(t, url), &pgstore.Options{Table: table, Mode: mode, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	p := proxy.Start(t, srv.Addr())
	proxied := strings.Replace(url, srv.Addr(), p.Addr(), 1)
	hs, err := pgstore.New(newPool(t, proxied), &pgstore.Options{Table: table, Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	return &cutOff{proxy: p, direct: ds, proxied: hs}
}

// testBlackholed: the holder's traffic to the database is blackholed by a
// proxy. Its Done closes before its lease could end at the server, and
// another (connected directly) obtains only after that.
func testBlackholed(t *testing.T, mode pgstore.Mode) {
	env := newCutOff(t, mode)
	const ttl = time.Second
	holder := newLocker(t, env.proxied, "holder")
	other := newLocker(t, env.direct, "other")
	l1, err := holder.Obtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	// Let at least one renewal through, then cut the holder off.
	work := faulttest.StartWork(t, l1)
	env.proxy.Blackhole(t)
	cut := time.Now()

	tk := work.AwaitTakeover(t, l1, other, "job", &tasklock.ObtainOptions{TTL: 10 * time.Second, Wait: 10 * time.Second},
		cut, ttl+time.Second, "TTL + 1s")
	tk.Check(t, work, string(mode)+": ")
	acc, rej := work.Reg.Counts()
	t.Logf("%s: register: %d accepted, %d rejected (the probe above)", mode, acc, rej)
	env.proxy.Restore(t)
}

// kinds are the holds of a RWMutex's writer and of a Semaphore's only
// permit, which the kinds' fault tests take.
var kinds = []struct {
	name   string
	obtain func(ctx context.Context, lk *tasklock.Locker, opts *tasklock.ObtainOptions) (*tasklock.Lock, error)
}{
	{"write", func(ctx context.Context, lk *tasklock.Locker, opts *tasklock.ObtainOptions) (*tasklock.Lock, error) {
		return lk.RWMutex("job").Lock(ctx, opts)
	}},
	{"permit", func(ctx context.Context, lk *tasklock.Locker, opts *tasklock.ObtainOptions) (*tasklock.Lock, error) {
		return lk.Semaphore("pool", 1).Acquire(ctx, opts)
	}},
}

// testKindsBlackholed: as testBlackholed, for a writer and for a
// semaphore's permit. The holder's Done closes by its TTL after the cut,
// before another obtains the writer's side or the permit, whose fence is
// higher: a late write of the old holder is refused.
func testKindsBlackholed(t *testing.T, mode pgstore.Mode) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			env := newCutOff(t, mode)
			const ttl = time.Second
			holder := newLocker(t, env.proxied, "holder")
			other := newLocker(t, env.direct, "other")
			l1, err := k.obtain(ctxT(t), holder, &tasklock.ObtainOptions{TTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			work := faulttest.StartWork(t, l1)
			env.proxy.Blackhole(t)
			cut := time.Now()
			t.Cleanup(func() { env.proxy.Restore(t) }) // before the Lockers close

			closedAtTTL := faulttest.LookAt(l1, cut.Add(ttl))
			doneAt := make(chan time.Time, 1)
			go func() { <-l1.Done(); doneAt <- time.Now() }()
			l2, err := k.obtain(ctxT(t), other, &tasklock.ObtainOptions{TTL: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			obtainedAt := time.Now()
			select {
			case <-l1.Done():
			default:
				t.Fatalf("the other obtained %v after the cut while the holder's Done was open", obtainedAt.Sub(cut))
			}
			lastWrite := work.Wait()
			t.Logf("%s %s: the holder was told %v after the cut (%v), the other obtained %v after it (TTL %v)", mode, k.name,
				(<-doneAt).Sub(cut).Round(time.Millisecond), l1.Err(), obtainedAt.Sub(cut).Round(time.Millisecond), ttl)
			if !<-closedAtTTL {
				t.Errorf("the holder's Done still open at a look one TTL (%v) after the cut", ttl)
			}
			if !errors.Is(l1.Err(), tasklock.ErrLockLost) {
				t.Errorf("holder's cause %v, want ErrLockLost", l1.Err())
			}
			if !obtainedAt.After(lastWrite) {
				t.Errorf("the other obtained before the holder's last accepted write")
			}
			if l2.Fence() <= l1.Fence() {
				t.Errorf("fence %d after %d", l2.Fence(), l1.Fence())
			}
			work.CheckStale(t, l1.Fence(), l2.Fence())
			if err := l2.Release(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
}
