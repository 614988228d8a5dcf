package tasklock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/fakeclock"
	"github.com/tasklock/tasklock/memstore"
)

// countingStore wraps a memstore and counts acquires and releases, single
// and batched, so that a test can tell a nested obtain made no store call.
type countingStore struct {
	*memstore.Store
	acquires, releases atomic.Int64
}

func (s *countingStore) Acquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	s.acquires.Add(1)
	return s.Store.Acquire(ctx, p)
}

func (s *countingStore) AcquireBatch(ctx context.Context, ps []driver.AcquireParams) ([]driver.AcquireResult, error) {
	s.acquires.Add(int64(len(ps)))
	return s.Store.AcquireBatch(ctx, ps)
}

func (s *countingStore) Release(ctx context.Context, p driver.ReleaseParams) error {
	s.releases.Add(1)
	return s.Store.Release(ctx, p)
}

func (s *countingStore) ReleaseBatch(ctx context.Context, ps []driver.ReleaseParams) ([]error, error) {
	s.releases.Add(int64(len(ps)))
	return s.Store.ReleaseBatch(ctx, ps)
}

// nestedOpen is how many nested handles are open on l's lease.
func nestedOpen(l *Lock) int {
	e := l.lk.eng
	e.mu.Lock()
	defer e.mu.Unlock()
	if x := l.state.x; x != nil {
		return len(x.nested)
	}
	return 0
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A nested Obtain or TryObtain with the outer lock's context returns at
// once without a store call, counts the hold, keeps the lease when it is
// released, and the outer Release frees the key.
func TestReentrantNestedObtainCountsHolds(t *testing.T) {
	s := &countingStore{Store: memstore.New(nil)}
	lk := newTestLocker(t, s)
	other := newTestLocker(t, s)
	ctx := context.Background()
	outer, err := lk.Obtain(ctx, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	acq := s.acquires.Load()
	in1, err := lk.Obtain(outer.Context(), "k", &ObtainOptions{TTL: time.Minute, Owner: "ignored"})
	if err != nil {
		t.Fatal(err)
	}
	derived, cancel := context.WithTimeout(outer.Context(), time.Minute) // a ctx derived from it
	defer cancel()
	in2, err := lk.TryObtain(derived, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	in3, err := lk.TryObtain(in2.Context(), "k", nil) // a nested handle's context nests too
	if err != nil || in3.outer != outer {
		t.Fatalf("obtain with a nested handle's context: %v", err)
	}
	if n := s.acquires.Load() - acq; n != 0 {
		t.Fatalf("nested obtains made %d store acquires, want 0", n)
	}
	if n := nestedOpen(outer); n != 3 {
		t.Fatalf("%d nested holds counted, want 3", n)
	}
	if err := in3.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, in := range []*Lock{in1, in2} {
		if in.Key() != "k" || in.Fence() != outer.Fence() || in.Owner() != outer.Owner() {
			t.Errorf("nested handle %q/%d/%q, want the outer's %q/%d/%q", in.Key(), in.Fence(), in.Owner(), outer.Key(), outer.Fence(), outer.Owner())
		}
	}
	if _, err := other.TryObtain(ctx, "k", nil); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("another Locker obtained a reentrantly held key: %v", err)
	}

	if err := in1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !isClosed(in1.Done()) || !errors.Is(context.Cause(in1.Context()), ErrReleased) || !errors.Is(in1.Err(), ErrReleased) {
		t.Fatalf("released nested handle: Done closed %v, cause %v", isClosed(in1.Done()), in1.Err())
	}
	if err := in1.Release(ctx); err != nil {
		t.Errorf("second Release of a nested handle: %v", err)
	}
	if err := in1.Extend(ctx, time.Minute); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Extend on a released nested handle = %v, want ErrNotHeld", err)
	}
	if isClosed(outer.Done()) || isClosed(in2.Done()) {
		t.Fatal("releasing one nested handle ended the others")
	}
	if n := s.releases.Load(); n != 0 {
		t.Fatalf("nested release made %d store releases, want 0", n)
	}
	if n := nestedOpen(outer); n != 1 {
		t.Fatalf("%d nested holds counted after one release, want 1", n)
	}
	if err := in2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryObtain(ctx, "k", nil); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("the key was freed by the inner releases: %v", err)
	}

	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.releases.Load(); n != 1 {
		t.Fatalf("%d store releases, want 1 (the outermost)", n)
	}
	l, err := other.TryObtain(ctx, "k", nil)
	if err != nil {
		t.Fatalf("after the outer release: %v", err)
	}
	_ = l.Release(ctx)
}

// Releasing the outer hold while nested handles are open releases the
// lease and ends them with ErrReleased; Extend and Heartbeat on a nested
// handle act on the outer lease.
func TestReentrantOuterReleaseEndsNested(t *testing.T) {
	clk := fakeclock.New()
	s := &countingStore{Store: memstore.New(clk)}
	lk := newClockedLocker(t, s, clk)
	ctx := context.Background()
	outer, err := lk.Obtain(ctx, "k", &ObtainOptions{TTL: time.Second, ProgressTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	in, err := lk.Obtain(outer.Context(), "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend on a nested handle: %v", err)
	}
	lk.eng.mu.Lock()
	ttl := outer.state.ttl
	lk.eng.mu.Unlock()
	if ttl != time.Minute {
		t.Errorf("the outer lease's renewals ask for %v after a nested Extend, want 1m", ttl)
	}
	clk.Advance(1500 * time.Millisecond)
	in.Heartbeat()
	if got := time.Duration(outer.beat.Load()); got != 1500*time.Millisecond {
		t.Errorf("the outer lease's last heartbeat at %v after a nested Heartbeat, want 1.5s", got)
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !isClosed(in.Done()) || !errors.Is(context.Cause(in.Context()), ErrReleased) {
		t.Fatalf("nested handle after the outer release: cause %v", in.Err())
	}
	if err := in.Release(ctx); err != nil {
		t.Errorf("Release of a nested handle ended by the outer release: %v", err)
	}
	if n := s.releases.Load(); n != 1 {
		t.Errorf("%d store releases, want 1", n)
	}
	// The outer's context is cancelled now: nothing to reenter, and the
	// call is refused with the context's error.
	if l, err := lk.TryObtain(outer.Context(), "k", nil); err == nil {
		_ = l.Release(ctx)
		t.Error("obtained with the context of a released lock")
	}
}

// Loss of the outer lease ends every nested handle with the same cause:
// MaxHold reached, and the store answering "not yours" on renewal. Time
// is the fake clock's.
func TestReentrantLossEndsNested(t *testing.T) {
	t.Run("MaxHold", func(t *testing.T) {
		clk := fakeclock.New()
		lk := newClockedLocker(t, memstore.New(clk), clk)
		start := clk.Now()
		ttl, maxHold := 300*time.Millisecond, 500*time.Millisecond
		outer, err := lk.TryObtain(context.Background(), "k", &ObtainOptions{TTL: ttl, MaxHold: maxHold})
		if err != nil {
			t.Fatal(err)
		}
		in, err := lk.TryObtain(outer.Context(), "k", &ObtainOptions{MaxHold: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		for advance(t, lk, clk, start.Add(maxHold)) && outer.Err() == nil {
		}
		if !errors.Is(outer.Err(), ErrMaxHold) {
			t.Fatalf("outer cause = %v, want ErrMaxHold", outer.Err())
		}
		if !isClosed(in.Done()) || in.Err() != outer.Err() || context.Cause(in.Context()) != outer.Err() {
			t.Fatalf("nested cause = %v, want the outer's %v", in.Err(), outer.Err())
		}
		if err := in.Release(context.Background()); !errors.Is(err, ErrNotHeld) || !errors.Is(err, ErrMaxHold) {
			t.Errorf("Release of a nested handle after loss = %v, want ErrNotHeld with the cause", err)
		}
	})
	t.Run("NotHeld", func(t *testing.T) {
		clk := fakeclock.New()
		s := memstore.New(clk)
		lk := newClockedLocker(t, s, clk)
		start := clk.Now()
		ttl := 3 * time.Second
		outer, err := lk.TryObtain(context.Background(), "k", &ObtainOptions{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		in, err := lk.TryObtain(outer.Context(), "k", nil)
		if err != nil {
			t.Fatal(err)
		}
		inCtx := in.Context() // made before the loss
		if err := s.ForceRelease(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
		for advance(t, lk, clk, start.Add(ttl)) && outer.Err() == nil {
		}
		if !errors.Is(outer.Err(), ErrLockLost) {
			t.Fatalf("outer cause = %v, want ErrLockLost", outer.Err())
		}
		if !isClosed(in.Done()) || context.Cause(inCtx) != outer.Err() {
			t.Fatalf("nested cause = %v, want the outer's %v", context.Cause(inCtx), outer.Err())
		}
	})
}

// Obtain A, then B with A's context, then A again with B's context: the
// last is reentrant. A different Locker on the same store, given the same
// context, is not.
func TestReentrantThroughAChainAndNotAcrossLockers(t *testing.T) {
	s := &countingStore{Store: memstore.New(nil)}
	lk := newTestLocker(t, s)
	other := newTestLocker(t, s)
	ctx := context.Background()
	a, err := lk.Obtain(ctx, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := lk.Obtain(a.Context(), "b", nil)
	if err != nil {
		t.Fatal(err)
	}
	if b.outer != nil {
		t.Fatal("a lock on another key was nested")
	}
	acq := s.acquires.Load()
	a2, err := lk.TryObtain(b.Context(), "a", nil)
	if err != nil {
		t.Fatalf("A→B→A: %v", err)
	}
	if a2.outer != a || s.acquires.Load() != acq {
		t.Fatal("A→B→A was not reentrant")
	}
	if _, err := other.TryObtain(b.Context(), "a", nil); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("another Locker with the holder's context: %v, want ErrNotObtained", err)
	}
	// Losing A ends the nested handle reached through B; B lives on.
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !isClosed(a2.Done()) || isClosed(b.Done()) {
		t.Fatal("releasing A: the nested handle must end and B must not")
	}
	// B's context still names A, but A is gone: a new Obtain contends.
	a3, err := lk.TryObtain(b.Context(), "a", nil)
	if err != nil || a3.outer != nil {
		t.Fatalf("obtain A after its release, with B's context: %v (nested %v)", err, a3 != nil && a3.outer != nil)
	}
	_ = a3.Release(ctx)
	_ = b.Release(ctx)
}

// A context without the lock is not reentrant: it contends.
func TestReentrantNeedsTheContext(t *testing.T) {
	lk := newTestLocker(t, memstore.New(nil))
	ctx := context.Background()
	l, err := lk.TryObtain(ctx, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release(ctx) }()
	if _, err := lk.TryObtain(ctx, "k", nil); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryObtain without the holder's context = %v, want ErrNotObtained", err)
	}
	// Options of a nested obtain are validated.
	var oe *OptionError
	if _, err := lk.TryObtain(l.Context(), "k", &ObtainOptions{TTL: time.Nanosecond}); !errors.As(err, &oe) || oe.Field != "ObtainOptions.TTL" {
		t.Fatalf("nested obtain with a bad TTL = %v, want an OptionError", err)
	}
}

// WithLock and Once nested on the same key with fn's context run fn at
// once under a nested handle; the key stays held until the outer ends.
func TestReentrantWithLockAndOnce(t *testing.T) {
	s := &countingStore{Store: memstore.New(nil)}
	lk := newTestLocker(t, s)
	other := newTestLocker(t, s)
	ctx := context.Background()
	var ran []string
	err := WithLock(ctx, lk, "k", nil, func(ctx context.Context) error {
		ran = append(ran, "outer")
		if err := WithLock(ctx, lk, "k", nil, func(ctx context.Context) error {
			ran = append(ran, "withlock")
			return nil
		}); err != nil {
			return err
		}
		res, err := Once(ctx, lk, "k", &ObtainOptions{MinHold: time.Hour}, func(ctx context.Context) error {
			ran = append(ran, "once")
			return nil
		})
		if err != nil || !res.Ran {
			t.Errorf("nested Once = %+v, %v", res, err)
		}
		if _, err := other.TryObtain(ctx, "k", nil); !errors.Is(err, ErrNotObtained) {
			t.Errorf("after the nested runs the key was free: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ran) != 3 {
		t.Fatalf("ran %v, want outer, withlock, once", ran)
	}
	if n := s.acquires.Load(); n != 2 {
		t.Errorf("%d store acquires, want 2 (the outer's, and the other Locker's refused one)", n)
	}
	l, err := other.TryObtain(ctx, "k", nil) // the nested MinHold had no effect
	if err != nil {
		t.Fatalf("after WithLock: %v", err)
	}
	_ = l.Release(ctx)
}

// Goroutines that share the holder's context nest at once, each with its
// own handle; the count comes back to zero and the lease stays held.
func TestReentrantConcurrentNesting(t *testing.T) {
	s := &countingStore{Store: memstore.New(nil)}
	lk := newTestLocker(t, s)
	ctx := context.Background()
	outer, err := lk.Obtain(ctx, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	var wg sync.WaitGroup
	start := make(chan struct{})
	handles := make([]*Lock, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			handles[i], errs[i] = lk.Obtain(outer.Context(), "k", nil)
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || handles[i].outer != outer {
			t.Fatalf("goroutine %d: %v", i, errs[i])
		}
	}
	if got := nestedOpen(outer); got != n {
		t.Fatalf("%d nested holds, want %d", got, n)
	}
	for i := range n {
		wg.Go(func() {
			if err := handles[i].Release(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := nestedOpen(outer); got != 0 || isClosed(outer.Done()) {
		t.Fatalf("%d nested holds after release, outer ended %v", got, isClosed(outer.Done()))
	}
	if s.acquires.Load() != 1 || s.releases.Load() != 0 {
		t.Fatalf("store calls: %d acquires, %d releases; want 1, 0", s.acquires.Load(), s.releases.Load())
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
