package tasklock

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/fakeclock"
	"github.com/tasklock/tasklock/memstore"
)

const ms = time.Millisecond

// t0 is a reading of the monotonic clock, as the Locker's times are.
var t0 = time.Now()

func TestDrift(t *testing.T) {
	for _, c := range []struct {
		ttl, want time.Duration
	}{
		{10 * ms, 2 * ms},            // MinTTL: the 2 ms floor dominates
		{100 * ms, 2 * ms},           // 1% would be 1 ms
		{200 * ms, 2 * ms},           // 1% is exactly the floor
		{300 * ms, 3 * ms},           // 1% from here on
		{time.Second, 10 * ms},       //
		{10 * time.Second, 100 * ms}, //
		{time.Hour, 36 * time.Second},
	} {
		if got := drift(c.ttl); got != c.want {
			t.Errorf("drift(%v) = %v, want %v", c.ttl, got, c.want)
		}
	}
}

func TestValidity(t *testing.T) {
	for _, c := range []struct {
		ttl, grace, want time.Duration
	}{
		{10 * ms, 0, 8 * ms},                         // tiny TTL: drift floor 2 ms
		{10 * ms, 4 * ms, 4 * ms},                    // grace just under half
		{10 * ms, 8 * ms, 0},                         // nothing left to trust
		{time.Second, 0, 990 * ms},                   // 1% drift
		{time.Second, 250 * ms, 740 * ms},            // grace comes off too
		{10 * time.Second, 0, 9900 * ms},             // DefaultTTL
		{600 * ms, 250 * ms, 600*ms - 6*ms - 250*ms}, // TestGrace's lease
	} {
		if got := validity(c.ttl, c.grace); got != c.want {
			t.Errorf("validity(%v, %v) = %v, want %v", c.ttl, c.grace, got, c.want)
		}
		if got, want := validUntil(t0, c.ttl, c.grace), t0.Add(c.want); !got.Equal(want) {
			t.Errorf("validUntil(t0, %v, %v) = t0%+v, want t0%+v", c.ttl, c.grace, got.Sub(t0), c.want)
		}
	}
}

func TestLeaseLength(t *testing.T) {
	for _, c := range []struct {
		name               string
		ttl, maxHold, held time.Duration
		want               time.Duration
		final              bool
	}{
		{"no MaxHold", time.Second, 0, 0, time.Second, false},
		{"no MaxHold, long held", time.Second, 0, time.Hour, time.Second, false},
		{"MaxHold far", time.Second, time.Minute, 0, time.Second, false},
		{"MaxHold a TTL away", time.Second, 10 * time.Second, 9 * time.Second, time.Second, true},
		{"MaxHold less than a TTL away", time.Second, 10 * time.Second, 9500 * ms, 500 * ms, true},
		{"MaxHold just over a TTL away", time.Second, 10 * time.Second, 8999 * ms, time.Second, false},
		{"MaxHold below the TTL at grant", time.Second, 300 * ms, 0, 300 * ms, true},
		{"MaxHold equal to the TTL at grant", time.Second, time.Second, 0, time.Second, true},
	} {
		got, final := leaseLength(c.ttl, c.maxHold, c.held)
		if got != c.want || final != c.final {
			t.Errorf("%s: leaseLength(%v, %v, %v) = %v, %v; want %v, %v", c.name, c.ttl, c.maxHold, c.held, got, final, c.want, c.final)
		}
		if c.held == 0 {
			if got, final := firstLease(c.ttl, c.maxHold); got != c.want || final != c.final {
				t.Errorf("%s: firstLease(%v, %v) = %v, %v; want %v, %v", c.name, c.ttl, c.maxHold, got, final, c.want, c.final)
			}
		}
	}
}

func TestMaxHoldReached(t *testing.T) {
	for _, c := range []struct {
		name                 string
		maxHold, held, grace time.Duration
		want                 bool
	}{
		{"no MaxHold", 0, time.Hour, 0, false},
		{"far from it", time.Minute, time.Second, 0, false},
		{"rest above the drift floor", time.Minute, time.Minute - 3*ms, 0, false},
		{"rest equal to the drift floor", time.Minute, time.Minute - 2*ms, 0, true},
		{"rest below the drift floor", time.Minute, time.Minute - ms, 0, true},
		{"passed", time.Minute, 2 * time.Minute, 0, true},
		{"grace eats the rest", time.Minute, time.Minute - 100*ms, 98 * ms, true},
		{"grace leaves a little", time.Minute, time.Minute - 100*ms, 97 * ms, false},
	} {
		if got := maxHoldReached(c.maxHold, c.held, c.grace); got != c.want {
			t.Errorf("%s: maxHoldReached(%v, %v, %v) = %v, want %v", c.name, c.maxHold, c.held, c.grace, got, c.want)
		}
	}
}

func TestKeepFor(t *testing.T) {
	for _, c := range []struct {
		minHold, held, want time.Duration
	}{
		{0, time.Second, 0},                              // no MinHold
		{5 * time.Second, time.Second, 4 * time.Second},  // released early: keep the rest
		{5 * time.Second, 5 * time.Second, 0},            // reached exactly
		{5 * time.Second, 6 * time.Second, -time.Second}, // passed: nothing to keep
	} {
		if got := keepFor(c.minHold, c.held); got != c.want {
			t.Errorf("keepFor(%v, %v) = %v, want %v", c.minHold, c.held, got, c.want)
		}
	}
}

func TestRenewalTimes(t *testing.T) {
	for _, c := range []struct {
		ttl, at, window time.Duration
	}{
		{10 * ms, 3333333, 1666666},
		{300 * ms, 100 * ms, 50 * ms},
		{600 * ms, 200 * ms, 100 * ms},
		{3 * time.Second, time.Second, 500 * ms},
	} {
		if got := renewalAt(t0, c.ttl); got.Sub(t0) != c.at {
			t.Errorf("renewalAt(t0, %v) = t0+%v, want t0+%v", c.ttl, got.Sub(t0), c.at)
		}
		if got := renewWindow(c.ttl); got != c.window {
			t.Errorf("renewWindow(%v) = %v, want %v", c.ttl, got, c.window)
		}
	}
}

func TestRenewDue(t *testing.T) {
	now := t0
	for _, c := range []struct {
		name    string
		renewAt time.Time
		retry   bool
		window  time.Duration
		want    bool
	}{
		{"none planned", time.Time{}, false, time.Second, false},
		{"due now", now, false, 0, true},
		{"overdue", now.Add(-ms), false, 0, true},
		{"later, no window", now.Add(ms), false, 0, false},
		{"within the window", now.Add(50 * ms), false, 100 * ms, true},
		{"at the window's edge", now.Add(100 * ms), false, 100 * ms, true},
		{"past the window", now.Add(101 * ms), false, 100 * ms, false},
		{"a retry waits out its backoff", now.Add(50 * ms), true, 100 * ms, false},
		{"a retry that is due", now, true, 100 * ms, true},
	} {
		if got := renewDue(now, c.renewAt, c.retry, c.window); got != c.want {
			t.Errorf("%s: renewDue = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestStallAt(t *testing.T) {
	for _, c := range []struct {
		name           string
		beat, progress time.Duration
		renewing       bool
		want           time.Duration // after t0
		stalls         bool
	}{
		{"no progress timeout", 0, 0, true, 0, false},
		{"not renewing", 0, time.Second, false, 0, false},
		{"no heartbeat yet", 0, time.Second, true, time.Second, true},
		{"after a heartbeat", 700 * ms, time.Second, true, 1700 * ms, true},
	} {
		got, stalls := stallAt(t0, c.beat, c.progress, c.renewing)
		if stalls != c.stalls || (stalls && got.Sub(t0) != c.want) {
			t.Errorf("%s: stallAt = t0+%v, %v; want t0+%v, %v", c.name, got.Sub(t0), stalls, c.want, c.stalls)
		}
	}
}

func TestDue(t *testing.T) {
	valid := t0.Add(time.Second)
	for _, c := range []struct {
		name           string
		renewAt, stall time.Time
		want           time.Time
	}{
		{"validity alone", time.Time{}, time.Time{}, valid},
		{"renewal first", t0.Add(300 * ms), time.Time{}, t0.Add(300 * ms)},
		{"renewal after validity (a retry)", t0.Add(2 * time.Second), time.Time{}, valid},
		{"stall first", t0.Add(300 * ms), t0.Add(200 * ms), t0.Add(200 * ms)},
		{"stall after renewal", t0.Add(300 * ms), t0.Add(500 * ms), t0.Add(300 * ms)},
		{"stall after validity", time.Time{}, t0.Add(2 * time.Second), valid},
	} {
		if got := due(valid, c.renewAt, c.stall); !got.Equal(c.want) {
			t.Errorf("%s: due = t0+%v, want t0+%v", c.name, got.Sub(t0), c.want.Sub(t0))
		}
	}
}

func TestExpiryCause(t *testing.T) {
	errRenew := errors.New("connection reset")
	for _, c := range []struct {
		name            string
		endCause, last  error
		renew, inFlight bool
		overdue         time.Duration
		is              []error
		says            string
	}{
		{"MaxHold's last lease", ErrMaxHold, errRenew, true, false, 0, []error{ErrMaxHold, ErrLockLost}, "max hold"},
		{"renewal failing", nil, errRenew, true, false, 0, []error{ErrLockLost, errRenew}, "not renewed within its validity: connection reset"},
		{"renewal failing, then paused", nil, errRenew, true, false, time.Second, []error{ErrLockLost, errRenew}, "not renewed within its validity: connection reset"},
		{"renewal off", nil, nil, false, false, 0, []error{ErrLockLost}, "renewal off"},
		{"never answered", nil, nil, true, true, 0, []error{ErrLockLost}, "not renewed within its validity: the store did not answer the renewal in time"},
		// A process paused past its lease: the renewal due never went out.
		{"never sent", nil, nil, true, false, 6500 * ms, []error{ErrLockLost}, "lease expired unrenewed: its renewal, due 6.5s before, was never sent (was this process paused or starved?)"},
		{"none planned", nil, nil, true, false, 0, []error{ErrLockLost}, "not renewed within its validity"},
	} {
		err := expiryCause(c.endCause, c.last, c.renew, c.inFlight, c.overdue)
		for _, target := range c.is {
			if !errors.Is(err, target) {
				t.Errorf("%s: %v does not match %v", c.name, err, target)
			}
		}
		if !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %q does not say %q", c.name, err, c.says)
		}
	}
}

// A process paused past its lease (SIGSTOP: the fake clock jumps at once)
// finds its lock lost when it resumes, and the cause says what happened:
// the renewal due was never sent, not that the store failed to answer.
func TestLostWhilePausedSaysSo(t *testing.T) {
	clk := fakeclock.New()
	lk := newClockedLocker(t, memstore.New(clk), clk)
	l, err := lk.TryObtain(context.Background(), "k", &ObtainOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(5 * time.Second)
	err = l.Err()
	if !errors.Is(err, ErrLockLost) {
		t.Fatalf("after a pause past the lease: %v, want ErrLockLost", err)
	}
	// Renewal was due at 1s (TTL/3): 4s before the end was noticed.
	if want := "its renewal, due 4s before, was never sent (was this process paused or starved?)"; !strings.Contains(err.Error(), want) {
		t.Errorf("cause %q does not say %q", err, want)
	}
}

func TestRetryDelay(t *testing.T) {
	for _, c := range []struct {
		ttl    time.Duration
		lo, hi []time.Duration // bounds by attempt 1, 2, ...
	}{
		// 25 ms doubling, capped at TTL/10, jittered over [d/2, d].
		{10 * time.Second, []time.Duration{12500000, 25 * ms, 50 * ms, 100 * ms, 200 * ms, 400 * ms, 500 * ms, 500 * ms}, []time.Duration{25 * ms, 50 * ms, 100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second}},
		{time.Second, []time.Duration{12500000, 25 * ms, 50 * ms, 50 * ms}, []time.Duration{25 * ms, 50 * ms, 100 * ms, 100 * ms}},
		{10 * ms, []time.Duration{500 * time.Microsecond, 500 * time.Microsecond}, []time.Duration{ms, ms}}, // the 1 ms floor
	} {
		for i := range c.lo {
			for range 50 {
				if d := retryDelay(i+1, c.ttl); d < c.lo[i] || d > c.hi[i] {
					t.Errorf("retryDelay(%d, %v) = %v, want within [%v, %v]", i+1, c.ttl, d, c.lo[i], c.hi[i])
				}
			}
		}
	}
	// And never beyond a tenth of the TTL, however many attempts failed.
	for attempt := 1; attempt < 20; attempt++ {
		if d := retryDelay(attempt, time.Second); d <= 0 || d > 100*time.Millisecond {
			t.Errorf("retryDelay(%d, 1s) = %v, want within (0, TTL/10]", attempt, d)
		}
	}
}

// jumpClock is a fake clock whose Now can jump ahead without firing any
// timer: a process resumed after a long pause (SIGSTOP, a VM stall) reads
// the new time before its engine goroutine has been scheduled again.
type jumpClock struct {
	fakeClock
	jump atomic.Int64
}

func (c *jumpClock) Now() time.Time { return c.fakeClock.Now().Add(time.Duration(c.jump.Load())) }

// A process resumed past its lease must find the lock's Context, and the
// context Once and WithLock hand their function, ended before it acts
// again, as Done is, even while its engine goroutine has not yet run:
// work that checks ctx.Err() between steps must not take one more step.
func TestContextEndsOnResumeBeforeTheEngineRuns(t *testing.T) {
	check := func(t *testing.T, what string, ctx context.Context) {
		t.Helper()
		if err := ctx.Err(); err == nil {
			t.Fatalf("%s: Err() = nil after a pause past the lease", what)
		}
		select {
		case <-ctx.Done():
		default:
			t.Fatalf("%s: Done() open after a pause past the lease", what)
		}
		if cause := context.Cause(ctx); !errors.Is(cause, ErrLockLost) {
			t.Fatalf("%s: cause %v, want ErrLockLost", what, cause)
		}
	}
	opts := &ObtainOptions{TTL: 3 * time.Second}
	for _, c := range []struct {
		name string
		run  func(t *testing.T, lk *Locker, clk *jumpClock, fake *fakeclock.Clock)
	}{
		{"Lock.Context", func(t *testing.T, lk *Locker, clk *jumpClock, fake *fakeclock.Clock) {
			l, err := lk.TryObtain(context.Background(), "k", opts)
			if err != nil {
				t.Fatal(err)
			}
			ctx := l.Context()
			settle(t, lk, fake)
			clk.jump.Store(int64(5 * time.Second))
			check(t, "Lock.Context", ctx)
		}},
		{"WithLock", func(t *testing.T, lk *Locker, clk *jumpClock, fake *fakeclock.Clock) {
			err := WithLock(context.Background(), lk, "k", opts, func(ctx context.Context) error {
				settle(t, lk, fake)
				clk.jump.Store(int64(5 * time.Second))
				check(t, "WithLock's ctx", ctx)
				return ctx.Err()
			})
			if !errors.Is(err, ErrLockLost) {
				t.Fatalf("WithLock = %v, want ErrLockLost", err)
			}
		}},
		{"Once", func(t *testing.T, lk *Locker, clk *jumpClock, fake *fakeclock.Clock) {
			_, err := Once(context.Background(), lk, "k", opts, func(ctx context.Context) error {
				settle(t, lk, fake)
				clk.jump.Store(int64(5 * time.Second))
				check(t, "Once's ctx", ctx)
				return nil
			})
			if !errors.Is(err, ErrLockLost) {
				t.Fatalf("Once = %v, want ErrLockLost", err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fake := fakeclock.New()
			clk := &jumpClock{fakeClock: fakeClock{fake}}
			lk, err := New(memstore.New(fake), &Config{Owner: "test", Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = lk.Close() })
			c.run(t, lk, clk, fake)
		})
	}
}

// pausingStore fails every renewal after a pause of the process past the
// lease, which the clock's jump stands for: the call hung, then failed.
type pausingStore struct {
	*memstore.Store
	clk *jumpClock
}

func (s *pausingStore) Renew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	s.clk.jump.Store(int64(5 * time.Second))
	return nil, errInjected
}

// Extend called with the lock's own Context, whose Err looks at the
// lease's deadline, returns when its renewal fails past that deadline:
// the engine must not look at ctx while it holds its own lock.
func TestExtendWithLockContextPastDeadline(t *testing.T) {
	fake := fakeclock.New()
	clk := &jumpClock{fakeClock: fakeClock{fake}}
	lk, err := New(&pausingStore{Store: memstore.New(fake), clk: clk}, &Config{Owner: "test", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	var hung atomic.Bool // a deadlocked engine cannot be closed
	t.Cleanup(func() {
		if !hung.Load() {
			_ = lk.Close()
		}
	})
	l, err := lk.TryObtain(context.Background(), "k", &ObtainOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	settle(t, lk, fake)
	done := make(chan error, 1)
	go func() { done <- l.Extend(l.Context(), 3*time.Second) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrLockLost) && !errors.Is(err, ErrNotHeld) {
			t.Fatalf("Extend = %v, want the lock's loss", err)
		}
	case <-time.After(10 * time.Second):
		hung.Store(true)
		t.Fatal("Extend(l.Context(), ...) hung after a failed renewal past the deadline")
	}
}
