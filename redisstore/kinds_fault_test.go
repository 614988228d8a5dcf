package redisstore

// Fault tests of read-write locks and semaphores: the server restarts
// under held writers' locks and permits. Their holders killed or paused
// are in fault_test.go, beside the mutex's.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/storetest/faulttest"
)

// envKind tells the holder process what to hold: "mutex", "write" (a
// RWMutex's writer) or "permit:N" (one of a Semaphore's N permits).
const envKind = "TL_KIND"

// obtainKind obtains key as kind ("mutex", "write" or "permit:N") with lk.
func obtainKind(ctx context.Context, lk *tasklock.Locker, key, kind string, opts *tasklock.ObtainOptions) (*tasklock.Lock, error) {
	switch kind {
	case "mutex":
		return lk.Obtain(ctx, key, opts)
	case "write":
		return lk.RWMutex(key).Lock(ctx, opts)
	}
	n, err := strconv.Atoi(strings.TrimPrefix(kind, "permit:"))
	if err != nil || !strings.HasPrefix(kind, "permit:") {
		return nil, fmt.Errorf("kind %q: want mutex, write or permit:N", kind)
	}
	return lk.Semaphore(key, n).Acquire(ctx, opts)
}

// TestKindsFaultHolder is the helper process of the fault tests for a
// RWMutex's writer or a Semaphore's permit: it obtains faulttest.EnvKey as
// envKind says and then speaks the protocol of
// faulttest.ReportingHolderMain ("obtained <fence>", "write <ok> <err>",
// "resumed done=closed|open", "lost <cause>"), which obtains a mutex only.
func TestKindsFaultHolder(t *testing.T) {
	if testserver.HelperRole() != faulttest.Role {
		t.Skip("helper process for the fault tests")
	}
	ttl, _ := time.ParseDuration(os.Getenv(faulttest.EnvTTL))
	s, err := New(redis.NewClient(&redis.Options{Addr: os.Getenv("TL_ADDR")}), &Options{Prefix: os.Getenv("TL_PREFIX")})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	reg := testserver.RedisRegister{Addr: os.Getenv("TL_REGISTER")}
	lk, err := tasklock.New(s, &tasklock.Config{Owner: "holder", Logger: faulttest.QuietLogger})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	ctx := context.Background()
	l, err := obtainKind(ctx, lk, os.Getenv(faulttest.EnvKey), os.Getenv(envKind), &tasklock.ObtainOptions{TTL: ttl})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("obtained", l.Fence())
	last := time.Now()
	for {
		gap := time.Since(last)
		last = time.Now()
		if gap > ttl {
			select {
			case <-l.Done():
				fmt.Println("resumed done=closed")
			default:
				fmt.Println("resumed done=open")
			}
		}
		select {
		case <-l.Done():
			fmt.Println("lost", l.Err())
			os.Exit(0)
		default:
		}
		ok, err := reg.Write(ctx, l.Fence(), "holder")
		fmt.Println("write", ok, err)
		time.Sleep(10 * time.Millisecond) // one unit of work
	}
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

// heldPermits returns how many permits of key the store at addr lists.
func heldPermits(t *testing.T, addr, prefix, key string) int {
	t.Helper()
	s := newStore(t, closeAtCleanup(t, redis.NewClient(&redis.Options{Addr: addr})), &Options{Prefix: prefix})
	ls, err := s.Leases(ctxT(t), key)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range ls {
		if l.Key == key && l.Mode == driver.ModePermit {
			n++
		}
	}
	return n
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
