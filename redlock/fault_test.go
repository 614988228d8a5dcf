package redlock

// Fault tests against three real redis-servers: the holder is killed,
// paused, or cut off from one or two nodes, and a node restarts with a lock
// held. A fenced register is the oracle that counts stale writes: kept on a
// fourth, unaffected redis-server when a helper process writes to it,
// fence.Register otherwise.

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
	"github.com/tasklock/tasklock/fence"
	"github.com/tasklock/tasklock/internal/faulttest"
	"github.com/tasklock/tasklock/internal/testserver"
)

// TestFaultHolder is the helper process (see
// faulttest.ReportingHolderMain): it obtains a lock on the nodes in
// TL_ADDRS and, while Done is open, writes to the register every few
// milliseconds, reporting each step on stdout.
func TestFaultHolder(t *testing.T) {
	faulttest.ReportingHolderMain(t, func(time.Duration) (driver.Store, faulttest.WriteFunc, error) {
		var clients []redis.UniversalClient
		for _, a := range strings.Split(os.Getenv("TL_ADDRS"), ",") {
			clients = append(clients, redis.NewClient(&redis.Options{Addr: a}))
		}
		s, err := New(clients, &Options{Prefix: os.Getenv("TL_PREFIX")})
		if err != nil {
			return nil, nil, err
		}
		reg := testserver.RedisRegister{C: redis.NewClient(&redis.Options{Addr: os.Getenv("TL_REGISTER")})}
		return s, func(ctx context.Context, fence uint64) (bool, error) { return reg.Write(ctx, fence, "holder") }, nil
	})
}

// holderSetup is three lock nodes, a register on a fourth server, and a
// helper process holding "job".
type holderSetup struct {
	addrs  []string
	prefix string
	reg    testserver.RedisRegister
	holder *testserver.Process
	fence  uint64
}

func startHolder(t *testing.T, ttl time.Duration) holderSetup {
	t.Helper()
	addrs := addrsOf(startNodes(t, 3))
	regSrv := testserver.StartRedis(t)
	h := holderSetup{
		addrs:  addrs,
		prefix: freshPrefix(),
		reg:    testserver.RedisRegister{C: closeAtCleanup(t, redis.NewClient(&redis.Options{Addr: regSrv.Addr()}))},
	}
	hp := faulttest.StartReportingHolder(t, "TestFaultHolder", "job", ttl,
		"TL_ADDRS="+strings.Join(addrs, ","), "TL_REGISTER="+regSrv.Addr(), "TL_PREFIX="+h.prefix)
	h.holder, h.fence = hp.Process, hp.Fence
	return h
}

// (a) The holder process is SIGKILLed: another obtains within TTL + 1 s.
func TestFaultHolderKilled(t *testing.T) {
	t.Parallel()
	ttl := time.Second
	h := startHolder(t, ttl)
	b := newLocker(t, newStore(t, h.addrs, &Options{Prefix: h.prefix}), "b")

	killed := time.Now()
	h.holder.Kill(t)
	l, took := faulttest.Obtain(t, b, "job", &tasklock.ObtainOptions{TTL: ttl}, killed)
	t.Logf("takeover %v after SIGKILL (TTL %v)", took, ttl)
	if took > ttl+time.Second {
		t.Fatalf("takeover took %v, want ≤ TTL + 1s", took)
	}
	if l.Fence() <= h.fence {
		t.Fatalf("fence %d after %d", l.Fence(), h.fence)
	}
	if ok, err := h.reg.Write(ctxT(t), l.Fence(), "b"); !ok || err != nil {
		t.Fatalf("the new holder's write was refused: %v", err)
	}
	if n := h.reg.Rejected(t); n != 0 {
		t.Fatalf("%d stale writes", n)
	}
}

// (b) The holder process is SIGSTOPped for 2×TTL: another obtains; when the
// first resumes its Done is already closed and none of its writes is
// accepted after the new holder's.
func TestFaultHolderPaused(t *testing.T) {
	t.Parallel()
	ttl := time.Second
	h := startHolder(t, ttl)
	b := newLocker(t, newStore(t, h.addrs, &Options{Prefix: h.prefix}), "b")

	h.holder.Stop(t)
	stopped := time.Now()
	l, err := b.Obtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("b obtained %v after the holder was stopped (TTL %v)", time.Since(stopped), ttl)
	if l.Fence() <= h.fence {
		t.Fatalf("fence %d after %d", l.Fence(), h.fence)
	}
	if ok, err := h.reg.Write(ctxT(t), l.Fence(), "b"); !ok || err != nil {
		t.Fatalf("the new holder's write was refused: %v", err)
	}
	time.Sleep(time.Until(stopped.Add(2 * ttl))) // the pause itself, not synchronisation
	h.holder.Cont(t)
	if line := h.holder.WaitLine(t, "resumed ", 5*time.Second); line != "resumed done=closed" {
		t.Fatalf("on resume the holder saw %q: it could have acted on a lost lock", line)
	}
	h.holder.WaitLine(t, "lost ", 5*time.Second)
	if stale := testserver.AcceptedAfter(h.reg.Accepted(t), "b", "holder"); len(stale) > 0 {
		t.Fatalf("register accepted the paused holder's writes after the new holder's: %v", stale)
	}
	assertHeld(t, l)
}

func assertHeld(t *testing.T, l *tasklock.Lock) {
	t.Helper()
	select {
	case <-l.Done():
		t.Fatalf("lock %q lost: %v", l.Key(), l.Err())
	default:
	}
}

// proxied starts one proxy per node and returns them and their addresses.
func proxied(t *testing.T, srvs []*testserver.Redis) ([]*testserver.Proxy, []string) {
	ps := make([]*testserver.Proxy, len(srvs))
	addrs := make([]string, len(srvs))
	for i, srv := range srvs {
		ps[i] = testserver.StartProxy(t, srv.Addr())
		addrs[i] = ps[i].Addr()
	}
	return ps, addrs
}

// newStoreCtx is newStore with clients that have ContextTimeoutEnabled set
// as given.
func newStoreCtx(t *testing.T, addrs []string, prefix string, ctxTimeout bool) *Store {
	t.Helper()
	cs := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		cs[i] = closeAtCleanup(t, redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: ctxTimeout}))
	}
	s, err := New(cs, &Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// (c) The network between the holder and one node is blackholed: the
// holder keeps the lock, renewing on the other two, and nobody else obtains
// it. With and without ContextTimeoutEnabled on the holder's clients.
func TestFaultBlackholeOneNode(t *testing.T) {
	t.Parallel()
	for _, ctxTimeout := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxTimeout), func(t *testing.T) {
			t.Parallel()
			srvs := startNodes(t, 3)
			proxies, paddrs := proxied(t, srvs)
			prefix := freshPrefix()
			a := newLocker(t, newStoreCtx(t, paddrs, prefix, ctxTimeout), "a")
			b := newLocker(t, newStore(t, addrsOf(srvs), &Options{Prefix: prefix}), "b")
			var reg fence.Register
			ttl := time.Second

			la, err := a.TryObtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			proxies[0].Blackhole(t)
			t.Cleanup(func() { proxies[0].Restore(t) }) // before the Lockers close
			deadline := time.Now().Add(3 * ttl)
			for time.Now().Before(deadline) {
				notObtainedWhileHeld(t, b, la)
				if err := reg.Write(la.Fence()); err != nil {
					t.Fatal(err)
				}
				time.Sleep(ttl / 10) // sampling interval
			}
			if err := la.Release(ctxT(t)); err != nil {
				t.Fatalf("release with one node cut off: %v", err)
			}
			lb, err := b.Obtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			faulttest.RefuseStale(t, &reg, la.Fence(), lb.Fence())
			_ = lb.Release(ctxT(t))
		})
	}
}

// (d) The network between the holder and two nodes is blackholed: the
// holder's Done closes before its lease could expire at those nodes, and
// another client obtains after.
func TestFaultBlackholeTwoNodes(t *testing.T) {
	t.Parallel()
	srvs := startNodes(t, 3)
	proxies, paddrs := proxied(t, srvs)
	prefix := freshPrefix()
	a := newLocker(t, newStore(t, paddrs, &Options{Prefix: prefix}), "a")
	b := newLocker(t, newStore(t, addrsOf(srvs), &Options{Prefix: prefix}), "b")
	var reg fence.Register
	ttl := time.Second

	la, err := a.TryObtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Write(la.Fence()); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	proxies[0].Blackhole(t)
	proxies[1].Blackhole(t)
	t.Cleanup(func() { proxies[0].Restore(t); proxies[1].Restore(t) }) // before the Lockers close

	closedAtTTL := faulttest.LookAt(la, cut.Add(ttl))
	lb, doneAt, bAt := faulttest.ObtainAfterDone(t, la, b, "job", &tasklock.ObtainOptions{TTL: ttl}, cut)
	t.Logf("a told %v after the cut (%v), b obtained %v after (TTL %v)", doneAt.Sub(cut), la.Err(), bAt.Sub(cut), ttl)
	if !<-closedAtTTL {
		t.Fatalf("a's Done still open at a look one TTL (%v) after the cut", ttl)
	}
	if !errors.Is(la.Err(), tasklock.ErrLockLost) {
		t.Fatalf("a's cause = %v", la.Err())
	}
	faulttest.RefuseStale(t, &reg, la.Fence(), lb.Fence())
	_ = lb.Release(ctxT(t))
}

// (e) A node restarts while a lock is held on it: the failure the package
// documentation describes ("Fences"), built deterministically, then the two
// rules that prevent it.
//
// Nodes 1, 2 and 3. Holder a cannot reach node 3 (blackholed), so its lock
// is on nodes 1 and 2 only; b reaches all three. Three earlier grants by a
// took node 1's and node 2's fence counters to 3; node 3's stayed at 0, so
// a's fence is 4. Then node 2 restarts:
//
//   - immediately, without persistence: node 2 comes back empty, and b
//     obtains the lock on nodes 2 and 3 while a's lease is still valid — two
//     holders — with fence 1, below a's 4. a learns of it at its next
//     renewal, once it reaches node 3 again.
//   - after staying down for the TTL (the delayed-restart rule): b cannot
//     obtain while a's lease is valid, and obtains only after a's Done has
//     closed.
//   - immediately, with appendonly yes and appendfsync always on every node:
//     node 2 comes back with a's lease, a keeps the lock, and b never
//     obtains it; fences keep increasing.
func TestFaultNodeRestart(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"immediate", "delayed", "aof"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testNodeRestart(t, mode)
		})
	}
}

func testNodeRestart(t *testing.T, mode string) {
	var srvOpts []testserver.RedisOption
	if mode == "aof" {
		srvOpts = append(srvOpts, testserver.WithRedisArgs("--appendonly", "yes", "--appendfsync", "always"))
	}
	srvs := startNodes(t, 3, srvOpts...)
	p3 := testserver.StartProxy(t, srvs[2].Addr())
	prefix := freshPrefix()
	a := newLocker(t, newStore(t, []string{srvs[0].Addr(), srvs[1].Addr(), p3.Addr()}, &Options{Prefix: prefix}), "a")
	// b reaches every node and waits for all of them: on a loaded machine a
	// node given up on after 50ms would turn b's grant into "held".
	b := newLocker(t, newStore(t, addrsOf(srvs), &Options{Prefix: prefix, NodeTimeout: time.Second}), "b")
	p3.Blackhole(t)
	t.Cleanup(func() { p3.Restore(t) }) // before the Lockers close
	for range 3 {
		l, err := a.TryObtain(ctxT(t), "job", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	ttl := 2 * time.Second
	la, err := a.TryObtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if la.Fence() != 4 {
		t.Fatalf("a's fence %d, want 4", la.Fence())
	}
	var reg fence.Register
	if err := reg.Write(la.Fence()); err != nil {
		t.Fatal(err)
	}

	switch mode {
	case "immediate":
		srvs[1].Restart(t)
		restarted := time.Now()
		lb, err := b.TryObtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: ttl})
		if err != nil {
			t.Fatalf("b did not obtain the lock after node 2 restarted empty (the documented violation did not happen): %v", err)
		}
		select {
		case <-la.Done():
			t.Fatalf("a's lock ended (%v) before b obtained: no overlap was shown", la.Err())
		default:
		}
		t.Logf("DOCUMENTED VIOLATION (package doc, Fences): node 2 restarted without persistence; "+
			"%v later b obtained the lock (nodes 2 and 3) with fence %d while a still held it (nodes 1 and 2 at grant) with fence %d: two holders",
			time.Since(restarted).Round(time.Millisecond), lb.Fence(), la.Fence())
		if lb.Fence() >= la.Fence() {
			t.Fatalf("b's fence %d is not below a's %d: the construction did not lower the maximum", lb.Fence(), la.Fence())
		}
		// The fence went down: the resource refuses the new holder and keeps
		// accepting the old one.
		if err := reg.Write(lb.Fence()); !errors.Is(err, tasklock.ErrStaleFence) {
			t.Fatalf("b's write with fence %d = %v, want ErrStaleFence", lb.Fence(), err)
		}
		if err := reg.Write(la.Fence()); err != nil {
			t.Fatalf("a's write = %v", err)
		}
		t.Logf("DOCUMENTED VIOLATION: the register rejects b's writes (fence %d) and accepts a's (fence %d)", lb.Fence(), la.Fence())
		// Once a reaches node 3 again, its next renewal finds a majority not
		// holding its lease.
		p3.Restore(t)
		select {
		case <-la.Done():
			t.Logf("a told %v after the restart: %v", time.Since(restarted).Round(time.Millisecond), la.Err())
		case <-time.After(ttl):
			t.Fatal("a was not told of the loss within one TTL")
		}
		if !errors.Is(la.Err(), tasklock.ErrLockLost) {
			t.Fatalf("a's cause = %v", la.Err())
		}
		_ = lb.Release(ctxT(t))

	case "delayed":
		srvs[1].Kill(t)
		killed := time.Now()
		// b tries throughout node 2's downtime, which lasts the TTL: the
		// delay is the point here, not synchronisation.
		tries := 0
		for time.Since(killed) < ttl {
			tries++
			if lb, err := b.TryObtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: ttl}); err == nil {
				select {
				case <-la.Done():
					t.Fatalf("b obtained the lock while node 2 was down (a's lease had ended: %v), want only after node 2 is back", la.Err())
				default:
					t.Fatalf("two holders while node 2 was down: b got fence %d while a holds fence %d", lb.Fence(), la.Fence())
				}
			}
			time.Sleep(50 * time.Millisecond) // sampling interval
		}
		srvs[1].Restart(t)
		lb, err := b.Obtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-la.Done():
		default:
			t.Fatalf("two holders after the delayed restart: b got fence %d while a holds fence %d", lb.Fence(), la.Fence())
		}
		t.Logf("delayed restart: b failed %d times while node 2 was down, obtained %v after the kill with fence %d; a had ended (%v) with fence %d",
			tries, time.Since(killed).Round(time.Millisecond), lb.Fence(), la.Err(), la.Fence())
		if lb.Fence() < la.Fence() {
			t.Logf("as documented, the delayed restart does not keep fences from going down: %d after %d", lb.Fence(), la.Fence())
		}
		_ = lb.Release(ctxT(t))

	case "aof":
		srvs[1].Restart(t)
		// For two TTLs a keeps renewing (nodes 1 and 2) and b never obtains.
		deadline := time.Now().Add(2 * ttl)
		for time.Now().Before(deadline) {
			notObtainedWhileHeld(t, b, la)
			time.Sleep(100 * time.Millisecond) // sampling interval
		}
		if err := la.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		lb, err := b.Obtain(ctxT(t), "job", nil)
		if err != nil {
			t.Fatal(err)
		}
		if lb.Fence() <= la.Fence() {
			t.Fatalf("fence %d after %d across an AOF restart", lb.Fence(), la.Fence())
		}
		t.Logf("with appendfsync always a kept the lock across node 2's restart; b obtained after its release with fence %d > %d", lb.Fence(), la.Fence())
		_ = lb.Release(ctxT(t))
	}
}
