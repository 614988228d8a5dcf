package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/internal/testserver"
)

// queuedLocker is a Locker on a Store of its own, on a client of its own
// whose requests are counted, reporting EventQueued on a channel.
type queuedLocker struct {
	lk     *tasklock.Locker
	cnt    *counter
	queued chan struct{}
}

func newQueuedLocker(t *testing.T, endpoints []string, prefix, owner string, opts *Options) *queuedLocker {
	t.Helper()
	q := &queuedLocker{cnt: &counter{}, queued: make(chan struct{}, 16)}
	o := Options{Prefix: prefix}
	if opts != nil {
		o = *opts
		o.Prefix = prefix
	}
	s := newStore(t, newClient(t, endpoints, q.cnt), &o)
	lk, err := tasklock.New(s, &tasklock.Config{Owner: owner, OnEvent: func(e tasklock.Event) {
		if e.Type == tasklock.EventQueued {
			q.queued <- struct{}{}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lk.Close() })
	q.lk = lk
	return q
}

func (q *queuedLocker) waitQueued(t *testing.T) {
	t.Helper()
	select {
	case <-q.queued:
	case <-time.After(10 * time.Second):
		t.Fatal("waiter did not queue within 10s")
	}
}

// reads is how many Txn and Range requests the client sent since the last
// take: what a waiter costs the cluster when it wakes.
func (q *queuedLocker) reads() int {
	n := q.cnt.take()
	return n["Txn"] + n["Range"]
}

// TestQueueWakesOnlySuccessor queues five waiters, each on its own client,
// behind a holder, and hands the lock down the queue: every release wakes
// the next waiter only — the others send no request — and fences rise in
// queue order.
func TestQueueWakesOnlySuccessor(t *testing.T) {
	srv := testserver.StartEtcd(t)
	prefix := freshPrefix()
	holder := newQueuedLocker(t, srv.Endpoints(), prefix, "holder", nil)
	first, err := holder.lk.Obtain(ctxT(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	ws := make([]*queuedLocker, n)
	got := make([]chan *tasklock.Lock, n)
	for i := range n {
		ws[i] = newQueuedLocker(t, srv.Endpoints(), prefix, fmt.Sprintf("w%d", i), nil)
		got[i] = make(chan *tasklock.Lock, 1)
		go func() {
			l, err := ws[i].lk.Obtain(ctxT(t), "q", nil)
			if err != nil {
				t.Error(err)
				close(got[i])
				return
			}
			got[i] <- l
		}()
		ws[i].waitQueued(t)
	}
	for _, w := range ws {
		w.reads()
	}
	prev := first
	for i := range n {
		if err := prev.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		var l *tasklock.Lock
		select {
		case l = <-got[i]:
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %d did not obtain within 10s of its predecessor's release", i)
		}
		if l == nil {
			t.FailNow()
		}
		if l.Fence() <= prev.Fence() {
			t.Fatalf("waiter %d got fence %d after %d", i, l.Fence(), prev.Fence())
		}
		for j := i + 1; j < n; j++ {
			if r := ws[j].reads(); r != 0 {
				t.Fatalf("release %d: waiter %d, not next in line, sent %d reads (thundering herd)", i, j, r)
			}
		}
		ws[i].reads()
		prev = l
	}
	if err := prev.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// TestQueueEntryOutlivesSession waits in the queue three times as long as
// the session TTL: the Store keeps its session alive while the entry waits,
// so the waiter keeps its place and its one entry (one EventQueued) and
// obtains the key when the holder lets go.
func TestQueueEntryOutlivesSession(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 6s")
	}
	srv := testserver.StartEtcd(t)
	prefix := freshPrefix()
	opts := &Options{SessionTTL: 2 * time.Second}
	holder := newQueuedLocker(t, srv.Endpoints(), prefix, "holder", opts)
	w := newQueuedLocker(t, srv.Endpoints(), prefix, "w", opts)
	l, err := holder.lk.Obtain(ctxT(t), "long", &tasklock.ObtainOptions{TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l2, err := w.lk.Obtain(ctxT(t), "long", &tasklock.ObtainOptions{TTL: 2 * time.Second})
		if err == nil {
			err = l2.Release(context.Background())
		}
		got <- err
	}()
	w.waitQueued(t)
	timer := time.NewTimer(6 * time.Second) // the wait being tested, not synchronisation
	select {
	case err := <-got:
		t.Fatalf("waiter returned while the holder held the key: %v", err)
	case <-l.Done():
		t.Fatalf("holder lost its lock: %v", l.Err())
	case <-timer.C:
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if len(w.queued) != 0 {
		t.Fatalf("the waiter queued %d more times: its entry was lost", len(w.queued))
	}
}

// TestQueueLeaveDeletesEntry gives up a queued wait and checks at etcd that
// its entry is gone, and that the holder's entry is untouched.
func TestQueueLeaveDeletesEntry(t *testing.T) {
	srv := testserver.StartEtcd(t)
	c := newClient(t, srv.Endpoints(), nil)
	prefix := freshPrefix()
	holder := newQueuedLocker(t, srv.Endpoints(), prefix, "holder", nil)
	w := newQueuedLocker(t, srv.Endpoints(), prefix, "w", nil)
	l, err := holder.lk.Obtain(ctxT(t), "leave", nil)
	if err != nil {
		t.Fatal(err)
	}
	count := func() int64 {
		resp, err := c.Get(ctxT(t), prefix+"leave/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := w.lk.Obtain(ctx, "leave", nil)
		done <- err
	}()
	w.waitQueued(t)
	if n := count(); n != 2 {
		t.Fatalf("%d entries under the key while one waits, want 2", n)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Obtain = %v, want context.Canceled", err)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d entries under the key after the wait was given up, want 1 (the holder's)", n)
	}
	assertOpenLock(t, l)
	_ = l.Release(ctxT(t))
}

func assertOpenLock(t *testing.T, l *tasklock.Lock) {
	t.Helper()
	select {
	case <-l.Done():
		t.Fatalf("lock lost: %v", l.Err())
	default:
	}
}
