package storetest

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
)

// batchTests need a driver.Batcher.
var batchTests = []struct {
	name string
	fn   func(t *testing.T, s driver.Store)
}{
	{"BatchItemsAsAlone", testBatchItems},
	{"BatchedBurst", testBatchedBurst},
}

func batcher(t *testing.T, s driver.Store) driver.Batcher {
	t.Helper()
	b, ok := s.(driver.Batcher)
	if !ok {
		t.Skip("the store does not implement driver.Batcher")
	}
	return b
}

// testBatchItems calls the batch methods directly: every item gets the
// answer Acquire or Release alone would give, in order, including a key
// named twice in one batch and a release with the wrong token.
func testBatchItems(t *testing.T, s driver.Store) {
	b := batcher(t, s)
	ctx := ctxT(t, 10*time.Second)
	const ttl = 10 * time.Second
	if _, err := s.Acquire(ctx, driver.AcquireParams{Key: "b-held", Token: "other", Owner: "someone", TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	ps := []driver.AcquireParams{
		{Key: "b-free", Token: "t1", Owner: "me", TTL: ttl},
		{Key: "b-held", Token: "t2", Owner: "me", TTL: ttl},
		{Key: "b-twice", Token: "t3", Owner: "me", TTL: ttl},
		{Key: "b-twice", Token: "t4", Owner: "me", TTL: ttl},
	}
	rs, err := b.AcquireBatch(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(ps) {
		t.Fatalf("AcquireBatch returned %d results for %d items", len(rs), len(ps))
	}
	for _, i := range []int{0, 2} {
		if rs[i].Err != nil || rs[i].Grant.Fence == 0 {
			t.Errorf("item %d (%s): got %+v, want a grant with a fence", i, ps[i].Key, rs[i])
		}
	}
	for _, i := range []int{1, 3} {
		var he *driver.HeldError
		if !errors.As(rs[i].Err, &he) {
			t.Errorf("item %d (%s): got %+v, want a *HeldError", i, ps[i].Key, rs[i])
		}
	}

	rel := []driver.ReleaseParams{
		{Key: "b-free", Token: "t1"},
		{Key: "b-held", Token: "t2"}, // not ours
		{Key: "b-twice", Token: "t3"},
		{Key: "b-never", Token: "t5"},
	}
	errs, err := b.ReleaseBatch(ctx, rel)
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) != len(rel) {
		t.Fatalf("ReleaseBatch returned %d results for %d items", len(errs), len(rel))
	}
	for i, want := range []error{nil, driver.ErrNotHeld, nil, driver.ErrNotHeld} {
		if !errors.Is(errs[i], want) || (want == nil && errs[i] != nil) {
			t.Errorf("release item %d (%s): got %v, want %v", i, rel[i].Key, errs[i], want)
		}
	}
	// The released keys are free again, with a higher fence; the other
	// owner's lease is untouched.
	g, err := s.Acquire(ctx, driver.AcquireParams{Key: "b-free", Token: "t6", Owner: "me", TTL: ttl})
	if err != nil {
		t.Fatalf("b-free after the batch release: %v", err)
	}
	if g.Fence <= rs[0].Grant.Fence {
		t.Errorf("b-free fence %d after release, want above %d", g.Fence, rs[0].Grant.Fence)
	}
	if _, err := s.Acquire(ctx, driver.AcquireParams{Key: "b-held", Token: "t7", Owner: "me", TTL: ttl}); !errors.Is(err, driver.ErrHeld) {
		t.Errorf("b-held after a release with the wrong token: got %v, want ErrHeld", err)
	}
}

// testBatchedBurst has 64 goroutines obtain and release distinct keys and
// 16 more contend for one key through one Locker, so that the Locker
// coalesces their calls: every distinct key is granted once, the shared
// key to one holder at a time, and nothing is left held.
func testBatchedBurst(t *testing.T, s driver.Store) {
	batcher(t, s)
	lk := newLocker(t, s, "burst", nil)
	ctx := ctxT(t, 20*time.Second)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		inside   atomic.Int32
		fences   = map[string]uint64{}
		failures []error
	)
	fail := func(err error) {
		mu.Lock()
		failures = append(failures, err)
		mu.Unlock()
	}
	for i := range 64 {
		wg.Go(func() {
			key := fmt.Sprintf("burst-%d", i)
			for range 5 {
				l, err := lk.TryObtain(ctx, key, nil)
				if err != nil {
					fail(fmt.Errorf("TryObtain(%s): %w", key, err))
					return
				}
				mu.Lock()
				if l.Fence() <= fences[key] {
					failures = append(failures, fmt.Errorf("%s: fence %d after %d", key, l.Fence(), fences[key]))
				}
				fences[key] = l.Fence()
				mu.Unlock()
				if err := l.Release(ctx); err != nil {
					fail(fmt.Errorf("Release(%s): %w", key, err))
					return
				}
			}
		})
	}
	for range 16 {
		wg.Go(func() {
			for range 3 {
				l, err := lk.TryObtain(ctx, "burst-shared", nil)
				if errors.Is(err, tasklock.ErrNotObtained) {
					continue
				}
				if err != nil {
					fail(fmt.Errorf("TryObtain(burst-shared): %w", err))
					return
				}
				if inside.Add(1) > 1 {
					fail(errors.New("burst-shared: two holders at once"))
				}
				runtime.Gosched() // let another holder, if any, overlap
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					fail(fmt.Errorf("Release(burst-shared): %w", err))
				}
			}
		})
	}
	wg.Wait()
	for _, err := range failures {
		t.Error(err)
	}
	if l, ok := s.(driver.Lister); ok {
		leases, err := l.Leases(ctx, "burst")
		if err != nil {
			t.Fatal(err)
		}
		if len(leases) != 0 {
			t.Errorf("%d leases left after the burst, want 0: %+v", len(leases), leases)
		}
	}
}
