package redisstore

// Fault tests: a real holder is killed or paused, or loses its server, and
// a fenced register kept on a second, unaffected redis-server is the oracle
// that counts stale writes. The holder cut off by a blackholing proxy is
// tested in systest/redisfault (the proxy must not be a dependency of the
// library module).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/storetest/faulttest"
)

func newRegister(t *testing.T, addr string) testserver.RedisRegister {
	return testserver.RedisRegister{Addr: addr}
}

// TestFaultHolder is the helper process (see
// faulttest.ReportingHolderMain): it obtains a lock and, while Done is
// open, writes to the register every few milliseconds, reporting each step
// on stdout.
func TestFaultHolder(t *testing.T) {
	faulttest.ReportingHolderMain(t, func(time.Duration) (driver.Store, faulttest.WriteFunc, error) {
		c := redis.NewClient(&redis.Options{Addr: os.Getenv("TL_ADDR")})
		s, err := New(c, &Options{Prefix: os.Getenv("TL_PREFIX")})
		if err != nil {
			return nil, nil, err
		}
		reg := testserver.RedisRegister{Addr: os.Getenv("TL_REGISTER")}
		return s, func(ctx context.Context, fence uint64) (bool, error) { return reg.Write(ctx, fence, "holder") }, nil
	})
}

func startHolder(t *testing.T, lockAddr, regAddr, prefix string, ttl time.Duration) (*faulttest.Holder, uint64) {
	t.Helper()
	h := faulttest.StartReportingHolder(t, "TestFaultHolder", "job", ttl,
		"TL_ADDR="+lockAddr, "TL_REGISTER="+regAddr, "TL_PREFIX="+prefix)
	return h, h.Fence
}

// steadyTTL is the TTL of a hold that takes a paused holder's place:
// long enough that no busy machine delays its renewals past it, so that
// it lasts the test whatever the load and its end would be the fault's
// doing. Only the holder process's hold has to end fast.
const steadyTTL = 10 * time.Second

func newFaultLocker(t *testing.T, addr, prefix, owner string) *tasklock.Locker {
	t.Helper()
	s := newStore(t, closeAtCleanup(t, redis.NewClient(&redis.Options{Addr: addr})), &Options{Prefix: prefix})
	return faulttest.NewLocker(t, s, tasklock.Config{Owner: owner})
}

// (a) The holder process is SIGKILLed: another obtains within TTL + 1 s.
func TestFaultHolderKilled(t *testing.T) {
	t.Parallel()
	srv, regSrv := testserver.StartRedis(t), testserver.StartRedis(t)
	reg := newRegister(t, regSrv.Addr())
	ttl := time.Second
	prefix := freshPrefix()
	holder, fence := startHolder(t, srv.Addr(), regSrv.Addr(), prefix, ttl)
	b := newFaultLocker(t, srv.Addr(), prefix, "b")

	killed := time.Now()
	holder.Kill(t)
	l, took := faulttest.Obtain(t, b, "job", &tasklock.ObtainOptions{TTL: ttl}, killed)
	t.Logf("takeover %v after SIGKILL (TTL %v)", took, ttl)
	if took > ttl+time.Second {
		t.Fatalf("takeover took %v, want ≤ TTL + 1s", took)
	}
	if l.Fence() <= fence {
		t.Fatalf("fence %d after %d", l.Fence(), fence)
	}
	if ok, err := reg.Write(ctxT(t), l.Fence(), "b"); !ok || err != nil {
		t.Fatalf("the new holder's write was refused: %v", err)
	}
	if n := reg.Rejected(t); n != 0 {
		t.Fatalf("%d stale writes", n)
	}
}

// (b) The holder process is SIGSTOPped for 2×TTL: another obtains (for
// steadyTTL); when the first resumes its Done is already closed and its
// Context ended, and none of its writes is accepted after the new
// holder's. Once it has exited,
// the lock key holds the new holder's grant, which renews, and a write
// with its fence is still accepted.
func TestFaultHolderPaused(t *testing.T) {
	t.Parallel()
	srv, regSrv := testserver.StartRedis(t), testserver.StartRedis(t)
	reg := newRegister(t, regSrv.Addr())
	ttl := time.Second
	prefix := freshPrefix()
	holder, fence := startHolder(t, srv.Addr(), regSrv.Addr(), prefix, ttl)
	b := newFaultLocker(t, srv.Addr(), prefix, "b")

	holder.Stop(t)
	stopped := time.Now()
	l, err := b.Obtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: steadyTTL})
	if err != nil {
		t.Fatal(err)
	}
	if l.Fence() <= fence {
		t.Fatalf("fence %d after %d", l.Fence(), fence)
	}
	if ok, err := reg.Write(ctxT(t), l.Fence(), "b"); !ok || err != nil {
		t.Fatalf("the new holder's write was refused: %v", err)
	}
	time.Sleep(time.Until(stopped.Add(2 * ttl))) // the pause itself, not synchronisation
	holder.Cont(t)
	if line := holder.WaitLine(t, "resumed ", 5*time.Second); line != "resumed done=closed" {
		t.Fatalf("on resume the holder saw %q: it could have acted on a lost lock", line)
	}
	holder.WaitLine(t, "lost ", 5*time.Second)
	if code := holder.Wait(t, 10*time.Second); code != 0 {
		t.Errorf("holder exit code %d", code)
	}
	if stale := testserver.AcceptedAfter(reg.Accepted(t), "b", "holder"); len(stale) > 0 {
		t.Fatalf("register accepted the paused holder's writes after the new holder's: %v", stale)
	}
	c := closeAtCleanup(t, redis.NewClient(&redis.Options{Addr: srv.Addr()}))
	lk, fk := prefix+"{job}", prefix+"{job}:fence"
	v, err := c.Get(ctxT(t), lk).Result()
	if _, rest, _ := strings.Cut(v, ":"); err != nil || rest != fmt.Sprintf("%d:b", l.Fence()) {
		t.Fatalf("the lock key holds %q (%v), want the new holder's grant, fence %d, owner b", v, err, l.Fence())
	}
	if f, err := c.Get(ctxT(t), fk).Uint64(); err != nil || f != l.Fence() {
		t.Errorf("the fence counter is %d (%v), the new holder's fence %d: a grant came after it", f, err, l.Fence())
	}
	if err := l.Extend(ctxT(t), steadyTTL); err != nil {
		t.Fatalf("the new holder's renewal after the holder resumed: %v", err)
	}
	select {
	case <-l.Done():
		t.Fatalf("the new holder lost its lock: %v", l.Err())
	default:
	}
	if ok, err := reg.Write(ctxT(t), l.Fence(), "b"); !ok || err != nil {
		t.Fatalf("the new holder's write after the holder resumed: accepted %v, %v", ok, err)
	}
}

// (d) Redis restarted without persistence: the holder learns of the loss at
// its next renewal, and — as the package doc says — the fence counter starts
// again, so the next grant's fence repeats an earlier one.
func TestFaultRestartWithoutPersistence(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t)
	ttl := time.Second
	prefix := freshPrefix()
	a := newFaultLocker(t, srv.Addr(), prefix, "a")
	b := newFaultLocker(t, srv.Addr(), prefix, "b")
	for range 3 {
		l, err := a.TryObtain(ctxT(t), "job", nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Release(ctxT(t))
	}
	la, err := a.TryObtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)
	restarted := time.Now()
	select {
	case <-la.Done():
	case <-time.After(ttl):
		t.Fatal("the holder was not told within one TTL that its lease vanished")
	}
	t.Logf("holder told %v after the restart: %v", time.Since(restarted), la.Err())
	if !errors.Is(la.Err(), tasklock.ErrLockLost) {
		t.Fatalf("cause = %v", la.Err())
	}
	lb, err := b.TryObtain(ctxT(t), "job", nil)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Fence() > la.Fence() {
		t.Fatalf("fence %d after a restart without persistence: the doc says the counter restarts", lb.Fence())
	}
	t.Logf("documented: fence %d after the restart repeats (the holder had %d)", lb.Fence(), la.Fence())
}

// (d') With AOF and appendfsync always, a held lock survives the restart and
// fences keep increasing.
func TestFaultRestartWithAOF(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t, testserver.WithRedisArgs("--appendonly", "yes", "--appendfsync", "always"))
	ttl := 2 * time.Second
	prefix := freshPrefix()
	a := newFaultLocker(t, srv.Addr(), prefix, "a")
	b := newFaultLocker(t, srv.Addr(), prefix, "b")
	la, err := a.TryObtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)
	if _, err := b.TryObtain(ctxT(t), "job", nil); !errors.Is(err, tasklock.ErrNotObtained) {
		t.Fatalf("after the restart another obtained the held lock: %v", err)
	}
	deadline := time.Now().Add(2 * ttl) // two TTLs of renewals through the restart
	for time.Now().Before(deadline) {
		select {
		case <-la.Done():
			t.Fatalf("lock lost across an AOF restart: %v", la.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := la.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryObtain(ctxT(t), "job", nil)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Fence() <= la.Fence() {
		t.Fatalf("fence %d after %d across an AOF restart", lb.Fence(), la.Fence())
	}
}

// (e) Sentinel failover with a held lock: the lease, acknowledged by the
// replica, survives on the new master; nobody else obtains it meanwhile; the
// holder keeps renewing there or is told; fences keep increasing.
func TestFaultSentinelFailover(t *testing.T) {
	t.Parallel()
	sen := testserver.StartSentinel(t)
	newLocker := func(owner string) *tasklock.Locker {
		c := closeAtCleanup(t, redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: sen.MasterName(), SentinelAddrs: sen.SentinelAddrs(),
		}))
		s := newStore(t, c, &Options{Prefix: "failover:", WaitReplicas: 1})
		lk, err := tasklock.New(s, &tasklock.Config{Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lk.Close() })
		return lk
	}
	a, b := newLocker("a"), newLocker("b")
	ttl := 3 * time.Second
	la, err := a.TryObtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	sen.Failover(t)
	// For two TTLs after the failover, whenever b tries, a must either still
	// hold the lock or have been told it lost it.
	deadline := time.Now().Add(2 * ttl)
	for time.Now().Before(deadline) {
		lb, err := b.TryObtain(ctxT(t), "job", nil)
		if err == nil {
			select {
			case <-la.Done():
				t.Logf("a was told (%v) before b obtained", la.Err())
				_ = lb.Release(ctxT(t))
				return
			default:
				t.Fatalf("two holders after the failover: b obtained fence %d while a (fence %d) holds", lb.Fence(), la.Fence())
			}
		}
		time.Sleep(100 * time.Millisecond) // sampling interval
	}
	select {
	case <-la.Done():
		t.Logf("a lost its lock across the failover: %v", la.Err())
	default:
		t.Log("a kept renewing on the new master")
	}
	_ = la.Release(ctxT(t))
	lb, err := b.Obtain(ctxT(t), "job", nil)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Fence() <= la.Fence() {
		t.Fatalf("fence %d after %d across the failover", lb.Fence(), la.Fence())
	}
}

// With the client built as the package documentation says
// (ContextTimeoutEnabled), ctx bounds a call to a server that stopped
// answering: TryObtain returns at its deadline, not at the client's
// ReadTimeout (3s by default), which go-redis otherwise waits out.
func TestFaultContextDeadlineBoundsCallToStoppedServer(t *testing.T) {
	t.Parallel()
	srv := testserver.StartRedis(t)
	c := closeAtCleanup(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true}))
	lk := faulttest.NewLocker(t, newStore(t, c, nil), tasklock.Config{Owner: "a"})
	if _, err := lk.TryObtain(ctxT(t), "warm", nil); err != nil {
		t.Fatal(err)
	}
	srv.Stop(t)
	defer srv.Cont(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := lk.TryObtain(ctx, "k", nil)
	if took := time.Since(start); err == nil || took > 2*time.Second {
		t.Fatalf("TryObtain on a stopped server with a 200ms deadline: %v after %v", err, took)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("TryObtain on a stopped server: %v, want the deadline in the chain", err)
	}
}
