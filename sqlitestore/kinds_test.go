package sqlitestore

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
)

// acquireKind asks s for a hold of mode m (limit for a permit) on key.
func acquireKind(t *testing.T, s *Store, key, token string, m driver.Mode, limit int, ttl time.Duration) (driver.Grant, error) {
	t.Helper()
	return s.Acquire(ctxT(t), driver.AcquireParams{Key: key, Token: token, Owner: "owner-" + token, TTL: ttl, Mode: m, Limit: limit})
}

func mustKind(t *testing.T, s *Store, key, token string, m driver.Mode, limit int, ttl time.Duration) uint64 {
	t.Helper()
	g, err := acquireKind(t, s, key, token, m, limit, ttl)
	if err != nil {
		t.Fatalf("Acquire %v %q for %q: %v", m, key, token, err)
	}
	return g.Fence
}

// heldKind checks that err is a *driver.HeldError naming owner, with a
// positive TTL unless waiting.
func heldKind(t *testing.T, what string, err error, owner string, waiting bool) {
	t.Helper()
	var he *driver.HeldError
	if !errors.As(err, &he) || he.Owner != owner || (he.TTL > 0) == waiting {
		t.Fatalf("%s = %v (%+v), want a *HeldError naming %s (waiting %v)", what, err, he, owner, waiting)
	}
}

// TestWriterClaimExpires: a writer that dies while it waits stops holding
// readers off when its claim's TTL runs out by SQLite's clock, and a
// writer's hold released with MinHold is kept until then, no longer its
// token's.
func TestWriterClaimExpires(t *testing.T) {
	s := newStoreT(t, openT(t, dbPath(t), nil))
	ctx := ctxT(t)
	mustKind(t, s, "rw", "r1", driver.ModeRead, 0, time.Minute)
	const claimTTL = 300 * time.Millisecond
	_, err := acquireKind(t, s, "rw", "dead", driver.ModeWrite, 0, claimTTL)
	heldKind(t, "writer while a reader holds", err, "owner-r1", false)
	_, err = acquireKind(t, s, "rw", "r2", driver.ModeRead, 0, time.Minute)
	heldKind(t, "reader while a writer waits", err, "owner-dead", true)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := acquireKind(t, s, "rw", "r2", driver.ModeRead, 0, time.Minute)
		if err == nil {
			break
		}
		if !errors.Is(err, driver.ErrHeld) || time.Now().After(deadline) {
			t.Fatalf("reader after the dead writer's claim expired = %v", err)
		}
		time.Sleep(20 * time.Millisecond) // polling SQLite's clock, not synchronising
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "rw", Token: "dead", Mode: driver.ModeWrite}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Release of an expired claim = %v, want ErrNotHeld", err)
	}
	for _, r := range []string{"r1", "r2"} {
		if err := s.Release(ctx, driver.ReleaseParams{Key: "rw", Token: r, Mode: driver.ModeRead}); err != nil {
			t.Fatal(err)
		}
	}
	mustKind(t, s, "rw", "w", driver.ModeWrite, 0, time.Minute)
	if err := s.Release(ctx, driver.ReleaseParams{Key: "rw", Token: "w", Mode: driver.ModeWrite, KeepFor: time.Minute}); err != nil {
		t.Fatal(err)
	}
	_, err = acquireKind(t, s, "rw", "r3", driver.ModeRead, 0, time.Minute)
	heldKind(t, "reader while a released writer is kept (MinHold)", err, "owner-w", false)
	res, err := s.Renew(ctx, []driver.RenewParams{{Key: "rw", Token: "w", TTL: time.Minute, Mode: driver.ModeWrite}})
	if err != nil || !errors.Is(res[0], driver.ErrNotHeld) {
		t.Fatalf("Renew of a kept writer = %v, %v, want ErrNotHeld", res, err)
	}
}

// TestSemaphoreRules: a permit expires by SQLite's clock, one released
// with MinHold is kept (and counted) until then, ForceRelease deletes them
// all, and the key's fence counter outlives them.
func TestSemaphoreRules(t *testing.T) {
	s := newStoreT(t, openT(t, dbPath(t), nil))
	ctx := ctxT(t)
	f1 := mustKind(t, s, "sem", "a", driver.ModePermit, 2, time.Minute)
	f2 := mustKind(t, s, "sem", "b", driver.ModePermit, 2, 300*time.Millisecond)
	if f2 <= f1 {
		t.Fatalf("fences %d then %d", f1, f2)
	}
	_, err := acquireKind(t, s, "sem", "c", driver.ModePermit, 2, time.Minute)
	heldKind(t, "third permit of 2", err, "owner-b", false) // b's ends first
	// b's permit expires by SQLite's clock, without a release.
	deadline := time.Now().Add(10 * time.Second)
	var f3 uint64
	for {
		g, err := acquireKind(t, s, "sem", "c", driver.ModePermit, 2, time.Minute)
		if err == nil {
			f3 = g.Fence
			break
		}
		if !errors.Is(err, driver.ErrHeld) || time.Now().After(deadline) {
			t.Fatalf("permit after b's expiry = %v", err)
		}
		time.Sleep(20 * time.Millisecond) // polling SQLite's clock, not synchronising
	}
	if f3 <= f2 {
		t.Fatalf("fence %d after %d", f3, f2)
	}
	res, err := s.Renew(ctx, []driver.RenewParams{
		{Key: "sem", Token: "b", TTL: time.Minute, Mode: driver.ModePermit},
		{Key: "sem", Token: "a", TTL: time.Minute, Mode: driver.ModePermit},
	})
	if err != nil || !errors.Is(res[0], driver.ErrNotHeld) || res[1] != nil {
		t.Fatalf("Renew = %v, %v, want [ErrNotHeld nil]", res, err)
	}
	// MinHold: a released permit is kept, and no longer the token's.
	if err := s.Release(ctx, driver.ReleaseParams{Key: "sem", Token: "a", Mode: driver.ModePermit, KeepFor: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "sem", Token: "a", Mode: driver.ModePermit}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("second Release = %v, want ErrNotHeld", err)
	}
	if _, err := acquireKind(t, s, "sem", "d", driver.ModePermit, 2, time.Minute); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("permit while a kept one and c hold = %v, want ErrHeld", err)
	}
	if err := s.ForceRelease(ctx, "sem"); err != nil {
		t.Fatal(err)
	}
	if err := s.ForceRelease(ctx, "sem"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("ForceRelease of nothing = %v, want ErrNotHeld", err)
	}
	// Emptied, the key takes the kind of the next Acquire; its fence goes on.
	if f := mustKind(t, s, "sem", "e", driver.ModePermit, 5, time.Minute); f <= f3 {
		t.Fatalf("fence %d after %d", f, f3)
	}
}

// TestRenewMixedBatch renews mutexes, readers and permits in one call: one
// transaction of two statements, whatever the number of leases.
func TestRenewMixedBatch(t *testing.T) {
	db, cc := openCounting(t, dbPath(t))
	s := newStoreT(t, db)
	ctx := ctxT(t)
	var ps []driver.RenewParams
	for i := range 50 {
		key, tok := fmt.Sprintf("k%02d", i), fmt.Sprintf("t%02d", i)
		mode := [...]driver.Mode{driver.ModeMutex, driver.ModeRead, driver.ModePermit}[i%3]
		switch mode {
		case driver.ModeMutex:
			mustAcquire(t, s, key, tok, time.Minute)
		case driver.ModeRead:
			mustKind(t, s, key, tok, mode, 0, time.Minute)
		default:
			mustKind(t, s, "sem", tok, mode, 100, time.Minute)
			key = "sem"
		}
		ps = append(ps, driver.RenewParams{Key: key, Token: tok, TTL: 2 * time.Minute, Mode: mode})
	}
	ps = append(ps,
		driver.RenewParams{Key: "k00", Token: "t00", TTL: time.Minute, Mode: driver.ModeRead}, // a mutex's token, as a reader
		driver.RenewParams{Key: "sem", Token: "nobody", TTL: time.Minute, Mode: driver.ModePermit},
	)
	stmts, txs := cc.stmts.Load(), cc.txs.Load()
	res, err := s.Renew(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	if n, x := cc.stmts.Load()-stmts, cc.txs.Load()-txs; n != 2 || x != 1 {
		t.Fatalf("mixed Renew ran %d statements in %d transactions, want 2 in 1", n, x)
	}
	for i, err := range res {
		if (i >= 50) != errors.Is(err, driver.ErrNotHeld) || (i < 50 && err != nil) {
			t.Fatalf("Renew result %d (%+v) = %v", i, ps[i], err)
		}
	}
	leases, err := s.Leases(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != 50 {
		t.Fatalf("%d leases listed, want 50", len(leases))
	}
	for _, l := range leases {
		if l.TTL < 90*time.Second {
			t.Fatalf("lease %+v not renewed", l)
		}
		if l.Mode == driver.ModePermit && l.Limit != 100 {
			t.Fatalf("permit listed with Limit %d", l.Limit)
		}
	}
}

// newLockerT returns a Locker on s, closed at cleanup.
func newLockerT(t *testing.T, s driver.Store, owner string) *tasklock.Locker {
	t.Helper()
	lk, err := tasklock.New(s, &tasklock.Config{Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lk.Close() })
	return lk
}

// TestSemaphoreAcrossStores opens the file twice, as two processes would,
// and contends for a semaphore's permits through both: the count holds
// across them, since every decision is made inside SQLite's write lock.
func TestSemaphoreAcrossStores(t *testing.T) {
	path := dbPath(t)
	s1 := newStoreT(t, openT(t, path, nil))
	s2 := newStoreT(t, openT(t, path, nil))
	lks := []*tasklock.Locker{newLockerT(t, s1, "one"), newLockerT(t, s2, "two")}
	ctx := ctxT(t)
	const permits = 2
	var (
		in, most atomic.Int64
		grants   [2]atomic.Int64
		wg       sync.WaitGroup
	)
	for g := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lk := lks[g%2]
			for range 6 {
				l, err := lk.Semaphore("shared", permits).Acquire(ctx, &tasklock.ObtainOptions{TTL: 5 * time.Second})
				if err != nil {
					t.Error(err)
					return
				}
				grants[g%2].Add(1)
				n := in.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				// Look at the store while holding: never more live permits
				// than the limit, by either Store's reading.
				for _, s := range []*Store{s1, s2} {
					ls, err := s.Leases(ctx, "shared")
					if err != nil {
						t.Error(err)
					} else if len(ls) > permits {
						t.Errorf("%d permits live at the store, want at most %d", len(ls), permits)
					}
				}
				in.Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if m := most.Load(); m > permits {
		t.Fatalf("%d permits held at once across two Stores, want at most %d", m, permits)
	}
	if grants[0].Load() == 0 || grants[1].Load() == 0 {
		t.Fatalf("grants per Store: %d and %d, want both", grants[0].Load(), grants[1].Load())
	}
	// A permit the other Store holds counts here: fill both from s1, then
	// s2 is refused.
	for i := range permits {
		mustKind(t, s1, "full", fmt.Sprint("p", i), driver.ModePermit, permits, time.Minute)
	}
	if _, err := acquireKind(t, s2, "full", "late", driver.ModePermit, permits, time.Minute); !errors.Is(err, driver.ErrHeld) {
		t.Fatalf("a third permit through the other Store = %v, want ErrHeld", err)
	}
}
