package redisstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
)

// fairLocker returns a Locker on a store of d with prefix.
func fairLocker(t *testing.T, d deployment, prefix, owner string, onEvent func(tasklock.Event)) *tasklock.Locker {
	t.Helper()
	s := newStore(t, d.newClient(t), &Options{Prefix: prefix})
	lk, err := tasklock.New(s, &tasklock.Config{Owner: owner, OnEvent: onEvent})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lk.Close() })
	return lk
}

// testFairOrder queues three fair waiters, each on its own Locker, behind
// a holder: they are served in the order they queued.
func testFairOrder(t *testing.T, d deployment) {
	prefix := freshPrefix()
	fair := &tasklock.ObtainOptions{Fair: true, TTL: time.Second}
	holder, err := fairLocker(t, d, prefix, "holder", nil).Obtain(ctxT(t), "fifo", fair)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	var (
		mu    sync.Mutex
		order []int
	)
	errc := make(chan error, n)
	for i := range n {
		queued := make(chan struct{}, 1)
		lk := fairLocker(t, d, prefix, "w", func(e tasklock.Event) {
			if e.Type == tasklock.EventQueued {
				queued <- struct{}{}
			}
		})
		go func() {
			l, err := lk.Obtain(ctxT(t), "fifo", fair)
			if err != nil {
				errc <- err
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			errc <- l.Release(context.Background())
		}()
		<-queued
	}
	start := time.Now()
	if err := holder.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%s: three handoffs in %v", d.name, time.Since(start))
	for i, j := range order {
		if i != j {
			t.Fatalf("served in order %v, want [0 1 2]", order)
		}
	}
}

// testFairDeadWaiter puts an entry in the queue that nobody waits on (its
// process died): it leaves the queue within its TTL, and the waiter
// behind it gets the key.
func testFairDeadWaiter(t *testing.T, d deployment) {
	prefix := freshPrefix()
	s := newStore(t, d.newClient(t), &Options{Prefix: prefix})
	holderTok := token()
	mustAcquire(t, s, "q", holderTok, "holder", time.Minute)
	dead := 300 * time.Millisecond
	if _, err := s.EnqueueFair(ctxT(t), driver.AcquireParams{Key: "q", Token: token(), Owner: "dead", TTL: dead}); err != nil {
		t.Fatal(err)
	}
	queued := make(chan struct{}, 1)
	lk := fairLocker(t, d, prefix, "live", func(e tasklock.Event) {
		if e.Type == tasklock.EventQueued {
			queued <- struct{}{}
		}
	})
	got := make(chan error, 1)
	go func() {
		l, err := lk.Obtain(ctxT(t), "q", &tasklock.ObtainOptions{Fair: true, TTL: 5 * time.Second})
		if err == nil {
			err = l.Release(context.Background())
		}
		got <- err
	}()
	<-queued
	released := time.Now()
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "q", Token: holderTok}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: the waiter behind a dead one obtained %v after the release (dead entry's TTL %v)", d.name, time.Since(released), dead)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter behind a dead entry did not obtain the key")
	}
}

// testFairStore checks the queue's store calls: an empty queue grants at
// once; Leave releases a grant; an entry not renewed is gone after its
// TTL; a Wait whose context ends leaves the entry queued.
func testFairStore(t *testing.T, d deployment) {
	c := d.newClient(t)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	first := driver.AcquireParams{Key: "f", Token: token(), Owner: "first", TTL: time.Minute}
	t1, err := s.EnqueueFair(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	g1, err := t1.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second := driver.AcquireParams{Key: "f", Token: token(), Owner: "second", TTL: 200 * time.Millisecond}
	t2, err := s.EnqueueFair(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	if h := t2.Holder(); h == nil || h.Owner != "first" {
		t.Fatalf("Holder() after EnqueueFair = %+v, want first", h)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = t2.Wait(wctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait behind a holder: %v, want DeadlineExceeded", err)
	}
	if h := t2.Holder(); h == nil || h.Owner != "first" || h.TTL <= 0 {
		t.Fatalf("Holder() = %+v, want first with its TTL", h)
	}
	// Nobody renews the second entry: it is gone within its TTL.
	waitFor(t, 5*time.Second, func() bool {
		return c.Exists(ctx, s.lockKey("f")+fairSuffix).Val() == 0
	})
	if _, err := t2.Wait(ctx); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Wait of an expired entry: %v, want ErrNotHeld", err)
	}
	// Leave after the grant releases the key (the Locker never does it,
	// but a store may be asked to).
	if err := t1.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Exists(ctx, s.lockKey("f")).Val() != 0 {
		t.Fatal("Leave after a grant left the lease")
	}
	g3 := mustAcquire(t, s, "f", token(), "plain", time.Minute)
	if g3 <= g1.Fence {
		t.Fatalf("fence %d after the fair grant's %d", g3, g1.Fence)
	}
}
