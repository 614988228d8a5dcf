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
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
)

// Fault tests. The oracle for lock holders in other processes is a fenced
// register kept in ZooKeeper: a node holding the highest fence accepted,
// changed only by a multi that checks the version read (so a write with a
// lower fence than the one stored is refused) and appends a sequential
// child "fence writer" for every accepted write, so that any overlap would
// show in the history. In-process holders use tasklock.FencedRegister.

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
	lk, err := tasklock.New(s, &tasklock.Config{Owner: owner, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lk.Close() })
	return lk
}

// startHolder runs a helper process that obtains key under root on the
// shared server with a session (and TTL) of faultSession and writes to the
// register; it returns once the helper holds the lock and made a write.
func startHolder(t *testing.T, addr, root, reg, key string) (*testserver.Process, uint64) {
	t.Helper()
	h := testserver.StartHelper(t, "TestHolderProcess", "holder",
		"TASKLOCK_ZK_ADDR="+addr, "TASKLOCK_ZK_ROOT="+root, "TASKLOCK_ZK_REGISTER="+reg,
		"TASKLOCK_KEY="+key, "TASKLOCK_SESSION="+faultSession.String())
	line := h.WaitLine(t, "LOCKED ", 20*time.Second)
	fence, err := strconv.ParseUint(strings.TrimPrefix(line, "LOCKED "), 10, 64)
	if err != nil {
		t.Fatalf("helper said %q", line)
	}
	h.WaitLine(t, "WROTE", 10*time.Second)
	return h, fence
}

// TestHolderProcess is the lock holder that the fault tests run in a
// helper process; in a normal run it skips.
func TestHolderProcess(t *testing.T) {
	if testserver.HelperRole() != "holder" {
		t.Skip("runs only as a helper process started by testserver.StartHelper")
	}
	os.Exit(runHolder())
}

// runHolder obtains the key (TTL = the session timeout), prints "LOCKED
// <fence>", and then writes its fence to the register every 10ms while its
// lock's Done is open. After a pause (SIGSTOP) it prints "RESUMED", and
// every write it tries from then on; when Done closes it prints "LOST
// <cause>" and exits.
func runHolder() int {
	session, err := time.ParseDuration(os.Getenv("TASKLOCK_SESSION"))
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	c, err := dial(os.Getenv("TASKLOCK_ZK_ADDR"), session, nil)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	defer c.Close()
	s, err := New(c, &Options{Root: os.Getenv("TASKLOCK_ZK_ROOT"), SessionTimeout: session})
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	lk, err := tasklock.New(s, &tasklock.Config{Owner: "helper", Logger: quietLog})
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := lk.Obtain(ctx, os.Getenv("TASKLOCK_KEY"), &tasklock.ObtainOptions{TTL: session})
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	fmt.Printf("LOCKED %d\n", l.Fence())
	reg := os.Getenv("TASKLOCK_ZK_REGISTER")
	last := time.Now()
	resumed, wrote := false, false
	for {
		if gap := time.Since(last); gap > 200*time.Millisecond && !resumed {
			resumed = true
			fmt.Printf("RESUMED after %v\n", gap.Round(time.Millisecond))
		}
		last = time.Now()
		select {
		case <-l.Done():
			fmt.Printf("LOST %v\n", l.Err())
			return 0
		default:
		}
		ok, err := writeRegister(c, reg, l.Fence(), "helper")
		switch {
		case err != nil:
			fmt.Printf("WRITE %d error %v\n", l.Fence(), err)
		case resumed || !ok:
			fmt.Printf("WRITE %d accepted=%v\n", l.Fence(), ok)
		case !wrote:
			wrote = true
			fmt.Println("WROTE")
		}
		time.Sleep(10 * time.Millisecond) // the work between two writes
	}
}

// TestFaults runs the fault tests side by side.
func TestFaults(t *testing.T) {
	t.Run("HolderKilled", func(t *testing.T) { t.Parallel(); testHolderKilled(t) })
	t.Run("HolderPaused", func(t *testing.T) { t.Parallel(); testHolderPaused(t) })
	t.Run("NetworkBlackholed", func(t *testing.T) { t.Parallel(); testBlackholed(t) })
	t.Run("ServerKilled", func(t *testing.T) { t.Parallel(); testServerDown(t, false) })
	t.Run("ServerStopped", func(t *testing.T) { t.Parallel(); testServerDown(t, true) })
}

// testHolderKilled: the holder process is SIGKILLed. Its session and its
// lease (TTL = the session timeout) end at the server within the session
// timeout, and another obtains within the session timeout + 1s.
func testHolderKilled(t *testing.T) {
	z, c := shared(t)
	root, reg := newRoot(), newRegister(t, c)
	h, f1 := startHolder(t, z.Addr(), root, reg, "job")
	lk := newLocker(t, newStore(t, c, testSession, &Options{Root: root}), "next")
	h.Kill(t)
	killed := time.Now()
	l, err := lk.Obtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(killed)
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
	h, f1 := startHolder(t, z.Addr(), root, reg, "job")
	lk := newLocker(t, newStore(t, c, testSession, &Options{Root: root}), "next")
	h.Stop(t)
	stopped := time.Now()
	l, err := lk.Obtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(stopped)
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

	h.Cont(t)
	lost := h.WaitLine(t, "LOST ", 5*time.Second)
	var after []string
	for drained := false; !drained; {
		select {
		case line := <-h.Lines():
			if strings.HasPrefix(line, "RESUMED") || strings.HasPrefix(line, "WRITE ") {
				after = append(after, line)
			}
		default:
			drained = true
		}
	}
	t.Logf("the resumed holder said %q, after %q", after, lost)
	if !strings.Contains(lost, "tasklock: lock lost") {
		t.Errorf("holder's cause: %q, want a loss", lost)
	}
	for _, line := range after {
		if strings.Contains(line, "accepted=true") {
			t.Errorf("the resumed holder's write was accepted: %q", line)
		}
	}
	if code := h.Wait(t, 10*time.Second); code != 0 {
		t.Errorf("holder exit code %d", code)
	}
	t.Logf("writes accepted: %v", checkHistory(t, c, reg))
	select {
	case <-l.Done():
		t.Fatalf("the new holder's lock ended: %v", l.Err())
	default:
	}
}

// testBlackholed: the holder's traffic to ZooKeeper is blackholed by a
// proxy. Its Done closes before its session could expire at the server
// (its TTL is the session timeout, counted from its last renewal, which the
// server heard), and another (connected directly) obtains only after that.
func testBlackholed(t *testing.T) {
	z, c := shared(t)
	root := newRoot()
	proxy := testserver.StartProxy(t, z.Addr())
	hc := connect(t, proxy.Addr(), faultSession)
	holder := newLocker(t, newStore(t, hc, faultSession, &Options{Root: root}), "holder")
	other := newLocker(t, newStore(t, c, testSession, &Options{Root: root}), "other")
	l1, err := holder.Obtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: faultSession})
	if err != nil {
		t.Fatal(err)
	}
	var reg tasklock.FencedRegister
	var mu sync.Mutex
	var lastWrite time.Time // the holder's last accepted write
	workDone := make(chan struct{})
	go func() { // the holder's critical section, until Done
		defer close(workDone)
		for {
			select {
			case <-l1.Done():
				return
			default:
			}
			if reg.Write(l1.Fence()) == nil {
				mu.Lock()
				lastWrite = time.Now()
				mu.Unlock()
			}
			time.Sleep(5 * time.Millisecond) // the work between two writes
		}
	}()
	waitFor(t, 5*time.Second, "a write", func() bool { a, _ := reg.Counts(); return a > 0 })
	proxy.Blackhole(t)
	cut := time.Now()

	got := make(chan time.Time, 1)
	var l2 *tasklock.Lock
	go func() {
		var err error
		l2, err = other.Obtain(context.Background(), "job", &tasklock.ObtainOptions{TTL: 10 * time.Second, Wait: 10 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- time.Now()
	}()
	select {
	case <-l1.Done():
	case <-time.After(faultSession + time.Second):
		t.Fatalf("the blackholed holder's Done did not close within the session timeout + 1s")
	}
	doneAt := time.Now()
	<-workDone
	obtainedAt := <-got
	if l2 == nil {
		t.FailNow()
	}
	t.Logf("holder's Done closed %v after the cut (%v); other obtained %v after the cut",
		doneAt.Sub(cut).Round(time.Millisecond), l1.Err(), obtainedAt.Sub(cut).Round(time.Millisecond))
	if !errors.Is(l1.Err(), tasklock.ErrLockLost) {
		t.Errorf("holder's cause %v, want ErrLockLost", l1.Err())
	}
	if doneAt.Sub(cut) > faultSession {
		t.Errorf("Done closed %v after the cut, later than the session timeout %v", doneAt.Sub(cut), faultSession)
	}
	mu.Lock()
	lw := lastWrite
	mu.Unlock()
	if !obtainedAt.After(doneAt) || !obtainedAt.After(lw) {
		t.Errorf("the other obtained at +%v, before the holder's Done (+%v) or last write (+%v)",
			obtainedAt.Sub(cut), doneAt.Sub(cut), lw.Sub(cut))
	}
	if l2.Fence() <= l1.Fence() {
		t.Errorf("fence %d after %d", l2.Fence(), l1.Fence())
	}
	if err := reg.Write(l2.Fence()); err != nil {
		t.Fatal(err)
	}
	if err := reg.Write(l1.Fence()); !errors.Is(err, tasklock.ErrStaleFence) {
		t.Errorf("a late write of the old holder: %v, want ErrStaleFence", err)
	}
	acc, rej := reg.Counts()
	t.Logf("register: %d accepted, %d rejected (the probe above)", acc, rej)
	proxy.Restore(t)
}

// testServerDown: the ZooKeeper server is down (killed, or stopped) for
// longer than the session timeout while one client holds three locks.
// Every one of them is signalled lost within its TTL; after the server is
// back another client obtains each key with a higher fence, and the old
// holder's Store reports its leases gone.
func testServerDown(t *testing.T, stop bool) {
	z := testserver.StartZooKeeper(t)
	ac := connect(t, z.Addr(), faultSession)
	bc := connect(t, z.Addr(), testSession)
	root := newRoot()
	as := newStore(t, ac, faultSession, &Options{Root: root})
	a := newLocker(t, as, "a")
	b := newLocker(t, newStore(t, bc, testSession, &Options{Root: root}), "b")
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
