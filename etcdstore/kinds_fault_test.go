package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
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
// restarted under holders and waiters. The oracle is the fenced register
// of fault_test.go; the blackhole is in systest/etcdfault.

// Environment of the kinds holder process.
const (
	envMode  = "TASKLOCK_MODE"  // "permit" or "write"
	envLimit = "TASKLOCK_LIMIT" // a semaphore's permits
)

// asKind is the Store of the kinds holder process: it makes the holds of
// a Locker that obtains mutexes through it holds of mode at the Store (a
// permit of limit, or the writer's side), so that faulttest.HolderMain,
// which obtains a mutex, holds a permit or the writer's side with the same
// entries, renewals and releases a Semaphore or RWMutex makes. (It hides
// the Store's Queuer and Notifier: the holder obtains a free key at once.)
type asKind struct {
	s     *Store
	mode  driver.Mode
	limit int
}

func (k asKind) Acquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	p.Mode, p.Limit = k.mode, k.limit
	return k.s.Acquire(ctx, p)
}

func (k asKind) Renew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	kps := make([]driver.RenewParams, len(ps))
	for i, p := range ps {
		p.Mode = k.mode
		kps[i] = p
	}
	return k.s.Renew(ctx, kps)
}

func (k asKind) Release(ctx context.Context, p driver.ReleaseParams) error {
	p.Mode = k.mode
	return k.s.Release(ctx, p)
}

// TestKindHolderProcess is the holder of a permit or a writer's side that
// the kinds fault tests run in a helper process (faulttest.HolderMain); in
// a normal run it skips.
func TestKindHolderProcess(t *testing.T) {
	faulttest.HolderMain(t, func(ttl time.Duration) (driver.Store, faulttest.WriteFunc, error) {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{os.Getenv("TASKLOCK_ETCD")}, DialTimeout: 5 * time.Second})
		if err != nil {
			return nil, nil, err
		}
		s, err := New(c, &Options{Prefix: os.Getenv("TASKLOCK_PREFIX"), SessionTTL: ttl})
		if err != nil {
			return nil, nil, err
		}
		k := asKind{s: s, mode: driver.ModeWrite}
		if os.Getenv(envMode) == "permit" {
			k.mode = driver.ModePermit
			if k.limit, err = strconv.Atoi(os.Getenv(envLimit)); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", envLimit, err)
			}
		}
		reg := register{c: c, prefix: os.Getenv("TASKLOCK_REGISTER")}
		return k, func(ctx context.Context, fence uint64) (bool, error) { return reg.write(ctx, fence, "helper") }, nil
	})
}

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

// kindTakeover starts a holder process of kc's hold (of a permit, beside a
// permit another Locker holds), SIGKILLs it (stop false) or SIGSTOPs it
// (stop true), and has "next" obtain the hold: within SessionTTL + 1s,
// with a fence above the holder's; then makes the new holder's write. It
// returns the holder, the register, the new lock and the fault's time.
func kindTakeover(t *testing.T, kc kindCase, stop bool) (*faulttest.Holder, register, *tasklock.Lock, time.Time) {
	t.Helper()
	srv := testserver.StartEtcd(t)
	c := newClient(t, srv.Endpoints(), nil)
	reg := newRegister(t, c)
	s := newStore(t, c, &Options{SessionTTL: faultTTL})
	opts := &tasklock.ObtainOptions{TTL: faultTTL}
	var co *tasklock.Lock // the semaphore's other permit, held throughout
	if kc.mode == driver.ModePermit {
		var err error
		if co, err = newLocker(t, s, "co").Semaphore("job", kc.limit).Acquire(ctxT(t), opts); err != nil {
			t.Fatal(err)
		}
	}
	h := faulttest.StartHolder(t, "TestKindHolderProcess", "job", faultTTL,
		"TASKLOCK_ETCD="+srv.Endpoints()[0], "TASKLOCK_PREFIX="+s.prefix, "TASKLOCK_REGISTER="+reg.prefix,
		envMode+"="+kc.mode.String(), envLimit+"="+strconv.Itoa(kc.limit))
	lk := newLocker(t, s, "next")
	if l, err := kc.tryObtain(ctxT(t), lk, "job", opts); !errors.Is(err, tasklock.ErrNotObtained) {
		t.Fatalf("a %v hold while the holder process holds: %v, %v", kc.mode, l, err)
	}
	sig, fenceErr := "SIGKILL", t.Errorf
	if stop {
		sig, fenceErr = "SIGSTOP", t.Fatalf
		h.Stop(t)
	} else {
		h.Kill(t)
	}
	faulted := time.Now()
	l, err := kc.obtain(ctxT(t), lk, "job", opts)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(faulted)
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	t.Logf("obtained a %v hold %v after %s of the holder (SessionTTL %v), fence %d after %d", kc.mode, took.Round(time.Millisecond), sig, faultTTL, l.Fence(), h.Fence)
	if took > faultTTL+time.Second {
		t.Errorf("takeover took %v, want ≤ SessionTTL + 1s", took)
	}
	if l.Fence() <= h.Fence {
		fenceErr("fence %d after %d", l.Fence(), h.Fence)
	}
	if co != nil {
		select {
		case <-co.Done():
			t.Fatalf("the other permit was lost: %v", co.Err())
		default:
		}
	}
	if ok, err := reg.write(ctxT(t), l.Fence(), "next"); err != nil || !ok {
		t.Fatalf("the new holder's write: %v %v", ok, err)
	}
	return h, reg, l, faulted
}

// testKindHolderKilled: the holder process of a permit or of the writer's
// side is SIGKILLed; the hold returns when etcd expires its session, and
// another obtains it within SessionTTL + 1 s, with a higher fence.
func testKindHolderKilled(t *testing.T, kc kindCase) {
	_, reg, l, _ := kindTakeover(t, kc, false)
	t.Logf("writes accepted: %v", reg.check(t, l.Fence()))
}

// testKindHolderPaused: the holder process is SIGSTOPped past its TTL.
// Another obtains the hold once etcd expired the session; the resumed
// holder's Done is closed before it writes again, and the register
// accepts none of its writes after the new holder's.
func testKindHolderPaused(t *testing.T, kc kindCase) {
	h, reg, l, stopped := kindTakeover(t, kc, true)
	time.Sleep(time.Until(stopped.Add(2 * faultTTL))) // the pause itself, not synchronisation

	h.CheckResumed(t, "")
	t.Logf("writes accepted: %v", reg.check(t, l.Fence()))
	select {
	case <-l.Done():
		// A hold of a 1s TTL may expire on a machine too busy to renew it
		// in time; the resumed holder must not have taken it away.
		if strings.Contains(l.Err().Error(), "no longer has") {
			t.Fatalf("the new holder's hold ended: %v", l.Err())
		}
		t.Logf("the new holder's hold expired (a busy machine): %v", l.Err())
	default:
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
	holders := []*tasklock.Lock{}
	for i := range max(kc.limit, 1) {
		l, err := kc.obtain(ctxT(t), locker(fmt.Sprintf("holder-%d", i), onEvent), "job", opts)
		if err != nil {
			t.Fatal(err)
		}
		holders = append(holders, l)
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
	for _, l := range holders {
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
		if err := r.l.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	if n := early.Load(); n > 0 {
		t.Errorf("%d waiters were granted before the holders released", n)
	}
}
