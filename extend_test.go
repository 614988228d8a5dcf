package tasklock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/memstore"
)

// renewGate is a memstore whose Renew calls of one lease (the calls an
// Extend makes alone) wait at a gate, or until their ctx ends; it records
// the leases of every Renew call.
type renewGate struct {
	*memstore.Store
	entered chan struct{} // a lone Renew reached the gate
	gate    chan struct{} // closed: lone Renews proceed

	mu    sync.Mutex
	calls [][]driver.RenewParams
}

func newRenewGate() *renewGate {
	return &renewGate{Store: memstore.New(nil), entered: make(chan struct{}, 64), gate: make(chan struct{})}
}

func (s *renewGate) Renew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	s.mu.Lock()
	s.calls = append(s.calls, append([]driver.RenewParams(nil), ps...))
	s.mu.Unlock()
	if len(ps) == 1 {
		s.entered <- struct{}{}
		select {
		case <-s.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.Renew(ctx, ps)
}

// sizes returns the number of leases of every Renew call so far.
func (s *renewGate) sizes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int, len(s.calls))
	for i, c := range s.calls {
		out[i] = len(c)
	}
	return out
}

// renewedWith reports whether a Renew call asked for key with ttl.
func (s *renewGate) renewedWith(key string, ttl time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.calls {
		for _, p := range c {
			if p.Key == key && p.TTL == ttl {
				return true
			}
		}
	}
	return false
}

// obtainN obtains keys prefix-0 … prefix-(n-1) with a lease long enough that
// the engine renews none of them during a test.
func obtainN(t *testing.T, lk *Locker, prefix string, n int) []*Lock {
	t.Helper()
	locks := make([]*Lock, n)
	for i := range locks {
		l, err := lk.TryObtain(context.Background(), fmt.Sprintf("%s-%d", prefix, i), &ObtainOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		locks[i] = l
	}
	return locks
}

// Extend calls that arrive while maxInFlight others are at the store wait
// and go together, in one Renew call, as acquires do.
func TestExtendGroupCommits(t *testing.T) {
	s := newRenewGate()
	lk := newTestLocker(t, s)
	const n = 10
	locks := obtainN(t, lk, "x", maxInFlight+n)
	ctx := context.Background()
	var wg sync.WaitGroup
	extend := func(l *Lock) {
		wg.Go(func() {
			if err := l.Extend(ctx, 2*time.Minute); err != nil {
				t.Errorf("Extend %s: %v", l.Key(), err)
			}
		})
	}
	for _, l := range locks[:maxInFlight] {
		extend(l)
	}
	for range maxInFlight {
		<-s.entered
	}
	for _, l := range locks[maxInFlight:] {
		extend(l)
	}
	waitUntil(t, "the later Extend calls never queued", func() bool {
		lk.door.extends.mu.Lock()
		defer lk.door.extends.mu.Unlock()
		return len(lk.door.extends.queue) == n
	})
	close(s.gate)
	wg.Wait()
	sizes := s.sizes()
	want := []int{1, 1, n}
	if fmt.Sprint(sizes) != fmt.Sprint(want) {
		t.Errorf("Renew calls carried %v leases, want %v", sizes, want)
	}
	for _, l := range locks {
		if err := l.Err(); err != nil {
			t.Errorf("%s ended: %v", l.Key(), err)
		}
	}
}

// When ctx ends while Extend's renewal is at the store, Extend returns ctx's
// error, the lock stays held, and the engine renews the lease with the new
// length itself.
func TestExtendContextEndsDuringCall(t *testing.T) {
	s := newRenewGate()
	lk := newTestLocker(t, s)
	l := obtainN(t, lk, "ctx", 1)[0]
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Extend(ctx, 3*time.Minute) }()
	<-s.entered
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Extend = %v, want context.Canceled", err)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("the lock ended: %v", err)
	}
	close(s.gate) // the engine's retry goes through
	waitUntil(t, "the engine never renewed the lease after the cancelled Extend", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.calls) >= 2 && s.calls[len(s.calls)-1][0].TTL == 3*time.Minute
	})
	waitUntil(t, "the retry's outcome was never applied", func() bool {
		lk.eng.mu.Lock()
		defer lk.eng.mu.Unlock()
		return !l.state.inFlight && l.state.attempts == 0
	})
	if err := l.Err(); err != nil {
		t.Fatalf("the lock ended: %v", err)
	}
}

// An Extend that arrives while another Extend of the same lock is at the
// store is answered by the renewal made right after it, with its own
// length.
func TestExtendDuringExtend(t *testing.T) {
	s := newRenewGate()
	lk := newTestLocker(t, s)
	l := obtainN(t, lk, "twice", 1)[0]
	ctx := context.Background()
	first := make(chan error, 1)
	go func() { first <- l.Extend(ctx, 2*time.Minute) }()
	<-s.entered
	second := make(chan error, 1)
	go func() { second <- l.Extend(ctx, 4*time.Minute) }()
	waitUntil(t, "the second Extend never waited", func() bool {
		lk.eng.mu.Lock()
		defer lk.eng.mu.Unlock()
		return l.state.x != nil && len(l.state.x.extends) == 1
	})
	close(s.gate)
	for i, ch := range []chan error{first, second} {
		if err := <-ch; err != nil {
			t.Errorf("Extend %d: %v", i+1, err)
		}
	}
	if !s.renewedWith(l.Key(), 4*time.Minute) {
		t.Errorf("no renewal asked for the second Extend's 4m: %v", s.sizes())
	}
}

// Extend of a lock whose lease the store no longer has ends the lock and
// returns ErrNotHeld, on the direct path too.
func TestExtendLostLease(t *testing.T) {
	st := memstore.New(nil)
	lk := newTestLocker(t, st)
	l, err := lk.TryObtain(context.Background(), "gone", &ObtainOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.ForceRelease(context.Background(), "gone"); err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(context.Background(), time.Minute); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Extend = %v, want ErrNotHeld", err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done is open after Extend found the lease gone")
	}
	if err := l.Err(); !errors.Is(err, ErrLockLost) {
		t.Errorf("Err = %v, want ErrLockLost", err)
	}
	// Release says why the lock had ended, as Extend does.
	if err := l.Release(context.Background()); !errors.Is(err, ErrNotHeld) || !errors.Is(err, ErrLockLost) {
		t.Errorf("Release after the loss = %v, want ErrNotHeld with the cause ErrLockLost", err)
	}
}
