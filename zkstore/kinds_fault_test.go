package zkstore

import (
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/storetest/faulttest"
)

// Fault tests of read-write locks and semaphores, with holder processes
// (faulttest's kinds protocol). The oracles: the critical sections of
// every holder, in and out of process, side by side (faulttest's
// CheckSections), and for a read-write lock the fenced register of
// fault_test.go (a reader writes the fence of the last writer).

// TestKindHolderProcess is the kinds holder that the fault tests run in a
// process of its own.
func TestKindHolderProcess(t *testing.T) { faulttest.KindHolderMain(t, holderSetup) }

// startKindHolder runs a kinds holder process on the shared server with a
// session (and TTL) of faultSession.
func startKindHolder(t *testing.T, addr, root, reg, key string, mode tasklock.Mode, permits int) *faulttest.KindHolder {
	t.Helper()
	return faulttest.StartKindHolder(t, "TestKindHolderProcess", key, mode, permits, faultSession,
		"TASKLOCK_ZK_ADDR="+addr, "TASKLOCK_ZK_ROOT="+root, "TASKLOCK_ZK_REGISTER="+reg)
}

// TestKindFaults runs the kinds fault tests side by side.
func TestKindFaults(t *testing.T) {
	t.Run("PermitHolderKilled", func(t *testing.T) { t.Parallel(); testPermitHolderKilled(t) })
	t.Run("WriterPaused", func(t *testing.T) { t.Parallel(); testWriterPaused(t) })
}

// testPermitHolderKilled: of a semaphore of two, the holder process of
// one permit is SIGKILLed while this process holds the other. Its session
// ends at the server within the session timeout, with its entry, and a
// waiter here gets the permit within the session timeout + 1s. Never more
// than two sections at once.
func testPermitHolderKilled(t *testing.T) {
	z, c := shared(t)
	root, reg := newRoot(), newRegister(t, c)
	h := startKindHolder(t, z.Addr(), root, reg, "pool", tasklock.ModePermit, 2)
	a := newLocker(t, newStore(t, c, testSession, &Options{Root: root}), "a")
	b := newLocker(t, newStore(t, connect(t, z.Addr(), testSession), testSession, &Options{Root: root}), "b")
	ctx := ctxT(t)
	var log faulttest.Sections
	mine, err := a.Semaphore("pool", 2).Acquire(ctx, &tasklock.ObtainOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Sections that last (the work under the permit), so that holders'
	// sections overlap where the permits allow it.
	work := func() { time.Sleep(2 * time.Millisecond) }
	stopA := log.Loop("a", mine, work)
	if l, err := b.Semaphore("pool", 2).TryAcquire(ctx, nil); err == nil {
		_ = l.Release(ctx)
		t.Fatal("a third permit of two was granted")
	}
	killed := time.Now()
	h.Kill(t)
	l, err := b.Semaphore("pool", 2).Acquire(ctx, &tasklock.ObtainOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(killed)
	limit := faultSession + time.Second
	t.Logf("session timeout %v: the killed holder's permit came back %v after SIGKILL (limit %v); fence %d after %d", faultSession, took.Round(time.Millisecond), limit, l.Fence(), h.Fence)
	if took > limit {
		t.Errorf("the permit came back %v after the kill, want ≤ %v", took, limit)
	}
	if l.Fence() <= h.Fence {
		t.Errorf("fence %d after the killed holder's %d", l.Fence(), h.Fence)
	}
	stopB := log.Loop("b", l, work)
	waitFor(t, 5*time.Second, "b's sections", func() bool {
		n := 0
		for _, sec := range log.List() {
			if sec.Holder == "b" {
				n++
			}
		}
		return n >= 10
	})
	stopA()
	stopB()
	if !log.Both("a", mine, "b", l) {
		t.Fatalf("a permit ended: a's %v, b's %v", mine.Err(), l.Err())
	}
	if most := faulttest.CheckSections(t, 2, h.Sections(), log.List()); most != 2 {
		t.Errorf("at most %d sections at once, want 2 (the permits are shared)", most)
	}
	for _, x := range []*tasklock.Lock{mine, l} {
		if err := x.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// testWriterPaused: the holder process of a read-write lock's write side
// is SIGSTOPped past its session timeout. A reader here gets in once the
// session (and the writer's entry) ended at the server, with the paused
// writer's fence; a writer here then gets a higher fence. When the holder
// resumes, its Done is closed before it acts again, and the register
// refuses nothing of ours; no section overlaps a writer's.
func testWriterPaused(t *testing.T) {
	z, c := shared(t)
	root, reg := newRoot(), newRegister(t, c)
	h := startKindHolder(t, z.Addr(), root, reg, "doc", tasklock.ModeWrite, 0)
	lk := newLocker(t, newStore(t, c, testSession, &Options{Root: root}), "next")
	ctx := ctxT(t)
	var log faulttest.Sections
	write := func(l *tasklock.Lock) func() {
		return func() {
			if ok, err := writeRegister(c, reg, l.Fence(), "next"); err != nil || !ok {
				t.Errorf("%v's write with fence %d: %v, %v", l.Mode(), l.Fence(), ok, err)
			}
		}
	}
	h.Stop(t)
	stopped := time.Now()
	r, err := lk.RWMutex("doc").RLock(ctx, &tasklock.ObtainOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(stopped)
	t.Logf("a reader got in %v after SIGSTOP of the writer (session timeout %v), fence %d (the writer's %d)", took.Round(time.Millisecond), faultSession, r.Fence(), h.Fence)
	if took > faultSession+time.Second {
		t.Errorf("the reader got in %v after the pause, want ≤ session timeout + 1s", took)
	}
	if r.Fence() != h.Fence {
		t.Errorf("reader's fence %d, want the last writer's %d", r.Fence(), h.Fence)
	}
	log.Do("next", r, write(r))
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w, err := lk.RWMutex("doc").Lock(ctx, &tasklock.ObtainOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if w.Fence() <= h.Fence {
		t.Errorf("new writer's fence %d after the paused writer's %d", w.Fence(), h.Fence)
	}
	stop := log.Loop("next", w, write(w))
	h.CheckResumed(t, "")
	stop()
	faulttest.CheckSections(t, 0, h.Sections(), log.List())
	t.Logf("writes accepted: %v", checkHistory(t, c, reg))
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
