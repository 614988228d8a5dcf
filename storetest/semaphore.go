package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
)

// testSemNeverExceeded: 32 goroutines on 3 Lockers take permits of one
// semaphore of 3 over and over. An oracle outside the store counts the
// holders inside: never more than the permits; every grant's fence is
// distinct. First, the permits are shown to be shared, not a mutex: the
// three Lockers each take one, and a fourth is refused.
func testSemNeverExceeded(t *testing.T, s driver.Store) {
	skipUnlessSem(t, s)
	const permits, goroutines, rounds = 3, 32, 3
	lks := newLockers(t, s, 3, "node")
	var held []*tasklock.Lock
	for i, lk := range lks {
		l, err := lk.Semaphore("sem-count", permits).TryAcquire(ctxT(t, 10*time.Second), nil)
		if err != nil {
			t.Fatalf("permit %d of %d, on Locker %d: %v (the permits are not shared)", i+1, permits, i, err)
		}
		held = append(held, l)
	}
	if l, err := lks[0].Semaphore("sem-count", permits).TryAcquire(ctxT(t, 10*time.Second), nil); err == nil {
		t.Fatalf("a fourth permit of %d was granted (fence %d)", permits, l.Fence())
	}
	for _, l := range held {
		if err := l.Release(ctxT(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	var (
		in, most atomic.Int64
		mu       sync.Mutex
		fences   = map[uint64]int{}
	)
	ctx := ctxT(t, 60*time.Second)
	opts := &tasklock.ObtainOptions{TTL: 5 * time.Second}
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range goroutines {
		wg.Go(func() {
			sem := lks[i%len(lks)].Semaphore("sem-count", permits)
			for r := range rounds {
				l, err := sem.Acquire(ctx, opts)
				if err != nil {
					errs <- fmt.Errorf("goroutine %d, round %d: %w", i, r, err)
					return
				}
				n := in.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				mu.Lock()
				fences[l.Fence()]++
				mu.Unlock()
				time.Sleep(5 * time.Millisecond) // widen the window a broken semaphore would show
				in.Add(-1)
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d permits taken in %v, at most %d at once", goroutines*rounds, time.Since(start).Round(time.Millisecond), most.Load())
	if m := most.Load(); m > permits {
		t.Errorf("%d holders at once of a semaphore of %d", m, permits)
	}
	for f, n := range fences {
		if n > 1 || f == 0 {
			t.Errorf("fence %d granted %d times", f, n)
		}
	}
}

// testSemDeadHolder: of two permits, one holder dies (no renewal, never
// released). Its permit returns at its TTL, to a waiter, while the other
// holder keeps its own.
func testSemDeadHolder(t *testing.T, s driver.Store) {
	skipUnlessSem(t, s)
	lks := newLockers(t, s, 3, "node")
	ctx := ctxT(t, 20*time.Second)
	const ttl = time.Second
	dead := got(t, "the dying holder")(lks[0].Semaphore("sem-dead", 2).TryAcquire(ctx, &tasklock.ObtainOptions{TTL: ttl, NoRenew: true}))
	deadline := time.Now().Add(ttl)
	live := got(t, "the live holder")(lks[1].Semaphore("sem-dead", 2).TryAcquire(ctx, &tasklock.ObtainOptions{TTL: ttl}))
	sem := lks[2].Semaphore("sem-dead", 2)
	l, err := sem.TryAcquire(ctx, nil)
	refused(t, "a third permit of two", l, err)
	var deadOpen atomic.Bool
	w := waiting(func() (*tasklock.Lock, error) {
		l, err := sem.Acquire(ctx, nil)
		select {
		case <-dead.Done():
		default:
			deadOpen.Store(true) // the store gave the permit away early
		}
		return l, err
	})
	doneBy(t, dead, deadline, "the dead holder's TTL")
	res := await(t, "the waiter", w, 10*time.Second)
	l = got(t, "the waiter")(res.l, res.err)
	if deadOpen.Load() {
		t.Error("the waiter was granted while the dead holder's Done was open")
	}
	t.Logf("the dead holder's permit came to the waiter %v after its TTL", res.at.Sub(deadline).Round(time.Millisecond))
	if l.Fence() <= live.Fence() {
		t.Errorf("the waiter's fence %d, want above the earlier %d", l.Fence(), live.Fence())
	}
	assertOpen(t, live)
	release(t, l, live)
}

// testSemLimitMismatch: a semaphore asked with another number of permits
// than its holders is refused with ErrKindMismatch, at once even by a
// waiting Acquire; once free, it takes the new number.
func testSemLimitMismatch(t *testing.T, s driver.Store) {
	skipUnlessSem(t, s)
	lks := newLockers(t, s, 2, "node")
	ctx := ctxT(t, 20*time.Second)
	p := got(t, "a permit of two")(lks[0].Semaphore("sem-limit", 2).TryAcquire(ctx, nil))
	if p.Mode() != tasklock.ModePermit {
		t.Errorf("Acquire's Mode() = %v", p.Mode())
	}
	l, err := lks[1].Semaphore("sem-limit", 3).TryAcquire(ctx, nil)
	mismatched(t, "a permit of three", l, err)
	start := time.Now()
	l, err = lks[1].Semaphore("sem-limit", 1).Acquire(ctxT(t, 5*time.Second), nil)
	mismatched(t, "a waiting Acquire of one", l, err)
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Acquire took %v to report a mismatch: it retried", el)
	}
	p2 := got(t, "a second permit of two")(lks[1].Semaphore("sem-limit", 2).TryAcquire(ctx, nil))
	release(t, p, p2)
	p3 := got(t, "a permit of three once free")(lks[1].Semaphore("sem-limit", 3).TryAcquire(ctx, nil))
	l, err = lks[0].Semaphore("sem-limit", 2).TryAcquire(ctx, nil)
	mismatched(t, "a permit of two after the key became three", l, err)
	release(t, p3)
}

// testSemFences: every permit granted carries a fence above every earlier
// one, whichever Locker asks and whoever else holds.
func testSemFences(t *testing.T, s driver.Store) {
	skipUnlessSem(t, s)
	lks := newLockers(t, s, 2, "node")
	ctx := ctxT(t, 20*time.Second)
	var (
		last  uint64
		holds []*tasklock.Lock
	)
	for i := range 12 {
		l := got(t, "a permit")(lks[i%2].Semaphore("sem-fence", 2).TryAcquire(ctx, nil))
		if l.Fence() <= last {
			t.Fatalf("grant %d: fence %d after %d", i, l.Fence(), last)
		}
		last = l.Fence()
		holds = append(holds, l)
		if len(holds) == 2 { // keep one held across the next grant
			release(t, holds[0])
			holds = holds[1:]
		}
	}
	release(t, holds...)
}

// testSemWakeOnRelease: a waiter for a permit is woken by the store when
// one is released.
func testSemWakeOnRelease(t *testing.T, s driver.Store) {
	skipUnlessSem(t, s)
	a := newLocker(t, s, "holder", nil)
	ev := newEvents()
	b := frozenLocker(t, s, "waiter", ev)
	ctx := ctxT(t, 10*time.Second)
	p1 := got(t, "a permit")(a.Semaphore("sem-wake", 2).TryAcquire(ctx, nil))
	p2 := got(t, "a permit")(a.Semaphore("sem-wake", 2).TryAcquire(ctx, nil))
	wakeOnRelease(t, s, ev, []*tasklock.Lock{p1}, func(ctx context.Context) (*tasklock.Lock, error) {
		return b.Semaphore("sem-wake", 2).Acquire(ctx, nil)
	})
	release(t, p2)
}
