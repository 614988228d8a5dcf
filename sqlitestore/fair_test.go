package sqlitestore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
)

// queued returns the live entries of key's fair queue, in order, as
// tokens.
func queued(t *testing.T, s *Store, key string) []string {
	t.Helper()
	rows, err := s.db.QueryContext(ctxT(t), `SELECT token FROM `+s.kinds.queue+` WHERE "key" = ?1 AND expires_at > `+nowUS+` ORDER BY seq`, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var tok string
		if err := rows.Scan(&tok); err != nil {
			t.Fatal(err)
		}
		out = append(out, tok)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// eventLocker is a Locker on s whose events of type typ are counted on ch.
func eventLocker(t *testing.T, s driver.Store, owner string, typ tasklock.EventType, ch chan<- struct{}) *tasklock.Locker {
	t.Helper()
	lk, err := tasklock.New(s, &tasklock.Config{Owner: owner, OnEvent: func(e tasklock.Event) {
		if e.Type == typ {
			ch <- struct{}{}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lk.Close() })
	return lk
}

func waitSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10s", what)
	}
}

// TestFairOrder queues waiters from Lockers on two Stores over one file,
// alternately: they are served in the order they queued.
func TestFairOrder(t *testing.T) {
	path := dbPath(t)
	stores := []*Store{newStoreT(t, openT(t, path, nil)), newStoreT(t, openT(t, path, nil))}
	ctx := ctxT(t)
	holder := newLockerT(t, stores[0], "holder")
	l, err := holder.Obtain(ctx, "fifo", &tasklock.ObtainOptions{Fair: true}) // granted at once: queue empty, key free
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	var (
		mu    sync.Mutex
		order []int
	)
	errc := make(chan error, n)
	for i := range n {
		q := make(chan struct{}, 1)
		lk := eventLocker(t, stores[i%2], "w", tasklock.EventQueued, q)
		go func() {
			l, err := lk.Obtain(ctx, "fifo", &tasklock.ObtainOptions{Fair: true, TTL: time.Second})
			if err != nil {
				errc <- err
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			errc <- l.Release(ctx)
		}()
		waitSignal(t, q, "EventQueued") // the next waiter queues behind this one
	}
	if got := len(queued(t, stores[1], "fifo")); got != n {
		t.Fatalf("%d entries queued, want %d", got, n)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	for i, j := range order {
		if i != j {
			t.Fatalf("waiters obtained in order %v, want [0 1 2 3]", order)
		}
	}
	if q := queued(t, stores[0], "fifo"); len(q) != 0 {
		t.Fatalf("entries left in the queue: %v", q)
	}
}

// TestFairTicket checks a Ticket at the store: Wait renews its entry while
// it waits (a TTL shorter than the wait), grants with the mutex's next
// fence when the entry is the head and the key free, and Leave deletes
// the entry.
func TestFairTicket(t *testing.T) {
	s := newStoreT(t, openT(t, dbPath(t), nil))
	ctx := ctxT(t)
	f1 := mustAcquire(t, s, "k", "holder", time.Minute)
	const ttl = 300 * time.Millisecond
	first, err := s.EnqueueFair(ctx, driver.AcquireParams{Key: "k", Token: "first", Owner: "first", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.EnqueueFair(ctx, driver.AcquireParams{Key: "k", Token: "second", Owner: "second", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	// Waiting for 4 TTLs: the entry outlives them, renewed by Wait.
	wctx, cancel := context.WithTimeout(ctx, 4*ttl)
	_, err = first.Wait(wctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait while held = %v, want DeadlineExceeded", err)
	}
	if h := first.Holder(); h == nil || h.Owner != "owner-holder" || h.TTL <= 0 {
		t.Fatalf("Holder = %+v, want owner-holder with its TTL", h)
	}
	if q := queued(t, s, "k"); len(q) != 1 || q[0] != "first" {
		t.Fatalf("queue after the wait = %v, want [first] (second was not renewed)", q)
	}
	if _, err := second.Wait(ctx); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Wait of an expired entry = %v, want ErrNotHeld", err)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: "holder"}); err != nil {
		t.Fatal(err)
	}
	g, err := first.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if g.Fence <= f1 {
		t.Fatalf("fair grant's fence = %d, want more than %d", g.Fence, f1)
	}
	if r := readRow(t, s.db, DefaultTable, "k"); r.token != "first" || r.expiresInUS <= 0 || r.durationUS != ttl.Microseconds() {
		t.Fatalf("after the grant the row is %+v, want first's lease of %v", r, ttl)
	}
	if q := queued(t, s, "k"); len(q) != 0 {
		t.Fatalf("queue after the grant = %v, want empty", q)
	}
	// A waiter that leaves is gone at once.
	third, err := s.EnqueueFair(ctx, driver.AcquireParams{Key: "k", Token: "third", Owner: "third", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := third.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if q := queued(t, s, "k"); len(q) != 0 {
		t.Fatalf("queue after Leave = %v, want empty", q)
	}
	if _, err := third.Wait(ctx); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Wait after Leave = %v, want ErrNotHeld", err)
	}
}
