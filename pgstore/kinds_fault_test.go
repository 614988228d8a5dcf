package pgstore

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/storetest/faulttest"
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

// TestKindHolderProcess is the holder of a read-write lock's side or a
// semaphore's permit that the kinds' fault tests run in a helper process
// (see faulttest.KindHolderMain); in a normal run it skips. A permit of a
// semaphore of more than one has no fence order among its holders: its
// sections are the oracle, and it writes to no register.
func TestKindHolderProcess(t *testing.T) {
	faulttest.KindHolderMain(t, func(ttl time.Duration) (driver.Store, faulttest.WriteFunc, error) {
		s, write, err := holderSetup(ttl)
		if os.Getenv(faulttest.EnvHold) == driver.ModePermit.String() && os.Getenv(faulttest.EnvPermits) != "1" {
			write = nil
		}
		return s, write, err
	})
}

// hold is a hold the kinds' fault tests take: a writer's side, or a
// permit of a semaphore of permits.
type hold struct {
	name    string
	mode    driver.Mode
	permits int
}

// obtain obtains the hold on key with lk, failing the test on error.
func (h hold) obtain(t *testing.T, lk *tasklock.Locker, key string, opts *tasklock.ObtainOptions) *tasklock.Lock {
	t.Helper()
	var l *tasklock.Lock
	var err error
	if h.mode == driver.ModePermit {
		l, err = lk.Semaphore(key, h.permits).Acquire(ctxT(t), opts)
	} else {
		l, err = lk.RWMutex(key).Lock(ctxT(t), opts)
	}
	if err != nil {
		t.Fatalf("%s: %v", h.name, err)
	}
	return l
}

// takeOver obtains with lk, on "job", the place of the holder process p
// (with a hold of ttl) that a fault (what) has just stopped, and checks it
// came within TTL + 1s with a higher fence.
func (h hold) takeOver(t *testing.T, lk *tasklock.Locker, p *faulttest.KindHolder, ttl time.Duration, what string) *tasklock.Lock {
	t.Helper()
	start := time.Now()
	l := h.obtain(t, lk, "job", &tasklock.ObtainOptions{TTL: 10 * time.Second})
	took := time.Since(start)
	t.Logf("%s: obtained %v after the fault (the holder's TTL %v), fence %d after %d", what, took, ttl, l.Fence(), p.Fence)
	if took > ttl+time.Second {
		t.Errorf("takeover took %v, want ≤ TTL + 1s", took)
	}
	if l.Fence() <= p.Fence {
		t.Fatalf("fence %d after %d", l.Fence(), p.Fence)
	}
	return l
}

// eachHold runs fn for a writer's side and a permit of a semaphore of
// permits, each in a fresh database.
func eachHold(t *testing.T, mode Mode, permits int, fn func(t *testing.T, env *faultEnv, h hold)) {
	for _, h := range []hold{{"write", driver.ModeWrite, 0}, {"permit", driver.ModePermit, permits}} {
		t.Run(h.name, func(t *testing.T) { fn(t, newFaultEnv(t, newDB(t), mode), h) })
	}
}

// holderTTL is the TTL of the holder process's hold: the fault tests
// take its place within holderTTL + 1s of the fault, and before the fault
// it must hold through renewals on a busy machine. A 1s hold, renewed a
// third of it in and lost unless the renewal is back within the rest,
// was lost before the fault under load (two CPU hogs beside the -race
// test and its helper processes): the holder said "LOST ... not renewed
// within its validity" under a second after its grant.
const holderTTL = 3 * time.Second

// runFor waits until the holder process p has run critical sections for d
// (from the start of its first to the end of its last), through its hold's
// renewals (one every third of its TTL). It fails at once when the holder
// lost its hold meanwhile: a renewal that ended a hold it should have kept.
func runFor(t *testing.T, p *faulttest.KindHolder, d time.Duration) {
	t.Helper()
	waitFor(t, 10*d+10*time.Second, "the holder's critical sections", func() bool {
		secs := p.Sections()
		if lost := p.Lost(); lost != "" {
			t.Fatalf("the holder process lost its hold before the fault, after %d critical sections: %q", len(secs), lost)
		}
		return len(secs) > 0 && time.Duration(secs[len(secs)-1].Leave-secs[0].Enter) >= d
	})
}

// testKindHolderKilled: the holder process of a writer's side, or of one
// of a semaphore's two permits while this process holds the other, is
// SIGKILLed. Another obtains its place within TTL + 1s, with a higher
// fence, and the critical sections of every holder never break the lock's
// promise (one writer; two permits).
func testKindHolderKilled(t *testing.T, mode Mode) {
	eachHold(t, mode, 2, func(t *testing.T, env *faultEnv, h hold) {
		const ttl = holderTTL
		p := faulttest.StartKindHolder(t, "TestKindHolderProcess", "job", h.mode, h.permits, ttl, env.holderEnv()...)
		lk := newLocker(t, env.store, "next", nil)
		var log faulttest.Sections
		if h.mode == driver.ModePermit {
			// The other permit, in sections of 20ms: long enough to
			// overlap the holder's.
			stop := log.Loop("mine", h.obtain(t, lk, "job", nil), func() { time.Sleep(20 * time.Millisecond) })
			defer stop()
		}
		runFor(t, p, ttl)
		p.Kill(t)
		l := h.takeOver(t, lk, p, ttl, fmt.Sprintf("%s %s: SIGKILL", mode, h.name))
		for range 3 {
			if !log.Do("next", l, nil) {
				t.Fatalf("the new hold ended: %v", l.Err())
			}
		}
		most := faulttest.CheckSections(t, h.permits, p.Sections(), log.List())
		t.Logf("%s %s: at most %d critical sections at once", mode, h.name, most)
		if most < max(h.permits, 1) {
			t.Errorf("at most %d sections at once: the permits' holders never overlapped", most)
		}
		if err := l.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	})
}

// testKindHolderPaused: the holder process of a writer's side, or of a
// semaphore's only permit, is SIGSTOPped past its TTL. Another obtains
// once the hold ended at the server, with a higher fence; the resumed
// holder finds its Done closed at its first look, and the fenced register
// accepts none of its writes after the new holder's.
func testKindHolderPaused(t *testing.T, mode Mode) {
	eachHold(t, mode, 1, func(t *testing.T, env *faultEnv, h hold) {
		const ttl = holderTTL
		p := faulttest.StartKindHolder(t, "TestKindHolderProcess", "job", h.mode, h.permits, ttl, env.holderEnv()...)
		lk := newLocker(t, env.store, "next", nil)
		runFor(t, p, ttl)
		p.Stop(t)
		stopped := time.Now()
		l := h.takeOver(t, lk, p, ttl, fmt.Sprintf("%s %s: SIGSTOP", mode, h.name))
		var log faulttest.Sections
		log.Do("next", l, func() {
			if ok, err := writeRegister(ctxT(t), env.pool, l.Fence(), "next"); err != nil || !ok {
				t.Fatalf("the new holder's write: %v %v", ok, err)
			}
		})
		// The pause lasts past the holder's TTL whatever the takeover
		// took: the length of the fault, not a wait for anything.
		time.Sleep(time.Until(stopped.Add(2 * ttl)))
		p.CheckResumed(t, fmt.Sprintf("%s %s: ", mode, h.name))
		counts := checkHistory(t, env.pool, l.Fence())
		acc, ref := p.Writes()
		t.Logf("%s %s: writes accepted: %v; the holder's: %d accepted, %d refused", mode, h.name, counts, acc, ref)
		faulttest.CheckSections(t, h.permits, p.Sections(), log.List())
		select {
		case <-l.Done():
			t.Fatalf("the new holder's lock ended: %v", l.Err())
		default:
		}
	})
}
