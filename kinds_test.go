package tasklock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/fakeclock"
	"github.com/tasklock/tasklock/memstore"
)

// writeRecorder is a memstore that notes, by its clock, when each
// ModeWrite Acquire came.
type writeRecorder struct {
	*memstore.Store
	clk *fakeclock.Clock

	mu  sync.Mutex
	ats []time.Time
}

func (s *writeRecorder) Acquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	if p.Mode == driver.ModeWrite {
		s.mu.Lock()
		s.ats = append(s.ats, s.clk.Now())
		s.mu.Unlock()
	}
	return s.Store.Acquire(ctx, p)
}

func (s *writeRecorder) attempts() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.ats...)
}

// claims returns the writers' claims (waiting entries) on key in s.
func claims(t *testing.T, s driver.Lister, key string) []driver.Lease {
	t.Helper()
	leases, err := s.Leases(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	var out []driver.Lease
	for _, le := range leases {
		if le.Key == key && le.Waiting {
			out = append(out, le)
		}
	}
	return out
}

// noClaims fails the test when s has a writer's claim on key.
func noClaims(t *testing.T, s driver.Lister, key, after string) {
	t.Helper()
	if cs := claims(t, s, key); len(cs) != 0 {
		t.Fatalf("claims after %s: %+v", after, cs)
	}
}

// withReader returns a memstore, a Locker on it, and that Locker's reader
// on "k".
func withReader(t *testing.T) (*memstore.Store, *Locker, *Lock) {
	t.Helper()
	ms := memstore.New(nil)
	lk := newTestLocker(t, ms)
	r, err := lk.RWMutex("k").TryRLock(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return ms, lk, r
}

// A writer waiting behind a reader asks again within TTL/3 every time,
// however long it has waited (its backoff would otherwise grow to a
// second), so its claim at the store, which holds new readers off, never
// lapses. Time is the fake clock's, the store's and the Locker's alike.
func TestWriterClaimRenewedWhileWaiting(t *testing.T) {
	clk := fakeclock.New()
	ms := memstore.New(clk)
	s := &writeRecorder{Store: ms, clk: clk}
	ctx := context.Background()
	if _, err := ms.Acquire(ctx, driver.AcquireParams{Key: "k", Token: "reader", Owner: "reader", TTL: time.Hour, Mode: driver.ModeRead}); err != nil {
		t.Fatal(err)
	}
	lk := newClockedLocker(t, s, clk)
	const ttl = 1500 * time.Millisecond
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		l, err := lk.RWMutex("k").Lock(wctx, &ObtainOptions{TTL: ttl})
		if l != nil {
			err = fmt.Errorf("granted beside a reader: fence %d", l.Fence())
		}
		done <- err
	}()
	start := clk.Now()
	seen := 0
	for clk.Now().Sub(start) < 4*ttl {
		// The writer has asked again and sleeps on its poll timer.
		waitUntil(t, "the writer's next attempt", func() bool {
			next, ok := clk.Next()
			return len(s.attempts()) > seen && ok && next.Before(clk.Now().Add(time.Minute))
		})
		seen = len(s.attempts())
		if cs := claims(t, ms, "k"); len(cs) != 1 || cs[0].Owner != "test" || cs[0].TTL <= 0 {
			t.Fatalf("at +%v the writer's claims at the store are %+v, want one", clk.Now().Sub(start), cs)
		}
		next, _ := clk.Next()
		clk.Advance(next.Sub(clk.Now()))
	}
	ats := s.attempts()
	for i := 1; i < len(ats); i++ {
		if gap := ats[i].Sub(ats[i-1]); gap > ttl/3 {
			t.Fatalf("attempt %d came %v after the one before, want within TTL/3 = %v (attempts at %v)", i, gap, ttl/3, ats)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock = %v", err)
	}
	noClaims(t, ms, "k", "the cancelled wait")
}

// A TryLock refused leaves no claim: readers are not held off.
func TestTryLockLeavesNoClaim(t *testing.T) {
	ms, lk, r := withReader(t)
	ctx := context.Background()
	if _, err := lk.RWMutex("k").TryLock(ctx, nil); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock beside a reader = %v", err)
	}
	noClaims(t, ms, "k", "a refused TryLock")
	r2, err := lk.RWMutex("k").TryRLock(ctx, nil)
	if err != nil {
		t.Fatalf("a reader after a refused TryLock: %v", err)
	}
	_ = r.Release(ctx)
	_ = r2.Release(ctx)
}

// A Lock whose wait is cancelled takes its claim back before it returns.
func TestCancelledLockRemovesClaim(t *testing.T) {
	ms, lk, r := withReader(t)
	ctx := context.Background()
	defer r.Release(ctx)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := lk.RWMutex("k").Lock(wctx, nil)
		done <- err
	}()
	waitUntil(t, "the writer's claim never appeared", func() bool { return len(claims(t, ms, "k")) == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock = %v", err)
	}
	noClaims(t, ms, "k", "the cancelled wait")
}

// One release wakes one of a Locker's waiters; a reader that obtains
// passes the wake-up on, as there may be room for the next. The waiters'
// Locker runs on a frozen clock, so only wake-ups move them.
func TestSharedGrantPassesWakeUpOn(t *testing.T) {
	ms := memstore.New(nil)
	writer := newTestLocker(t, ms)
	frozen := fakeclock.Frozen()
	readers, err := New(ms, &Config{Owner: "readers", Clock: fakeClock{frozen}})
	if err != nil {
		t.Fatal(err)
	}
	defer readers.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := writer.RWMutex("k").TryLock(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	got := make(chan *Lock, n)
	for range n {
		go func() {
			l, err := readers.RWMutex("k").RLock(ctx, nil)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
	}
	// A waiter is asleep once it has made its poll timer and set it after
	// its attempt: two of the frozen clock's resets each, beside the two
	// of the idle engine's timer.
	waitUntil(t, "the readers never all waited", func() bool { return frozen.Resets() == 2*n+2 })
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		select {
		case l := <-got:
			if l != nil {
				defer l.Release(context.Background())
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d waiting readers obtained after the writer's release: the wake-up was not passed on", i, n)
		}
	}
}

// mutexStore keeps only mutexes, and no queue: memstore's Store methods
// and nothing else.
type mutexStore struct{ s *memstore.Store }

func (m mutexStore) Acquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	return m.s.Acquire(ctx, p)
}

func (m mutexStore) Renew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	return m.s.Renew(ctx, ps)
}

func (m mutexStore) Release(ctx context.Context, p driver.ReleaseParams) error {
	return m.s.Release(ctx, p)
}

// kindCalls are every call that obtains a read-write lock or semaphore.
func kindCalls(lk *Locker, key string, permits int, opts *ObtainOptions) map[string]func(context.Context) (*Lock, error) {
	rw, sem := lk.RWMutex(key), lk.Semaphore(key, permits)
	return map[string]func(context.Context) (*Lock, error){
		"Lock":       func(ctx context.Context) (*Lock, error) { return rw.Lock(ctx, opts) },
		"TryLock":    func(ctx context.Context) (*Lock, error) { return rw.TryLock(ctx, opts) },
		"RLock":      func(ctx context.Context) (*Lock, error) { return rw.RLock(ctx, opts) },
		"TryRLock":   func(ctx context.Context) (*Lock, error) { return rw.TryRLock(ctx, opts) },
		"Acquire":    func(ctx context.Context) (*Lock, error) { return sem.Acquire(ctx, opts) },
		"TryAcquire": func(ctx context.Context) (*Lock, error) { return sem.TryAcquire(ctx, opts) },
	}
}

// A store without driver.Kinder refuses read-write locks and semaphores
// with ErrUnsupported, at once, even to a caller with a deadline; and a
// store that keeps no queue refuses a fair Obtain the same way.
func TestKindsUnsupported(t *testing.T) {
	lk := newTestLocker(t, mutexStore{memstore.New(nil)})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	for name, call := range kindCalls(lk, "k", 2, nil) {
		if l, err := call(ctx); l != nil || !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s on a store without driver.Kinder = %v, %v; want ErrUnsupported", name, l, err)
		}
	}
	if l, err := lk.Obtain(ctx, "k", &ObtainOptions{Fair: true}); l != nil || !errors.Is(err, ErrUnsupported) {
		t.Errorf("a fair Obtain on a store without a queue = %v, %v; want ErrUnsupported", l, err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("the refusals took %v: retried", el)
	}
	// Mutexes still work, and TryObtain ignores Fair.
	l, err := lk.TryObtain(ctx, "k", &ObtainOptions{Fair: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
}

// Options a read-write lock or semaphore cannot take are *OptionErrors
// naming them: Fair, and a number of permits out of range.
func TestKindsOptionErrors(t *testing.T) {
	lk := newTestLocker(t, memstore.New(nil))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, call := range kindCalls(lk, "k", 2, &ObtainOptions{Fair: true}) {
		var oe *OptionError
		l, err := call(ctx)
		if l != nil {
			_ = l.Release(ctx)
		}
		if l != nil || !errors.As(err, &oe) || oe.Field != "ObtainOptions.Fair" {
			t.Errorf("%s with Fair = %v, %v; want an OptionError for ObtainOptions.Fair", name, l, err)
		}
	}
	for _, permits := range []int{0, -1, MaxPermits + 1} {
		for _, name := range []string{"Acquire", "TryAcquire"} {
			var oe *OptionError
			if l, err := kindCalls(lk, "k", permits, nil)[name](ctx); l != nil || !errors.As(err, &oe) || oe.Field != "permits" {
				t.Errorf("%s with %d permits = %v, %v; want an OptionError for permits", name, permits, l, err)
			}
		}
	}
	for _, permits := range []int{1, MaxPermits} {
		l, err := lk.Semaphore(fmt.Sprint("k", permits), permits).TryAcquire(ctx, nil)
		if err != nil {
			t.Fatalf("TryAcquire with %d permits: %v", permits, err)
		}
		_ = l.Release(ctx)
	}
	var oe *OptionError
	if _, err := lk.RWMutex("").TryLock(ctx, nil); !errors.As(err, &oe) || oe.Field != "key" {
		t.Errorf("TryLock of an empty key = %v, want an OptionError for key", err)
	}
}

// Holds of read-write locks and semaphores are never reentrant: a call
// with a context that carries one asks the store again, for a hold of its
// own, and a mutex of the same name is another lock.
func TestKindsNotReentrant(t *testing.T) {
	var mu sync.Mutex
	grants := 0
	lk, err := New(memstore.New(nil), &Config{Owner: "test", OnEvent: func(e Event) {
		if e.Type == EventObtained {
			mu.Lock()
			grants++
			mu.Unlock()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	ctx := context.Background()
	w, err := lk.RWMutex("k").TryLock(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lk.RWMutex("k").TryLock(w.Context(), nil); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock with the writer's context = %v, want ErrNotObtained", err)
	}
	if _, err := lk.RWMutex("k").TryRLock(w.Context(), nil); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryRLock with the writer's context = %v, want ErrNotObtained", err)
	}
	m, err := lk.Obtain(w.Context(), "k", nil) // a mutex: another lock, a grant of its own
	if err != nil || m.outer != nil {
		t.Fatalf("Obtain of a mutex with a writer's context: %v (nested: %v)", err, m != nil && m.outer != nil)
	}
	_ = w.Release(ctx)
	// A writer with the mutex's context: a grant of its own too.
	w2, err := lk.RWMutex("k").TryLock(m.Context(), nil)
	if err != nil || w2.outer != nil || w2.Mode() != ModeWrite {
		t.Fatalf("TryLock with a mutex's context: %v; want a hold of its own", err)
	}
	_ = w2.Release(ctx)

	r1, err := lk.RWMutex("k").TryRLock(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := lk.RWMutex("k").TryRLock(r1.Context(), nil)
	if err != nil || r2.outer != nil || r2.token == r1.token {
		t.Fatalf("TryRLock with a reader's context: %v; want a hold of its own", err)
	}
	_ = r1.Release(ctx)
	select {
	case <-r2.Done():
		t.Fatalf("the second reader ended with the first: %v", r2.Err())
	default:
	}
	_ = r2.Release(ctx)

	p, err := lk.Semaphore("s", 1).TryAcquire(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lk.Semaphore("s", 1).TryAcquire(p.Context(), nil); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryAcquire of a semaphore of one with the holder's context = %v, want ErrNotObtained", err)
	}
	_ = p.Release(ctx)
	_ = m.Release(ctx)
	mu.Lock()
	defer mu.Unlock()
	if grants != 6 {
		t.Fatalf("%d grants, want 6 (two writers, mutex, two readers, permit)", grants)
	}
}
