package pgstore

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/storetest/faulttest"
)

// Fault tests. The oracle for lock holders in other processes is a fenced
// register kept in the database: a row updated only WHERE fence <= $new,
// with every accepted write appended to a history table, so a stale write
// is refused by the database and any overlap would show in the history.
// The test of a holder cut off by a blackholing proxy is in
// systest/pgfault: the proxy must not be a dependency of the library
// module.

const registerDDL = `
CREATE TABLE IF NOT EXISTS register (id int PRIMARY KEY, fence bigint NOT NULL);
INSERT INTO register VALUES (1, 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS history (
	id     bigserial PRIMARY KEY,
	fence  bigint NOT NULL,
	writer text NOT NULL,
	at     timestamptz NOT NULL DEFAULT clock_timestamp()
)`

// writeRegister makes one fenced write and reports whether the database
// accepted it.
func writeRegister(ctx context.Context, pool *pgxpool.Pool, fence uint64, writer string) (bool, error) {
	rows, err := pool.Query(ctx, `WITH u AS (
		UPDATE register SET fence = $1 WHERE id = 1 AND fence <= $1 RETURNING 1
	) INSERT INTO history (fence, writer) SELECT $1, $2 FROM u RETURNING id`, int64(fence), writer)
	if err != nil {
		return false, err
	}
	n := 0
	for rows.Next() {
		n++
	}
	return n == 1, rows.Err()
}

func readHistory(t *testing.T, pool *pgxpool.Pool) []faulttest.Write {
	t.Helper()
	rows, err := pool.Query(ctxT(t), "SELECT fence, writer FROM history ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	var out []faulttest.Write
	for rows.Next() {
		var w faulttest.Write
		var f int64
		if err := rows.Scan(&f, &w.Writer); err != nil {
			t.Fatal(err)
		}
		w.Fence = uint64(f)
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkHistory checks the history with faulttest.CheckHistory and returns
// how many writes each writer made.
func checkHistory(t *testing.T, pool *pgxpool.Pool, from uint64) map[string]int {
	t.Helper()
	return faulttest.CheckHistory(t, readHistory(t, pool), from)
}

// faultEnv is one database with a lease table and the register.
type faultEnv struct {
	url   string
	pool  *pgxpool.Pool
	store *Store
	table string
	mode  Mode
}

func newFaultEnv(t *testing.T, url string, mode Mode) *faultEnv {
	t.Helper()
	pool := newPool(t, url, nil)
	s := newStore(t, pool, &Options{Mode: mode})
	if _, err := pool.Exec(ctxT(t), registerDDL); err != nil {
		t.Fatal(err)
	}
	return &faultEnv{url: url, pool: pool, store: s, table: s.o.tableName, mode: mode}
}

// quietLogger drops the Locker's warnings (an expected loss is not news).
var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

func newLocker(t *testing.T, s *Store, owner string, cfg *tasklock.Config) *tasklock.Locker {
	t.Helper()
	c := tasklock.Config{Owner: owner, Logger: quietLogger}
	if cfg != nil {
		c = *cfg
		c.Owner, c.Logger = owner, quietLogger
	}
	lk, err := tasklock.New(s, &c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lk.Close() })
	return lk
}

// startHolder starts a helper process that obtains key and writes to the
// register until its lock ends, and waits for its first accepted write.
func startHolder(t *testing.T, env *faultEnv, key string, ttl time.Duration) *faulttest.Holder {
	t.Helper()
	return faulttest.StartHolder(t, "TestHolderProcess", key, ttl, env.holderEnv()...)
}

// holderEnv is what a holder process needs to know of env: see
// holderSetup.
func (env *faultEnv) holderEnv() []string {
	return []string{"TASKLOCK_PG_URL=" + env.url, "TASKLOCK_PG_TABLE=" + env.table, "TASKLOCK_PG_MODE=" + string(env.mode)}
}

// TestHolderProcess is the lock holder that the fault tests run in a
// helper process (see faulttest.HolderMain); in a normal run it skips.
func TestHolderProcess(t *testing.T) { faulttest.HolderMain(t, holderSetup) }

// holderSetup builds a holder process's store and register writer from
// the environment startHolder and startKindHolder give it.
func holderSetup(time.Duration) (driver.Store, faulttest.WriteFunc, error) {
	pool, err := pgxpool.New(context.Background(), os.Getenv("TASKLOCK_PG_URL"))
	if err != nil {
		return nil, nil, err
	}
	s, err := New(pool, &Options{Table: os.Getenv("TASKLOCK_PG_TABLE"), Mode: Mode(os.Getenv("TASKLOCK_PG_MODE"))})
	if err != nil {
		return nil, nil, err
	}
	return s, func(ctx context.Context, fence uint64) (bool, error) {
		return writeRegister(ctx, pool, fence, "helper")
	}, nil
}

// TestFaults runs the fault tests in both modes (the kinds' in
// kinds_fault_test.go).
func TestFaults(t *testing.T) {
	tests := []struct {
		name string
		fn   func(t *testing.T, mode Mode)
	}{
		{"HolderKilled", testHolderKilled},
		{"HolderPaused", testHolderPaused},
		{"ServerRestarted", testServerRestarted},
		{"KindHolderKilled", testKindHolderKilled},
		{"KindHolderPaused", testKindHolderPaused},
		{"KindsServerRestarted", testKindsServerRestarted},
		{"ServerPaused", testServerPaused},
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

// testServerPaused: the server is SIGSTOPped (its sockets stay open, and
// silent). A TryObtain and a Release with no deadline of the caller's end
// with the store's error all the same, the first within its lease's TTL
// and an eighth (the Locker's bound: before, both waited for as long as the
// server was paused); once the server resumes, a lock is obtained again.
func testServerPaused(t *testing.T, mode Mode) {
	r := newRestartEnv(t, mode)
	faulttest.ServerPaused(t, r.a, r.b, r.srv.Stop, r.srv.Cont)
}

// testHolderKilled: the holder process is SIGKILLed. Lease mode: another
// obtains within TTL + 1s. Connection mode: the server ends the dead
// holder's session at once, and another obtains within 2s whatever the TTL.
func testHolderKilled(t *testing.T, mode Mode) {
	env := newFaultEnv(t, newDB(t), mode)
	ttl, limit := time.Second, 2*time.Second // TTL + 1s
	if mode == ModeConnection {
		ttl, limit = 30*time.Second, 2*time.Second
	}
	h := startHolder(t, env, "job", ttl)
	f1 := h.Fence
	lk := newLocker(t, env.store, "next", nil)
	h.Kill(t)
	l, took := faulttest.Obtain(t, lk, "job", &tasklock.ObtainOptions{TTL: 5 * time.Second}, time.Now())
	t.Logf("%s: TTL %v: obtained %v after SIGKILL of the holder (limit %v), fence %d after %d", mode, ttl, took, limit, l.Fence(), f1)
	if took > limit {
		t.Errorf("takeover took %v, want ≤ %v", took, limit)
	}
	if l.Fence() <= f1 {
		t.Errorf("fence %d after %d", l.Fence(), f1)
	}
	if ok, err := writeRegister(ctxT(t), env.pool, l.Fence(), "next"); err != nil || !ok {
		t.Fatalf("the new holder's write: %v %v", ok, err)
	}
	counts := checkHistory(t, env.pool, l.Fence())
	t.Logf("%s: writes accepted: %v", mode, counts)
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// testHolderPaused: the holder process is SIGSTOPped past its TTL. Another
// obtains once the lease ended at the server; when the holder resumes its
// Done is closed before it writes again, and none of its writes is accepted
// after the new holder's.
func testHolderPaused(t *testing.T, mode Mode) {
	env := newFaultEnv(t, newDB(t), mode)
	const ttl = time.Second
	h := startHolder(t, env, "job", ttl)
	f1 := h.Fence
	lk := newLocker(t, env.store, "next", nil)
	h.Stop(t)
	l, took := faulttest.Obtain(t, lk, "job", &tasklock.ObtainOptions{TTL: 10 * time.Second}, time.Now())
	t.Logf("%s: obtained %v after SIGSTOP of the holder (TTL %v), fence %d after %d", mode, took, ttl, l.Fence(), f1)
	if took > ttl+time.Second {
		t.Errorf("takeover took %v, want ≤ TTL + 1s", took)
	}
	if l.Fence() <= f1 {
		t.Fatalf("fence %d after %d", l.Fence(), f1)
	}
	if ok, err := writeRegister(ctxT(t), env.pool, l.Fence(), "next"); err != nil || !ok {
		t.Fatalf("the new holder's write: %v %v", ok, err)
	}

	h.CheckResumed(t, string(mode)+": ")
	counts := checkHistory(t, env.pool, l.Fence())
	t.Logf("%s: writes accepted: %v", mode, counts)
	select {
	case <-l.Done():
		t.Fatalf("the new holder's lock ended: %v", l.Err())
	default:
	}
}

// testServerRestarted: the database server is restarted while a lock is
// held. The fence keeps increasing across the restart. Connection mode: the
// holder's session is gone, it learns at its next renewal and another
// obtains at once. Lease mode: the lease is durable, so a short outage
// loses nothing (renewals resume); an outage longer than the TTL ends the
// lock by its local validity.
func testServerRestarted(t *testing.T, mode Mode) {
	r := newRestartEnv(t, mode)
	srv, env, ev, a, b := r.srv, r.env, r.ev, r.a, r.b
	woken := make(chan string, 10)
	stop, err := env.store.Subscribe(ctxT(t), func(key string) { woken <- key })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	ttl := 10 * time.Second // lease mode: long enough to outlast the restart on a busy machine
	if mode == ModeConnection {
		ttl = 1500 * time.Millisecond
	}
	l1, err := a.Obtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	doneAt := make(chan time.Time, 1)
	go func() {
		<-l1.Done()
		doneAt <- time.Now()
	}()
	start := time.Now()
	srv.Restart(t)
	restarted := time.Now()
	t.Logf("%s: restart took %v", mode, restarted.Sub(start).Round(time.Millisecond))

	var last uint64
	switch mode {
	case ModeConnection:
		// The holder's session died with the server, but the holder does not
		// know until its next renewal: nobody may take the key before that.
		// Its row keeps the key until it expires, and then b obtains.
		var l2 *tasklock.Lock
		var obtainedAt time.Time
		waitFor(t, 2*ttl, "b obtains after the restart", func() bool {
			l2, err = b.TryObtain(ctxT(t), "job", nil)
			obtainedAt = time.Now()
			return err == nil
		})
		var done time.Time
		select {
		case done = <-doneAt:
		default:
			t.Fatalf("b obtained %v after the restart while the old holder's Done is open", obtainedAt.Sub(restarted))
		}
		t.Logf("%s: TTL %v: the holder's Done closed %v after the restart began (%v); b obtained %v after it",
			mode, ttl, done.Sub(start).Round(time.Millisecond), l1.Err(), obtainedAt.Sub(start).Round(time.Millisecond))
		if !errors.Is(l1.Err(), tasklock.ErrLockLost) || !strings.Contains(l1.Err().Error(), "no longer has this lease") {
			t.Errorf("cause %v, want the store's answer (its session is gone)", l1.Err())
		}
		if l2.Fence() <= l1.Fence() {
			t.Fatalf("fence %d after the restart, %d before", l2.Fence(), l1.Fence())
		}
		last = l2.Fence()
		if err := l2.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	case ModeLease:
		// The lease survived: the holder renews it once the server is back,
		// and nobody else can take it meanwhile.
		renewed := ev.count(tasklock.EventRenewed)
		waitFor(t, ttl, "a renewal after the restart", func() bool { return ev.count(tasklock.EventRenewed) > renewed })
		select {
		case <-l1.Done():
			t.Fatalf("the lease was lost over a %v outage with TTL %v: %v", restarted.Sub(start), ttl, l1.Err())
		default:
		}
		if _, err := b.TryObtain(ctxT(t), "job", nil); !errors.Is(err, tasklock.ErrNotObtained) {
			t.Fatalf("b's TryObtain during a's surviving lease: %v, want ErrNotObtained", err)
		}
		if err := l1.Release(ctxT(t)); err != nil {
			t.Fatalf("Release after the restart: %v", err)
		}
		l2, err := b.TryObtain(ctxT(t), "job", nil)
		if err != nil {
			t.Fatal(err)
		}
		if l2.Fence() <= l1.Fence() {
			t.Fatalf("fence %d after the restart, %d before", l2.Fence(), l1.Fence())
		}
		last = l2.Fence()

		// An outage longer than the TTL: the holder stops at its validity.
		l3, err := a.Obtain(ctxT(t), "short", &tasklock.ObtainOptions{TTL: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		_ = l2.Release(ctxT(t))
		srv.Kill(t)
		killed := time.Now()
		select {
		case <-l3.Done():
		case <-time.After(2 * time.Second):
			t.Fatal("the holder's Done did not close within its TTL while the server was down")
		}
		t.Logf("%s: with the server down, the holder (TTL 500ms) stopped %v after the kill: %v", mode,
			time.Since(killed).Round(time.Millisecond), l3.Err())
		srv.Restart(t)
		var l4 *tasklock.Lock
		waitFor(t, 10*time.Second, "b obtains after the second restart", func() bool {
			l4, err = b.TryObtain(ctxT(t), "short", nil)
			return err == nil
		})
		if l4.Fence() <= l3.Fence() {
			t.Fatalf("fence %d after the restart, %d before", l4.Fence(), l3.Fence())
		}
		_ = l4.Release(ctxT(t))
	}

	// Fences keep counting, and the subscription came back.
	waitFor(t, 10*time.Second, "a notification after the restart", func() bool {
		l, err := b.TryObtain(ctxT(t), "job", nil)
		if err != nil {
			return false
		}
		if l.Fence() <= last {
			t.Fatalf("fence %d after %d", l.Fence(), last)
		}
		last = l.Fence()
		// A waiter's attempt, so that the release announces itself.
		if _, err := a.TryObtain(ctxT(t), "job", nil); !errors.Is(err, tasklock.ErrNotObtained) {
			t.Fatalf("a obtained a held lock: %v", err)
		}
		_ = l.Release(ctxT(t))
		for {
			select {
			case k := <-woken:
				if k == "job" {
					return true
				}
				continue
			case <-time.After(100 * time.Millisecond):
			}
			return false
		}
	})
}

// restartEnv is a server of the test's own, to restart, with a table and
// the register on it, and two Lockers: a, whose events ev counts, and b.
type restartEnv struct {
	srv  *testserver.Postgres
	env  *faultEnv
	ev   *eventLog
	a, b *tasklock.Locker
}

func newRestartEnv(t *testing.T, mode Mode) *restartEnv {
	t.Helper()
	srv := testserver.StartPostgresPrivate(t)
	env := newFaultEnv(t, srv.CreateDB(t), mode)
	ev := newEventLog()
	return &restartEnv{
		srv: srv, env: env, ev: ev,
		a: newLocker(t, env.store, "a", &tasklock.Config{OnEvent: ev.on}),
		b: newLocker(t, env.store, "b", nil),
	}
}

// eventLog counts a Locker's events.
type eventLog struct {
	mu     sync.Mutex
	counts map[tasklock.EventType]int
}

func newEventLog() *eventLog { return &eventLog{counts: map[tasklock.EventType]int{}} }

func (e *eventLog) on(ev tasklock.Event) {
	e.mu.Lock()
	e.counts[ev.Type]++
	e.mu.Unlock()
}

func (e *eventLog) count(t tasklock.EventType) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.counts[t]
}

// TestReleaseDuringHungRenewal: connection mode, the server is SIGSTOPped
// while a renewal is under way on the lock's connection. A Release whose
// ctx ends after 1s returns ctx's error within 3s (it used to wait for the
// renewal, which ends only with its own ctx, a TTL later: 10 s), the
// renewal ends at once too, the connection is closed and no longer
// registered, and once the server resumes the key is free.
func TestReleaseDuringHungRenewal(t *testing.T) {
	t.Parallel()
	const ttl = 10 * time.Second
	srv := testserver.StartPostgresPrivate(t)
	s := newStore(t, newPool(t, srv.CreateDB(t), nil), &Options{Mode: ModeConnection})
	mustAcquire(t, s, "k", "tok-a", "a", ttl)
	h := s.conns.get("k", "tok-a")
	if h == nil {
		t.Fatal("the lock's connection is not registered")
	}
	resume := sync.OnceFunc(func() { srv.Cont(t) })
	t.Cleanup(resume) // before the pool's and the server's cleanups
	faulttest.ReleaseDuringHungRenewal(t, ttl, srv.Stop,
		func(ctx context.Context) error {
			res, err := s.Renew(ctx, []driver.RenewParams{{Key: "k", Token: "tok-a", TTL: ttl}})
			return cmp.Or(err, res[0])
		},
		func(ctx context.Context) error { return s.Release(ctx, driver.ReleaseParams{Key: "k", Token: "tok-a"}) },
		func() bool { return faulttest.Locked(&h.mu) })
	h.mu.Lock()
	closed := h.conn == nil
	h.mu.Unlock()
	if !closed {
		t.Error("the lock's connection is still open")
	}
	if n := s.conns.len(); n != 0 {
		t.Errorf("%d connections still registered", n)
	}
	// The server ends the closed session when it runs again, and with it
	// the advisory lock.
	resume()
	faulttest.FreeWithin(t, 10*time.Second, func() error {
		_, err := s.Acquire(ctxT(t), driver.AcquireParams{Key: "k", Token: "tok-b", Owner: "b", TTL: time.Second})
		return err
	})
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "k", Token: "tok-b"}); err != nil {
		t.Fatal(err)
	}
}
