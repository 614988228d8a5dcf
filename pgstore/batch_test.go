package pgstore

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/fakeclock"
)

// readWaiters reads key's waiters flag.
func readWaiters(t testing.TB, s *Store, key string) bool {
	t.Helper()
	var w bool
	if err := s.pool.QueryRow(ctxT(t), `SELECT waiters FROM `+s.Table()+` WHERE key = $1`, key).Scan(&w); err != nil {
		t.Fatalf("read waiters of %q: %v", key, err)
	}
	return w
}

// nextNotified returns the next key announced on woken.
func nextNotified(t testing.TB, woken <-chan string) string {
	t.Helper()
	select {
	case k := <-woken:
		return k
	case <-time.After(10 * time.Second):
		t.Fatal("no notification within 10s")
		return ""
	}
}

// TestBatchDuplicateKeys: a key named several times in one batch goes to
// its first item; the others find it held by that item (or, for a retry
// with the first item's token, lease mode takes it again) and set its
// waiters flag, so that its release NOTIFYs, exactly as calls made in turn
// would. In lease mode a batch is one statement, and the repeats go in the
// same round trip.
func TestBatchDuplicateKeys(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			pool, tr := tracedPool(t, newDB(t))
			s := newStore(t, pool, &Options{Mode: mode})
			ctx := ctxT(t)
			woken := make(chan string, 10)
			stop, err := s.Subscribe(ctx, func(k string) { woken <- k })
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			hold := token()
			mustAcquire(t, s, "held", hold, "holder", time.Minute)

			const ttl = time.Minute
			first := token()
			ps := []driver.AcquireParams{
				{Key: "dup", Token: first, Owner: "first", TTL: ttl},
				{Key: "dup", Token: first, Owner: "first", TTL: ttl}, // a retry of the first
				{Key: "dup", Token: token(), Owner: "third", TTL: ttl},
				{Key: "free", Token: token(), Owner: "fourth", TTL: ttl},
				{Key: "held", Token: token(), Owner: "fifth", TTL: ttl},
				{Key: "dup", Token: token(), Owner: "sixth", TTL: ttl},
				{Key: "held", Token: token(), Owner: "seventh", TTL: ttl},
			}
			tr.reset()
			rs, err := s.AcquireBatch(ctx, ps)
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) != len(ps) {
				t.Fatalf("%d results for %d items", len(rs), len(ps))
			}
			if mode == ModeLease {
				all, n := tr.count(s.sql.acquireBatch)
				if b := tr.batchCount(); b != 1 || all != 4 || n != 4 {
					t.Errorf("a batch with a key four times: %d statements (%d batch acquires) in %d pgx.Batches, want 4 in 1", all, n, b)
				}
			}
			for _, i := range []int{0, 3} {
				if rs[i].Err != nil || rs[i].Grant.Fence != 1 {
					t.Errorf("item %d (%s): %+v, want granted with fence 1", i, ps[i].Key, rs[i])
				}
			}
			heldBy := map[int]string{2: "first", 4: "holder", 5: "first", 6: "holder"}
			if mode == ModeLease {
				// The same token again is a retry: granted, same fence.
				if rs[1].Err != nil || rs[1].Grant.Fence != rs[0].Grant.Fence {
					t.Errorf("item 1 (a retry): %+v, want the grant of item 0", rs[1])
				}
			} else {
				// The advisory lock is the first item's connection's.
				heldBy[1] = "first"
			}
			for i, owner := range heldBy {
				var he *driver.HeldError
				if !errors.As(rs[i].Err, &he) || he.Owner != owner || he.TTL <= 0 || he.TTL > ttl {
					t.Errorf("item %d (%s): %+v, want held by %s for at most %v", i, ps[i].Key, rs[i], owner, ttl)
				}
			}
			if !readWaiters(t, s, "dup") {
				t.Error("dup: waiters flag not set by the items that found it held")
			}

			tr.reset()
			errs, err := s.ReleaseBatch(ctx, []driver.ReleaseParams{
				{Key: "dup", Token: first},
				{Key: "dup", Token: first}, // released already
				{Key: "free", Token: ps[3].Token},
				{Key: "held", Token: ps[4].Token}, // not ours
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range []error{nil, driver.ErrNotHeld, nil, driver.ErrNotHeld} {
				if !errors.Is(errs[i], want) || (want == nil && errs[i] != nil) {
					t.Errorf("release item %d: %v, want %v", i, errs[i], want)
				}
			}
			if mode == ModeLease {
				all, n := tr.count(s.sql.releaseBatch)
				if b := tr.batchCount(); b != 1 || all != 2 || n != 2 {
					t.Errorf("a release batch with a key twice: %d statements (%d batch releases) in %d pgx.Batches, want 2 in 1", all, n, b)
				}
			}
			// dup was waited for: announced. free was not: the next
			// announcement is held's, released after.
			if k := nextNotified(t, woken); k != "dup" {
				t.Errorf("announced %q, want dup", k)
			}
			if err := s.Release(ctx, driver.ReleaseParams{Key: "held", Token: hold}); err != nil {
				t.Fatal(err)
			}
			if k := nextNotified(t, woken); k != "held" {
				t.Errorf("announced %q, want held (and nothing for free, which nobody waited for)", k)
			}
			if g := mustAcquire(t, s, "dup", token(), "me", ttl); g != rs[0].Grant.Fence+1 {
				t.Errorf("dup: fence %d after the batch's grant of %d", g, rs[0].Grant.Fence)
			}

			if mode != ModeLease {
				return
			}
			// Distinct keys: one statement each way.
			ps = ps[:0]
			for i := range 50 {
				ps = append(ps, driver.AcquireParams{Key: fmt.Sprintf("k%02d", i), Token: token(), Owner: "me", TTL: ttl})
			}
			tr.reset()
			rs, err = s.AcquireBatch(ctx, ps)
			if err != nil {
				t.Fatal(err)
			}
			rel := make([]driver.ReleaseParams, len(ps))
			for i, r := range rs {
				if r.Err != nil {
					t.Fatalf("%s: %v", ps[i].Key, r.Err)
				}
				rel[i] = driver.ReleaseParams{Key: ps[i].Key, Token: ps[i].Token}
			}
			if errs, err := s.ReleaseBatch(ctx, rel); err != nil || slices.ContainsFunc(errs, func(e error) bool { return e != nil }) {
				t.Fatalf("ReleaseBatch: %v %v", errs, err)
			}
			all, acq := tr.count(s.sql.acquireBatch)
			_, rels := tr.count(s.sql.releaseBatch)
			if all != 2 || acq != 1 || rels != 1 || tr.batchCount() != 0 {
				t.Errorf("acquiring and releasing 50 keys: %d statements (%d acquires, %d releases), %d pgx.Batches; want one of each and no pgx.Batch", all, acq, rels, tr.batchCount())
			}
		})
	}
}

// TestBatchReleaseWakesWaiter: a Locker waiting in Obtain is woken by the
// NOTIFY of a batched release made by another Store (another process); a
// release nobody waited for and a MinHold release announce nothing. The
// waiter's Locker runs on a frozen clock: its poll timers never fire, so
// only the notification can wake it, however slow the machine is. The
// handoff time is logged.
func TestBatchReleaseWakesWaiter(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			pool := newPool(t, newDB(t), nil)
			s := newStore(t, pool, &Options{Mode: mode})
			other, err := New(pool, &Options{Table: s.o.tableName, Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t)
			woken := make(chan string, 10)
			stop, err := s.Subscribe(ctx, func(k string) { woken <- k })
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			keys := []string{"job", "nobody", "kept", "last"}
			ps := make([]driver.AcquireParams, len(keys))
			for i, k := range keys {
				ps[i] = driver.AcquireParams{Key: k, Token: token(), Owner: "holder", TTL: time.Minute}
			}
			rs, err := other.AcquireBatch(ctx, ps)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range rs {
				if r.Err != nil {
					t.Fatalf("%s: %v", keys[i], r.Err)
				}
			}

			ev := newEventLog()
			waiter := newLocker(t, s, "waiter", &tasklock.Config{OnEvent: ev.on, Clock: frozenClock{fakeclock.Frozen()}})
			type result struct {
				l   *tasklock.Lock
				err error
				at  time.Time
			}
			got := make(chan result, 1)
			go func() {
				l, err := waiter.Obtain(ctx, "job", nil)
				got <- result{l, err, time.Now()}
			}()
			// The second failed attempt comes after the waiter subscribed
			// and joined its Locker's waiters; its poll timer never fires.
			waitFor(t, 10*time.Second, "the waiter's attempts", func() bool {
				return ev.count(tasklock.EventNotObtained) >= 2
			})
			mustFindHeld(t, s, "kept")
			mustFindHeld(t, s, "last")
			released := time.Now()
			errs, err := other.ReleaseBatch(ctx, []driver.ReleaseParams{
				{Key: "job", Token: ps[0].Token},
				{Key: "nobody", Token: ps[1].Token},
				{Key: "kept", Token: ps[2].Token, KeepFor: time.Minute},
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, e := range errs {
				if e != nil {
					t.Fatalf("release %s: %v", keys[i], e)
				}
			}
			var r result
			select {
			case r = <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("the waiter did not obtain the released key within 10s: the release did not notify it")
			}
			if r.err != nil {
				t.Fatal(r.err)
			}
			t.Logf("%s: batched release → waiter on another Locker obtains: %v", mode, r.at.Sub(released))
			if err := r.l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			// Announced: job only. last, released after, comes next.
			if err := other.Release(ctx, driver.ReleaseParams{Key: "last", Token: ps[3].Token}); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"job", "last"} {
				if k := nextNotified(t, woken); k != want {
					t.Errorf("announced %q, want %q", k, want)
				}
			}
		})
	}
}

// frozenClock adapts a frozen fakeclock to tasklock.Clock.
type frozenClock struct{ *fakeclock.Clock }

func (c frozenClock) NewTimer(d time.Duration) tasklock.Timer { return c.Clock.NewTimer(d) }

// TestBatchLockOrder: batches that acquire, renew and release overlapping
// keys in opposite orders, concurrently, never deadlock (the server would
// fail one of them after deadlock_timeout): every statement that locks
// several rows locks them in key order.
func TestBatchLockOrder(t *testing.T) {
	t.Parallel()
	pool := newPool(t, newDB(t), func(c *pgxpool.Config) { c.MaxConns = 8 })
	s := newStore(t, pool, nil)
	ctx := ctxT(t)
	keys := make([]string, 12)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%02d", i)
	}
	const rounds = 150
	var wg sync.WaitGroup
	fail := func(what string, err error) {
		t.Errorf("%s: %v", what, err)
	}
	// Two acquirers: all keys, in opposite orders, releasing what they got
	// in the order opposite to their acquire.
	for _, reverse := range []bool{false, true} {
		wg.Go(func() {
			order := slices.Clone(keys)
			if reverse {
				slices.Reverse(order)
			}
			for range rounds {
				ps := make([]driver.AcquireParams, len(order))
				for i, k := range order {
					ps[i] = driver.AcquireParams{Key: k, Token: token(), Owner: "batch", TTL: time.Minute}
				}
				rs, err := s.AcquireBatch(ctx, ps)
				if err != nil {
					fail("AcquireBatch", err)
					return
				}
				var rel []driver.ReleaseParams
				for i := len(rs) - 1; i >= 0; i-- {
					if rs[i].Err == nil {
						rel = append(rel, driver.ReleaseParams{Key: ps[i].Key, Token: ps[i].Token})
					} else if !errors.Is(rs[i].Err, driver.ErrHeld) {
						fail("AcquireBatch item "+ps[i].Key, rs[i].Err)
						return
					}
				}
				if len(rel) == 0 {
					continue
				}
				if _, err := s.ReleaseBatch(ctx, rel); err != nil {
					fail("ReleaseBatch", err)
					return
				}
			}
		})
	}
	// A holder that takes keys one at a time, renews them all in reverse
	// order in one call, and releases them together.
	wg.Go(func() {
		for range rounds {
			var held []driver.RenewParams
			for _, k := range keys {
				tok := token()
				if _, err := s.Acquire(ctx, driver.AcquireParams{Key: k, Token: tok, Owner: "single", TTL: time.Minute}); err == nil {
					held = append(held, driver.RenewParams{Key: k, Token: tok, TTL: time.Minute})
				} else if !errors.Is(err, driver.ErrHeld) {
					fail("Acquire", err)
					return
				}
			}
			slices.Reverse(held)
			if _, err := s.Renew(ctx, held); err != nil {
				fail("Renew", err)
				return
			}
			rel := make([]driver.ReleaseParams, len(held))
			for i, h := range held {
				rel[i] = driver.ReleaseParams{Key: h.Key, Token: h.Token}
			}
			if _, err := s.ReleaseBatch(ctx, rel); err != nil {
				fail("ReleaseBatch", err)
				return
			}
		}
	})
	wg.Wait()
}
