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

// gatedStore is a memstore whose single Acquire calls, and optionally its
// batches, wait at a gate, so that a test controls when calls are under
// way; it records the size of every batch.
type gatedStore struct {
	*memstore.Store
	entered   chan string   // a single Acquire reached the gate
	gate      chan struct{} // closed: single calls proceed
	batchGate chan struct{} // closed: batches proceed
	batched   chan struct{} // a batch was answered
	max       int           // MaxBatch, when not 0

	mu      sync.Mutex
	batches []int
}

func newGatedStore() *gatedStore {
	bg := make(chan struct{})
	close(bg)
	return &gatedStore{
		Store: memstore.New(nil), entered: make(chan string, 64),
		gate: make(chan struct{}), batchGate: bg, batched: make(chan struct{}, 64),
	}
}

func (s *gatedStore) Acquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	s.entered <- p.Key
	<-s.gate
	return s.Store.Acquire(ctx, p)
}

func (s *gatedStore) MaxBatch() int {
	if s.max != 0 {
		return s.max
	}
	return s.Store.MaxBatch()
}

func (s *gatedStore) AcquireBatch(ctx context.Context, ps []driver.AcquireParams) ([]driver.AcquireResult, error) {
	s.mu.Lock()
	s.batches = append(s.batches, len(ps))
	s.mu.Unlock()
	<-s.batchGate
	defer func() { s.batched <- struct{}{} }()
	return s.Store.AcquireBatch(ctx, ps)
}

func (s *gatedStore) batchSizes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.batches...)
}

// fillSlots starts maxInFlight TryObtain calls and waits until each is
// held at the store's gate.
func fillSlots(t *testing.T, lk *Locker, s *gatedStore, wg *sync.WaitGroup) {
	t.Helper()
	for i := range maxInFlight {
		wg.Go(func() {
			if _, err := lk.TryObtain(context.Background(), fmt.Sprintf("slot-%d", i), nil); err != nil {
				t.Errorf("slot %d: %v", i, err)
			}
		})
	}
	for range maxInFlight {
		select {
		case <-s.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the first calls never reached the store")
		}
	}
}

// waitUntil polls cond every millisecond until it holds, and fails the
// test with what when it does not within ten seconds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(time.Millisecond) // polling interval
	}
}

// waitQueued waits until n acquires wait for a batch.
func waitQueued(t *testing.T, lk *Locker, n int) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%d acquires never queued", n), func() bool {
		lk.door.acquires.mu.Lock()
		defer lk.door.acquires.mu.Unlock()
		return len(lk.door.acquires.queue) == n
	})
}

// obtainBehindSlots fills the slots of a Locker at s, queues n TryObtain
// calls of keys prefix-0 … behind them, then opens the gate and returns
// what the queued calls obtained once every call has returned.
func obtainBehindSlots(t *testing.T, s *gatedStore, prefix string, n int) []*Lock {
	t.Helper()
	lk, err := New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lk.Close() })
	var wg sync.WaitGroup
	fillSlots(t, lk, s, &wg)
	locks := make([]*Lock, n)
	for i := range n {
		wg.Go(func() {
			l, err := lk.TryObtain(context.Background(), fmt.Sprintf("%s-%d", prefix, i), nil)
			if err != nil {
				t.Errorf("%s %d: %v", prefix, i, err)
			}
			locks[i] = l
		})
	}
	waitQueued(t, lk, n)
	close(s.gate)
	wg.Wait()
	return locks
}

func TestBatchCoalescesWaitingCalls(t *testing.T) {
	s := newGatedStore()
	const n = 10
	locks := obtainBehindSlots(t, s, "queued", n)

	if got := s.batchSizes(); len(got) != 1 || got[0] != n {
		t.Fatalf("batches %v, want one of %d", got, n)
	}
	for i, l := range locks {
		if l == nil || l.Fence() != 1 {
			t.Fatalf("lock %d: %+v, want a lock with fence 1", i, l)
		}
	}
	// The batched locks are renewed and released like any other.
	for _, l := range locks {
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// queueOne fills the Locker's slots at s, then queues a TryObtain of key
// behind them; cancel ends that call's context, and errc gets its error.
// wg waits for the calls that fill the slots.
func queueOne(t *testing.T, s *gatedStore, key string) (wg *sync.WaitGroup, cancel context.CancelFunc, errc chan error) {
	t.Helper()
	lk, err := New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lk.Close() })
	wg = new(sync.WaitGroup)
	fillSlots(t, lk, s, wg)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	errc = make(chan error, 1)
	go func() {
		_, err := lk.TryObtain(ctx, key, nil)
		errc <- err
	}()
	waitQueued(t, lk, 1)
	return wg, cancel, errc
}

func TestBatchCallerGivesUpWhileQueued(t *testing.T) {
	s := newGatedStore()
	wg, cancel, errc := queueOne(t, s, "gives-up")
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("TryObtain after its context ended in the queue: %v, want context.Canceled", err)
	}
	close(s.gate)
	wg.Wait()
	if got := s.batchSizes(); len(got) != 0 {
		t.Fatalf("batches %v: a call given up before its batch was sent must not be sent", got)
	}
	// Nothing was granted for it.
	other, err := New(s.Store, &Config{Owner: "other"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.TryObtain(context.Background(), "gives-up", nil); err != nil {
		t.Fatalf("another Locker cannot obtain the key given up: %v", err)
	}
}

func TestBatchGrantToCallerWhoGaveUpIsGivenBack(t *testing.T) {
	s := newGatedStore()
	s.batchGate = make(chan struct{})
	wg, cancel, errc := queueOne(t, s, "late")
	close(s.gate) // the slots end; their successor sends the batch, which waits
	waitUntil(t, "the batch was never sent", func() bool { return len(s.batchSizes()) > 0 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("TryObtain after its context ended during the batch: %v, want context.Canceled", err)
	}
	close(s.batchGate)
	wg.Wait()
	<-s.batched

	// The batch granted "late" to nobody's use: the Locker gives it back.
	other, err := New(s.Store, &Config{Owner: "other"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var l *Lock
	waitUntil(t, "the grant nobody took was not given back", func() bool {
		l, err = other.TryObtain(context.Background(), "late", nil)
		if err != nil && !errors.Is(err, ErrNotObtained) {
			t.Fatalf("TryObtain(late): %v", err)
		}
		return err == nil
	})
	if l.Fence() != 2 {
		t.Fatalf("fence %d, want 2: the abandoned grant was the first", l.Fence())
	}
}

func TestBatchSizeBoundedByStore(t *testing.T) {
	s := newGatedStore()
	s.max = 4
	const n = 10
	obtainBehindSlots(t, s, "bounded", n)
	total := 0
	for _, size := range s.batchSizes() {
		if size > s.max {
			t.Errorf("a batch of %d items, above the store's MaxBatch %d", size, s.max)
		}
		total += size
	}
	if total != n {
		t.Errorf("batches %v carried %d items, want %d", s.batchSizes(), total, n)
	}
}

func TestNoBatchingWhenStoreSaysOne(t *testing.T) {
	s := newGatedStore()
	s.max = 1
	lk, err := New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	if lk.door.acquires != nil || lk.door.releases != nil {
		t.Fatal("the Locker batches for a store whose MaxBatch is 1")
	}
}
