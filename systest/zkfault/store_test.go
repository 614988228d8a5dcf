package zkfault

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/systest/internal/proxy"
	"github.com/tasklock/tasklock/zkstore"
)

// TestAbandonedAcquire: an Acquire whose ctx ends while the server is slow
// returns at once, and the grant that comes later is given back.
func TestAbandonedAcquire(t *testing.T) {
	t.Parallel()
	z := testserver.SharedZooKeeper(t)
	p := proxy.Start(t, z.Addr())
	var d countingDialer
	c := connectVia(t, p.Addr(), testSession, d.dial)
	s := newStore(t, c, testSession, nil)
	warm := token()
	mustAcquire(t, s, "warm", warm, "me", 10*time.Second) // creates the root
	// The server answers a second late: an Acquire that waited for it
	// would take that long, one that returns when its ctx ends does not,
	// however busy the machine.
	const latency = time.Second
	p.Latency(t, latency)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	tok := token()
	start := time.Now()
	_, err := s.Acquire(ctx, driver.AcquireParams{Key: "job", Token: tok, Owner: "me", TTL: time.Second})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire = %v, want DeadlineExceeded", err)
	}
	if took := time.Since(start); took >= latency {
		t.Fatalf("Acquire returned %v after it started, not before the server answered (%v late)", took, latency)
	}
	p.Latency(t, 0)
	other := newStore(t, connect(t, z.Addr(), testSession), testSession, &zkstore.Options{Root: s.Root()})
	// The late grant is dropped: the key becomes free, no lease is kept.
	waitFor(t, 10*time.Second, "the abandoned grant given back", func() bool {
		_, err := other.Acquire(ctxT(t), driver.AcquireParams{Key: "job", Token: token(), Owner: "o", TTL: time.Second})
		return err == nil
	})
	// No lease is kept for the abandoned grant: renewing it is ErrNotHeld
	// at once, without a request (a lease the Store kept, before its
	// deadline, would be checked at the server). The lease of "warm" is
	// kept.
	if since := time.Since(start); since >= time.Second {
		t.Logf("the grant's deadline (TTL 1s) passed %v ago: a lease kept for it would also be ErrNotHeld at once", since-time.Second)
	}
	w0 := d.writes.Load()
	res, err := s.Renew(ctxT(t), []driver.RenewParams{{Key: "job", Token: tok, TTL: time.Second}})
	if err != nil || !errors.Is(res[0], driver.ErrNotHeld) {
		t.Fatalf("Renew of the abandoned grant = %v, %v; want ErrNotHeld", res, err)
	}
	if n := d.writes.Load() - w0; n != 0 {
		t.Fatalf("%d requests sent to renew the abandoned grant: the Store kept a lease for it", n)
	}
	res, err = s.Renew(ctxT(t), []driver.RenewParams{{Key: "warm", Token: warm, TTL: 10 * time.Second}})
	if err != nil || res[0] != nil {
		t.Fatalf("Renew of \"warm\" = %v, %v; want it renewed", res, err)
	}
}

// TestSessionExpired: once the client learns that its session expired, the
// leases of that session are ErrNotHeld at once, without a request, even
// before their deadline. (The deadline comes first when SessionTimeout is
// right; here it is overstated, as a misconfigured Store would have it.)
func TestSessionExpired(t *testing.T) {
	t.Parallel()
	z := testserver.SharedZooKeeper(t)
	p := proxy.Start(t, z.Addr())
	var d countingDialer
	c := connectVia(t, p.Addr(), time.Second, d.dial)
	s := newStore(t, c, 30*time.Second, nil)
	tok := token()
	mustAcquire(t, s, "job", tok, "me", 30*time.Second)
	kids := children(t, c, keyPath(s, "job"))
	if len(kids) != 1 {
		t.Fatalf("children %q", kids)
	}
	node := keyPath(s, "job") + "/" + kids[0]
	old := c.SessionID()
	watcher := connect(t, z.Addr(), testSession)
	p.Blackhole(t)
	cut := time.Now()
	waitFor(t, 10*time.Second, "the session expired at the server", func() bool {
		ok, _, err := watcher.Exists(node)
		return err == nil && !ok
	})
	t.Logf("session (timeout 1s) expired at the server %v after the cut", time.Since(cut).Round(time.Millisecond))
	p.Restore(t)
	waitFor(t, 15*time.Second, "a new session", func() bool {
		return c.State() == zk.StateHasSession && c.SessionID() != old
	})
	w0 := d.writes.Load()
	res, err := s.Renew(ctxT(t), []driver.RenewParams{{Key: "job", Token: tok, TTL: 30 * time.Second}})
	if err != nil || !errors.Is(res[0], driver.ErrNotHeld) {
		t.Fatalf("Renew after the session expired = %v, %v; want ErrNotHeld", res, err)
	}
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "job", Token: tok}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Release after the session expired = %v, want ErrNotHeld", err)
	}
	if n := d.writes.Load() - w0; n != 0 {
		t.Errorf("%d requests sent for leases of an expired session", n)
	}
	// The new session works.
	mustAcquire(t, s, "job", token(), "me", time.Second)
}
