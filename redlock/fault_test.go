package redlock

// Fault tests against three real redis-servers: the holder process is
// killed or paused. A fenced register kept on a fourth, unaffected
// redis-server is the oracle that counts stale writes. The tests that cut
// the network to some nodes (a blackholing proxy per node) are in
// systest/redlockfault: the proxy must not be a dependency of the library
// module.

import (
	"context"
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
		reg := testserver.RedisRegister{Addr: os.Getenv("TL_REGISTER")}
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
		reg:    testserver.RedisRegister{Addr: regSrv.Addr()},
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
