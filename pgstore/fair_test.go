package pgstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tasklock/tasklock"
)

// fairResult is the outcome of waiter i's fair Obtain.
type fairResult struct {
	i   int
	l   *tasklock.Lock
	err error
}

// fairObtain starts waiter i's fair Obtain of key on lk, to report on out,
// and returns once the waiter is queued.
func fairObtain(t *testing.T, lk *tasklock.Locker, ev *eventLog, key string, opts tasklock.ObtainOptions, i int, out chan<- fairResult) {
	t.Helper()
	opts.Fair = true
	go func() {
		l, err := lk.Obtain(ctxT(t), key, &opts)
		out <- fairResult{i, l, err}
	}()
	waitFor(t, 10*time.Second, "the waiter queued", func() bool { return ev.count(tasklock.EventQueued) > 0 })
}

// testFairOrder: three fair waiters on three Lockers behind a holder are
// served in the order they queued, though their entries (TTL 1s) must be
// renewed several times while they wait.
func testFairOrder(t *testing.T, pool *pgxpool.Pool, mode Mode) {
	s := newStore(t, pool, &Options{Mode: mode})
	holder, err := newLocker(t, s, "holder", nil).Obtain(ctxT(t), "fifo", nil)
	if err != nil {
		t.Fatal(err)
	}
	const n, ttl = 3, time.Second
	served := make(chan fairResult, n)
	for i := range n {
		ev := newEventLog()
		lk := newLocker(t, s, fmt.Sprintf("w%d", i), &tasklock.Config{OnEvent: ev.on})
		fairObtain(t, lk, ev, "fifo", tasklock.ObtainOptions{TTL: ttl}, i, served)
	}
	// Every entry is renewed past three of its TTLs before the release,
	// and stays the same entry (one that expired would have been queued
	// again, at the back, with another token).
	first := queueExpiries(t, s, "fifo")
	waitFor(t, 30*time.Second, "the entries' renewals", func() bool {
		now := queueExpiries(t, s, "fifo")
		for tok, at := range first {
			if _, ok := now[tok]; !ok {
				t.Fatalf("an entry expired while its waiter waited: %v, then %v", first, now)
			}
			if now[tok].Sub(at) < 3*ttl {
				return false
			}
		}
		return true
	})
	if err := holder.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// In order: the first served is the first queued, and so on, each
	// once the one before released.
	for i := range n {
		r := <-served
		if r.err != nil {
			t.Fatalf("waiter %d: %v", r.i, r.err)
		}
		if r.i != i {
			t.Fatalf("waiter %d served before waiter %d", r.i, i)
		}
		if err := r.l.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
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
	got := make(chan fairResult, 1)
	fairObtain(t, newLocker(t, s, "w2", &tasklock.Config{OnEvent: ev2.on}), ev2, "k", tasklock.ObtainOptions{}, 2, got)
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
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		_ = r.l.Release(ctxT(t))
	case <-time.After(10 * time.Second):
		t.Fatal("w2 was not served")
	}
	if n := queueLen(t, s, "k"); n != 0 {
		t.Errorf("%d entries left", n)
	}
}
