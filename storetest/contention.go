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
)

// contentionTests check that contention at the store never surfaces as an
// error: a store that loses a race it cannot settle returns
// driver.ErrTryAgain, and the Locker tries again.
var contentionTests = []struct {
	name string
	fn   func(t *testing.T, s driver.Store)
}{
	{"ContendedObtainWaits", testContendedObtainWaits},
	{"ContendedTryObtainGrantsOne", testContendedTryObtain},
}

// testContendedObtainWaits: 3 Lockers × 4 goroutines obtain one key over and
// over, each releasing at once, with a context that has no deadline. Every
// Obtain must return the lock: with no deadline, Obtain ends only with the
// lock, ctx's error or a failure it cannot retry, and losing a race to
// another contender is none of those. The critical sections must not
// overlap.
func testContendedObtainWaits(t *testing.T, s driver.Store) {
	const lockers, goroutines, rounds = 3, 4, 8
	lks := make([]*tasklock.Locker, lockers)
	for i := range lks {
		lks[i] = newLocker(t, s, fmt.Sprintf("contender-%d", i), nil)
	}
	// No deadline, so that Obtain treats store errors as it would for a
	// caller without one; a watchdog cancels it if the test hangs.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watchdog := time.AfterFunc(2*time.Minute, cancel)
	defer watchdog.Stop()

	var inside, overlaps, obtained atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, lockers*goroutines)
	start := time.Now()
	for i := range lockers * goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lk := lks[i%lockers]
			for r := range rounds {
				l, err := lk.Obtain(ctx, "contended", &tasklock.ObtainOptions{TTL: 5 * time.Second})
				if err != nil {
					errs <- fmt.Errorf("goroutine %d, obtain %d: %w", i, r, err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				obtained.Add(1)
				inside.Add(-1)
				if err := l.Release(context.Background()); err != nil {
					errs <- fmt.Errorf("goroutine %d, release %d: %w", i, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 5 {
			t.Error(err)
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("the watchdog ended the test: %d of %d obtained within 2 minutes", obtained.Load(), lockers*goroutines*rounds)
	}
	if n > 0 {
		t.Fatalf("%d of %d goroutines' Obtain with no deadline failed; %d of %d obtains succeeded", n, lockers*goroutines, obtained.Load(), lockers*goroutines*rounds)
	}
	if o := overlaps.Load(); o != 0 {
		t.Fatalf("%d overlapping critical sections", o)
	}
	t.Logf("%d contended obtains in %v", obtained.Load(), time.Since(start).Round(time.Millisecond))
}

// testContendedTryObtain: in each round, 5 Lockers call TryObtain on one
// free key at the same moment. Exactly one must get it, and every other
// must be told the key is held (ErrNotObtained), never get a store error:
// contenders that tie at the store (a RedLock vote split between them, a
// ZooKeeper holder gone while it was read) try again rather than all lose.
func testContendedTryObtain(t *testing.T, s driver.Store) {
	const lockers, rounds = 5, 20
	lks := make([]*tasklock.Locker, lockers)
	for i := range lks {
		lks[i] = newLocker(t, s, fmt.Sprintf("replica-%d", i), nil)
	}
	ctx := ctxT(t, 2*time.Minute)
	noWinner := 0
	for r := range rounds {
		key := fmt.Sprintf("tick-%d", r)
		var (
			wg    sync.WaitGroup
			ready sync.WaitGroup
			fire  = make(chan struct{})
			locks = make([]*tasklock.Lock, lockers)
			errs  = make([]error, lockers)
		)
		for i, lk := range lks {
			wg.Add(1)
			ready.Add(1)
			go func() {
				defer wg.Done()
				ready.Done()
				<-fire
				locks[i], errs[i] = lk.TryObtain(ctx, key, &tasklock.ObtainOptions{TTL: 5 * time.Second})
			}()
		}
		ready.Wait()
		close(fire)
		wg.Wait()
		winners := 0
		for i := range lks {
			switch {
			case errs[i] == nil:
				winners++
			case !errors.Is(errs[i], tasklock.ErrNotObtained):
				t.Errorf("round %d, locker %d: TryObtain = %v, want the lock or ErrNotObtained", r, i, errs[i])
			}
		}
		for _, l := range locks {
			if l != nil {
				if err := l.Release(ctx); err != nil {
					t.Fatalf("round %d: Release: %v", r, err)
				}
			}
		}
		switch {
		case winners > 1:
			t.Fatalf("round %d: %d contenders obtained the key at once", r, winners)
		case winners == 0:
			noWinner++
		}
	}
	if noWinner > 0 {
		t.Fatalf("%d of %d rounds on a free key granted it to nobody", noWinner, rounds)
	}
}
