package zkstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/storetest/faulttest"
)

// Fault tests. The oracle for lock holders in other processes is a fenced
// register kept in ZooKeeper: a node holding the highest fence accepted,
// changed only by a multi that checks the version read (so a write with a
// lower fence than the one stored is refused) and appends a sequential
// child "fence writer" for every accepted write, so that any overlap would
// show in the history. The test of a holder cut off by a blackholing proxy
// is in systest/zkfault: the proxy must not be a dependency of the library
// module.

// faultSession is the session timeout (and the lock TTL) of the holders in
// the fault tests.
const faultSession = 2 * time.Second

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// newRegister creates a register node and returns its path.
func newRegister(t testing.TB, c *zk.Conn) string {
	t.Helper()
	reg := newRoot() + "-register"
	if _, err := c.Create(reg, []byte("0"), zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	return reg
}

// writeRegister makes one fenced write and reports whether it was accepted.
func writeRegister(c *zk.Conn, reg string, fence uint64, writer string) (bool, error) {
	for {
		b, st, err := c.Get(reg)
		if err != nil {
			return false, err
		}
		cur, err := strconv.ParseUint(string(b), 10, 64)
		if err != nil {
			return false, err
		}
		if fence < cur {
			return false, nil
		}
		_, err = c.Multi(
			&zk.SetDataRequest{Path: reg, Data: []byte(strconv.FormatUint(fence, 10)), Version: st.Version},
			&zk.CreateRequest{Path: reg + "/w-", Data: []byte(fmt.Sprintf("%d %s", fence, writer)), Acl: zk.WorldACL(zk.PermAll), Flags: zk.FlagSequence},
		)
		if errors.Is(err, zk.ErrBadVersion) {
			continue // another write came between: read again
		}
		return err == nil, err
	}
}

// checkHistory fails when an accepted write's fence is below an earlier
// one's, and returns how many writes each writer made.
func checkHistory(t testing.TB, c *zk.Conn, reg string) map[string]int {
	t.Helper()
	kids, _, err := c.Children(reg)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(kids) // w-NNNNNNNNNN: the order they were accepted in
	counts := map[string]int{}
	var last uint64
	for _, k := range kids {
		b, _, err := c.Get(reg + "/" + k)
		if err != nil {
			t.Fatal(err)
		}
		f, writer, _ := strings.Cut(string(b), " ")
		fence, _ := strconv.ParseUint(f, 10, 64)
		if fence < last {
			t.Errorf("write %s with fence %d accepted after fence %d", k, fence, last)
		}
		last = fence
		counts[writer]++
	}
	return counts
}

func newLocker(t testing.TB, s driver.Store, owner string) *tasklock.Locker {
	t.Helper()
	return faulttest.NewLocker(t, s, tasklock.Config{Owner: owner, Logger: quietLog})
}

// startHolder runs a helper process that obtains key under root on the
// shared server with a session (and TTL) of faultSession and writes to the
// register; it returns once the helper holds the lock and made a write.
func startHolder(t *testing.T, addr, root, reg, key string) *faulttest.Holder {
	t.Helper()
	return faulttest.StartHolder(t, "TestHolderProcess", key, faultSession,
		"TASKLOCK_ZK_ADDR="+addr, "TASKLOCK_ZK_ROOT="+root, "TASKLOCK_ZK_REGISTER="+reg)
}

// TestHolderProcess is the lock holder that the fault tests run in a
// helper process (see faulttest.HolderMain; its TTL is also its session
// timeout); in a normal run it skips.
func TestHolderProcess(t *testing.T) { faulttest.HolderMain(t, holderSetup) }

// holderSetup builds a holder process's store and register from its
// environment.
func holderSetup(session time.Duration) (driver.Store, faulttest.WriteFunc, error) {
	c, err := dial(os.Getenv("TASKLOCK_ZK_ADDR"), session, nil)
	if err != nil {
		return nil, nil, err
	}
	s, err := New(c, &Options{Root: os.Getenv("TASKLOCK_ZK_ROOT"), SessionTimeout: session})
	if err != nil {
		return nil, nil, err
	}
	reg := os.Getenv("TASKLOCK_ZK_REGISTER")
	return s, func(_ context.Context, fence uint64) (bool, error) { return writeRegister(c, reg, fence, "helper") }, nil
}

// TestFaults runs the fault tests side by side.
func TestFaults(t *testing.T) {
	t.Run("HolderKilled", func(t *testing.T) { t.Parallel(); testHolderKilled(t) })
	t.Run("HolderPaused", func(t *testing.T) { t.Parallel(); testHolderPaused(t) })
	t.Run("ServerKilled", func(t *testing.T) { t.Parallel(); testServerDown(t, false) })
	t.Run("ServerStopped", func(t *testing.T) { t.Parallel(); testServerDown(t, true) })
	t.Run("ServerRestarted", func(t *testing.T) { t.Parallel(); testServerRestarted(t) })
	t.Run("ServerDownPastReaper", func(t *testing.T) { t.Parallel(); testServerDownPastReaper(t) })
}

// outage is a ZooKeeper server of a test's own, to take down, with two
// clients on one root that dial it through d: a (Conn ac, Store as), with
// the session timeout the test chose, and b, with testSession.
type outage struct {
	z      *testserver.ZooKeeper
	d      *downDialer
	ac, bc *zk.Conn
	as     *Store
	a, b   *tasklock.Locker
}

func startOutage(t *testing.T, session time.Duration) *outage {
	t.Helper()
	o := &outage{z: testserver.StartZooKeeper(t), d: new(downDialer)}
	o.ac = connectVia(t, o.z.Addr(), session, o.d.dial)
	o.bc = connectVia(t, o.z.Addr(), testSession, o.d.dial)
	root := newRoot()
	o.as = newStore(t, o.ac, session, &Options{Root: root})
	o.a = newLocker(t, o.as, "a")
	o.b = newLocker(t, newStore(t, o.bc, testSession, &Options{Root: root}), "b")
	return o
}

// testServerDownPastReaper: the ZooKeeper server is killed while a holds a
// lock, and stays down until long after the lease's deadline plus twice the
// session timeout (plus the reaper's longest backoff and a second): a
// reaper that stopped retrying a failed delete after twice the session
// timeout has given up on the lock node by then. The restarted server
// restores a's session with a fresh timeout and a's client resumes it, and
// with it the node of the lock a lost during the outage. a's Store must
// delete that node within its longest retry interval (and a little) of the
// reconnection, and b then obtains the key at once, with a higher fence.
//
// The clients dial through a downDialer that refuses them from the kill
// until the restarted server serves requests: a client that connects while
// the server is still loading its data may be left without an answer or a
// close (ZooKeeper 3.8.0 fails to close such a connection) for ten times
// go-zookeeper's receive timeout, long enough for its session to expire. The session timeout leaves the restarted server time
// to get from restoring the session to serving requests, and the client
// time to redial; on a machine so loaded that the session expires anyway,
// the run shows nothing, and it is tried again, at most three times.
func testServerDownPastReaper(t *testing.T) {
	const session, ttl, tries = 8 * time.Second, time.Second, 3
	o := startOutage(t, session)
	z, d, ac, bc, as, a, b := o.z, o.d, o.ac, o.bc, o.as, o.a, o.b

	// try runs the outage once for key and reports whether a's session was
	// resumed.
	try := func(key string) bool {
		la, err := a.Obtain(ctxT(t), key, &tasklock.ObtainOptions{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		granted := time.Now() // after the grant was sent: the Store's deadline is before granted+ttl
		sid := ac.SessionID()
		z.Kill(t)
		d.Down()
		down := time.Now()
		select {
		case <-la.Done():
		case <-time.After(ttl + time.Second):
			t.Fatalf("a's lock still open %v after the server went down (TTL %v)", time.Since(down), ttl)
		}
		// The outage is the fault under test: it lasts past the point
		// where a reaper bounded by twice the session timeout gives up
		// (its last attempt starts by then, and fails within a second).
		time.Sleep(time.Until(granted.Add(ttl + 2*session + reapRetryMax + time.Second)))
		z.Restart(t)
		d.Up()
		back := time.Now()
		t.Logf("server down %v (lease deadline + 2 × session timeout %v + %v + 1s)",
			back.Sub(down).Round(time.Millisecond), session, reapRetryMax)
		waitFor(t, 15*time.Second, "a's client reconnected", func() bool { return ac.State() == zk.StateHasSession })
		reconnected := time.Now()
		if got := ac.SessionID(); got != sid {
			t.Logf("a's client reconnected %v after the restart with session %x, not its own %x: the session expired, and its node with it",
				reconnected.Sub(back).Round(time.Millisecond), got, sid)
			return false
		}
		limit := reapRetryMax + 5*time.Second
		waitFor(t, limit, "a's lock node deleted after a's session was resumed", func() bool {
			kids, _, err := bc.Children(as.keyPath(key))
			return errors.Is(err, zk.ErrNoNode) || err == nil && len(kids) == 0
		})
		deleted := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		lb, err := b.Obtain(ctx, key, &tasklock.ObtainOptions{TTL: 5 * time.Second})
		if err != nil {
			t.Fatalf("b's Obtain %v after a's lock node was deleted: %v", time.Since(deleted).Round(time.Millisecond), err)
		}
		t.Logf("a resumed session %x %v after the restart; its lock node deleted %v later (limit %v); b obtained %v after that",
			sid, reconnected.Sub(back).Round(time.Millisecond), deleted.Sub(reconnected).Round(time.Millisecond), limit,
			time.Since(deleted).Round(time.Millisecond))
		if lb.Fence() <= la.Fence() {
			t.Errorf("fence %d after %d", lb.Fence(), la.Fence())
		}
		if err := lb.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		return true
	}
	for i := 1; !try(fmt.Sprintf("job-%d", i)); i++ {
		if i == tries {
			t.Fatalf("a's session expired in all %d outages: the machine is too busy for the restarted server to serve within the session timeout %v", tries, session)
		}
	}
	// A second orphan for the same node (the Locker's Release of the lost
	// lock hands it over too) goes at its next retry.
	waitFor(t, reapRetryMax+time.Second, "a's Store done with its nodes", func() bool {
		as.mu.Lock()
		defer as.mu.Unlock()
		return len(as.orphans)+len(as.leases) == 0
	})
}

// testServerRestarted: the ZooKeeper server is killed and restarted at once
// while a holds a lock and b waits for it. The server restores a's session
// from its log (its timeout counting again from the restart), so a's
// client reconnects and keeps the lock; b must not obtain it while a's
// Done is open. It repeats three times, and then a releases and b
// obtains with a higher fence. (On a machine so busy that a restart takes
// longer than the TTL, a loses the lock and b must obtain it.) The clients
// dial through a downDialer that refuses them until the restarted server
// serves requests (see testServerDownPastReaper).
func testServerRestarted(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	var d downDialer
	ac := connectVia(t, z.Addr(), faultSession, d.dial)
	bc := connectVia(t, z.Addr(), faultSession, d.dial)
	root := newRoot()
	a := newLocker(t, newStore(t, ac, faultSession, &Options{Root: root}), "a")
	b := newLocker(t, newStore(t, bc, faultSession, &Options{Root: root}), "b")
	la, err := a.Obtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: faultSession})
	if err != nil {
		t.Fatal(err)
	}
	aDone := make(chan time.Time, 1)
	go func() { <-la.Done(); aDone <- time.Now() }()
	type result struct {
		l   *tasklock.Lock
		err error
		at  time.Time
	}
	bGot := make(chan result, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		l, err := b.Obtain(ctx, "job", &tasklock.ObtainOptions{TTL: faultSession})
		bGot <- result{l, err, time.Now()}
	}()
	for i := range 3 {
		start := time.Now()
		z.Kill(t)
		d.Down()
		z.Restart(t)
		d.Up()
		t.Logf("restart %d took %v", i, time.Since(start).Round(time.Millisecond))
		// Two session timeouts after the restart a's session has either
		// been resumed or has expired; a lock a lost meanwhile has its node
		// deleted by then, or within a's Store's longest retry interval.
		select {
		case r := <-bGot:
			var doneAt time.Time
			select {
			case doneAt = <-aDone:
			case <-time.After(10 * time.Second):
				t.Fatalf("b obtained (%v) and a's Done did not close within 10s", r.err)
			}
			if r.err != nil {
				t.Fatal(r.err)
			}
			if doneAt.After(r.at) {
				t.Fatalf("restart %d: b obtained %v before a's Done closed: two holders", i, doneAt.Sub(r.at))
			}
			t.Logf("restart %d: a lost the lock (%v), b obtained %v after a's Done", i, la.Err(), r.at.Sub(doneAt))
			_ = r.l.Release(ctxT(t))
			return
		case <-time.After(2*faultSession + reapRetryMax):
		}
		select {
		case <-la.Done():
			t.Fatalf("restart %d: a's lock ended (%v) but b has not obtained", i, la.Err())
		default:
		}
	}
	t.Logf("a kept the lock through 3 restarts; b waited")
	if err := la.Release(ctxT(t)); err != nil {
		t.Fatalf("a's Release after the restarts: %v", err)
	}
	r := <-bGot
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.l.Fence() <= la.Fence() {
		t.Errorf("fence %d after %d", r.l.Fence(), la.Fence())
	}
	_ = r.l.Release(ctxT(t))
}

// testHolderKilled: the holder process is SIGKILLed. Its session and its
// lease (TTL = the session timeout) end at the server within the session
// timeout, and another obtains within the session timeout + 1s.
func testHolderKilled(t *testing.T) {
	z, c := shared(t)
	root, reg := newRoot(), newRegister(t, c)
	h := startHolder(t, z.Addr(), root, reg, "job")
	f1 := h.Fence
	lk := newLocker(t, newStore(t, c, testSession, &Options{Root: root}), "next")
	h.Kill(t)
	l, took := faulttest.Obtain(t, lk, "job", &tasklock.ObtainOptions{TTL: 5 * time.Second}, time.Now())
	limit := faultSession + time.Second
	t.Logf("session timeout %v: obtained %v after SIGKILL of the holder (limit %v), fence %d after %d", faultSession, took.Round(time.Millisecond), limit, l.Fence(), f1)
	if took > limit {
		t.Errorf("takeover took %v, want ≤ %v", took, limit)
	}
	if l.Fence() <= f1 {
		t.Errorf("fence %d after %d", l.Fence(), f1)
	}
	if ok, err := writeRegister(c, reg, l.Fence(), "next"); err != nil || !ok {
		t.Fatalf("the new holder's write: %v %v", ok, err)
	}
	t.Logf("writes accepted: %v", checkHistory(t, c, reg))
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// testHolderPaused: the holder process is SIGSTOPped past its session
// timeout. Another obtains once its session or lease ended at the server;
// when the holder resumes, its Done is closed before it writes again, and
// none of its writes is accepted after the new holder's.
func testHolderPaused(t *testing.T) {
	z, c := shared(t)
	root, reg := newRoot(), newRegister(t, c)
	h := startHolder(t, z.Addr(), root, reg, "job")
	f1 := h.Fence
	lk := newLocker(t, newStore(t, c, testSession, &Options{Root: root}), "next")
	h.Stop(t)
	l, took := faulttest.Obtain(t, lk, "job", &tasklock.ObtainOptions{TTL: 10 * time.Second}, time.Now())
	t.Logf("obtained %v after SIGSTOP of the holder (session timeout %v), fence %d after %d", took.Round(time.Millisecond), faultSession, l.Fence(), f1)
	if took > faultSession+time.Second {
		t.Errorf("takeover took %v, want ≤ session timeout + 1s", took)
	}
	if l.Fence() <= f1 {
		t.Fatalf("fence %d after %d", l.Fence(), f1)
	}
	if ok, err := writeRegister(c, reg, l.Fence(), "next"); err != nil || !ok {
		t.Fatalf("the new holder's write: %v %v", ok, err)
	}

	h.CheckResumed(t, "")
	t.Logf("writes accepted: %v", checkHistory(t, c, reg))
	select {
	case <-l.Done():
		t.Fatalf("the new holder's lock ended: %v", l.Err())
	default:
	}
}

// testServerDown: the ZooKeeper server is down (killed, or stopped) for
// longer than the session timeout while one client holds three locks.
// Every one of them is signalled lost within its TTL; after the server is
// back another client obtains each key with a higher fence, and the old
// holder's Store reports its leases gone. A killed server's clients dial
// through a downDialer that refuses them until the restarted server serves
// requests (see testServerDownPastReaper).
func testServerDown(t *testing.T, stop bool) {
	o := startOutage(t, faultSession)
	z, d, ac, as, a, b := o.z, o.d, o.ac, o.as, o.a, o.b
	keys := []string{"job-1", "job-2", "job-3"}
	locks := make([]*tasklock.Lock, len(keys))
	for i, k := range keys {
		var err error
		if locks[i], err = a.Obtain(ctxT(t), k, &tasklock.ObtainOptions{TTL: faultSession}); err != nil {
			t.Fatal(err)
		}
	}
	tok := token() // a lease taken through the store directly, to renew by hand
	mustAcquire(t, as, "direct", tok, "a", faultSession)

	down := time.Now()
	if stop {
		z.Stop(t)
	} else {
		z.Kill(t)
		d.Down()
	}
	for i, l := range locks {
		select {
		case <-l.Done():
		case <-time.After(faultSession + time.Second):
			t.Fatalf("lock %s still open %v after the server went down", keys[i], time.Since(down))
		}
		if !errors.Is(l.Err(), tasklock.ErrLockLost) {
			t.Errorf("lock %s: cause %v, want ErrLockLost", keys[i], l.Err())
		}
	}
	t.Logf("all %d holders signalled %v after the server went down (TTL %v): %v", len(locks),
		time.Since(down).Round(time.Millisecond), faultSession, locks[0].Err())
	// The outage lasts past the session timeout.
	time.Sleep(time.Until(down.Add(faultSession + 300*time.Millisecond)))
	start := time.Now()
	if stop {
		z.Cont(t)
	} else {
		z.Restart(t)
		d.Up()
	}
	t.Logf("server back %v after it went down (%s)", time.Since(down).Round(time.Millisecond), map[bool]string{true: "SIGSTOP/SIGCONT", false: "SIGKILL/restart"}[stop])
	for i, k := range keys {
		l, err := b.Obtain(ctxT(t), k, &tasklock.ObtainOptions{TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= locks[i].Fence() {
			t.Errorf("%s: fence %d after the outage, %d before", k, l.Fence(), locks[i].Fence())
		}
		if err := locks[i].Release(ctxT(t)); !errors.Is(err, tasklock.ErrNotHeld) {
			t.Errorf("%s: the old holder's Release = %v, want ErrNotHeld", k, err)
		}
		_ = l.Release(ctxT(t))
	}
	t.Logf("b obtained all %d keys %v after the server was back", len(keys), time.Since(start).Round(time.Millisecond))
	res, err := as.Renew(ctxT(t), []driver.RenewParams{{Key: "direct", Token: tok, TTL: faultSession}})
	if err != nil || !errors.Is(res[0], driver.ErrNotHeld) {
		t.Errorf("renewing a lease of before the outage: %v, %v; want ErrNotHeld", res, err)
	}
	t.Logf("a's session %x (state %v)", ac.SessionID(), ac.State())
}
