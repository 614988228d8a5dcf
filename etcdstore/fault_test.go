package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/storetest/faulttest"
)

// Fault tests. The oracle for a lock holder in another process is a fenced
// register kept in etcd: one Txn accepts a write only when the register's
// fence is not above the writer's, and logs every accepted write, so a
// stale write is refused by etcd and any overlap would show in the log.
// The tests that cut a Store off from etcd with a blackholing proxy are in
// systest/etcdfault: the proxy must not be a dependency of the library
// module.

// register is fence.Register's rule kept in etcd under prefix.
type register struct {
	c      *clientv3.Client
	prefix string
}

// pad makes fences compare as etcd compares values: as bytes.
func pad(f uint64) string { return fmt.Sprintf("%020d", f) }

func newRegister(t *testing.T, c *clientv3.Client) register {
	t.Helper()
	r := register{c: c, prefix: freshPrefix() + "register/"}
	if _, err := c.Put(ctxT(t), r.prefix+"highest", pad(0)); err != nil {
		t.Fatal(err)
	}
	return r
}

// write makes one fenced write and reports whether etcd accepted it.
func (r register) write(ctx context.Context, fence uint64, writer string) (bool, error) {
	f := pad(fence)
	resp, err := r.c.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(r.prefix+"highest"), "<", pad(fence+1))). // etcd has no <=
		Then(clientv3.OpPut(r.prefix+"highest", f),
			clientv3.OpPut(r.prefix+"log/"+f+"/"+writer+"/"+strconv.FormatInt(time.Now().UnixNano(), 10), writer)).
		Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// history returns the accepted writes in the order etcd accepted them.
func (r register) history(t *testing.T) []faulttest.Write {
	t.Helper()
	resp, err := r.c.Get(ctxT(t), r.prefix+"log/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	var out []faulttest.Write
	for _, kv := range resp.Kvs {
		parts := strings.Split(strings.TrimPrefix(string(kv.Key), r.prefix+"log/"), "/")
		f, err := strconv.ParseUint(parts[0], 10, 64)
		if err != nil {
			t.Fatalf("register log key %q", kv.Key)
		}
		out = append(out, faulttest.Write{Fence: f, Writer: string(kv.Value)})
	}
	return out
}

// check checks the register's history with faulttest.CheckHistory and
// returns how many writes each writer made.
func (r register) check(t *testing.T, from uint64) map[string]int {
	t.Helper()
	return faulttest.CheckHistory(t, r.history(t), from)
}

func newLocker(t *testing.T, s *Store, owner string) *tasklock.Locker {
	t.Helper()
	return faulttest.NewLocker(t, s, tasklock.Config{Owner: owner, Logger: quietLogger})
}

// faultTTL is both the session TTL and the lock TTL of the fault tests:
// etcd's smallest lease with the test server's raft timings.
const faultTTL = time.Second

// steadyTTL is the session TTL and the lock TTL of the test's own
// holders beside a holder process of faultTTL: long enough that no busy
// machine delays their keepalives past it, so that their holds last the
// test whatever the load, and a hold of theirs that ends is the fault's
// doing. Only the holder process's hold has to end fast.
const steadyTTL = 10 * time.Second

// startHolder starts a helper process that obtains key with faultTTL and
// writes to the register until its lock ends, and waits for its first
// accepted write.
func startHolder(t *testing.T, srv *testserver.Etcd, prefix string, reg register) *faulttest.Holder {
	t.Helper()
	return faulttest.StartHolder(t, "TestHolderProcess", "job", faultTTL, holderEnv(srv, prefix, reg)...)
}

// holderEnv is what a holder process needs to know: the server, the
// Store's Prefix and the register's.
func holderEnv(srv *testserver.Etcd, prefix string, reg register) []string {
	return []string{"TASKLOCK_ETCD=" + srv.Endpoints()[0], "TASKLOCK_PREFIX=" + prefix, "TASKLOCK_REGISTER=" + reg.prefix}
}

// holderSetup builds a holder process's Store and register writer from
// holderEnv's variables (a faulttest.SetupFunc).
func holderSetup(ttl time.Duration) (driver.Store, faulttest.WriteFunc, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{os.Getenv("TASKLOCK_ETCD")}, DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, nil, err
	}
	s, err := New(c, &Options{Prefix: os.Getenv("TASKLOCK_PREFIX"), SessionTTL: ttl})
	if err != nil {
		return nil, nil, err
	}
	reg := register{c: c, prefix: os.Getenv("TASKLOCK_REGISTER")}
	return s, func(ctx context.Context, fence uint64) (bool, error) {
		return reg.write(ctx, fence, faulttest.HelperOwner)
	}, nil
}

// TestHolderProcess is the lock holder that the fault tests run in a
// helper process (see faulttest.HolderMain); in a normal run it skips.
func TestHolderProcess(t *testing.T) { faulttest.HolderMain(t, holderSetup) }

// TestFaults runs the fault tests, in parallel, each on a server of its
// own.
func TestFaults(t *testing.T) {
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"HolderKilled", testHolderKilled},
		{"HolderPaused", testHolderPaused},
		{"ServerRestarted", testServerRestarted},
		{"ServerDown", testServerDown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

// takeover starts a holder process, SIGKILLs it (stop false) or SIGSTOPs
// it (stop true), has "next" obtain the key (with steadyTTL, on a Store
// of its own on the holder's prefix), checks that it did within the
// holder's SessionTTL + 1s with a higher fence, and makes the new
// holder's write. It returns the holder, the register, the new lock and
// its Store, and the fault's time.
func takeover(t *testing.T, stop bool) (*faulttest.Holder, register, *tasklock.Lock, *Store, time.Time) {
	t.Helper()
	srv := testserver.StartEtcd(t)
	c := newClient(t, srv.Endpoints(), nil)
	reg := newRegister(t, c)
	s := newStore(t, c, &Options{SessionTTL: steadyTTL})
	h := startHolder(t, srv, s.prefix, reg)
	f1 := h.Fence
	lk := newLocker(t, s, "next")
	sig, fenceErr := signal(t, h, stop)
	faulted := time.Now()
	l, took := faulttest.Obtain(t, lk, "job", &tasklock.ObtainOptions{TTL: steadyTTL}, faulted)
	t.Logf("obtained %v after %s of the holder (its SessionTTL %v), fence %d after %d", took.Round(time.Millisecond), sig, faultTTL, l.Fence(), f1)
	if took > faultTTL+time.Second {
		t.Errorf("takeover took %v, want ≤ SessionTTL + 1s", took)
	}
	if l.Fence() <= f1 {
		fenceErr("fence %d after %d", l.Fence(), f1)
	}
	if ok, err := reg.write(ctxT(t), l.Fence(), "next"); err != nil || !ok {
		t.Fatalf("the new holder's write: %v %v", ok, err)
	}
	return h, reg, l, s, faulted
}

// holderProcess is a holder process of either protocol (faulttest.Holder,
// faulttest.KindHolder), as the fault tests signal it.
type holderProcess interface {
	Stop(t testing.TB)
	Kill(t testing.TB)
}

// signal SIGSTOPs (stop) or SIGKILLs the holder process h, and returns
// the signal's name and how to report a fence that did not rise: fatally
// after a pause, since the resumed holder's writes would not be refused.
func signal(t *testing.T, h holderProcess, stop bool) (string, func(string, ...any)) {
	t.Helper()
	if stop {
		h.Stop(t)
		return "SIGSTOP", t.Fatalf
	}
	h.Kill(t)
	return "SIGKILL", t.Errorf
}

// testHolderKilled: the holder process is SIGKILLed; another obtains
// within SessionTTL + 1 s, with a higher fence.
func testHolderKilled(t *testing.T) {
	_, reg, l, _, _ := takeover(t, false)
	t.Logf("writes accepted: %v", reg.check(t, l.Fence()))
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// testHolderPaused: the holder process is SIGSTOPped past its TTL. Another
// obtains once etcd expired its session; when the holder resumes its Done
// is closed before it writes again, and none of its writes is accepted
// after the new holder's. Once the resumed holder has exited, whatever it
// did is at etcd: the key must have the new holder's entry alone, as its
// grant put it, its renewal must succeed, and a write with its fence must
// still be accepted.
func testHolderPaused(t *testing.T) {
	h, reg, l, s, stopped := takeover(t, true)
	time.Sleep(time.Until(stopped.Add(2 * faultTTL))) // the pause itself, not synchronisation

	h.CheckResumed(t, "") // and waits for it to exit
	t.Logf("writes accepted: %v", reg.check(t, l.Fence()))
	checkMutexHold(t, reg.c, s, "job", l)
	if err := l.Extend(ctxT(t), steadyTTL); err != nil {
		t.Fatalf("the new holder's renewal after the holder resumed: %v", err)
	}
	select {
	case <-l.Done():
		t.Fatalf("the new holder's lock ended: %v", l.Err())
	default:
	}
	if ok, err := reg.write(ctxT(t), l.Fence(), "next"); err != nil || !ok {
		t.Fatalf("the new holder's write after the holder resumed: accepted %v, %v", ok, err)
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// checkMutexHold reads key's entries at etcd and fails unless l's is the
// only one: of its owner, created at its fence (the grant's own put), on
// s's session lease.
func checkMutexHold(t *testing.T, c *clientv3.Client, s *Store, key string, l *tasklock.Lock) {
	t.Helper()
	resp, err := c.Get(ctxT(t), s.keyPrefix(key), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	lease := s.sess.id
	s.mu.Unlock()
	if len(resp.Kvs) != 1 {
		var keys []string
		for _, kv := range resp.Kvs {
			keys = append(keys, string(kv.Key))
		}
		t.Fatalf("%q has %d entries at etcd, want the new holder's alone: %q", key, len(resp.Kvs), keys)
	}
	kv := resp.Kvs[0]
	if _, owner, _ := parseValue(kv.Value); owner != l.Owner() {
		t.Errorf("%q is held by %q at etcd, want %q", key, owner, l.Owner())
	}
	if kv.CreateRevision != int64(l.Fence()) {
		t.Errorf("the entry %q created at revision %d, the new holder's fence %d: put again", kv.Key, kv.CreateRevision, l.Fence())
	}
	if clientv3.LeaseID(kv.Lease) != lease {
		t.Errorf("the entry %q on lease %x, not the Store's session %x", kv.Key, kv.Lease, lease)
	}
}

// testServerRestarted: etcd is killed and restarted while a lock is held.
// Its session lease, like everything etcd acknowledged, survives; renewals
// resume, nobody else obtains the lock meanwhile, the subscription comes
// back, and fences keep increasing.
func testServerRestarted(t *testing.T) {
	srv := testserver.StartEtcd(t)
	c := newClient(t, srv.Endpoints(), nil)
	const ttl = 3 * time.Second // long enough to outlast the restart
	s := newStore(t, c, &Options{SessionTTL: ttl})
	var renewed sync.Map
	a, err := tasklock.New(s, &tasklock.Config{Owner: "a", Logger: quietLogger, OnEvent: func(ev tasklock.Event) {
		if ev.Type == tasklock.EventRenewed {
			renewed.Store(ev.Fence, time.Now())
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	b := newLocker(t, s, "b")
	woken := make(chan string, 16)
	stop, err := s.Subscribe(ctxT(t), func(key string) { woken <- key })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	l1, err := a.Obtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	srv.Restart(t)
	restarted := time.Now()
	t.Logf("restart took %v", restarted.Sub(start).Round(time.Millisecond))
	waitFor(t, ttl, "a renewal after the restart", func() bool {
		at, ok := renewed.Load(l1.Fence())
		return ok && at.(time.Time).After(restarted)
	})
	select {
	case <-l1.Done():
		t.Fatalf("the lock was lost over a %v restart with TTL %v: %v", restarted.Sub(start), ttl, l1.Err())
	default:
	}
	if _, err := b.TryObtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: ttl}); !errors.Is(err, tasklock.ErrNotObtained) {
		t.Fatalf("b's TryObtain during a's surviving lock: %v, want ErrNotObtained", err)
	}
	if err := l1.Release(ctxT(t)); err != nil {
		t.Fatalf("Release after the restart: %v", err)
	}
	waitFor(t, 5*time.Second, "the watch to report the release", func() bool {
		select {
		case k := <-woken:
			return k == "job"
		default:
			return false
		}
	})
	l2, err := b.TryObtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if l2.Fence() <= l1.Fence() {
		t.Fatalf("fence %d after the restart, %d before", l2.Fence(), l1.Fence())
	}
	_ = l2.Release(ctxT(t))
}

// testServerDown: etcd is down for longer than the TTL. The holder's Done
// closes at its local validity, while etcd, back up, still has its key
// (its session gets a full TTL again on the restart: etcd's rule on a new
// leader); the holder's Store deletes it as soon as it reaches etcd again,
// since its deadline passed, and another obtains. Fences keep increasing.
func testServerDown(t *testing.T) {
	srv := testserver.StartEtcd(t)
	c := newClient(t, srv.Endpoints(), nil)
	s := newStore(t, c, &Options{SessionTTL: faultTTL})
	a := newLocker(t, s, "a")
	b := newLocker(t, newStore(t, newClient(t, srv.Endpoints(), nil), &Options{Prefix: s.prefix, SessionTTL: faultTTL}), "b")
	l1, err := a.Obtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: faultTTL})
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill(t)
	killed := time.Now()
	select {
	case <-l1.Done():
	case <-time.After(faultTTL + time.Second):
		t.Fatal("the holder's Done did not close within its TTL while etcd was down")
	}
	doneAt := time.Now()
	t.Logf("with etcd down, the holder stopped %v after the kill: %v", doneAt.Sub(killed).Round(time.Millisecond), l1.Err())
	if !errors.Is(l1.Err(), tasklock.ErrLockLost) {
		t.Errorf("cause %v, want ErrLockLost", l1.Err())
	}
	// With no deadline of the caller's, a call to the store that etcd
	// cannot answer still ends, with the store's error: a TryObtain on the
	// Store whose session was live within about its TTL, and the release
	// of the lost lock within about 5 s (the Locker's bounds, bound.go; the
	// Store bounds a call to it with no deadline by the session TTL too).
	faulttest.Unanswered(t, "TryObtain", 2*faultTTL, func() error {
		_, err := a.TryObtain(context.Background(), "other", &tasklock.ObtainOptions{TTL: faultTTL})
		return err
	})
	faulttest.Unanswered(t, "Release", 6*time.Second, func() error { return l1.Release(context.Background()) }) // the Locker's bound
	srv.Restart(t)
	restarted := time.Now()
	l2, err := b.Obtain(ctxT(t), "job", &tasklock.ObtainOptions{TTL: faultTTL})
	if err != nil {
		t.Fatal(err)
	}
	if !restarted.After(doneAt) {
		t.Fatal("b obtained before the holder's Done closed")
	}
	t.Logf("b obtained %v after the restart, fence %d after %d", time.Since(restarted).Round(time.Millisecond), l2.Fence(), l1.Fence())
	if l2.Fence() <= l1.Fence() {
		t.Fatalf("fence %d after the restart, %d before", l2.Fence(), l1.Fence())
	}
	if err := l2.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}
