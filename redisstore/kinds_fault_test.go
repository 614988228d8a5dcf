package redisstore

// Fault tests of read-write locks, semaphores and fair queues: a holder
// process (faulttest.KindHolderMain) killed or paused, with its critical
// sections and a fenced register on a second, unaffected redis-server as
// the oracles; the server restarted under held writers' locks and
// permits; a fair waiter's process killed in the queue.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/storetest/faulttest"
)

// TestKindHolder is the holder process of the kinds fault tests
// (faulttest.KindHolderMain). Its critical sections write its fence to the
// register at TL_REGISTER, except a semaphore's of more than one permit,
// whose holders have no fence order among them.
func TestKindHolder(t *testing.T) {
	faulttest.KindHolderMain(t, func(time.Duration) (driver.Store, faulttest.WriteFunc, error) {
		s, err := New(redis.NewClient(&redis.Options{Addr: os.Getenv("TL_ADDR")}), &Options{Prefix: os.Getenv("TL_PREFIX")})
		if err != nil || (os.Getenv(faulttest.EnvHold) == "permit" && os.Getenv(faulttest.EnvPermits) != "1") {
			return s, nil, err
		}
		reg := testserver.RedisRegister{Addr: os.Getenv("TL_REGISTER")}
		return s, func(ctx context.Context, fence uint64) (bool, error) {
			return reg.Write(ctx, fence, faulttest.HelperOwner)
		}, nil
	})
}

// kindCase is one hold a fault test puts in the holder process, and what
// the others then obtain: a writer's lock after a reader or a writer, a
// permit after a permit.
type kindCase struct {
	hold    tasklock.Mode
	permits int
}

func (k kindCase) String() string {
	if k.hold == tasklock.ModePermit {
		return fmt.Sprintf("permit of %d", k.permits)
	}
	return k.hold.String()
}

// obtain has lk obtain what takes the holder's place.
func (k kindCase) obtain(ctx context.Context, lk *tasklock.Locker, key string, opts *tasklock.ObtainOptions) (*tasklock.Lock, error) {
	if k.hold == tasklock.ModePermit {
		return lk.Semaphore(key, k.permits).Acquire(ctx, opts)
	}
	return lk.RWMutex(key).Lock(ctx, opts)
}

// kindsRig is a fault test's setting: the server under test, the
// register on another, and a holder process of k on "job".
type kindsRig struct {
	srv    *testserver.Redis
	reg    testserver.RedisRegister
	prefix string
	holder *faulttest.KindHolder
	log    faulttest.Sections // the sections of the test's own holders
}

func startKindsRig(t *testing.T, k kindCase, ttl time.Duration) *kindsRig {
	t.Helper()
	srv, regSrv := testserver.StartRedis(t), testserver.StartRedis(t)
	r := &kindsRig{srv: srv, reg: newRegister(t, regSrv.Addr()), prefix: freshPrefix()}
	r.holder = faulttest.StartKindHolder(t, "TestKindHolder", "job", k.hold, k.permits, ttl,
		"TL_ADDR="+srv.Addr(), "TL_REGISTER="+regSrv.Addr(), "TL_PREFIX="+r.prefix)
	return r
}

// work runs l's critical sections, held by owner, into the rig's log,
// writing l's fence to the register unless k's holders have no fence
// order, until the returned stop is called.
func (r *kindsRig) work(t *testing.T, k kindCase, owner string, l *tasklock.Lock) (stop func()) {
	var act func()
	if k.hold != tasklock.ModePermit || k.permits == 1 {
		act = func() {
			if _, err := r.reg.Write(context.Background(), l.Fence(), owner); err != nil {
				t.Error(err)
			}
		}
	}
	return r.log.Loop(owner, l, act)
}

// (a) The holder process of a read side, a write side or a permit (of a
// semaphore whose other permit stays held) is SIGKILLed: its hold returns
// within TTL + 1 s, the writer or permit that takes its place has a higher
// fence, and the sections of all holders never overlap beyond the lock's
// promise.
func TestFaultKindsHolderKilled(t *testing.T) {
	t.Parallel()
	for _, k := range []kindCase{{tasklock.ModeRead, 0}, {tasklock.ModeWrite, 0}, {tasklock.ModePermit, 2}} {
		t.Run(k.String(), func(t *testing.T) {
			t.Parallel()
			ttl := time.Second
			opts := &tasklock.ObtainOptions{TTL: ttl}
			r := startKindsRig(t, k, ttl)
			if k.hold == tasklock.ModePermit {
				// The other permit, held (and renewed) throughout.
				other, err := k.obtain(ctxT(t), newFaultLocker(t, r.srv.Addr(), r.prefix, "c"), "job", opts)
				if err != nil {
					t.Fatal(err)
				}
				stopOther := r.work(t, k, "c", other)
				defer stopOther()
			}
			b := newFaultLocker(t, r.srv.Addr(), r.prefix, "b")

			killed := time.Now()
			r.holder.Kill(t)
			l, err := k.obtain(ctxT(t), b, "job", opts)
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(killed)
			t.Logf("took the place of a killed %v holder %v after SIGKILL (TTL %v)", k, took, ttl)
			if took > ttl+time.Second {
				t.Fatalf("took %v, want ≤ TTL + 1s", took)
			}
			if l.Fence() <= r.holder.Fence {
				t.Fatalf("fence %d after %d", l.Fence(), r.holder.Fence)
			}
			stop := r.work(t, k, "b", l)
			waitSections(t, &r.log, "b", 5)
			stop()
			faulttest.CheckSections(t, k.permits, r.holder.Sections(), r.log.List())
			if n := r.reg.Rejected(t); n != 0 {
				t.Fatalf("%d stale writes", n)
			}
		})
	}
}

// (b) The holder process of a read side, a write side or a semaphore's
// only permit is SIGSTOPped for 2×TTL: a writer or a permit takes its
// place; when the holder resumes its Done is already closed, it writes
// nothing, and no sections overlap. Once the resumed holder has exited,
// the new hold is at the server as it was granted and alone
// (checkKindHold), renews, and a write with its fence is still accepted.
func TestFaultKindsHolderPaused(t *testing.T) {
	t.Parallel()
	for _, k := range []kindCase{{tasklock.ModeRead, 0}, {tasklock.ModeWrite, 0}, {tasklock.ModePermit, 1}} {
		t.Run(k.String(), func(t *testing.T) {
			t.Parallel()
			ttl := time.Second
			r := startKindsRig(t, k, ttl)
			b := newFaultLocker(t, r.srv.Addr(), r.prefix, "b")

			r.holder.Stop(t)
			stopped := time.Now()
			l, err := k.obtain(ctxT(t), b, "job", &tasklock.ObtainOptions{TTL: steadyTTL})
			if err != nil {
				t.Fatal(err)
			}
			if l.Fence() <= r.holder.Fence {
				t.Fatalf("fence %d after %d", l.Fence(), r.holder.Fence)
			}
			stop := r.work(t, k, "b", l)
			time.Sleep(time.Until(stopped.Add(2 * ttl))) // the pause itself, not synchronisation
			r.holder.CheckResumed(t, "")                 // and waits for it to exit
			stop()
			faulttest.CheckSections(t, k.permits, r.holder.Sections(), r.log.List())
			if stale := testserver.AcceptedAfter(r.reg.Accepted(t), "b", faulttest.HelperOwner); len(stale) > 0 {
				t.Fatalf("register accepted the paused holder's writes after the new holder's: %v", stale)
			}
			checkKindHold(t, r.srv.Addr(), r.prefix, "job", l)
			if err := l.Extend(ctxT(t), steadyTTL); err != nil {
				t.Fatalf("the new holder's renewal after the holder resumed: %v", err)
			}
			assertHeld(t, l)
			if ok, err := r.reg.Write(ctxT(t), l.Fence(), "b"); err != nil || !ok {
				t.Fatalf("the new holder's write after the holder resumed: accepted %v, %v", ok, err)
			}
		})
	}
}

// checkKindHold reads key's read-write lock or semaphore at the server
// (kinds.lua's keys under prefix) and fails unless l's hold is its only
// live one: the held set has one member, not expired, whose entry is of
// l's mode, fence and owner, and no grant came after it (the fence
// counter is l's fence).
func checkKindHold(t *testing.T, addr, prefix, key string, l *tasklock.Lock) {
	t.Helper()
	c := closeAtCleanup(t, redis.NewClient(&redis.Options{Addr: addr}))
	lk := prefix + "{" + key + "}"
	ctx := ctxT(t)
	held, err := c.ZRangeWithScores(ctx, lk+kindsHeldSuffix, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var who []string
	for _, z := range held {
		tok := z.Member.(string)
		v, err := c.HGet(ctx, lk+kindsSuffix, tok).Result()
		if err != nil {
			t.Fatalf("the held %q's entry: %v", tok, err)
		}
		who = append(who, v)
	}
	want := fmt.Sprintf("%c:%d:%s", l.Mode().String()[0], l.Fence(), l.Owner())
	if len(who) != 1 || who[0] != want {
		t.Fatalf("the holds of %q at the server: %q, want the new holder's alone: %q", key, who, want)
	}
	srvNow, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if exp := int64(held[0].Score); exp <= srvNow.UnixMilli() {
		t.Errorf("the new hold expires at %d ms, the server's time is %d ms", exp, srvNow.UnixMilli())
	}
	if f, err := c.Get(ctx, lk+kindsFenceSuffix).Uint64(); err != nil || f != l.Fence() {
		t.Errorf("the fence counter is %d (%v), the new holder's fence %d: a grant came after it", f, err, l.Fence())
	}
}

// waitSections waits until holder has logged n sections in log.
func waitSections(t *testing.T, log *faulttest.Sections, holder string, n int) {
	t.Helper()
	waitFor(t, 10*time.Second, func() bool {
		c := 0
		for _, s := range log.List() {
			if s.Holder == holder {
				c++
			}
		}
		return c >= n
	})
}

// Redis restarts with AOF and appendfsync always while a writer and both
// permits of a semaphore are held: they keep renewing, nobody else obtains
// the lock or a third permit meanwhile, and fences keep increasing.
func TestFaultKindsRestartWithAOF(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t, testserver.WithRedisArgs("--appendonly", "yes", "--appendfsync", "always"))
	ttl := 2 * time.Second
	prefix := freshPrefix()
	a := newFaultLocker(t, srv.Addr(), prefix, "a")
	b := newFaultLocker(t, srv.Addr(), prefix, "b")
	held := kindsHolds(t, a, ttl)
	srv.Restart(t)
	deadline := time.Now().Add(2 * ttl) // two TTLs of renewals through the restart
	for time.Now().Before(deadline) {
		for _, l := range held {
			assertHeld(t, l)
		}
		if l, err := b.RWMutex("rw").TryRLock(ctxT(t), nil); !errors.Is(err, tasklock.ErrNotObtained) {
			t.Fatalf("a reader beside the writer after the restart: %v, %v", l, err)
		}
		if l, err := b.Semaphore("pool", 2).TryAcquire(ctxT(t), nil); !errors.Is(err, tasklock.ErrNotObtained) {
			t.Fatalf("a third permit of two after the restart: %v, %v", l, err)
		}
		time.Sleep(100 * time.Millisecond) // sampling interval
	}
	for _, l := range held {
		if err := l.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	w, err := b.RWMutex("rw").TryLock(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.Semaphore("pool", 2).TryAcquire(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if w.Fence() <= held[0].Fence() || p.Fence() <= held[2].Fence() {
		t.Fatalf("fences %d, %d after %d, %d across an AOF restart", w.Fence(), p.Fence(), held[0].Fence(), held[2].Fence())
	}
}

// Redis restarts without persistence while a writer and both permits of a
// semaphore are held: every holder is told within one TTL (its renewal
// finds nothing), and then others obtain. As the package doc says, the
// kinds' fence counter starts again.
func TestFaultKindsRestartWithoutPersistence(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t)
	ttl := time.Second
	prefix := freshPrefix()
	a := newFaultLocker(t, srv.Addr(), prefix, "a")
	b := newFaultLocker(t, srv.Addr(), prefix, "b")
	held := kindsHolds(t, a, ttl)
	srv.Restart(t)
	restarted := time.Now()
	for _, l := range held {
		select {
		case <-l.Done():
		case <-time.After(time.Until(restarted.Add(ttl))):
			t.Fatalf("%v hold not told within one TTL that its lease vanished", l.Mode())
		}
		if !errors.Is(l.Err(), tasklock.ErrLockLost) {
			t.Fatalf("cause = %v", l.Err())
		}
	}
	t.Logf("every holder told %v after the restart", time.Since(restarted))
	w, err := b.RWMutex("rw").TryLock(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := b.Semaphore("pool", 2).TryAcquire(ctxT(t), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Semaphore("pool", 2).TryAcquire(ctxT(t), nil); !errors.Is(err, tasklock.ErrNotObtained) {
		t.Fatalf("a third permit of two: %v", err)
	}
	t.Logf("documented: the writer's fence %d after the restart repeats (the holder had %d)", w.Fence(), held[0].Fence())
}

// kindsHolds has lk take the writer's lock of "rw" and both permits of
// the semaphore "pool", with ttl.
func kindsHolds(t *testing.T, lk *tasklock.Locker, ttl time.Duration) []*tasklock.Lock {
	t.Helper()
	// A first writer, released, so that the fences are not all 1.
	first, err := lk.RWMutex("rw").TryLock(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = first.Release(ctxT(t))
	var held []*tasklock.Lock
	w, err := lk.RWMutex("rw").TryLock(ctxT(t), &tasklock.ObtainOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	held = append(held, w)
	for range 2 {
		p, err := lk.Semaphore("pool", 2).TryAcquire(ctxT(t), &tasklock.ObtainOptions{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	return held
}

func assertHeld(t *testing.T, l *tasklock.Lock) {
	t.Helper()
	select {
	case <-l.Done():
		t.Fatalf("the %v hold of %q was lost: %v", l.Mode(), l.Key(), l.Err())
	default:
	}
}

// TestFairWaiterHelper is the helper process of TestFaultFairWaiterKilled:
// it waits for faulttest.EnvKey in the fair queue, printing "queued" once
// its entry is in, and "obtained" if it ever gets the key.
func TestFairWaiterHelper(t *testing.T) {
	if testserver.HelperRole() != "fair-waiter" {
		t.Skip("helper process for the fault tests")
	}
	ttl, _ := time.ParseDuration(os.Getenv(faulttest.EnvTTL))
	s, err := New(redis.NewClient(&redis.Options{Addr: os.Getenv("TL_ADDR")}), &Options{Prefix: os.Getenv("TL_PREFIX")})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	lk, err := tasklock.New(s, &tasklock.Config{Owner: "dying", Logger: faulttest.QuietLogger, OnEvent: func(e tasklock.Event) {
		if e.Type == tasklock.EventQueued {
			fmt.Println("queued")
		}
	}})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	_, err = lk.Obtain(context.Background(), os.Getenv(faulttest.EnvKey), &tasklock.ObtainOptions{TTL: ttl, Fair: true})
	fmt.Println("obtained", err)
	os.Exit(0)
}

// A fair waiter's process is SIGKILLed while it waits at the head of the
// queue: its entry leaves the queue within its TTL, and the waiter behind
// it gets the key then — a dead waiter never blocks the line.
func TestFaultFairWaiterKilled(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t)
	prefix := freshPrefix()
	ttl := time.Second
	fair := &tasklock.ObtainOptions{TTL: ttl, Fair: true}
	holder, err := newFaultLocker(t, srv.Addr(), prefix, "holder").Obtain(ctxT(t), "job", fair)
	if err != nil {
		t.Fatal(err)
	}
	dying := testserver.StartHelper(t, "TestFairWaiterHelper", "fair-waiter",
		"TL_ADDR="+srv.Addr(), "TL_PREFIX="+prefix, faulttest.EnvKey+"=job", faulttest.EnvTTL+"="+ttl.String())
	dying.WaitLine(t, "queued", 20*time.Second)

	queued := make(chan struct{}, 1)
	next := faulttest.NewLocker(t, newStore(t, closeAtCleanup(t, redis.NewClient(&redis.Options{Addr: srv.Addr()})), &Options{Prefix: prefix}),
		tasklock.Config{Owner: "next", OnEvent: func(e tasklock.Event) {
			if e.Type == tasklock.EventQueued {
				queued <- struct{}{}
			}
		}})
	got := make(chan *tasklock.Lock, 1)
	go func() {
		l, err := next.Obtain(ctxT(t), "job", fair)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	<-queued
	dying.Kill(t)
	killed := time.Now()
	if err := holder.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	took := time.Since(killed)
	t.Logf("the waiter behind the killed one obtained %v after the kill (entry TTL %v)", took, ttl)
	if took > ttl+time.Second {
		t.Fatalf("took %v, want ≤ the dead entry's TTL + 1s", took)
	}
	if l.Fence() <= holder.Fence() {
		t.Fatalf("fence %d after %d", l.Fence(), holder.Fence())
	}
}
