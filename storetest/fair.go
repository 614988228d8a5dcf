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

// fairTests run against stores that keep a queue of waiters: for every
// wait (driver.Queuer) or on request (driver.FairQueuer). They obtain
// with ObtainOptions.Fair.
var fairTests = []struct {
	name string
	fn   func(t *testing.T, s driver.Store)
}{
	{"FairFIFO", testFairFIFO},
	{"FairDeadWaiterSkipped", testFairDeadWaiter},
	{"FairCancelledWaiterLeaves", testFairCancelled},
}

func skipUnlessFair(t *testing.T, s driver.Store) {
	t.Helper()
	_, q := s.(driver.Queuer)
	_, fq := s.(driver.FairQueuer)
	if !q && !fq {
		t.Skipf("store %T implements neither driver.Queuer nor driver.FairQueuer: it keeps no queue of waiters", s)
	}
}

// fairOpts are the fair waiters' options. A driver.FairQueuer's entries
// are leases of the TTL: long enough that only a store that removes an
// entry itself lets the next waiter through within the tests' bounds. A
// driver.Queuer's live with the waiter's session, whose length bounds the
// TTL: they take the default.
func fairOpts(s driver.Store) *tasklock.ObtainOptions {
	if _, ok := s.(driver.Queuer); ok {
		return &tasklock.ObtainOptions{Fair: true}
	}
	return &tasklock.ObtainOptions{TTL: 30 * time.Second, Fair: true}
}

// testFairFIFO queues three fair waiters, each on its own Locker and each
// only once the one before is queued, behind a holder: they must be
// served in that order.
func testFairFIFO(t *testing.T, s driver.Store) {
	skipUnlessFair(t, s)
	holder := mustObtain(t, newLocker(t, s, "holder", nil), "fair-fifo", nil)
	const n = 3
	var (
		mu    sync.Mutex
		order []int
	)
	errc := make(chan error, n)
	for i := range n {
		ev := newEvents()
		lk := newLocker(t, s, "w"+string(rune('1'+i)), ev)
		go func() {
			l, err := lk.Obtain(ctxT(t, 20*time.Second), "fair-fifo", fairOpts(s))
			if err != nil {
				errc <- err
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			errc <- l.Release(ctxT(t, 5*time.Second))
		}()
		ev.waitFor(t, tasklock.EventQueued, 1, 10*time.Second)
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
			t.Fatalf("fair waiters obtained in order %v, want [0 1 2]", order)
		}
	}
}

// testFairDeadWaiter puts an entry at the head of the fair queue that
// nobody waits on (its waiter died) with a 1s TTL, and a live fair waiter
// behind it: once the holder releases, the live waiter must get the key
// when the dead entry's TTL ends, not be blocked by it.
func testFairDeadWaiter(t *testing.T, s driver.Store) {
	skipUnlessFair(t, s)
	fq, ok := s.(driver.FairQueuer)
	if !ok {
		t.Skipf("store %T queues every wait (driver.Queuer): its entries live with the waiter's session, not as leases of their own", s)
	}
	const ttl = time.Second
	holder := mustObtain(t, newLocker(t, s, "holder", nil), "fair-dead", nil)
	queued := time.Now()
	if _, err := fq.EnqueueFair(ctxT(t, 5*time.Second), driver.AcquireParams{Key: "fair-dead", Token: "dead-waiter", Owner: "dead", TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	// The ticket is dropped: never waited on, never left.
	ev := newEvents()
	lk := newLocker(t, s, "live", ev)
	w := waiting(func() (*tasklock.Lock, error) { return lk.Obtain(ctxT(t, 20*time.Second), "fair-dead", fairOpts(s)) })
	ev.waitFor(t, tasklock.EventQueued, 1, 10*time.Second)
	if err := holder.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	res := await(t, "the live waiter behind a dead one", w, 20*time.Second)
	l := got(t, "the live waiter behind a dead one")(res.l, res.err)
	el := res.at.Sub(queued)
	t.Logf("the live waiter obtained %v after the dead entry was queued (TTL %v)", el.Round(time.Millisecond), ttl)
	if el > ttl+5*time.Second {
		t.Errorf("the live waiter obtained %v after the dead entry (TTL %v) was queued", el, ttl)
	}
	release(t, l)
}

// testFairCancelled: of two fair waiters, the first gives up; the second
// must get the key as soon as the holder releases it (well within the
// first's entry TTL), and nothing may be left queued after.
func testFairCancelled(t *testing.T, s driver.Store) {
	skipUnlessFair(t, s)
	holder := mustObtain(t, newLocker(t, s, "holder", nil), "fair-leave", nil)
	ev1, ev2 := newEvents(), newEvents()
	w1, w2 := newLocker(t, s, "w1", ev1), newLocker(t, s, "w2", ev2)
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	first := waiting(func() (*tasklock.Lock, error) { return w1.Obtain(ctx1, "fair-leave", fairOpts(s)) })
	ev1.waitFor(t, tasklock.EventQueued, 1, 10*time.Second)
	second := waiting(func() (*tasklock.Lock, error) { return w2.Obtain(ctxT(t, 20*time.Second), "fair-leave", fairOpts(s)) })
	ev2.waitFor(t, tasklock.EventQueued, 1, 10*time.Second)

	cancel1()
	res := await(t, "the cancelled fair Obtain", first, 10*time.Second)
	refused(t, "the cancelled fair Obtain", res.l, res.err)
	if !errors.Is(res.err, context.Canceled) {
		t.Fatalf("cancelled Obtain = %v, want context.Canceled in the chain", res.err)
	}
	released := time.Now()
	if err := holder.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	res = await(t, "the second fair waiter (the cancelled entry blocks the queue?)", second, 10*time.Second)
	l := got(t, "the second fair waiter")(res.l, res.err)
	t.Logf("the second waiter obtained %v after the release", res.at.Sub(released).Round(time.Millisecond))
	release(t, l)
	// Nothing is left queued: a new fair waiter obtains the free key at
	// once, not after the cancelled entry's TTL.
	after := newLocker(t, s, "after", nil)
	release(t, got(t, "a fair Obtain once the queue emptied")(after.Obtain(ctxT(t, 5*time.Second), "fair-leave", fairOpts(s))))
}
