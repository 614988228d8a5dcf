package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tasklock/tasklock"
)

// fairObtain starts a fair Obtain of key on lk and returns its result
// channel once the waiter is queued.
func fairObtain(t *testing.T, lk *tasklock.Locker, ev *eventLog, key string, opts tasklock.ObtainOptions) <-chan *tasklock.Lock {
	t.Helper()
	opts.Fair = true
	got := make(chan *tasklock.Lock, 1)
	go func() {
		l, err := lk.Obtain(ctxT(t), key, &opts)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, 10*time.Second, "the waiter queued", func() bool { return ev.count(tasklock.EventQueued) > 0 })
	return got
}

// testFairOrder: three fair waiters on three Lockers behind a holder are
// served in the order they queued, though their entries (TTL 300ms) must
// be renewed several times while they wait.
func testFairOrder(t *testing.T, pool *pgxpool.Pool, mode Mode) {
	s := newStore(t, pool, &Options{Mode: mode})
	holder, err := newLocker(t, s, "holder", nil).Obtain(ctxT(t), "fifo", nil)
	if err != nil {
		t.Fatal(err)
	}
	var order []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 3 {
		ev := newEventLog()
		lk := newLocker(t, s, fmt.Sprintf("w%d", i), &tasklock.Config{OnEvent: ev.on})
		got := fairObtain(t, lk, ev, "fifo", tasklock.ObtainOptions{TTL: 300 * time.Millisecond})
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := <-got
			if l == nil {
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := l.Release(ctxT(t)); err != nil {
				t.Error(err)
			}
		}()
	}
	// Every entry is renewed past three of its TTLs before the release.
	first := queueExpiries(t, s, "fifo")
	waitFor(t, 10*time.Second, "the entries' renewals", func() bool {
		now := queueExpiries(t, s, "fifo")
		for tok, at := range first {
			if now[tok].Sub(at) < 900*time.Millisecond {
				return false
			}
		}
		return len(now) == 3
	})
	if err := holder.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if fmt.Sprint(order) != "[0 1 2]" {
		t.Fatalf("served in order %v, want [0 1 2]", order)
	}
	if n := queueLen(t, s, "fifo"); n != 0 {
		t.Errorf("%d entries left in the queue", n)
	}
}

// queueLen counts key's rows in the queue table.
func queueLen(t *testing.T, s *Store, key string) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(ctxT(t), "SELECT count(*) FROM "+tablesOf(s.o).queue+" WHERE key = $1", key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// queueExpiries reads the expiry of each of key's entries, by token.
func queueExpiries(t *testing.T, s *Store, key string) map[string]time.Time {
	t.Helper()
	rows, err := s.pool.Query(ctxT(t), "SELECT token, expires_at FROM "+tablesOf(s.o).queue+" WHERE key = $1", key)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	var tok string
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&tok, &at}, func() error { out[tok] = at; return nil })
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// testFairLeave: a fair waiter that gives up leaves nothing queued, and the
// one behind it is served at the holder's release.
func testFairLeave(t *testing.T, pool *pgxpool.Pool, mode Mode) {
	s := newStore(t, pool, &Options{Mode: mode})
	holder, err := newLocker(t, s, "holder", nil).Obtain(ctxT(t), "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	ev1 := newEventLog()
	w1 := newLocker(t, s, "w1", &tasklock.Config{OnEvent: ev1.on})
	ctx1, cancel1 := context.WithCancel(context.Background())
	err1 := make(chan error, 1)
	go func() {
		_, err := w1.Obtain(ctx1, "k", &tasklock.ObtainOptions{Fair: true})
		err1 <- err
	}()
	waitFor(t, 10*time.Second, "w1 queued", func() bool { return ev1.count(tasklock.EventQueued) > 0 })
	ev2 := newEventLog()
	got := fairObtain(t, newLocker(t, s, "w2", &tasklock.Config{OnEvent: ev2.on}), ev2, "k", tasklock.ObtainOptions{})
	cancel1()
	var ne *tasklock.NotObtainedError
	if err := <-err1; !errors.As(err, &ne) || ne.Owner != "holder" || !errors.Is(err, context.Canceled) {
		t.Fatalf("w1's cancelled Obtain: %v, want a NotObtainedError naming holder", err)
	}
	if n := queueLen(t, s, "k"); n != 1 {
		t.Fatalf("%d entries queued after w1 left, want w2's", n)
	}
	if err := holder.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
		_ = l.Release(ctxT(t))
	case <-time.After(10 * time.Second):
		t.Fatal("w2 was not served")
	}
	if n := queueLen(t, s, "k"); n != 0 {
		t.Errorf("%d entries left", n)
	}
}
