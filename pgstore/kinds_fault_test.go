package pgstore

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
)

// Fault tests of read-write locks and semaphores. The network fault is in
// systest/pgfault, as the mutex's is.

// intruder keeps trying to take a semaphore's permit and a read-write
// lock's either side with TryAcquire, TryLock and TryRLock until stopped,
// and records every hold it got.
type intruder struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	got  []string
}

func startIntruder(t *testing.T, lk *tasklock.Locker, sem *tasklock.Semaphore, rw *tasklock.RWMutex) *intruder {
	in := &intruder{stop: make(chan struct{}), done: make(chan struct{})}
	tries := []struct {
		name string
		try  func() (*tasklock.Lock, error)
	}{
		{"permit", func() (*tasklock.Lock, error) { return sem.TryAcquire(ctxT(t), nil) }},
		{"write", func() (*tasklock.Lock, error) { return rw.TryLock(ctxT(t), nil) }},
		{"read", func() (*tasklock.Lock, error) { return rw.TryRLock(ctxT(t), nil) }},
	}
	go func() {
		defer close(in.done)
		for {
			for _, tr := range tries {
				select {
				case <-in.stop:
					return
				default:
				}
				if l, err := tr.try(); err == nil {
					in.mu.Lock()
					in.got = append(in.got, tr.name)
					in.mu.Unlock()
					_ = l.Release(ctxT(t))
				}
			}
			time.Sleep(10 * time.Millisecond) // between rounds of attempts
		}
	}()
	return in
}

// end stops the intruder and returns what it got.
func (in *intruder) end() []string {
	close(in.stop)
	<-in.done
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.got
}

// testKindsServerRestarted: the database restarts while a's Locker holds
// both permits of a semaphore and a read-write lock's writer side. The
// holds are rows, durable like every commit, so they outlive a restart
// shorter than their TTL (in connection mode too: only mutexes are bound
// to connections): a renews them once the server is back, and b, trying
// all along, never gets a third permit, nor either side beside the
// writer. Then an outage longer than the TTL: a's holds end by their
// validity, and b obtains them after the restart with higher fences.
func testKindsServerRestarted(t *testing.T, mode Mode) {
	r := newRestartEnv(t, mode)
	srv, ev, a, b := r.srv, r.ev, r.a, r.b
	opts := &tasklock.ObtainOptions{TTL: 10 * time.Second} // long enough to outlast the restart on a busy machine
	var held []*tasklock.Lock
	for range 2 {
		l, err := a.Semaphore("pool", 2).Acquire(ctxT(t), opts)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	w, err := a.RWMutex("doc").Lock(ctxT(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	held = append(held, w)
	in := startIntruder(t, b, b.Semaphore("pool", 2), b.RWMutex("doc"))

	start := time.Now()
	srv.Restart(t)
	t.Logf("%s: restart took %v", mode, time.Since(start).Round(time.Millisecond))
	renewed := ev.count(tasklock.EventRenewed)
	waitFor(t, opts.TTL, "a renewal after the restart", func() bool { return ev.count(tasklock.EventRenewed) >= renewed+len(held) })
	if got := in.end(); len(got) > 0 {
		t.Fatalf("b got %v while a held both permits and the writer's side", got)
	}
	for _, l := range held {
		select {
		case <-l.Done():
			t.Fatalf("a %v hold was lost over the restart: %v", l.Mode(), l.Err())
		default:
		}
		if err := l.Release(ctxT(t)); err != nil {
			t.Fatalf("Release after the restart: %v", err)
		}
	}
	p, err := b.Semaphore("pool", 2).TryAcquire(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Fence() <= max(held[0].Fence(), held[1].Fence()) {
		t.Errorf("permit's fence %d after the restart, %d and %d before", p.Fence(), held[0].Fence(), held[1].Fence())
	}
	w2, err := b.RWMutex("doc").TryLock(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if w2.Fence() <= w.Fence() {
		t.Errorf("writer's fence %d after the restart, %d before", w2.Fence(), w.Fence())
	}
	_, _ = p.Release(ctxT(t)), w2.Release(ctxT(t))

	// An outage longer than the TTL: the holds stop at their validity.
	short := &tasklock.ObtainOptions{TTL: 500 * time.Millisecond}
	sp, err := a.Semaphore("short", 1).Acquire(ctxT(t), short)
	if err != nil {
		t.Fatal(err)
	}
	sw, err := a.RWMutex("shortdoc").Lock(ctxT(t), short)
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill(t)
	killed := time.Now()
	for _, l := range []*tasklock.Lock{sp, sw} {
		select {
		case <-l.Done():
		case <-time.After(2 * time.Second):
			t.Fatalf("a %v hold's Done did not close within its TTL while the server was down", l.Mode())
		}
		if !errors.Is(l.Err(), tasklock.ErrLockLost) {
			t.Errorf("cause %v, want ErrLockLost", l.Err())
		}
	}
	t.Logf("%s: with the server down, the holds (TTL %v) stopped %v after the kill", mode, short.TTL, time.Since(killed).Round(time.Millisecond))
	srv.Restart(t)
	var p2, w3 *tasklock.Lock
	waitFor(t, 10*time.Second, "b obtains after the second restart", func() bool {
		if p2 == nil {
			p2, _ = b.Semaphore("short", 1).TryAcquire(ctxT(t), nil)
		}
		if w3 == nil {
			w3, _ = b.RWMutex("shortdoc").TryLock(ctxT(t), nil)
		}
		return p2 != nil && w3 != nil
	})
	if p2.Fence() <= sp.Fence() || w3.Fence() <= sw.Fence() {
		t.Errorf("fences %d, %d after the restart; %d, %d before", p2.Fence(), w3.Fence(), sp.Fence(), sw.Fence())
	}
	_, _ = p2.Release(ctxT(t)), w3.Release(ctxT(t))
}
