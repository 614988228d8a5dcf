package mysqlstore

import (
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
)

// newLocker returns a Locker on s, closed at cleanup.
func newLocker(t testing.TB, s *Store, owner string, onEvent func(tasklock.Event)) *tasklock.Locker {
	t.Helper()
	lk, err := tasklock.New(s, &tasklock.Config{Owner: owner, OnEvent: onEvent})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lk.Close() })
	return lk
}

// lockers returns n Lockers, each on a Store of its own with a pool of its
// own on dsn's database, as n processes would have.
func lockers(t *testing.T, dsn string, n int) []*tasklock.Locker {
	t.Helper()
	lks := make([]*tasklock.Locker, n)
	for i := range lks {
		lks[i] = newLocker(t, mustNew(t, openDB(t, dsn), nil), fmt.Sprintf("p%d", i), nil)
	}
	return lks
}

func kindAcquireP(key, tok string, mode driver.Mode, limit int, ttl time.Duration) driver.AcquireParams {
	return driver.AcquireParams{Key: key, Token: tok, Owner: "o-" + tok[:4], TTL: ttl, Mode: mode, Limit: limit}
}

// linger keeps a holder inside its critical section until full reports
// that as many holders as may be are inside, or d passes: long enough for
// the others to try to come in.
func linger(full func() bool, d time.Duration) {
	deadline := time.Now().Add(d)
	for !full() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// hammer runs n goroutines on each of lks, each of which calls hold
// rounds times with its Locker, and fails the test with the first error
// any returned.
func hammer(t *testing.T, lks []*tasklock.Locker, n, rounds int, hold func(lk *tasklock.Locker) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(lks)*n)
	for _, lk := range lks {
		for range n {
			wg.Go(func() {
				for range rounds {
					if err := hold(lk); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// peak is the highest value a counter of holders inside reached.
type peak struct{ inside, most atomic.Int32 }

// enter counts a holder in and returns how many are inside.
func (p *peak) enter() int32 {
	n := p.inside.Add(1)
	for m := p.most.Load(); n > m && !p.most.CompareAndSwap(m, n); m = p.most.Load() {
	}
	return n
}

// leave counts a holder out.
func (p *peak) leave() { p.inside.Add(-1) }

// TestSemaphorePermitCount: 32 goroutines on each of 3 Lockers take
// permits of one semaphore of 3; the permits held at once, counted by the
// holders themselves between their grant and their release, never exceed
// 3, and every grant's fence is new.
func TestSemaphorePermitCount(t *testing.T) {
	t.Parallel()
	const (
		permits    = 3
		goroutines = 32
		rounds     = 3
	)
	dsn := testserver.SharedMariaDB(t).CreateDB(t)
	mustNew(t, openDB(t, dsn), &Options{Migrate: true})
	lks := lockers(t, dsn, 3)
	ctx := ctxT(t)
	var (
		held   peak
		fences sync.Map
		dup    atomic.Int32
	)
	hammer(t, lks, goroutines, rounds, func(lk *tasklock.Locker) error {
		l, err := lk.Semaphore("pool", permits).Acquire(ctx, &tasklock.ObtainOptions{TTL: 5 * time.Second})
		if err != nil {
			return err
		}
		held.enter()
		if _, loaded := fences.LoadOrStore(l.Fence(), true); loaded {
			dup.Add(1)
		}
		linger(func() bool { return held.inside.Load() >= permits }, 30*time.Millisecond)
		held.leave()
		return l.Release(ctx)
	})
	t.Logf("most permits held at once: %d of %d; %d grants", held.most.Load(), permits, len(lks)*goroutines*rounds)
	if held.most.Load() > permits {
		t.Fatalf("%d permits held at once, the semaphore has %d", held.most.Load(), permits)
	}
	if dup.Load() > 0 {
		t.Fatalf("%d fences granted twice", dup.Load())
	}
}

// TestKindsStore exercises the rules of driver.Mode at the Store.
func TestKindsStore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s *Store, db *sql.DB)
	}{
		{"BadLimit", testKindBadLimit},
		{"Repeat", testKindRepeat},
		{"Expiry", testKindExpiry},
		{"KeepFor", testKindKeepFor},
		{"RenewMixed", testKindRenewMixed},
		{"ListAndForceRelease", testKindListForce},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, db, _ := newStore(t, ModeLease)
			tc.fn(t, s, db)
		})
	}
}

// testKindBadLimit: a semaphore of no permits, or a read-write lock with
// a limit, is an error at the store, not a hold.
func testKindBadLimit(t *testing.T, s *Store, _ *sql.DB) {
	ctx := ctxT(t)
	for _, ap := range []driver.AcquireParams{
		kindAcquireP("k", token(), driver.ModePermit, 0, time.Second),
		kindAcquireP("k", token(), driver.ModeRead, 2, time.Second),
	} {
		if _, err := s.Acquire(ctx, ap); err == nil || errors.Is(err, driver.ErrHeld) {
			t.Errorf("Acquire(%v, Limit %d): %v, want an error", ap.Mode, ap.Limit, err)
		}
	}
}

func testKindRepeat(t *testing.T, s *Store, _ *sql.DB) {
	ctx := ctxT(t)
	for _, mode := range []driver.Mode{driver.ModeRead, driver.ModeWrite, driver.ModePermit} {
		key := "repeat-" + mode.String()
		limit := 0
		if mode == driver.ModePermit {
			limit = 1
		}
		tok := token()
		g1, err := s.Acquire(ctx, kindAcquireP(key, tok, mode, limit, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		g2, err := s.Acquire(ctx, kindAcquireP(key, tok, mode, limit, time.Minute))
		if err != nil || g2 != g1 {
			t.Fatalf("%v: repeated Acquire: %+v %v, want %+v", mode, g2, err, g1)
		}
		if err := s.Release(ctx, driver.ReleaseParams{Key: key, Token: tok, Mode: mode}); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, driver.ReleaseParams{Key: key, Token: tok, Mode: mode}); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("%v: second Release: %v, want ErrNotHeld", mode, err)
		}
	}
	// Release and Renew in another mode than granted are not the token's.
	tok := token()
	if _, err := s.Acquire(ctx, kindAcquireP("m", tok, driver.ModeRead, 0, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "m", Token: tok, Mode: driver.ModePermit}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Release in another mode: %v", err)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "m", Token: tok}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Release as a mutex: %v", err)
	}
	if res, err := s.Renew(ctx, []driver.RenewParams{{Key: "m", Token: tok, TTL: time.Minute, Mode: driver.ModeWrite}}); err != nil || !errors.Is(res[0], driver.ErrNotHeld) {
		t.Fatalf("Renew in another mode: %v %v", res, err)
	}
}

func testKindExpiry(t *testing.T, s *Store, _ *sql.DB) {
	ctx := ctxT(t)
	dead := token()
	g1, err := s.Acquire(ctx, kindAcquireP("exp", dead, driver.ModePermit, 1, 300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Acquire(ctx, kindAcquireP("exp", token(), driver.ModePermit, 1, time.Minute))
	var he *driver.HeldError
	if !errors.As(err, &he) || he.TTL <= 0 || he.TTL > 300*time.Millisecond {
		t.Fatalf("while the permit is held: %v", err)
	}
	// The dead holder's permit returns when its lease ends, by the
	// server's clock.
	var g2 driver.Grant
	waitFor(t, 5*time.Second, "the expired permit's return", func() bool {
		g2, err = s.Acquire(ctx, kindAcquireP("exp", token(), driver.ModePermit, 1, time.Minute))
		return err == nil
	})
	if g2.Fence <= g1.Fence {
		t.Fatalf("fence %d after %d", g2.Fence, g1.Fence)
	}
	if res, err := s.Renew(ctx, []driver.RenewParams{{Key: "exp", Token: dead, TTL: time.Minute, Mode: driver.ModePermit}}); err != nil || !errors.Is(res[0], driver.ErrNotHeld) {
		t.Fatalf("Renew of the expired permit: %v %v", res, err)
	}
	// A key whose entries all expired takes any limit, and its counter
	// lives on.
	var n int
	if err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM tasklock_locks_holds WHERE lock_key = 'exp'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d entries of exp after the grant pruned the expired one, %v; want 1", n, err)
	}
}

func testKindKeepFor(t *testing.T, s *Store, _ *sql.DB) {
	ctx := ctxT(t)
	tok := token()
	if _, err := s.Acquire(ctx, kindAcquireP("keep", tok, driver.ModePermit, 1, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "keep", Token: tok, Mode: driver.ModePermit, KeepFor: 400 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, kindAcquireP("keep", token(), driver.ModePermit, 1, time.Minute)); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("within KeepFor: %v, want ErrHeld", err)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "keep", Token: tok, Mode: driver.ModePermit}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}
	if res, err := s.Renew(ctx, []driver.RenewParams{{Key: "keep", Token: tok, TTL: time.Minute, Mode: driver.ModePermit}}); err != nil || !errors.Is(res[0], driver.ErrNotHeld) {
		t.Fatalf("Renew after Release: %v %v", res, err)
	}
	waitFor(t, 5*time.Second, "the kept permit's end", func() bool {
		_, err := s.Acquire(ctx, kindAcquireP("keep", token(), driver.ModePermit, 1, time.Minute))
		return err == nil
	})
}

// testKindRenewMixed: a renewal of mutexes, readers and permits is one
// statement, and two when a lease was lost.
func testKindRenewMixed(t *testing.T, _ *Store, _ *sql.DB) {
	ctx := ctxT(t)
	dsn := testserver.SharedMariaDB(t).CreateDB(t)
	if err := Migrate(ctx, openDB(t, dsn), nil); err != nil {
		t.Fatal(err)
	}
	c := &counter{}
	s := mustNew(t, openCountingDB(t, dsn, c), nil)
	var ps []driver.RenewParams
	for i := range 4 {
		key, tok := fmt.Sprintf("m%d", i), token()
		mustAcquire(t, s, key, tok, "me", time.Minute)
		ps = append(ps, driver.RenewParams{Key: key, Token: tok, TTL: time.Minute})
		for _, mode := range []driver.Mode{driver.ModeRead, driver.ModePermit} {
			key, tok, limit := fmt.Sprintf("%v%d", mode, i), token(), 0
			if mode == driver.ModePermit {
				limit = 2
			}
			if _, err := s.Acquire(ctx, kindAcquireP(key, tok, mode, limit, time.Minute)); err != nil {
				t.Fatal(err)
			}
			ps = append(ps, driver.RenewParams{Key: key, Token: tok, TTL: 30 * time.Second, Mode: mode})
		}
	}
	for _, tc := range []struct {
		what  string
		ps    []driver.RenewParams
		stmts int
		lost  int
	}{
		{"mixed", ps, 1, -1},
		{"mutexes", ps[:1], 1, -1},
		{"entries", ps[1:3], 1, -1},
		{"a mutex and a reader", ps[:2], 1, -1},
		{"a reader", ps[1:2], 1, -1},
		{"mixed, a permit lost", append(append([]driver.RenewParams{}, ps...), driver.RenewParams{Key: "permit0", Token: token(), TTL: time.Minute, Mode: driver.ModePermit}), 2, len(ps)},
		{"mixed, a reader renewed as a permit", append(append([]driver.RenewParams{}, ps[:3]...), driver.RenewParams{Key: ps[1].Key, Token: ps[1].Token, TTL: time.Minute, Mode: driver.ModePermit}), 2, 3},
	} {
		c.reset()
		res, err := s.Renew(ctx, tc.ps)
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		for i, r := range res {
			if (i == tc.lost) != errors.Is(r, driver.ErrNotHeld) || (i != tc.lost && r != nil) {
				t.Errorf("%s: lease %d: %v", tc.what, i, r)
			}
		}
		if n, _ := c.count(); n != tc.stmts {
			t.Errorf("%s: %d statements %q, want %d", tc.what, n, c.stmts, tc.stmts)
		}
	}
	var left int64
	q := "SELECT MIN(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)) FROM tasklock_locks_holds"
	if err := s.db.QueryRowContext(ctx, q).Scan(&left); err != nil || left < int64(20*time.Second/time.Microsecond) || left > int64(30*time.Second/time.Microsecond) {
		t.Fatalf("entries renewed for %dµs, %v; want their TTL of 30 s", left, err)
	}
}

func testKindListForce(t *testing.T, s *Store, _ *sql.DB) {
	ctx := ctxT(t)
	mustAcquire(t, s, "x", token(), "mutex", time.Minute)
	if _, err := s.Acquire(ctx, driver.AcquireParams{Key: "x", Token: token(), Owner: "reader", TTL: time.Minute, Mode: driver.ModeRead}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, driver.AcquireParams{Key: "x", Token: token(), Owner: "writer", TTL: time.Minute, Mode: driver.ModeWrite}); !errors.Is(err, driver.ErrHeld) {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, driver.AcquireParams{Key: "y", Token: token(), Owner: "permit", TTL: time.Minute, Mode: driver.ModePermit, Limit: 4}); err != nil {
		t.Fatal(err)
	}
	ls, err := s.Leases(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []driver.Lease{
		{Key: "x", Owner: "mutex", Fence: 1, Mode: driver.ModeMutex},
		{Key: "x", Owner: "reader", Fence: 0, Mode: driver.ModeRead},
		{Key: "x", Owner: "writer", Fence: 0, Mode: driver.ModeWrite, Waiting: true},
		{Key: "y", Owner: "permit", Fence: 1, Mode: driver.ModePermit, Limit: 4},
	}
	if len(ls) != len(want) {
		t.Fatalf("Leases: %+v, want %+v", ls, want)
	}
	for i, l := range ls {
		if l.TTL <= 50*time.Second || l.TTL > time.Minute {
			t.Errorf("lease %d: TTL %v", i, l.TTL)
		}
		l.TTL = 0
		if l != want[i] {
			t.Errorf("lease %d: %+v, want %+v", i, l, want[i])
		}
	}
	if err := s.ForceRelease(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if ls, _ := s.Leases(ctx, "x"); len(ls) != 0 {
		t.Fatalf("after ForceRelease(x): %+v", ls)
	}
	if err := s.ForceRelease(ctx, "x"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("ForceRelease of nothing: %v", err)
	}
	if err := s.ForceRelease(ctx, "y"); err != nil {
		t.Fatalf("ForceRelease of a semaphore alone: %v", err)
	}
	// A Locker's permit forced away is lost at its next renewal.
	lk := newLocker(t, s, "lk", nil)
	l, err := lk.Semaphore("z", 2).Acquire(ctx, &tasklock.ObtainOptions{TTL: 900 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ForceRelease(ctx, "z"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done did not close after ForceRelease")
	}
	if !errors.Is(l.Err(), tasklock.ErrLockLost) {
		t.Fatalf("cause %v", l.Err())
	}
}

// TestKindsConnectionMode: connection mode keeps mutexes only, and says
// so; its mutexes wait fairly on request.
func TestKindsConnectionMode(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, ModeConnection)
	ctx := ctxT(t)
	for _, m := range []driver.Mode{driver.ModeRead, driver.ModeWrite, driver.ModePermit} {
		if err := s.Kinds(m); !errors.Is(err, driver.ErrUnsupported) {
			t.Errorf("Kinds(%v) = %v, want ErrUnsupported", m, err)
		}
	}
	if err := s.Kinds(driver.ModeMutex); err != nil {
		t.Errorf("Kinds(mutex) = %v", err)
	}
	if _, err := s.Acquire(ctx, driver.AcquireParams{Key: "k", Token: token(), Owner: "me", TTL: time.Second, Mode: driver.ModePermit, Limit: 2}); !errors.Is(err, driver.ErrUnsupported) {
		t.Errorf("Acquire of a permit = %v, want ErrUnsupported", err)
	}
	lk := newLocker(t, s, "lk", nil)
	if _, err := lk.Semaphore("k", 2).TryAcquire(ctx, nil); !errors.Is(err, tasklock.ErrUnsupported) {
		t.Errorf("Semaphore.TryAcquire = %v, want ErrUnsupported", err)
	}
	if err := newLeaseStore(t).Kinds(driver.ModePermit); err != nil {
		t.Errorf("lease mode Kinds(permit) = %v", err)
	}
	// Fair waits work: the head's grant is a GET_LOCK on a connection of
	// its own.
	l, err := lk.Obtain(ctx, "k", &tasklock.ObtainOptions{Fair: true})
	if err != nil {
		t.Fatalf("fair Obtain of a free key: %v", err)
	}
	if _, err := newLocker(t, s, "other", nil).TryObtain(ctx, "k", nil); !errors.Is(err, tasklock.ErrNotObtained) {
		t.Fatalf("TryObtain of a key held after a fair Obtain: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// newLeaseStore returns a lease-mode Store that makes no round trip.
func newLeaseStore(t *testing.T) *Store {
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:1)/x")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return mustNew(t, db, nil)
}
