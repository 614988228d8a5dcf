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

// TestReadWriteRules walks the read-write lock's rules at the store.
func TestReadWriteRules(t *testing.T) {
	s := newStoreT(t, openT(t, dbPath(t), nil))
	ctx := ctxT(t)
	const ttl = time.Minute
	if f := mustKind(t, s, "rw", "r1", driver.ModeRead, 0, ttl); f != 0 {
		t.Fatalf("first reader's fence = %d, want 0 (no writer yet)", f)
	}
	mustKind(t, s, "rw", "r2", driver.ModeRead, 0, ttl)
	// A mutex of the same name is another lock.
	mustAcquire(t, s, "rw", "m", ttl)

	// A writer is refused while readers hold, and leaves a claim that
	// refuses new readers.
	_, err := acquireKind(t, s, "rw", "w1", driver.ModeWrite, 0, ttl)
	heldKind(t, "writer while readers hold", err, "owner-r1", false)
	_, err = acquireKind(t, s, "rw", "r3", driver.ModeRead, 0, ttl)
	heldKind(t, "reader while a writer waits", err, "owner-w1", true)
	// An existing reader asking again (a lost answer) is renewed, not refused.
	if f := mustKind(t, s, "rw", "r1", driver.ModeRead, 0, ttl); f != 0 {
		t.Fatalf("repeat reader's fence = %d, want 0", f)
	}
	// The waiting claim is listed, and is not a hold: renewing it fails.
	leases, err := s.Leases(ctx, "rw")
	if err != nil {
		t.Fatal(err)
	}
	var modes []string
	for _, l := range leases {
		modes = append(modes, fmt.Sprintf("%v/%v/%v", l.Mode, l.Limit, l.Waiting))
	}
	if fmt.Sprint(modes) != "[mutex/0/false read/0/false read/0/false write/0/true]" {
		t.Fatalf("Leases = %v", modes)
	}
	res, err := s.Renew(ctx, []driver.RenewParams{{Key: "rw", Token: "w1", TTL: ttl, Mode: driver.ModeWrite}})
	if err != nil || !errors.Is(res[0], driver.ErrNotHeld) {
		t.Fatalf("Renew of a waiting claim = %v, %v, want ErrNotHeld", res, err)
	}

	for _, r := range []string{"r1", "r2"} {
		if err := s.Release(ctx, driver.ReleaseParams{Key: "rw", Token: r, Mode: driver.ModeRead}); err != nil {
			t.Fatal(err)
		}
	}
	// The mutex named rw is still held by m: it does not count.
	w1 := mustKind(t, s, "rw", "w1", driver.ModeWrite, 0, ttl)
	if w1 == 0 {
		t.Fatal("writer's fence is 0")
	}
	if f := mustKind(t, s, "rw", "w1", driver.ModeWrite, 0, ttl); f != w1 {
		t.Fatalf("repeat writer's fence = %d, want %d", f, w1)
	}
	_, err = acquireKind(t, s, "rw", "w2", driver.ModeWrite, 0, ttl)
	heldKind(t, "second writer", err, "owner-w1", false)
	_, err = acquireKind(t, s, "rw", "r4", driver.ModeRead, 0, ttl)
	heldKind(t, "reader while a writer holds", err, "owner-w1", false)
	// A semaphore of the same name is refused, and changes nothing.
	if _, err := acquireKind(t, s, "rw", "p", driver.ModePermit, 2, ttl); !errors.Is(err, driver.ErrKindMismatch) {
		t.Fatalf("permit on a read-write lock = %v, want ErrKindMismatch", err)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "rw", Token: "w1", Mode: driver.ModeWrite}); err != nil {
		t.Fatal(err)
	}
	// w2's claim still holds readers off; w2 leaving deletes it and is
	// told ErrNotHeld.
	_, err = acquireKind(t, s, "rw", "r4", driver.ModeRead, 0, ttl)
	heldKind(t, "reader while w2 waits", err, "owner-w2", true)
	if err := s.Release(ctx, driver.ReleaseParams{Key: "rw", Token: "w2", Mode: driver.ModeWrite}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Release of a waiting writer = %v, want ErrNotHeld", err)
	}
	if f := mustKind(t, s, "rw", "r4", driver.ModeRead, 0, ttl); f != w1 {
		t.Fatalf("reader's fence = %d, want the last writer's %d", f, w1)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "rw", Token: "r4", Mode: driver.ModeRead}); err != nil {
		t.Fatal(err)
	}
	// Every entry is gone; the fence counter is not.
	if f := mustKind(t, s, "rw", "w3", driver.ModeWrite, 0, ttl); f <= w1 {
		t.Fatalf("next writer's fence = %d, want more than %d", f, w1)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "rw", Token: "w3", Mode: driver.ModeRead}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Release in the wrong mode = %v, want ErrNotHeld", err)
	}
}

// TestSemaphoreRules walks the semaphore's rules at the store, expiry by
// SQLite's clock included.
func TestSemaphoreRules(t *testing.T) {
	s := newStoreT(t, openT(t, dbPath(t), nil))
	ctx := ctxT(t)
	f1 := mustKind(t, s, "sem", "a", driver.ModePermit, 2, time.Minute)
	f2 := mustKind(t, s, "sem", "b", driver.ModePermit, 2, 300*time.Millisecond)
	if f2 <= f1 {
		t.Fatalf("fences %d then %d", f1, f2)
	}
	if f := mustKind(t, s, "sem", "a", driver.ModePermit, 2, time.Minute); f != f1 {
		t.Fatalf("repeat permit's fence = %d, want %d", f, f1)
	}
	_, err := acquireKind(t, s, "sem", "c", driver.ModePermit, 2, time.Minute)
	heldKind(t, "third permit of 2", err, "owner-b", false) // b's ends first
	for _, m := range []struct {
		mode  driver.Mode
		limit int
	}{{driver.ModePermit, 3}, {driver.ModeRead, 0}, {driver.ModeWrite, 0}} {
		if _, err := acquireKind(t, s, "sem", "x", m.mode, m.limit, time.Minute); !errors.Is(err, driver.ErrKindMismatch) {
			t.Fatalf("%v (limit %d) on a semaphore of 2 = %v, want ErrKindMismatch", m.mode, m.limit, err)
		}
	}
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

// TestKindsThroughLocker uses the root API: readers share, a writer
// excludes them and is not starved; a semaphore keeps its number of
// permits. (TestSemaphoreAcrossStores has the permits contended.)
func TestKindsThroughLocker(t *testing.T) {
	s := newStoreT(t, openT(t, dbPath(t), nil))
	a, b := newLockerT(t, s, "a"), newLockerT(t, s, "b")
	ctx := ctxT(t)

	r1, err := a.RWMutex("doc").RLock(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.RWMutex("doc").RLock(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *tasklock.Lock, 1)
	go func() {
		w, err := b.RWMutex("doc").Lock(ctx, nil)
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	// Once the writer waits, new readers are refused.
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := a.RWMutex("doc").TryRLock(ctx, nil)
		if err != nil {
			if !errors.Is(err, tasklock.ErrNotObtained) {
				t.Fatal(err)
			}
			break
		}
		_ = l.Release(ctx)
		if time.Now().After(deadline) {
			t.Fatal("readers still admitted 10s after a writer started waiting")
		}
		time.Sleep(5 * time.Millisecond) // waiting for the writer's claim to appear
	}
	_ = r1.Release(ctx)
	_ = r2.Release(ctx)
	w := <-got
	if w == nil {
		t.FailNow()
	}
	if w.Mode() != tasklock.ModeWrite || w.Fence() == 0 {
		t.Fatalf("writer: mode %v fence %d", w.Mode(), w.Fence())
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A semaphore's number of permits is the key's while it is held.
	const permits = 3
	if _, err := a.Semaphore("pool", permits).TryAcquire(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Semaphore("pool", permits+1).TryAcquire(ctx, nil); !errors.Is(err, tasklock.ErrKindMismatch) {
		t.Fatalf("another number of permits while held = %v, want ErrKindMismatch", err)
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
