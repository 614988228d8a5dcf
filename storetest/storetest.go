// Package storetest is the conformance suite every tasklock store passes.
// A store's tests call Run with a function that returns a fresh, empty store
// (its own key prefix, table or database), backed by a real server. The
// cases run in parallel (t.Parallel), each on a store of its own:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) driver.Store { return newStore(t) })
//	}
//
// Capabilities a store lacks (driver.Notifier, driver.Lister,
// driver.ForceReleaser, driver.Queuer, driver.Batcher, driver.Kinder,
// driver.FairQueuer) skip the tests that need them, with the reason
// logged: the read-write lock and semaphore cases (names starting
// "RWMutex" and "Semaphore") need a driver.Kinder, the fair-queue cases
// ("Fair") a driver.Queuer or driver.FairQueuer. Timings use leases of a
// few hundred milliseconds to a few seconds, so the whole suite takes
// seconds per store.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/fakeclock"
	"github.com/tasklock/tasklock/internal/leakcheck"
)

// Timing. The suite must pass on a busy 2-core machine running -race,
// where a goroutine or a server can be held back for hundreds of
// milliseconds. So no bound here depends on how fast anything is
// scheduled:
//
//   - Leases are long enough (a second or more where they must be renewed
//     or answered in time) that a slow round trip does not lose them.
//   - "Done closes by the deadline" is checked by looking at Done after the
//     deadline (doneBy): Done checks the lock's local validity itself, so
//     it must be closed at any look after the lease's end, however late
//     the Locker's goroutine runs. The deadlines themselves are checked
//     exactly, with a fake clock, in the root package's tests.
//   - Wake-ups are checked with a waiter that cannot poll (a frozen clock),
//     not with a latency bound.

// NewStore returns a fresh, empty store for one test.
type NewStore func(t *testing.T) driver.Store

// Run runs the suite against stores made by newStore.
func Run(t *testing.T, newStore NewStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s driver.Store)
	}{
		{"MutualExclusion", testMutualExclusion},
		{"IndependentKeys", testIndependentKeys},
		{"ObtainReleaseObtain", testObtainReleaseObtain},
		{"NotObtainedNamesHolder", testNotObtainedNamesHolder},
		{"ExpiryWithoutRenewal", testExpiryWithoutRenewal},
		{"RenewalOutlivesTTL", testRenewalOutlivesTTL},
		{"ReleaseAndExtendAfterExpiry", testReleaseAndExtendAfterExpiry},
		{"Extend", testExtend},
		{"MinHold", testMinHold},
		{"MaxHold", testMaxHold},
		{"ExtendStopsAtMaxHold", testExtendMaxHold},
		{"ProgressTimeout", testProgressTimeout},
		{"FencesIncrease", testFencesIncrease},
		{"ListedFence", testListedFence},
		{"ListedTimeLeftWhileRenewed", testListedWhileRenewed},
		{"DoneWhenDeletedBehindBack", testDoneWhenDeleted},
		{"CancelledWaitLeavesNothing", testCancelledWait},
		{"WakeOnRelease", testWakeOnRelease},
		{"CloseReleasesAndLeaksNothing", testClose},
		{"WithLock", testDo},
		{"OnceAcrossReplicas", testOnceAcrossReplicas},
		{"Reentrant", testReentrant},
	}
	tests = append(tests, queueTests...)
	tests = append(tests, batchTests...)
	tests = append(tests, contentionTests...)
	tests = append(tests, kindsTests...)
	tests = append(tests, fairTests...)
	tests = append(tests, electionTests...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each case has a store of its own; most wait on leases
			tc.fn(t, newStore(t))
		})
	}
}

// events records a Locker's events for tests to wait on.
type events struct {
	mu     sync.Mutex
	counts map[tasklock.EventType]int
	ch     chan struct{} // closed and replaced on every event
}

func newEvents() *events {
	return &events{counts: map[tasklock.EventType]int{}, ch: make(chan struct{})}
}

func (ev *events) on(e tasklock.Event) {
	ev.mu.Lock()
	ev.counts[e.Type]++
	close(ev.ch)
	ev.ch = make(chan struct{})
	ev.mu.Unlock()
}

func (ev *events) count(typ tasklock.EventType) int {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return ev.counts[typ]
}

// waitFor waits until at least n events of type typ were seen.
func (ev *events) waitFor(t *testing.T, typ tasklock.EventType, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		ev.mu.Lock()
		c, ch := ev.counts[typ], ev.ch
		ev.mu.Unlock()
		if c >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("saw %d %v events within %v, want %d", c, typ, timeout, n)
		}
	}
}

func newLocker(t *testing.T, s driver.Store, owner string, ev *events) *tasklock.Locker {
	t.Helper()
	cfg := &tasklock.Config{Owner: owner}
	if ev != nil {
		cfg.OnEvent = ev.on
	}
	lk, err := tasklock.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lk.Close() })
	return lk
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustObtain(t *testing.T, lk *tasklock.Locker, key string, o *tasklock.ObtainOptions) *tasklock.Lock {
	t.Helper()
	l, err := lk.TryObtain(ctxT(t, 5*time.Second), key, o)
	if err != nil {
		t.Fatalf("TryObtain(%q): %v", key, err)
	}
	return l
}

func mustNotObtain(t *testing.T, lk *tasklock.Locker, key string) *tasklock.NotObtainedError {
	t.Helper()
	l, err := lk.TryObtain(ctxT(t, 5*time.Second), key, nil)
	var ne *tasklock.NotObtainedError
	if !errors.As(err, &ne) || !errors.Is(err, tasklock.ErrNotObtained) {
		if l != nil {
			_ = l.Release(context.Background())
		}
		t.Fatalf("TryObtain(%q) = %v, want an error matching ErrNotObtained", key, err)
	}
	return ne
}

// doneBy checks that l's Done is closed when looked at after deadline:
// the end of its lease's local validity at the latest, by the lease maths
// (the Lock counts validity from before it sent the request, so a
// deadline counted from after the call returned is never early). It
// returns when Done closed.
func doneBy(t *testing.T, l *tasklock.Lock, deadline time.Time, what string) time.Time {
	t.Helper()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-l.Done():
		return time.Now()
	case <-timer.C:
	}
	select {
	case <-l.Done():
		return time.Now()
	default:
		t.Fatalf("Done still open %v after %s", time.Since(deadline).Round(time.Millisecond), what)
		return time.Time{}
	}
}

func waitDone(t *testing.T, l *tasklock.Lock, within time.Duration) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(within):
		t.Fatalf("Done not closed within %v", within)
	}
}

func assertOpen(t *testing.T, l *tasklock.Lock) {
	t.Helper()
	select {
	case <-l.Done():
		t.Fatalf("lock %q ended: %v", l.Key(), l.Err())
	default:
	}
}

// testMutualExclusion: 32 goroutines on 4 Lockers increment two counters
// with a read-then-write that loses updates unless the lock excludes.
func testMutualExclusion(t *testing.T, s driver.Store) {
	const workers, rounds = 32, 4
	keys := []string{"mutex-a", "mutex-b"}
	lockers := make([]*tasklock.Locker, 4)
	for i := range lockers {
		lockers[i] = newLocker(t, s, fmt.Sprintf("node-%d", i), nil)
	}
	var counters, inside [2]atomic.Int64
	var overlaps atomic.Int64
	ctx := ctxT(t, 60*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := w % 2
			for range rounds {
				l, err := lockers[w%4].Obtain(ctx, keys[k], &tasklock.ObtainOptions{TTL: 5 * time.Second})
				if err != nil {
					errs <- err
					return
				}
				if inside[k].Add(1) != 1 {
					overlaps.Add(1)
				}
				v := counters[k].Load()
				time.Sleep(100 * time.Microsecond) // widen the window a broken lock would show
				counters[k].Store(v + 1)
				inside[k].Add(-1)
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for k := range keys {
		if got, want := counters[k].Load(), int64(workers/2*rounds); got != want {
			t.Errorf("counter %s = %d, want %d (lost updates: the lock did not exclude)", keys[k], got, want)
		}
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d overlapping critical sections", n)
	}
}

func testIndependentKeys(t *testing.T, s driver.Store) {
	lk := newLocker(t, s, "a", nil)
	a := mustObtain(t, lk, "ind-a", nil)
	b := mustObtain(t, lk, "ind-b", nil)
	mustNotObtain(t, lk, "ind-a")
	if err := a.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	assertOpen(t, b)
	c := mustObtain(t, lk, "ind-a", nil)
	for _, l := range []*tasklock.Lock{b, c} {
		if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
}

func testObtainReleaseObtain(t *testing.T, s driver.Store) {
	lk := newLocker(t, s, "a", nil)
	l1 := mustObtain(t, lk, "ror", nil)
	if err := l1.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := l1.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatalf("second Release = %v, want nil (idempotent)", err)
	}
	waitDone(t, l1, time.Second)
	if !errors.Is(context.Cause(l1.Context()), tasklock.ErrReleased) || errors.Is(l1.Err(), tasklock.ErrLockLost) {
		t.Fatalf("cause after Release = %v, want ErrReleased", l1.Err())
	}
	l2 := mustObtain(t, lk, "ror", nil)
	if l2.Fence() <= l1.Fence() {
		t.Fatalf("fence %d after %d: not increasing", l2.Fence(), l1.Fence())
	}
	_ = l2.Release(ctxT(t, 5*time.Second))
}

func testNotObtainedNamesHolder(t *testing.T, s driver.Store) {
	a := newLocker(t, s, "holder-a", nil)
	b := newLocker(t, s, "b", nil)
	l := mustObtain(t, a, "named", &tasklock.ObtainOptions{TTL: 5 * time.Second})
	defer l.Release(context.Background())
	ne := mustNotObtain(t, b, "named")
	if ne.Owner != "" && ne.Owner != "holder-a" {
		t.Fatalf("holder owner = %q, want holder-a", ne.Owner)
	}
	if ne.Owner == "" {
		t.Logf("store does not report the holder's owner")
	}
	if ne.TTL < 0 || ne.TTL > 5*time.Second {
		t.Fatalf("holder TTL = %v, want within (0, 5s]", ne.TTL)
	}
}

func testExpiryWithoutRenewal(t *testing.T, s driver.Store) {
	a := newLocker(t, s, "a", nil)
	b := newLocker(t, s, "b", nil)
	ttl := time.Second
	l := mustObtain(t, a, "expiry", &tasklock.ObtainOptions{TTL: ttl, NoRenew: true})
	doneBy(t, l, time.Now().Add(ttl), "the TTL")
	if !errors.Is(l.Err(), tasklock.ErrLockLost) {
		t.Fatalf("cause = %v, want ErrLockLost", l.Err())
	}
	l2, err := b.Obtain(ctxT(t, 10*time.Second), "expiry", nil)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence %d after %d", l2.Fence(), l.Fence())
	}
	_ = l2.Release(ctxT(t, 5*time.Second))
}

func testRenewalOutlivesTTL(t *testing.T, s driver.Store) {
	a := newLocker(t, s, "a", nil)
	b := newLocker(t, s, "b", nil)
	// Renewed every TTL/3, each with TTL·2/3 left to answer in.
	ttl := 1500 * time.Millisecond
	l := mustObtain(t, a, "renew", &tasklock.ObtainOptions{TTL: ttl})
	deadline := time.Now().Add(2 * ttl) // six renewals
	for time.Now().Before(deadline) {
		mustNotObtain(t, b, "renew")
		assertOpen(t, l)
		time.Sleep(ttl / 4) // sampling interval, not synchronisation
	}
	if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatalf("Release after 2×TTL: %v", err)
	}
}

func testReleaseAndExtendAfterExpiry(t *testing.T, s driver.Store) {
	a := newLocker(t, s, "a", nil)
	b := newLocker(t, s, "b", nil)
	l := mustObtain(t, a, "late", &tasklock.ObtainOptions{TTL: time.Second, NoRenew: true})
	waitDone(t, l, 5*time.Second)
	l2, err := b.Obtain(ctxT(t, 10*time.Second), "late", &tasklock.ObtainOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctxT(t, 5*time.Second), time.Second); !errors.Is(err, tasklock.ErrNotHeld) {
		t.Fatalf("Extend after expiry = %v, want ErrNotHeld", err)
	}
	if err := l.Release(ctxT(t, 5*time.Second)); !errors.Is(err, tasklock.ErrNotHeld) {
		t.Fatalf("Release after expiry = %v, want ErrNotHeld", err)
	}
	mustNotObtain(t, a, "late")
	assertOpen(t, l2)
	if err := l2.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatalf("new holder's Release = %v: its lease was touched", err)
	}
}

func testExtend(t *testing.T, s driver.Store) {
	a := newLocker(t, s, "a", nil)
	b := newLocker(t, s, "b", nil)
	ttl := time.Second
	l := mustObtain(t, a, "extend", &tasklock.ObtainOptions{TTL: ttl, NoRenew: true})
	if err := l.Extend(ctxT(t, 5*time.Second), 4*time.Second); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for time.Since(start) < ttl+200*time.Millisecond { // past the first lease's end
		mustNotObtain(t, b, "extend")
		assertOpen(t, l)
		time.Sleep(50 * time.Millisecond) // sampling interval
	}
	if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

func testMinHold(t *testing.T, s driver.Store) {
	a := newLocker(t, s, "a", nil)
	b := newLocker(t, s, "b", nil)
	minHold := 700 * time.Millisecond
	// MinHold counts from the acquisition, which a busy machine may answer
	// late: measure from before the request.
	start := time.Now()
	l := mustObtain(t, a, "minhold", &tasklock.ObtainOptions{TTL: 10 * time.Second, MinHold: minHold})
	if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	waitDone(t, l, time.Second)
	if time.Since(start) < minHold/2 {
		mustNotObtain(t, b, "minhold")
	}
	l2, err := b.Obtain(ctxT(t, 10*time.Second), "minhold", nil)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < minHold-50*time.Millisecond {
		t.Fatalf("obtained %v after the first obtain began, before MinHold %v", el, minHold)
	} else if el > minHold+5*time.Second {
		t.Fatalf("obtained %v after the first obtain began, long after MinHold %v", el, minHold)
	}
	_ = l2.Release(ctxT(t, 5*time.Second))
}

func testMaxHold(t *testing.T, s driver.Store) {
	a := newLocker(t, s, "a", nil)
	b := newLocker(t, s, "b", nil)
	// Renewed at TTL/3 and 2·TTL/3, the last time only up to MaxHold.
	ttl, maxHold := time.Second, 1500*time.Millisecond
	start := time.Now()
	l := mustObtain(t, a, "maxhold", &tasklock.ObtainOptions{TTL: ttl, MaxHold: maxHold})
	doneBy(t, l, time.Now().Add(maxHold), "MaxHold")
	doneAt := time.Since(start)
	if !errors.Is(l.Err(), tasklock.ErrMaxHold) || !errors.Is(l.Err(), tasklock.ErrLockLost) {
		t.Fatalf("cause = %v, want ErrMaxHold", l.Err())
	}
	if doneAt < maxHold/2 {
		t.Fatalf("Done closed %v after obtain, too early for MaxHold %v", doneAt, maxHold)
	}
	l2, err := b.Obtain(ctxT(t, 10*time.Second), "maxhold", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := time.Since(start); got < doneAt {
		t.Fatalf("obtained by another at %v, before the holder was told at %v", got, doneAt)
	}
	_ = l2.Release(ctxT(t, 5*time.Second))
}

func testExtendMaxHold(t *testing.T, s driver.Store) {
	a := newLocker(t, s, "a", nil)
	b := newLocker(t, s, "b", nil)
	const extend = 20 * time.Second
	maxHold := 1500 * time.Millisecond
	start := time.Now()
	l := mustObtain(t, a, "extend-max", &tasklock.ObtainOptions{TTL: time.Second, MaxHold: maxHold, NoRenew: true})
	if err := l.Extend(ctxT(t, 5*time.Second), extend); err != nil {
		t.Fatal(err)
	}
	doneBy(t, l, time.Now().Add(maxHold), "MaxHold")
	if !errors.Is(l.Err(), tasklock.ErrMaxHold) {
		t.Fatalf("cause = %v, want ErrMaxHold", l.Err())
	}
	// The store's lease ends at MaxHold too: another obtains long before
	// the Extend's 20 s would have run out.
	l2, err := b.Obtain(ctxT(t, extend/2), "extend-max", nil)
	if err != nil {
		t.Fatalf("another Obtain within %v after the first: %v (Extend went past MaxHold %v?)", time.Since(start), err, maxHold)
	}
	_ = l2.Release(ctxT(t, 5*time.Second))
}

func testProgressTimeout(t *testing.T, s driver.Store) {
	a := newLocker(t, s, "a", nil)
	b := newLocker(t, s, "b", nil)
	// A heartbeat every 100 ms of work against a ProgressTimeout of 1.2 s:
	// a busy machine may stretch a pause, not twelvefold.
	ttl, progress := time.Second, 1200*time.Millisecond
	l := mustObtain(t, a, "progress", &tasklock.ObtainOptions{TTL: ttl, ProgressTimeout: progress})
	for start := time.Now(); time.Since(start) < progress+200*time.Millisecond; { // longer than ProgressTimeout and the TTL
		l.Heartbeat()
		time.Sleep(100 * time.Millisecond) // the work between heartbeats
		assertOpen(t, l)
	}
	stopped := time.Now()
	waitDone(t, l, 5*time.Second)
	if !errors.Is(l.Err(), tasklock.ErrStalled) {
		t.Fatalf("cause = %v, want ErrStalled", l.Err())
	}
	if el := time.Since(stopped); el > progress+ttl {
		t.Fatalf("stall noticed %v after the last heartbeat, want within %v", el, progress+ttl)
	}
	l2, err := b.Obtain(ctxT(t, 10*time.Second), "progress", nil)
	if err != nil {
		t.Fatalf("the stalled lease did not expire: %v", err)
	}
	_ = l2.Release(ctxT(t, 5*time.Second))
}

func testFencesIncrease(t *testing.T, s driver.Store) {
	lks := []*tasklock.Locker{newLocker(t, s, "a", nil), newLocker(t, s, "b", nil)}
	var last uint64
	for i := range 20 {
		l := mustObtain(t, lks[i%2], "fences", nil)
		if l.Fence() <= last {
			t.Fatalf("grant %d: fence %d after %d", i, l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
}

// testListedWhileRenewed lists leases while they are renewed without a
// pause: none is ever listed with more time left than its TTL. (SQL stores
// that measured it from the statement's start listed about one in ten
// with more: a renewal that began after that start committed before the
// rows were read.) A lease listed with TTL 0 lasts as long as its holder's
// session.
func testListedWhileRenewed(t *testing.T, s driver.Store) {
	ls, ok := s.(driver.Lister)
	if !ok {
		t.Skip("store does not implement driver.Lister")
	}
	ctx := ctxT(t, 30*time.Second)
	const ttl = 10 * time.Second
	renew := make([]driver.RenewParams, 4)
	for i := range renew {
		renew[i] = driver.RenewParams{Key: fmt.Sprintf("renewed-%d", i), Token: fmt.Sprintf("t%d", i), TTL: ttl}
		if _, err := s.Acquire(ctx, driver.AcquireParams{Key: renew[i].Key, Token: renew[i].Token, Owner: "me", TTL: ttl}); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var renewers sync.WaitGroup
	for _, p := range renew {
		renewers.Add(1)
		go func() {
			defer renewers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if res, err := s.Renew(ctx, []driver.RenewParams{p}); err != nil || res[0] != nil {
					t.Errorf("Renew %s: %v %v", p.Key, err, res)
					return
				}
			}
		}()
	}
	defer renewers.Wait()
	defer close(stop)
	listed := 0
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		leases, err := ls.Leases(ctx, "renewed-")
		if err != nil {
			t.Fatal(err)
		}
		for _, le := range leases {
			listed++
			if le.TTL < 0 || le.TTL > ttl {
				t.Fatalf("lease %+v listed with %v left of a %v TTL", le, le.TTL, ttl)
			}
		}
	}
	if listed == 0 {
		t.Fatal("no lease listed")
	}
}

// testListedFence: a store that lists its leases (driver.Lister) lists a
// held lock with its fence, the same after renewals and Extend, and
// another fence for the next grant of the key. The scheduler tells from
// a listing that a node's lease was taken again (it lapsed) by its fence.
func testListedFence(t *testing.T, s driver.Store) {
	ls, ok := s.(driver.Lister)
	if !ok {
		t.Skip("store does not implement driver.Lister")
	}
	listed := func(key string) uint64 {
		t.Helper()
		leases, err := ls.Leases(ctxT(t, 5*time.Second), key)
		if err != nil {
			t.Fatal(err)
		}
		for _, le := range leases {
			if le.Key == key && !le.Waiting {
				return le.Fence
			}
		}
		t.Fatalf("Leases(%q) = %+v: the held lock is not listed", key, leases)
		return 0
	}
	ev := newEvents()
	lk := newLocker(t, s, "a", ev)
	l := mustObtain(t, lk, "listed", &tasklock.ObtainOptions{TTL: time.Second})
	if f := listed("listed"); f != l.Fence() {
		t.Fatalf("listed fence %d, the lock's %d", f, l.Fence())
	}
	if err := l.Extend(ctxT(t, 5*time.Second), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	ev.waitFor(t, tasklock.EventRenewed, ev.count(tasklock.EventRenewed)+2, 10*time.Second)
	assertOpen(t, l)
	if f := listed("listed"); f != l.Fence() {
		t.Fatalf("after an Extend and renewals: listed fence %d, the lock's %d", f, l.Fence())
	}
	if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	l2 := mustObtain(t, lk, "listed", nil)
	defer func() { _ = l2.Release(ctxT(t, 5*time.Second)) }()
	if f := listed("listed"); f != l2.Fence() || f == l.Fence() {
		t.Fatalf("the next grant: listed fence %d, the lock's %d, the previous grant's %d", f, l2.Fence(), l.Fence())
	}
}

func testDoneWhenDeleted(t *testing.T, s driver.Store) {
	fr, ok := s.(driver.ForceReleaser)
	if !ok {
		t.Skip("store does not implement driver.ForceReleaser")
	}
	a := newLocker(t, s, "a", nil)
	ttl := time.Second
	l := mustObtain(t, a, "behind", &tasklock.ObtainOptions{TTL: ttl})
	if err := fr.ForceRelease(ctxT(t, 5*time.Second), "behind"); err != nil {
		t.Fatal(err)
	}
	// A renewal sent after the deletion fails; one sent before it leaves
	// the lease valid for less than a TTL from now.
	doneBy(t, l, time.Now().Add(ttl), "the TTL after the lease was deleted")
	if !errors.Is(l.Err(), tasklock.ErrLockLost) {
		t.Fatalf("cause = %v, want ErrLockLost", l.Err())
	}
}

func testCancelledWait(t *testing.T, s driver.Store) {
	a := newLocker(t, s, "a", nil)
	b := newLocker(t, s, "b", nil)
	l := mustObtain(t, a, "cancelled", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := b.Obtain(ctx, "cancelled", nil)
	if !errors.Is(err, tasklock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Obtain = %v, want ErrNotObtained and DeadlineExceeded", err)
	}
	if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if ls, ok := s.(driver.Lister); ok {
		leases, err := ls.Leases(ctxT(t, 5*time.Second), "")
		if err != nil {
			t.Fatal(err)
		}
		for _, le := range leases {
			if le.Key == "cancelled" {
				t.Fatalf("lease left behind after a cancelled wait: %+v", le)
			}
		}
	}
	l2 := mustObtain(t, b, "cancelled", nil)
	_ = l2.Release(ctxT(t, 5*time.Second))
}

// testWakeOnRelease: a waiter whose Locker runs on a frozen clock — its
// poll timers never fire — must still obtain the key once the holder
// releases it: only the store can wake it (driver.Notifier), or serve it
// (driver.Queuer). Nothing here depends on how fast the machine is; the
// handoff time is logged.
func testWakeOnRelease(t *testing.T, s driver.Store) {
	_, queued := s.(driver.Queuer)
	if _, ok := s.(driver.Notifier); !ok && !queued {
		t.Skip("store implements neither driver.Notifier nor driver.Queuer: waiters poll")
	}
	a := newLocker(t, s, "a", nil)
	ev := newEvents()
	b, err := tasklock.New(s, &tasklock.Config{Owner: "b", OnEvent: ev.on, Clock: frozenClock{fakeclock.Frozen()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	var handoffs []time.Duration
	for round := range 2 {
		l := mustObtain(t, a, "wake", &tasklock.ObtainOptions{TTL: 10 * time.Second})
		failed := ev.count(tasklock.EventNotObtained)
		got := make(chan time.Time, 1)
		errc := make(chan error, 1)
		go func() {
			l2, err := b.Obtain(ctxT(t, 30*time.Second), "wake", nil)
			if err != nil {
				errc <- err
				return
			}
			got <- time.Now()
			_ = l2.Release(context.Background())
		}()
		// A queued waiter sleeps in the store's queue until its
		// predecessor goes. Otherwise the waiter's second failed attempt
		// comes after it subscribed and joined the Locker's waiters; its
		// poll timer never fires.
		if queued {
			ev.waitFor(t, tasklock.EventQueued, round+1, 10*time.Second)
		} else {
			ev.waitFor(t, tasklock.EventNotObtained, failed+2, 10*time.Second)
		}
		released := time.Now()
		if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		select {
		case at := <-got:
			handoffs = append(handoffs, at.Sub(released))
		case err := <-errc:
			t.Fatal(err)
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter was not woken by the release within 10s: the store did not notify it")
		}
		// Let the waiter's Release land before the next round.
		ev.waitFor(t, tasklock.EventReleased, round+1, 5*time.Second)
	}
	t.Logf("handoff through the store: %v", handoffs)
}

// frozenClock adapts a frozen fakeclock to tasklock.Clock.
type frozenClock struct{ *fakeclock.Clock }

func (c frozenClock) NewTimer(d time.Duration) tasklock.Timer { return c.Clock.NewTimer(d) }

func testClose(t *testing.T, s driver.Store) {
	b := newLocker(t, s, "b", nil)
	mustObtain(t, b, "close-warm", nil).Release(context.Background())
	ignore := leakcheck.IgnoreCurrent()
	a, err := tasklock.New(s, &tasklock.Config{Owner: "a"})
	if err != nil {
		t.Fatal(err)
	}
	l := mustObtain(t, a, "close", nil)
	hold := mustObtain(t, b, "close-b", nil)
	waiting := make(chan error, 1)
	go func() {
		_, err := a.Obtain(context.Background(), "close-b", nil)
		waiting <- err
	}()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	waitDone(t, l, time.Second)
	if !errors.Is(l.Err(), tasklock.ErrClosed) {
		t.Fatalf("cause = %v, want ErrClosed", l.Err())
	}
	select {
	case err := <-waiting:
		if !errors.Is(err, tasklock.ErrClosed) {
			t.Fatalf("blocked Obtain = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("blocked Obtain did not return after Close")
	}
	l2 := mustObtain(t, b, "close", nil) // Close released the lease
	_ = l2.Release(context.Background())
	_ = hold.Release(context.Background())
	if _, err := a.TryObtain(context.Background(), "close", nil); !errors.Is(err, tasklock.ErrClosed) {
		t.Fatalf("TryObtain after Close = %v, want ErrClosed", err)
	}
	leakcheck.VerifyNone(t, ignore, leakcheck.OwnedByCaller()) // the conformance runs of other deployments go on in parallel
}

func testDo(t *testing.T, s driver.Store) {
	a := newLocker(t, s, "a", nil)
	ran := false
	err := tasklock.WithLock(ctxT(t, 5*time.Second), a, "do", nil, func(ctx context.Context) error {
		ran = true
		return nil
	})
	if err != nil || !ran {
		t.Fatalf("WithLock = %v, ran = %v", err, ran)
	}
	// The work outlives a MaxHold: its ctx is cancelled with ErrMaxHold and
	// WithLock reports the loss even though the work returned nil.
	err = tasklock.WithLock(ctxT(t, 5*time.Second), a, "do", &tasklock.ObtainOptions{TTL: 5 * time.Second, MaxHold: time.Second},
		func(ctx context.Context) error {
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), tasklock.ErrMaxHold) {
				return fmt.Errorf("cause %v", context.Cause(ctx))
			}
			return nil
		})
	if !errors.Is(err, tasklock.ErrMaxHold) {
		t.Fatalf("WithLock = %v, want ErrMaxHold", err)
	}
	mustObtain(t, a, "do", nil).Release(context.Background())
}

// testOnceAcrossReplicas: replicas (Lockers with their own owner names)
// that reach the same work at the same moment run it once; a replica that
// comes after the run ended but within MinHold skips it too.
func testOnceAcrossReplicas(t *testing.T, s driver.Store) {
	const replicas, rounds = 4, 5
	lks := make([]*tasklock.Locker, replicas)
	for i := range lks {
		lks[i] = newLocker(t, s, fmt.Sprintf("replica-%d", i), nil)
	}
	opts := &tasklock.ObtainOptions{TTL: 5 * time.Second, MinHold: 3 * time.Second}
	for round := range rounds {
		key := fmt.Sprintf("once-%d", round)
		var ran atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		results := make([]tasklock.OnceResult, replicas)
		errs := make([]error, replicas)
		for i, lk := range lks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i], errs[i] = tasklock.Once(ctxT(t, 10*time.Second), lk, key, opts, func(ctx context.Context) error {
					ran.Add(1)
					return nil
				})
			}()
		}
		close(start)
		wg.Wait()
		ranResults := 0
		for i := range results {
			if errs[i] != nil {
				t.Fatalf("round %d: replica %d: Once = %v", round, i, errs[i])
			}
			if results[i].Ran {
				ranResults++
				if results[i].Fence == 0 {
					t.Errorf("round %d: replica %d ran with fence 0", round, i)
				}
			}
		}
		if n := ran.Load(); n != 1 || ranResults != 1 {
			t.Fatalf("round %d: the work ran %d times (%d results say Ran), want once", round, n, ranResults)
		}
		// A late replica, after the run ended, within MinHold: skips.
		res, err := tasklock.Once(ctxT(t, 10*time.Second), lks[0], key, opts, func(ctx context.Context) error {
			ran.Add(1)
			return nil
		})
		if err != nil || res.Ran || ran.Load() != 1 {
			t.Fatalf("round %d: a late replica within MinHold: %+v, %v; ran %d times", round, res, err, ran.Load())
		}
	}
}
