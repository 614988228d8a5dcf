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
)

func newLockers(t *testing.T, s driver.Store, n int, prefix string) []*tasklock.Locker {
	lks := make([]*tasklock.Locker, n)
	for i := range lks {
		lks[i] = newLocker(t, s, fmt.Sprintf("%s-%d", prefix, i), nil)
	}
	return lks
}

// testRWWritersExclude: writers and readers on 3 Lockers take one key
// over and over. An oracle outside the store counts who is inside: a
// writer must find no one else, a reader no writer; writers' fences
// strictly increase in the order they entered; every reader's fence is
// the fence of the last writer that entered before it (0 before any).
func testRWWritersExclude(t *testing.T, s driver.Store) {
	skipUnlessRW(t, s)
	const writers, readers, rounds = 6, 6, 3
	lks := newLockers(t, s, 3, "node")
	var (
		writersIn, readersIn atomic.Int64
		lastWriter           atomic.Uint64
		mu                   sync.Mutex
		fences               []uint64
		violations           []string
	)
	violate := func(format string, args ...any) {
		mu.Lock()
		violations = append(violations, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	ctx := ctxT(t, 60*time.Second)
	opts := &tasklock.ObtainOptions{TTL: 5 * time.Second}
	var wg sync.WaitGroup
	errs := make(chan error, writers+readers)
	for i := range writers + readers {
		wg.Go(func() {
			rw := lks[i%len(lks)].RWMutex("rw-excl")
			for r := range rounds {
				if i < writers {
					l, err := rw.Lock(ctx, opts)
					if err != nil {
						errs <- fmt.Errorf("writer %d, round %d: %w", i, r, err)
						return
					}
					if w := writersIn.Add(1); w != 1 || readersIn.Load() != 0 {
						violate("writer with fence %d entered with %d writers and %d readers inside", l.Fence(), w, readersIn.Load())
					}
					mu.Lock()
					fences = append(fences, l.Fence())
					mu.Unlock()
					lastWriter.Store(l.Fence())
					time.Sleep(200 * time.Microsecond) // widen the window a broken lock would show
					writersIn.Add(-1)
					if err := l.Release(ctx); err != nil {
						errs <- err
						return
					}
					continue
				}
				l, err := rw.RLock(ctx, opts)
				if err != nil {
					errs <- fmt.Errorf("reader %d, round %d: %w", i, r, err)
					return
				}
				readersIn.Add(1)
				if w := writersIn.Load(); w != 0 {
					violate("reader entered with %d writers inside", w)
				}
				if f, last := l.Fence(), lastWriter.Load(); f != last {
					violate("reader's fence %d, the last writer's %d", f, last)
				}
				time.Sleep(200 * time.Microsecond)
				readersIn.Add(-1)
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
	for _, v := range violations {
		t.Error(v)
	}
	if len(fences) != writers*rounds {
		t.Fatalf("%d writers entered, want %d", len(fences), writers*rounds)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("writers' fences in the order they entered: %v, not strictly increasing", fences)
		}
	}
}

// testRWReadersShare: readers on 3 Lockers hold one key at once (each
// waits inside until all are in, which a store that serialised them would
// never allow), while a writer is refused.
func testRWReadersShare(t *testing.T, s driver.Store) {
	skipUnlessRW(t, s)
	const n = 5
	lks := newLockers(t, s, 3, "reader")
	ctx := ctxT(t, 20*time.Second)
	var in atomic.Int32
	all, leave := make(chan struct{}), make(chan struct{})
	errs := make(chan error, n)
	for i := range n {
		go func() {
			l, err := lks[i%len(lks)].RWMutex("rw-share").RLock(ctx, nil)
			if err != nil {
				errs <- err
				return
			}
			if in.Add(1) == n {
				close(all)
			}
			<-leave
			errs <- l.Release(ctx)
		}()
	}
	select {
	case <-all:
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatalf("only %d of %d readers held the key at once within 10s", in.Load(), n)
	}
	w := newLocker(t, s, "writer", nil)
	l, err := w.RWMutex("rw-share").TryLock(ctx, nil)
	refused(t, "TryLock while readers hold", l, err)
	close(leave)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	release(t, got(t, "TryLock after the readers left")(w.RWMutex("rw-share").TryLock(ctx, nil)))
}

// testRWReadersAndWriters: a reader keeps a writer out, waiting or not,
// and a writer keeps readers and other writers out.
func testRWReadersAndWriters(t *testing.T, s driver.Store) {
	skipUnlessRW(t, s)
	lks := newLockers(t, s, 3, "node")
	a, b, c := lks[0].RWMutex("rw-both"), lks[1].RWMutex("rw-both"), lks[2].RWMutex("rw-both")
	ctx := ctxT(t, 20*time.Second)
	short := func() context.Context { return ctxT(t, 300*time.Millisecond) }
	checkWaitEnded := func(what string, l *tasklock.Lock, err error) {
		t.Helper()
		refused(t, what, l, err)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s = %v, want the deadline in the chain", what, err)
		}
	}

	r := got(t, "RLock")(a.RLock(ctx, nil))
	l, err := b.TryLock(ctx, nil)
	refused(t, "TryLock while a reader holds", l, err)
	l, err = b.Lock(short(), nil)
	checkWaitEnded("Lock with 300ms while a reader holds", l, err)
	release(t, r)

	w := got(t, "Lock after the reader left")(b.Lock(ctx, nil))
	l, err = a.TryRLock(ctx, nil)
	refused(t, "TryRLock while a writer holds", l, err)
	l, err = c.TryLock(ctx, nil)
	refused(t, "TryLock while a writer holds", l, err)
	l, err = a.RLock(short(), nil)
	checkWaitEnded("RLock with 300ms while a writer holds", l, err)
	release(t, w)
	release(t, got(t, "TryRLock after the writer left")(a.TryRLock(ctx, nil)))
}

// testRWWriterNotStarved: readers on two Lockers relay one key so that
// one always holds it (each takes it before the one before lets go). A
// writer that asks must still get in, and from when it waits, readers
// arriving are refused; a store without writer preference keeps the
// writer out for as long as the relay runs.
func testRWWriterNotStarved(t *testing.T, s driver.Store) {
	skipUnlessRW(t, s)
	relay := newLockers(t, s, 2, "reader")
	w := newLocker(t, s, "writer", nil)
	ctx := ctxT(t, 30*time.Second)
	opts := &tasklock.ObtainOptions{TTL: 3 * time.Second}
	cur := got(t, "the first reader")(relay[0].RWMutex("rw-starve").TryRLock(ctx, opts))
	var (
		writer   <-chan obtained
		asked    time.Time
		handoffs int
	)
	for i := 1; ; i++ {
		if i == 4 {
			asked = time.Now()
			writer = waiting(func() (*tasklock.Lock, error) { return w.RWMutex("rw-starve").Lock(ctx, opts) })
		}
		time.Sleep(20 * time.Millisecond) // a reader's work
		next, err := relay[i%2].RWMutex("rw-starve").TryRLock(ctx, opts)
		if err != nil {
			if !errors.Is(err, tasklock.ErrNotObtained) {
				t.Fatal(err)
			}
			if writer == nil {
				t.Fatalf("a reader was refused with no writer about: %v", err)
			}
			release(t, cur)
			break
		}
		release(t, cur)
		cur = next
		if writer != nil {
			handoffs++
			if time.Since(asked) > 10*time.Second {
				t.Fatalf("readers kept getting in for 10s (%d handoffs) while a writer waited: the writer is starved", handoffs)
			}
		}
	}
	res := await(t, "the writer's Lock", writer, 20*time.Second)
	l := got(t, "the writer's Lock")(res.l, res.err)
	t.Logf("the writer got in %v after it asked; readers got in %d times meanwhile", res.at.Sub(asked).Round(time.Millisecond), handoffs)
	release(t, l)
}

// testRWReaderFence: a reader's fence is that of the last writer (0
// before any); each writer's is above every earlier writer's.
func testRWReaderFence(t *testing.T, s driver.Store) {
	skipUnlessRW(t, s)
	lks := newLockers(t, s, 2, "node")
	ctx := ctxT(t, 20*time.Second)
	rwA, rwB := lks[0].RWMutex("rw-fence"), lks[1].RWMutex("rw-fence")
	r := got(t, "a reader before any writer")(rwA.TryRLock(ctx, nil))
	if r.Fence() != 0 {
		t.Errorf("a reader before any writer has fence %d, want 0", r.Fence())
	}
	if r.Mode() != tasklock.ModeRead {
		t.Errorf("RLock's Mode() = %v", r.Mode())
	}
	release(t, r)
	var last uint64
	for i := range 3 {
		w := got(t, "a writer")([]*tasklock.RWMutex{rwA, rwB}[i%2].TryLock(ctx, nil))
		if w.Fence() <= last || w.Mode() != tasklock.ModeWrite {
			t.Fatalf("writer %d: fence %d (mode %v) after %d", i, w.Fence(), w.Mode(), last)
		}
		last = w.Fence()
		release(t, w)
		r1 := got(t, "a reader")(rwA.TryRLock(ctx, nil))
		r2 := got(t, "a second reader")(rwB.TryRLock(ctx, nil))
		if r1.Fence() != last || r2.Fence() != last {
			t.Fatalf("readers' fences %d and %d after writer %d, want %d", r1.Fence(), r2.Fence(), i, last)
		}
		release(t, r1, r2)
	}
}

// testRWDeadReader: of two readers, one dies (no renewal, never
// released). Its entry ends at its TTL and no sooner frees the key, as
// the other still holds; once that one releases, a writer gets in at once.
// A store that kept all readers under one expiry would either drop the
// live reader with the dead one or keep the dead one while the live one
// renews.
func testRWDeadReader(t *testing.T, s driver.Store) {
	skipUnlessRW(t, s)
	lks := newLockers(t, s, 3, "node")
	ctx := ctxT(t, 20*time.Second)
	const ttl = time.Second
	dead := got(t, "the dying reader")(lks[0].RWMutex("rw-dead").TryRLock(ctx, &tasklock.ObtainOptions{TTL: ttl, NoRenew: true}))
	expiresBy := time.Now().Add(ttl) // at the store, too: the grant was before now
	live := got(t, "the live reader")(lks[1].RWMutex("rw-dead").TryRLock(ctx, &tasklock.ObtainOptions{TTL: ttl}))
	rw := lks[2].RWMutex("rw-dead")
	l, err := rw.TryLock(ctx, nil)
	refused(t, "TryLock while both readers hold", l, err)
	doneBy(t, dead, expiresBy, "the dead reader's TTL")
	// Waiting for a time the store's clock decides, not for a goroutine.
	time.Sleep(time.Until(expiresBy.Add(100 * time.Millisecond)))
	l, err = rw.TryLock(ctx, nil)
	refused(t, "TryLock after the dead reader's TTL, the live reader holding", l, err)
	assertOpen(t, live)
	release(t, live)
	w := got(t, "TryLock once the live reader left (the dead one's entry must be gone)")(rw.TryLock(ctx, nil))
	release(t, w)
}

// testRWTryLockNoClaim: a TryLock refused leaves no claim: a reader gets
// in right after, while the first reader still holds, and after a writer
// that refused it released.
func testRWTryLockNoClaim(t *testing.T, s driver.Store) {
	skipUnlessRW(t, s)
	lks := newLockers(t, s, 3, "node")
	ctx := ctxT(t, 20*time.Second)
	r := got(t, "RLock")(lks[0].RWMutex("rw-try").TryRLock(ctx, nil))
	l, err := lks[1].RWMutex("rw-try").TryLock(ctx, nil)
	refused(t, "TryLock while a reader holds", l, err)
	noClaims(t, s, "rw-try")
	release(t, got(t, "a reader after a refused TryLock")(lks[2].RWMutex("rw-try").TryRLock(ctx, nil)), r)

	w := got(t, "Lock")(lks[0].RWMutex("rw-try").TryLock(ctx, nil))
	l, err = lks[1].RWMutex("rw-try").TryLock(ctx, nil)
	refused(t, "TryLock while a writer holds", l, err)
	release(t, w)
	noClaims(t, s, "rw-try")
	release(t, got(t, "a reader after the writer left")(lks[2].RWMutex("rw-try").TryRLock(ctx, nil)))
}

// testRWCancelledLock: a writer waiting behind a reader holds new readers
// off; once its wait is cancelled, readers get in at once (its claim is
// gone within a moment, not at the end of its TTL).
func testRWCancelledLock(t *testing.T, s driver.Store) {
	skipUnlessRW(t, s)
	ev := newEvents()
	a, b, c := newLocker(t, s, "reader", nil), newLocker(t, s, "writer", ev), newLocker(t, s, "late-reader", nil)
	ctx := ctxT(t, 20*time.Second)
	r := got(t, "RLock")(a.RWMutex("rw-cancel").TryRLock(ctx, nil))
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	writer := waiting(func() (*tasklock.Lock, error) { return b.RWMutex("rw-cancel").Lock(wctx, nil) })
	ev.waitFor(t, tasklock.EventNotObtained, 1, 10*time.Second)
	l, err := c.RWMutex("rw-cancel").TryRLock(ctx, nil)
	refused(t, "TryRLock while a writer waits", l, err)
	cancel()
	res := await(t, "the cancelled Lock", writer, 10*time.Second)
	refused(t, "the cancelled Lock", res.l, res.err)
	if !errors.Is(res.err, context.Canceled) {
		t.Fatalf("cancelled Lock = %v, want context.Canceled in the chain", res.err)
	}
	noClaimsSoon(t, s, "rw-cancel", 3*time.Second)
	release(t, got(t, "TryRLock after the writer gave up")(c.RWMutex("rw-cancel").TryRLock(ctx, nil)), r)
}

// testRWKindMismatch: while a key is live as a read-write lock a
// semaphore of that name is refused with ErrKindMismatch, at once even by
// a waiting Acquire; once free it can be a semaphore, and then a
// read-write lock is refused the same way.
func testRWKindMismatch(t *testing.T, s driver.Store) {
	skipUnlessKinds(t, s, driver.ModeRead, driver.ModeWrite, driver.ModePermit)
	lks := newLockers(t, s, 2, "node")
	ctx := ctxT(t, 20*time.Second)
	r := got(t, "RLock")(lks[0].RWMutex("kind").TryRLock(ctx, nil))
	l, err := lks[1].Semaphore("kind", 2).TryAcquire(ctx, nil)
	mismatched(t, "a semaphore on a read-write lock's key", l, err)
	start := time.Now()
	l, err = lks[1].Semaphore("kind", 2).Acquire(ctxT(t, 5*time.Second), nil)
	mismatched(t, "a waiting Acquire on a read-write lock's key", l, err)
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Acquire took %v to report a mismatch: it retried", el)
	}
	release(t, r)
	p := got(t, "a semaphore once the key is free")(lks[1].Semaphore("kind", 2).TryAcquire(ctx, nil))
	l, err = lks[0].RWMutex("kind").TryLock(ctx, nil)
	mismatched(t, "TryLock on a semaphore's key", l, err)
	start = time.Now()
	l, err = lks[0].RWMutex("kind").RLock(ctxT(t, 5*time.Second), nil)
	mismatched(t, "RLock on a semaphore's key", l, err)
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("RLock took %v to report a mismatch: it retried", el)
	}
	release(t, p)
}

// testRWApartFromMutex: a mutex and a read-write lock or semaphore of the
// same name are different locks.
func testRWApartFromMutex(t *testing.T, s driver.Store) {
	skipUnlessRW(t, s)
	lks := newLockers(t, s, 2, "node")
	ctx := ctxT(t, 20*time.Second)
	m := mustObtain(t, lks[0], "apart", nil)
	w := got(t, "Lock on a mutex's name")(lks[1].RWMutex("apart").TryLock(ctx, nil))
	mustNotObtain(t, lks[1], "apart")
	l, err := lks[0].RWMutex("apart").TryRLock(ctx, nil)
	refused(t, "TryRLock while the writer holds", l, err)
	release(t, w)
	assertOpen(t, m)
	if s.(driver.Kinder).Kinds(driver.ModePermit) == nil {
		p := got(t, "a semaphore on a mutex's name")(lks[1].Semaphore("apart", 1).TryAcquire(ctx, nil))
		release(t, m)
		assertOpen(t, p)
		m = mustObtain(t, lks[0], "apart", nil)
		release(t, p)
	}
	release(t, m)
}

// testRWRenewMixed: a mutex, a writer, a reader and a permit held by one
// Locker, all with a 1s TTL, stay held across several TTLs: the engine
// renews them together, in calls that mix the modes.
func testRWRenewMixed(t *testing.T, s driver.Store) {
	skipUnlessKinds(t, s, driver.ModeRead, driver.ModeWrite, driver.ModePermit)
	a, b := newLocker(t, s, "a", nil), newLocker(t, s, "b", nil)
	ctx := ctxT(t, 20*time.Second)
	// Renewed every TTL/3, each with TTL·2/3 left to answer in.
	opts := &tasklock.ObtainOptions{TTL: time.Second}
	held := []*tasklock.Lock{
		mustObtain(t, a, "mix-m", opts),
		got(t, "Lock")(a.RWMutex("mix-w").TryLock(ctx, opts)),
		got(t, "RLock")(a.RWMutex("mix-r").TryRLock(ctx, opts)),
		got(t, "Acquire")(a.Semaphore("mix-s", 1).TryAcquire(ctx, opts)),
	}
	for deadline := time.Now().Add(2500 * time.Millisecond); time.Now().Before(deadline); {
		mustNotObtain(t, b, "mix-m")
		l, err := b.RWMutex("mix-w").TryRLock(ctx, nil)
		refused(t, "TryRLock of the held writer's key", l, err)
		l, err = b.RWMutex("mix-r").TryLock(ctx, nil)
		refused(t, "TryLock of the held reader's key", l, err)
		l, err = b.Semaphore("mix-s", 1).TryAcquire(ctx, nil)
		refused(t, "TryAcquire of the held permit's key", l, err)
		for _, l := range held {
			assertOpen(t, l)
		}
		time.Sleep(250 * time.Millisecond) // sampling interval, not synchronisation
	}
	release(t, held...)
}

// testRWListed: a driver.Lister lists every entry with its mode: readers,
// a waiting writer's claim (Waiting), and permits with the limit.
func testRWListed(t *testing.T, s driver.Store) {
	skipUnlessKinds(t, s, driver.ModeRead, driver.ModeWrite, driver.ModePermit)
	ls, ok := s.(driver.Lister)
	if !ok {
		t.Skip("store does not implement driver.Lister")
	}
	ev := newEvents()
	a, b, c := newLocker(t, s, "a", nil), newLocker(t, s, "b", ev), newLocker(t, s, "c", nil)
	ctx := ctxT(t, 20*time.Second)
	opts := &tasklock.ObtainOptions{TTL: 10 * time.Second}
	r := got(t, "RLock")(a.RWMutex("list-rw").TryRLock(ctx, opts))
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	writer := waiting(func() (*tasklock.Lock, error) { return b.RWMutex("list-rw").Lock(wctx, opts) })
	ev.waitFor(t, tasklock.EventNotObtained, 1, 10*time.Second)
	p1 := got(t, "a permit")(c.Semaphore("list-sem", 3).TryAcquire(ctx, opts))
	p2 := got(t, "a permit")(c.Semaphore("list-sem", 3).TryAcquire(ctx, opts))
	leases, err := ls.Leases(ctx, "list-")
	if err != nil {
		t.Fatal(err)
	}
	type entry struct {
		key, owner string
		mode       driver.Mode
		limit      int
		waiting    bool
		fence      uint64
	}
	want := map[entry]int{
		{"list-rw", "a", driver.ModeRead, 0, false, r.Fence()}:     1,
		{"list-rw", "b", driver.ModeWrite, 0, true, 0}:             1,
		{"list-sem", "c", driver.ModePermit, 3, false, p1.Fence()}: 1,
		{"list-sem", "c", driver.ModePermit, 3, false, p2.Fence()}: 1,
	}
	for _, le := range leases {
		e := entry{le.Key, le.Owner, le.Mode, le.Limit, le.Waiting, le.Fence}
		if e.waiting {
			e.fence = 0 // a claim has no fence of its own yet
		}
		if want[e] == 0 {
			t.Errorf("unexpected lease %+v", le)
			continue
		}
		want[e]--
		if le.TTL <= 0 || le.TTL > opts.TTL {
			t.Errorf("lease %+v: TTL %v, want within (0, %v]", le, le.TTL, opts.TTL)
		}
	}
	for e, n := range want {
		if n > 0 {
			t.Errorf("not listed: %+v (listed: %+v)", e, leases)
		}
	}
	cancel()
	if res := await(t, "the cancelled Lock", writer, 10*time.Second); res.err == nil {
		t.Fatal("the cancelled Lock was granted")
	}
	release(t, r, p1, p2)
	if leases, err = ls.Leases(ctx, "list-"); err != nil || len(leases) != 0 {
		t.Fatalf("after every release: %+v, %v; want none", leases, err)
	}
}

// frozenLocker returns a Locker on s whose clock never moves: its poll
// timers never fire, so only the store can wake its waiters.
func frozenLocker(t *testing.T, s driver.Store, owner string, ev *events) *tasklock.Locker {
	t.Helper()
	lk, err := tasklock.New(s, &tasklock.Config{Owner: owner, OnEvent: ev.on, Clock: frozenClock{fakeclock.Frozen()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lk.Close() })
	return lk
}

// wakeOnRelease has a waiter on a frozen clock obtain with obtain once
// the holds in held, released one by one, are all gone: only the store's
// notification (driver.Notifier) can wake it. It is in its Locker's
// waiters after its second refused attempt.
func wakeOnRelease(t *testing.T, s driver.Store, ev *events, held []*tasklock.Lock, obtain func(ctx context.Context) (*tasklock.Lock, error)) {
	t.Helper()
	if _, ok := s.(driver.Notifier); !ok {
		t.Skip("store does not implement driver.Notifier: waiters on read-write locks and semaphores poll")
	}
	w := waiting(func() (*tasklock.Lock, error) { return obtain(ctxT(t, 30*time.Second)) })
	ev.waitFor(t, tasklock.EventNotObtained, 2, 10*time.Second)
	var released time.Time
	for _, l := range held {
		released = time.Now()
		release(t, l)
	}
	select {
	case res := <-w:
		l := got(t, "the frozen waiter")(res.l, res.err)
		t.Logf("woken and granted %v after the last release", res.at.Sub(released).Round(time.Microsecond))
		release(t, l)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the release within 10s: the store did not notify it")
	}
}

// testRWWakeOnRelease: a writer waiting behind two readers is woken by
// the store when the last one releases.
func testRWWakeOnRelease(t *testing.T, s driver.Store) {
	skipUnlessRW(t, s)
	a := newLocker(t, s, "reader", nil)
	ev := newEvents()
	b := frozenLocker(t, s, "writer", ev)
	ctx := ctxT(t, 10*time.Second)
	held := []*tasklock.Lock{
		got(t, "RLock")(a.RWMutex("rw-wake").TryRLock(ctx, nil)),
		got(t, "RLock")(a.RWMutex("rw-wake").TryRLock(ctx, nil)),
	}
	wakeOnRelease(t, s, ev, held, func(ctx context.Context) (*tasklock.Lock, error) {
		return b.RWMutex("rw-wake").Lock(ctx, nil)
	})
}

// testRWClose: Close releases a Locker's readers, writers and permits at
// the store, and a writer it had waiting takes its claim back.
func testRWClose(t *testing.T, s driver.Store) {
	skipUnlessRW(t, s)
	ev := newEvents()
	a := newLocker(t, s, "a", ev)
	b := newLocker(t, s, "b", nil)
	ctx := ctxT(t, 20*time.Second)
	held := []*tasklock.Lock{
		got(t, "RLock")(a.RWMutex("close-r").TryRLock(ctx, nil)),
		got(t, "Lock")(a.RWMutex("close-w").TryLock(ctx, nil)),
	}
	sem := s.(driver.Kinder).Kinds(driver.ModePermit) == nil
	if sem {
		held = append(held, got(t, "Acquire")(a.Semaphore("close-s", 1).TryAcquire(ctx, nil)))
	}
	hold := got(t, "RLock")(b.RWMutex("close-h").TryRLock(ctx, nil))
	failed := ev.count(tasklock.EventNotObtained)
	writer := waiting(func() (*tasklock.Lock, error) { return a.RWMutex("close-h").Lock(context.Background(), nil) })
	ev.waitFor(t, tasklock.EventNotObtained, failed+1, 10*time.Second)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for _, l := range held {
		waitDone(t, l, time.Second)
		if !errors.Is(l.Err(), tasklock.ErrClosed) {
			t.Fatalf("%v hold's cause = %v, want ErrClosed", l.Mode(), l.Err())
		}
	}
	if res := await(t, "the waiting Lock", writer, 5*time.Second); !errors.Is(res.err, tasklock.ErrClosed) {
		t.Fatalf("the waiting Lock = %v, want ErrClosed", res.err)
	}
	release(t,
		got(t, "Lock of a closed Locker's reader's key")(b.RWMutex("close-r").TryLock(ctx, nil)),
		got(t, "RLock of a closed Locker's writer's key")(b.RWMutex("close-w").TryRLock(ctx, nil)),
		got(t, "RLock beside a closed Locker's waiting writer")(b.RWMutex("close-h").TryRLock(ctx, nil)),
		hold,
	)
	if sem {
		release(t, got(t, "Acquire of a closed Locker's permit")(b.Semaphore("close-s", 1).TryAcquire(ctx, nil)))
	}
}
