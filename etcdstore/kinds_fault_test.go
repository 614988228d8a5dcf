package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/storetest/faulttest"
)

// Fault tests of read-write locks and semaphores: a holder process of a
// permit or of a writer's side killed or paused past its TTL, and etcd
// restarted under holders and waiters. Two oracles: the critical sections
// of every holder, counted by faulttest.CheckSections (never more holders
// than permits, never two writers, never a reader beside a writer), and
// the fenced register of fault_test.go. The blackhole is in
// systest/etcdfault.

// TestKindHolderProcess is the holder of a permit or a writer's side that
// the kinds fault tests run in a helper process (faulttest.KindHolderMain);
// in a normal run it skips.
func TestKindHolderProcess(t *testing.T) { faulttest.KindHolderMain(t, holderSetup) }

// work is the act of the test's own critical sections: long enough that
// sections of holders that overlap would overlap in the log.
func work() { time.Sleep(4 * time.Millisecond) }

// kindCase is a kind of hold the fault tests take in a holder process and
// then by another Locker: a permit of a semaphore of two, whose other
// permit a third Locker holds throughout (so the permit the others get is
// the holder's), or the writer's side of a read-write lock.
type kindCase struct {
	name  string
	mode  driver.Mode
	limit int
}

var kindCases = []kindCase{
	{"Permit", driver.ModePermit, 2},
	{"Writer", driver.ModeWrite, 0},
}

// obtain obtains the case's hold of key through lk, waiting.
func (kc kindCase) obtain(ctx context.Context, lk *tasklock.Locker, key string, opts *tasklock.ObtainOptions) (*tasklock.Lock, error) {
	if kc.mode == driver.ModePermit {
		return lk.Semaphore(key, kc.limit).Acquire(ctx, opts)
	}
	return lk.RWMutex(key).Lock(ctx, opts)
}

// tryObtain makes one attempt.
func (kc kindCase) tryObtain(ctx context.Context, lk *tasklock.Locker, key string, opts *tasklock.ObtainOptions) (*tasklock.Lock, error) {
	if kc.mode == driver.ModePermit {
		return lk.Semaphore(key, kc.limit).TryAcquire(ctx, opts)
	}
	return lk.RWMutex(key).TryLock(ctx, opts)
}

// TestKindFaults runs the kinds fault tests, in parallel, each on a server
// of its own.
func TestKindFaults(t *testing.T) {
	for _, kc := range kindCases {
		for _, f := range []struct {
			name string
			fn   func(t *testing.T, kc kindCase)
		}{
			{"HolderKilled", testKindHolderKilled},
			{"HolderPaused", testKindHolderPaused},
			{"ServerRestarted", testKindServerRestarted},
		} {
			t.Run(kc.name+"/"+f.name, func(t *testing.T) {
				t.Parallel()
				f.fn(t, kc)
			})
		}
	}
}

// takeoverResult is what kindTakeover leaves for the test to check.
type takeoverResult struct {
	c   *clientv3.Client
	s   *Store // the Store of "next" (and "co"), on the holder's prefix
	reg register
	l   *tasklock.Lock // the new holder's
}

// kindTakeover starts a holder process of kc's hold (of a permit, beside
// a permit another Locker holds and works under throughout), SIGKILLs it
// (stop false) or SIGSTOPs it (stop true), and has "next" obtain the hold:
// within SessionTTL + 1s of the holder process, with a fence above the
// holder's; then makes the new holder's write and starts its critical
// sections. For a pause it resumes the holder once it is past twice the
// TTL, which must find its Done closed, and waits for it to exit. It
// checks both oracles. The holds of "co" and "next" are of steadyTTL.
func kindTakeover(t *testing.T, kc kindCase, stop bool) takeoverResult {
	t.Helper()
	srv := testserver.StartEtcd(t)
	c := newClient(t, srv.Endpoints(), nil)
	reg := newRegister(t, c)
	s := newStore(t, c, &Options{SessionTTL: steadyTTL})
	opts := &tasklock.ObtainOptions{TTL: steadyTTL}
	var secs faulttest.Sections
	if kc.mode == driver.ModePermit {
		co, err := kc.obtain(ctxT(t), newLocker(t, s, "co"), "job", opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(secs.Loop("co", co, work))
	}
	h := faulttest.StartKindHolder(t, "TestKindHolderProcess", "job", kc.mode, kc.limit, faultTTL, holderEnv(srv, s.prefix, reg)...)
	lk := newLocker(t, s, "next")
	if l, err := kc.tryObtain(ctxT(t), lk, "job", opts); !errors.Is(err, tasklock.ErrNotObtained) {
		t.Fatalf("a %v hold while the holder process holds: %v, %v", kc.mode, l, err)
	}
	sig, fenceErr := signal(t, h, stop)
	faulted := time.Now()
	l, err := kc.obtain(ctxT(t), lk, "job", opts)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(faulted)
	t.Logf("obtained a %v hold %v after %s of the holder (its SessionTTL %v), fence %d after %d", kc.mode, took.Round(time.Millisecond), sig, faultTTL, l.Fence(), h.Fence)
	if took > faultTTL+time.Second {
		t.Errorf("takeover took %v, want ≤ SessionTTL + 1s", took)
	}
	if l.Fence() <= h.Fence {
		fenceErr("fence %d after %d", l.Fence(), h.Fence)
	}
	if ok, err := reg.write(ctxT(t), l.Fence(), "next"); err != nil || !ok {
		t.Fatalf("the new holder's write: %v %v", ok, err)
	}
	stopNext := secs.Loop("next", l, work)
	if stop {
		time.Sleep(time.Until(faulted.Add(2 * faultTTL))) // the pause itself, not synchronisation
		h.CheckResumed(t, "")
	}
	stopNext()
	most := faulttest.CheckSections(t, kc.limit, h.Sections(), secs.List())
	accepted, refused := h.Writes()
	t.Logf("at most %d sections open at once; the holder's writes: %d accepted, %d refused; the register: %v", most, accepted, refused, reg.check(t, l.Fence()))
	return takeoverResult{c: c, s: s, reg: reg, l: l}
}

// testKindHolderKilled: the holder process of a permit or of the writer's
// side is SIGKILLed; the hold returns when etcd expires its session, and
// another obtains it within SessionTTL + 1 s, with a higher fence.
func testKindHolderKilled(t *testing.T, kc kindCase) {
	tk := kindTakeover(t, kc, false)
	if err := tk.l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// testKindHolderPaused: the holder process is SIGSTOPped past its TTL.
// Another obtains the hold once etcd expired the session; the resumed
// holder's Done is closed before it acts again, and the register accepts
// none of its writes after the new holder's. Once the resumed holder has
// exited, whatever it did is at etcd: the new holder's hold must be as it
// was granted (checkKindHolds), its renewal must succeed, and a write
// with its fence must still be accepted (nobody wrote with a higher one).
func testKindHolderPaused(t *testing.T, kc kindCase) {
	tk := kindTakeover(t, kc, true)
	l := tk.l
	want := []string{"next"}
	if kc.mode == driver.ModePermit {
		want = []string{"co", "next"}
	}
	checkKindHolds(t, tk.c, tk.s, "job", l, want)
	if err := l.Extend(ctxT(t), steadyTTL); err != nil {
		t.Fatalf("the new holder's renewal after the holder resumed: %v", err)
	}
	select {
	case <-l.Done():
		t.Fatalf("the new holder's hold ended: %v", l.Err())
	default:
	}
	if ok, err := tk.reg.write(ctxT(t), l.Fence(), "next"); err != nil || !ok {
		t.Fatalf("the new holder's write after the holder resumed: accepted %v, %v", ok, err)
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// checkKindHolds reads the read-write lock's or semaphore's key at etcd
// and fails unless its entries are held by exactly the owners want (in
// order), each on s's session lease, with no waiting entry; l's entry (of
// owner l.Owner()) is the one its grant put (created at its fence), and
// no grant came after it (the counter's revision is l's fence).
func checkKindHolds(t *testing.T, c *clientv3.Client, s *Store, key string, l *tasklock.Lock, want []string) {
	t.Helper()
	kp := s.kindPrefix(key)
	resp, err := c.Get(ctxT(t), kp, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	lease := s.sess.id
	s.mu.Unlock()
	var owners []string
	for _, kv := range resp.Kvs {
		_, sub, _, ok := s.parseKindKey(kv.Key)
		switch {
		case !ok:
			t.Errorf("a key %q that is not the Store's", kv.Key)
			continue
		case sub == subFence:
			if kv.ModRevision != int64(l.Fence()) {
				t.Errorf("the fence counter's revision is %d, the new holder's fence %d: a grant came after it", kv.ModRevision, l.Fence())
			}
			continue
		case sub != modeSub(l.Mode()):
			t.Errorf("an entry %q beside the new %v holder", kv.Key, l.Mode())
			continue
		}
		_, owner, _ := parseKindValue(kv.Value)
		owners = append(owners, owner)
		if clientv3.LeaseID(kv.Lease) != lease {
			t.Errorf("%s's entry %q on lease %x, not the Store's session %x", owner, kv.Key, kv.Lease, lease)
		}
		if owner == l.Owner() && kv.CreateRevision != int64(l.Fence()) {
			t.Errorf("%s's entry %q created at revision %d, its grant's fence %d: put again", owner, kv.Key, kv.CreateRevision, l.Fence())
		}
	}
	slices.Sort(owners)
	if !slices.Equal(owners, want) {
		t.Errorf("the %v holders at etcd: %q, want %q", l.Mode(), owners, want)
	}
}

// testKindServerRestarted: etcd is killed and restarted while every permit
// of a semaphore of two (or the writer's side) is held, by Lockers on
// Stores of their own, and waiters wait on Stores of their own. The holds
// survive (their session leases do), renewals resume, no waiter is granted
// while they last — never more than two permits, never two writers, nor a
// reader beside the writer — and when the holders release, the waiters get
// the holds, woken through a watch that came back, with fences above.
func testKindServerRestarted(t *testing.T, kc kindCase) {
	srv := testserver.StartEtcd(t)
	const ttl = 3 * time.Second // long enough to outlast the restart
	prefix := freshPrefix()
	var renewed sync.Map // by fence: the last renewal
	locker := func(owner string, onEvent func(tasklock.Event)) *tasklock.Locker {
		s := newStore(t, newClient(t, srv.Endpoints(), nil), &Options{Prefix: prefix, SessionTTL: ttl})
		lk, err := tasklock.New(s, &tasklock.Config{Owner: owner, Logger: quietLogger, OnEvent: onEvent})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lk.Close() })
		return lk
	}
	onEvent := func(ev tasklock.Event) {
		if ev.Type == tasklock.EventRenewed {
			renewed.Store(ev.Fence, time.Now())
		}
	}
	opts := &tasklock.ObtainOptions{TTL: ttl}
	var (
		secs    faulttest.Sections
		holders []*tasklock.Lock
		stops   []func() // the holders' critical sections
	)
	for i := range max(kc.limit, 1) {
		name := fmt.Sprintf("holder-%d", i)
		l, err := kc.obtain(ctxT(t), locker(name, onEvent), "job", opts)
		if err != nil {
			t.Fatal(err)
		}
		holders = append(holders, l)
		stops = append(stops, secs.Loop(name, l, work))
	}
	var highest uint64
	for _, l := range holders {
		highest = max(highest, l.Fence())
	}
	// The waiters: another hold of the same kind, and for a read-write
	// lock a reader too.
	type result struct {
		l   *tasklock.Lock
		err error
		at  time.Time
	}
	var (
		waiters   []<-chan result
		releasing atomic.Bool // set before the holders release
		early     atomic.Int64
	)
	wait := func(name string, obtain func(ctx context.Context, lk *tasklock.Locker) (*tasklock.Lock, error)) {
		lk := locker(name, nil)
		ch := make(chan result, 1)
		go func() {
			l, err := obtain(ctxT(t), lk)
			if err == nil && !releasing.Load() {
				early.Add(1)
			}
			ch <- result{l, err, time.Now()}
		}()
		waiters = append(waiters, ch)
	}
	wait("waiter", func(ctx context.Context, lk *tasklock.Locker) (*tasklock.Lock, error) {
		return kc.obtain(ctx, lk, "job", opts)
	})
	if kc.mode == driver.ModeWrite {
		wait("reader", func(ctx context.Context, lk *tasklock.Locker) (*tasklock.Lock, error) {
			return lk.RWMutex("job").RLock(ctx, opts)
		})
	}

	start := time.Now()
	srv.Restart(t)
	restarted := time.Now()
	t.Logf("restart took %v", restarted.Sub(start).Round(time.Millisecond))
	for _, l := range holders {
		waitFor(t, ttl, "a renewal after the restart", func() bool {
			at, ok := renewed.Load(l.Fence())
			return ok && at.(time.Time).After(restarted)
		})
		select {
		case <-l.Done():
			t.Fatalf("a %v hold was lost over a %v restart with TTL %v: %v", kc.mode, restarted.Sub(start), ttl, l.Err())
		default:
		}
	}
	if n := early.Load(); n > 0 {
		t.Fatalf("%d waiters were granted while every hold was held", n)
	}
	releasing.Store(true)
	released := time.Now()
	for i, l := range holders {
		stops[i]()
		if err := l.Release(ctxT(t)); err != nil {
			t.Fatalf("Release after the restart: %v", err)
		}
	}
	// The waiters in turn (a waiting writer goes before a reader).
	for _, w := range waiters {
		var r result
		select {
		case r = <-w:
		case <-time.After(10 * time.Second):
			t.Fatal("a waiter was not granted within 10s of the release")
		}
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Logf("a waiter got a %v hold %v after the release, fence %d", r.l.Mode(), r.at.Sub(released).Round(time.Millisecond), r.l.Fence())
		if r.l.Fence() < highest || (r.l.Mode() != tasklock.ModeRead && r.l.Fence() == highest) {
			t.Errorf("a %v hold's fence %d after the restart, %d before", r.l.Mode(), r.l.Fence(), highest)
		}
		for range 10 {
			secs.Do("waiter", r.l, work)
		}
		if err := r.l.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	if n := early.Load(); n > 0 {
		t.Errorf("%d waiters were granted before the holders released", n)
	}
	t.Logf("at most %d sections open at once", faulttest.CheckSections(t, kc.limit, secs.List()))
}
