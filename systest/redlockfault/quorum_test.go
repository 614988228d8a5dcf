package redlockfault

// Quorum tests that need a node's traffic delayed or cut off while the
// others answer. (Moved from redlock's own tests; the others stay there.)

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/redlock"
	"github.com/tasklock/tasklock/systest/internal/proxy"
)

// Fences strictly increase while the majority shifts from node to node and
// each node misses some grants: the case where taking the maximum alone is
// not enough (without raising the counters the third grant below would get
// fence 6 again).
func TestFenceShiftingMajorities(t *testing.T) {
	t.Parallel()
	srvs := startNodes(t, 3)
	proxies := make([]*proxy.Proxy, 3)
	clients := make([]redis.UniversalClient, 3)
	calls := make([]*inFlight, 3)
	for i, srv := range srvs {
		proxies[i] = proxy.Start(t, srv.Addr())
		c := closeAtCleanup(t, redis.NewClient(&redis.Options{Addr: proxies[i].Addr()}))
		calls[i] = &inFlight{}
		c.AddHook(calls[i])
		clients[i] = c
	}
	prefix := freshPrefix()
	s := newStoreOn(t, clients, &redlock.Options{Prefix: prefix})
	direct := newClients(t, addrsOf(srvs))
	var last uint64
	grant := func(cut, times int) {
		t.Helper()
		proxies[cut].Blackhole(t)
		defer func() {
			proxies[cut].Restore(t)
			// Calls to the cut-off node resume on reconnection; wait until
			// their answers have been dealt with: no call to that node
			// under way (checked first), and no grant left on it (a late
			// grant is released when it arrives).
			waitFor(t, 10*time.Second, func() bool {
				return calls[cut].n.Load() == 0 && !onNode(t, direct[cut], prefix, "k")
			})
		}()
		for range times {
			tok := token()
			f := mustAcquire(t, s, "k", tok, "a", 10*time.Second)
			if f <= last {
				t.Fatalf("fence %d after %d with node %d cut off", f, last, cut)
			}
			last = f
			if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "k", Token: tok}); err != nil {
				t.Fatal(err)
			}
		}
	}
	grant(1, 5) // nodes 0 and 2 reach 5
	grant(2, 1) // node 0 reaches 6, node 1 goes from 1 to 6
	grant(0, 1) // nodes 1 and 2: 7 and 6
	if last != 7 {
		t.Fatalf("last fence %d, want 7", last)
	}
}

// Answers that come after Acquire gave up on them are released when they
// arrive.
func TestAcquireLateGrantsUndone(t *testing.T) {
	t.Parallel()
	srvs := startNodes(t, 3)
	addrs := make([]string, 3)
	for i, srv := range srvs {
		p := proxy.Start(t, srv.Addr())
		if i < 2 {
			p.Latency(t, patience+200*time.Millisecond) // replies come after Acquire's limit
		}
		addrs[i] = p.Addr()
	}
	prefix := freshPrefix()
	s := newStore(t, addrs, &redlock.Options{Prefix: prefix})
	direct := newClients(t, addrsOf(srvs))
	_, err := acquire(t, s, "k", token(), "a", 10*time.Second)
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with two slow nodes = %v, want a *QuorumError of timeouts", err)
	}
	t.Log(err)
	if onNode(t, direct[2], prefix, "k") {
		t.Fatal("the grant on the fast node was left behind")
	}
	// The slow nodes did grant; their grants go once their answers arrive.
	waitFor(t, 10*time.Second, func() bool {
		return !onNode(t, direct[0], prefix, "k") && !onNode(t, direct[1], prefix, "k")
	})
}
