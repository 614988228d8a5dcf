package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
)

// queueTests run against stores that implement driver.Queuer.
var queueTests = []struct {
	name string
	fn   func(t *testing.T, s driver.Store)
}{
	{"QueueServesInArrivalOrder", testQueueOrder},
	{"QueueCancelledWaitLeaves", testQueueCancel},
}

func skipUnlessQueuer(t *testing.T, s driver.Store) {
	if _, ok := s.(driver.Queuer); !ok {
		t.Skipf("store %T does not implement driver.Queuer", s)
	}
}

// testQueueOrder queues three waiters, each on its own Locker, behind a
// holder: they must be served in the order they queued, each after one
// failed attempt only (no polling while queued).
func testQueueOrder(t *testing.T, s driver.Store) {
	skipUnlessQueuer(t, s)
	holder := mustObtain(t, newLocker(t, s, "holder", nil), "fifo", nil)
	const n = 3
	var (
		mu    sync.Mutex
		order []int
	)
	evs := make([]*events, n)
	errc := make(chan error, n)
	for i := range n {
		evs[i] = newEvents()
		lk := newLocker(t, s, "w"+string(rune('1'+i)), evs[i])
		go func() {
			l, err := lk.Obtain(ctxT(t, 20*time.Second), "fifo", nil)
			if err != nil {
				errc <- err
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			errc <- l.Release(ctxT(t, 5*time.Second))
		}()
		// The next waiter starts only once this one is in the queue.
		evs[i].waitFor(t, tasklock.EventQueued, 1, 10*time.Second)
	}
	if err := holder.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	for i, j := range order {
		if i != j {
			t.Fatalf("waiters obtained in order %v, want [0 1 2]", order)
		}
	}
	for i, ev := range evs {
		if c := ev.count(tasklock.EventNotObtained); c != 1 {
			t.Errorf("waiter %d made %d failed attempts, want 1 (queued waiters do not poll)", i, c)
		}
	}
}

// testQueueCancel gives up the wait of the first of two queued waiters: the
// second must get the key as soon as the holder releases it, and nothing
// may be left in the queue after.
func testQueueCancel(t *testing.T, s driver.Store) {
	skipUnlessQueuer(t, s)
	holder := mustObtain(t, newLocker(t, s, "holder", nil), "leave", nil)
	ev1, ev2 := newEvents(), newEvents()
	w1, w2 := newLocker(t, s, "w1", ev1), newLocker(t, s, "w2", ev2)

	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	err1 := make(chan error, 1)
	go func() {
		_, err := w1.Obtain(ctx1, "leave", nil)
		err1 <- err
	}()
	ev1.waitFor(t, tasklock.EventQueued, 1, 10*time.Second)
	// One result, sent once: the time w2 obtained and its release's
	// error, or its Obtain's error. (With a channel for each, a waiter
	// that obtained and released before the select below looked left both
	// ready, and the select could take the release's nil as a failure.)
	type result struct {
		at  time.Time
		err error
	}
	got2 := make(chan result, 1)
	go func() {
		l, err := w2.Obtain(ctxT(t, 20*time.Second), "leave", nil)
		if err != nil {
			got2 <- result{err: err}
			return
		}
		at := time.Now()
		got2 <- result{at, l.Release(ctxT(t, 5*time.Second))}
	}()
	ev2.waitFor(t, tasklock.EventQueued, 1, 10*time.Second)

	cancel1()
	err := <-err1
	var ne *tasklock.NotObtainedError
	if !errors.As(err, &ne) || !errors.Is(err, context.Canceled) || ne.Owner != "holder" {
		t.Fatalf("cancelled Obtain = %v, want a *NotObtainedError naming holder, matching context.Canceled", err)
	}
	released := time.Now()
	if err := holder.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got2:
		if r.err != nil {
			t.Fatal(r.err)
		}
		// The left entry must not stand in the way: the store wakes w2
		// itself (a queued waiter does not poll).
		t.Logf("second waiter obtained %v after the release", r.at.Sub(released))
	case <-time.After(10 * time.Second):
		t.Fatal("second waiter never obtained: the cancelled entry blocks the queue")
	}
	// Nothing is left queued: a new Locker obtains at once.
	l, err := newLocker(t, s, "after", nil).TryObtain(ctxT(t, 5*time.Second), "leave", nil)
	if err != nil {
		t.Fatalf("TryObtain after the queue emptied = %v", err)
	}
	_ = l.Release(ctxT(t, 5*time.Second))
}
