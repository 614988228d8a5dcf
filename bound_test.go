package tasklock

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/memstore"
)

// silentStore is a memstore that, once silent, answers no Acquire or
// Release until the call's ctx ends: a paused server, or a network that
// went quiet without closing the connection. It is a driver.Store only,
// not a Batcher, so that every call goes to it alone.
type silentStore struct {
	driver.Store
	silent atomic.Bool
}

func (s *silentStore) Acquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	if s.silent.Load() {
		<-ctx.Done()
		return driver.Grant{}, ctx.Err()
	}
	return s.Store.Acquire(ctx, p)
}

func (s *silentStore) Release(ctx context.Context, p driver.ReleaseParams) error {
	if s.silent.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.Store.Release(ctx, p)
}

// A call with no deadline of the caller's to a store that stopped
// answering ends, with an error saying so: an attempt to obtain within its
// lease's TTL and an eighth, a release within releaseTimeout and an
// eighth. Before, each
// waited for as long as the store's client did: forever, for most.
func TestCallsWithoutDeadlineToASilentStoreEnd(t *testing.T) {
	s := &silentStore{Store: memstore.New(nil)}
	lk, err := New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	held, err := lk.Obtain(context.Background(), "held", &ObtainOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s.silent.Store(true)
	const ttl = 400 * time.Millisecond
	opts := &ObtainOptions{TTL: ttl}
	cancelled, cancel := context.WithCancel(context.Background())
	defer cancel()
	type key struct{}
	calls := []struct {
		name  string
		limit time.Duration
		want  string
		call  func() error
	}{
		{"TryObtain(Background)", ttl + ttl/8, "did not answer within the lease's TTL", func() error {
			_, err := lk.TryObtain(context.Background(), "a", opts)
			return err
		}},
		{"Obtain(Background)", ttl + ttl/8, "did not answer within the lease's TTL", func() error {
			_, err := lk.Obtain(context.Background(), "b", opts)
			return err
		}},
		{"TryObtain(a ctx with a value)", ttl + ttl/8, "did not answer within the lease's TTL", func() error {
			_, err := lk.TryObtain(context.WithValue(context.Background(), key{}, 1), "c", opts)
			return err
		}},
		{"TryObtain(a ctx with a cancel, no deadline)", ttl + ttl/8, "did not answer within the lease's TTL", func() error {
			_, err := lk.TryObtain(cancelled, "d", opts)
			return err
		}},
		{"Release(Background)", releaseTimeout + releaseTimeout/8, "did not answer within " + releaseTimeout.String(), func() error {
			return held.Release(context.Background())
		}},
	}
	type result struct {
		err  error
		took time.Duration
	}
	results := make([]chan result, len(calls))
	for i, c := range calls {
		results[i] = make(chan result, 1)
		go func() {
			start := time.Now()
			err := c.call()
			results[i] <- result{err, time.Since(start)}
		}()
	}
	for i, c := range calls {
		select {
		case r := <-results[i]:
			t.Logf("%s: %v after %v", c.name, r.err, r.took.Round(time.Millisecond))
			switch {
			case r.err == nil || errors.Is(r.err, ErrNotObtained):
				t.Errorf("%s to a silent store: %v, want the store's error", c.name, r.err)
			case !errors.Is(r.err, context.DeadlineExceeded) || !strings.Contains(r.err.Error(), c.want):
				t.Errorf("%s: %v, want context.DeadlineExceeded and %q", c.name, r.err, c.want)
			case r.took > c.limit+time.Second: // a second for a busy machine
				t.Errorf("%s took %v, want at most %v", c.name, r.took, c.limit)
			}
		case <-time.After(c.limit + 10*time.Second): // a bound on a hang, far above the limit
			t.Fatalf("%s to a silent store had not returned %v later", c.name, c.limit+10*time.Second)
		}
	}
}

// Calls with a plain context.Background() share one bound for a while: no
// context or timer of their own.
func TestBoundsShared(t *testing.T) {
	var b callBounds
	ctx1, stop1 := b.bound(context.Background(), time.Minute)
	ctx2, stop2 := b.bound(context.Background(), time.Minute)
	stop1()
	stop2()
	if ctx1 != ctx2 {
		t.Error("two calls with context.Background() in a row got contexts of their own")
	}
	if d, ok := ctx1.Deadline(); !ok || time.Until(d) < time.Minute || time.Until(d) > time.Minute+time.Minute/8 {
		t.Errorf("shared bound's deadline %v from now, want between a minute and a minute and an eighth", time.Until(d))
	}
	if ctx3, stop3 := b.bound(context.Background(), time.Second); ctx3 == ctx1 {
		t.Error("a call with another bound got the shared context of the first")
	} else {
		stop3()
	}
	own, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if got, stop := b.bound(own, time.Second); got != own {
		t.Error("a ctx with a deadline was bounded again")
	} else {
		stop()
	}
	if a := testing.AllocsPerRun(100, func() {
		_, stop := b.bound(context.Background(), time.Second)
		stop()
	}); a != 0 {
		t.Errorf("%v allocations per shared bound, want 0", a)
	}
}

// An error the store answered at once (refusingStore's) is not called unanswered, whatever
// the ctx: the bound's own context, cancelled once the call returned,
// used to make every error with a ctx of the caller's but no deadline
// (exec's: a signal's context) read "the store did not answer within the
// lease's TTL" (seen from exec on a kind mismatch, refused at once).
func TestAnsweredErrorIsNotUnanswered(t *testing.T) {
	lk, err := New(refusingStore{memstore.New(nil)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	cancellable, cancel := context.WithCancel(context.Background())
	defer cancel()
	withDeadline, cancelDeadline := context.WithTimeout(context.Background(), time.Minute)
	defer cancelDeadline()
	type key struct{}
	for name, ctx := range map[string]context.Context{
		"Background":              context.Background(),
		"a ctx with a cancel":     cancellable,
		"a ctx with a value":      context.WithValue(context.Background(), key{}, 1),
		"a ctx with its deadline": withDeadline,
	} {
		_, err := lk.TryObtain(ctx, "k", nil)
		if !errors.Is(err, ErrUnsupported) || strings.Contains(err.Error(), "did not answer") {
			t.Errorf("TryObtain(%s) = %v, want the store's error alone", name, err)
		}
	}
}
