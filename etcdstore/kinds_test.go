package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
)

func tryKind(ctx context.Context, s *Store, key, tok, owner string, m driver.Mode, limit int, ttl time.Duration) (driver.Grant, error) {
	return s.Acquire(ctx, driver.AcquireParams{Key: key, Token: tok, Owner: owner, TTL: ttl, Mode: m, Limit: limit})
}

func mustKind(t *testing.T, s *Store, key, tok, owner string, m driver.Mode, limit int, ttl time.Duration) uint64 {
	t.Helper()
	g, err := tryKind(ctxT(t), s, key, tok, owner, m, limit, ttl)
	if err != nil {
		t.Fatalf("Acquire %v of %q by %s: %v", m, key, owner, err)
	}
	return g.Fence
}

func wantHeld(t *testing.T, what string, err error, owner string, ttl bool) {
	t.Helper()
	var he *driver.HeldError
	if !errors.As(err, &he) {
		t.Fatalf("%s: %v, want a *HeldError", what, err)
	}
	if he.Owner != owner || (he.TTL > 0) != ttl {
		t.Fatalf("%s: %+v, want owner %q and a TTL: %v", what, he, owner, ttl)
	}
}

// testKindsLayout: every entry is a key of its own under Prefix + 0xfe
// "kinds/" + key + "/", named by its mode and token, on the session lease,
// holding the Limit, the token, the TTL and the owner; the counter is
// outside any lease and its mod revision is the last grant's fence. A
// mutex of the same name is a key of the mutex namespace.
func testKindsLayout(t *testing.T, c *clientv3.Client) {
	s := newStore(t, c, nil)
	mf := mustAcquire(t, s, "a/b", "m", "mutex", 10*time.Second) // renewed at the end
	wf := mustKind(t, s, "a/b", "w", "writer", driver.ModeWrite, 0, 3*time.Second)
	if wf <= mf {
		t.Fatalf("writer's fence %d after the mutex's %d", wf, mf)
	}
	kp := s.prefix + "\xfekinds/a%2Fb/"
	resp, err := c.Get(ctxT(t), kp, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 2 {
		t.Fatalf("%d keys under %q, want the counter and the writer", len(resp.Kvs), kp)
	}
	f, w := resp.Kvs[0], resp.Kvs[1]
	if string(f.Key) != kp+"f" || f.Lease != 0 || uint64(f.ModRevision) != wf {
		t.Errorf("counter %q, lease %x, mod revision %d; want %q, none, %d", f.Key, f.Lease, f.ModRevision, kp+"f", wf)
	}
	if string(w.Key) != kp+"w/w" || string(w.Value) != "0\nw\n3000\nwriter" || clientv3.LeaseID(w.Lease) != s.sess.id || uint64(w.ModRevision) != wf {
		t.Errorf("writer %q = %q, lease %x, mod revision %d", w.Key, w.Value, w.Lease, w.ModRevision)
	}
	if key, ok := s.lockOf(w.Key); !ok || key != "a/b" {
		t.Errorf("lockOf(%q) = %q, %v", w.Key, key, ok)
	}
	if _, ok := s.lockOf(f.Key); ok {
		t.Errorf("lockOf(the counter) = ok")
	}
	if _, _, ok := s.parseKey(w.Key); ok {
		t.Errorf("parseKey took a kinds entry for a mutex's")
	}
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "a/b", Token: "w", Mode: driver.ModeWrite}); err != nil {
		t.Fatal(err)
	}
	pf := mustKind(t, s, "a/b", "p", "sem", driver.ModePermit, 2, 5*time.Second)
	if ok, lease := exists(t, c, kp+"p/p"); !ok || lease != s.sess.id {
		t.Fatalf("permit key: exists %v, lease %x", ok, lease)
	}
	resp, err = c.Get(ctxT(t), kp+"f")
	if err != nil || len(resp.Kvs) != 1 || uint64(resp.Kvs[0].ModRevision) != pf {
		t.Fatalf("counter after a permit: %v %v, want mod revision %d", resp, err, pf)
	}
	// The mutex is untouched by all this.
	res, err := s.Renew(ctxT(t), []driver.RenewParams{{Key: "a/b", Token: "m", TTL: time.Second}})
	if err != nil || res[0] != nil {
		t.Fatalf("Renew of the mutex: %v %v", res, err)
	}
}

// testKindsRWRules: the read-write rules at the store, with the etcd keys
// they leave: the waiting entry, its removal, repeats, fences.
func testKindsRWRules(t *testing.T, c *clientv3.Client) {
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	const ttl = 10 * time.Second
	kp := s.kindPrefix("rw")
	if f := mustKind(t, s, "rw", "r1", "reader-1", driver.ModeRead, 0, ttl); f != 0 {
		t.Fatalf("a reader before any writer: fence %d", f)
	}
	_, err := tryKind(ctx, s, "rw", "w1", "writer-1", driver.ModeWrite, 0, ttl)
	wantHeld(t, "a writer while a reader holds", err, "reader-1", true)
	if ok, _ := exists(t, c, kp+"q/w1"); !ok {
		t.Fatal("the refused writer left no waiting entry")
	}
	_, err = tryKind(ctx, s, "rw", "r2", "reader-2", driver.ModeRead, 0, ttl)
	wantHeld(t, "a reader while a writer waits", err, "writer-1", false)
	// A repeated reader is granted again while the writer waits.
	if f := mustKind(t, s, "rw", "r1", "reader-1", driver.ModeRead, 0, ttl); f != 0 {
		t.Fatalf("a repeated reader: fence %d", f)
	}
	// Kinds mismatch: a permit on a read-write lock, with a waiting writer only too.
	if _, err := tryKind(ctx, s, "rw", "p", "sem", driver.ModePermit, 1, ttl); !errors.Is(err, driver.ErrKindMismatch) {
		t.Fatalf("a permit on a read-write lock: %v", err)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "rw", Token: "r1", Mode: driver.ModeRead}); err != nil {
		t.Fatal(err)
	}
	// The waiting entry becomes the hold: the key has a writer, no waiting entry.
	f1 := mustKind(t, s, "rw", "w1", "writer-1", driver.ModeWrite, 0, ttl)
	if ok, _ := exists(t, c, kp+"q/w1"); ok {
		t.Fatal("the granted writer's waiting entry is still there")
	}
	if f := mustKind(t, s, "rw", "w1", "writer-1", driver.ModeWrite, 0, ttl); f != f1 {
		t.Fatalf("a repeated writer: fence %d, want %d", f, f1)
	}
	_, err = tryKind(ctx, s, "rw", "w2", "writer-2", driver.ModeWrite, 0, ttl)
	wantHeld(t, "a writer while a writer holds", err, "writer-1", true)
	// A waiting writer that gives up: its entry goes, and Release says ErrNotHeld.
	if err := s.Release(ctx, driver.ReleaseParams{Key: "rw", Token: "w2", Mode: driver.ModeWrite}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Release of a waiting writer: %v, want ErrNotHeld", err)
	}
	if ok, _ := exists(t, c, kp+"q/w2"); ok {
		t.Fatal("the waiting writer's entry outlived its Release")
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "rw", Token: "w1", Mode: driver.ModeWrite}); err != nil {
		t.Fatal(err)
	}
	if f := mustKind(t, s, "rw", "r3", "reader-3", driver.ModeRead, 0, ttl); f != f1 {
		t.Fatalf("a reader after the writer: fence %d, want the writer's %d", f, f1)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "rw", Token: "r3", Mode: driver.ModeRead}); err != nil {
		t.Fatal(err)
	}
	// The counter outlives the entries: the next writer's fence is higher.
	if f := mustKind(t, s, "rw", "w3", "writer-3", driver.ModeWrite, 0, ttl); f <= f1 {
		t.Fatalf("next writer's fence %d after %d", f, f1)
	}
}

// testKindsSemRules: Limit permits, mismatches, the refusal naming the
// permit that can end first, repeats.
func testKindsSemRules(t *testing.T, c *clientv3.Client) {
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	f1 := mustKind(t, s, "sem", "p1", "one", driver.ModePermit, 2, 8*time.Second)
	f2 := mustKind(t, s, "sem", "p2", "two", driver.ModePermit, 2, 5*time.Second)
	if f2 <= f1 {
		t.Fatalf("fences %d, %d", f1, f2)
	}
	_, err := tryKind(ctx, s, "sem", "p3", "three", driver.ModePermit, 2, 5*time.Second)
	wantHeld(t, "a third permit of two", err, "two", true)
	if he := (*driver.HeldError)(nil); errors.As(err, &he) && he.TTL > 5*time.Second {
		t.Fatalf("TTL %v, above the permit's 5s", he.TTL)
	}
	if f := mustKind(t, s, "sem", "p1", "one", driver.ModePermit, 2, 8*time.Second); f != f1 {
		t.Fatalf("repeated permit: fence %d, want %d", f, f1)
	}
	for _, m := range []struct {
		mode  driver.Mode
		limit int
	}{{driver.ModePermit, 3}, {driver.ModeRead, 0}, {driver.ModeWrite, 0}} {
		if _, err := tryKind(ctx, s, "sem", "x", "x", m.mode, m.limit, time.Second); !errors.Is(err, driver.ErrKindMismatch) {
			t.Fatalf("%v (Limit %d) on a semaphore of 2: %v", m.mode, m.limit, err)
		}
	}
	if ok, _ := exists(t, c, s.kindPrefix("sem")+"q/x"); ok {
		t.Fatal("a mismatched writer left a waiting entry")
	}
	for _, bad := range []driver.AcquireParams{
		{Key: "sem", Token: "y", TTL: time.Second, Mode: driver.ModePermit},
		{Key: "sem", Token: "y", TTL: time.Second, Mode: driver.ModeRead, Limit: 2},
	} {
		var oe *driver.OptionError
		if _, err := s.Acquire(ctx, bad); !errors.As(err, &oe) || oe.Field != "AcquireParams.Limit" {
			t.Fatalf("Acquire %+v: %v, want an OptionError naming AcquireParams.Limit", bad, err)
		}
	}
	if _, err := s.Acquire(ctx, driver.AcquireParams{Key: "sem", Token: "y", TTL: time.Second, Mode: 9}); !errors.Is(err, driver.ErrUnsupported) {
		t.Fatalf("an unknown mode: %v, want ErrUnsupported", err)
	}
	for _, tok := range []string{"p1", "p2"} {
		if err := s.Release(ctx, driver.ReleaseParams{Key: "sem", Token: tok, Mode: driver.ModePermit}); err != nil {
			t.Fatal(err)
		}
	}
	if f := mustKind(t, s, "sem", "p4", "four", driver.ModePermit, 3, time.Second); f <= f2 {
		t.Fatalf("fence %d after %d", f, f2)
	}
}

// testKindsRoundTrips: a reader's and a writer's Acquire, granted or
// refused, is one Txn; a permit's, one Txn on a free key and two beside
// other permits; Renew of a batch mixing mutexes and every mode is one Txn,
// as for mutexes alone.
func testKindsRoundTrips(t *testing.T, c *clientv3.Client) {
	var cnt counter
	s := newStore(t, newClient(t, c.Endpoints(), &cnt), nil)
	const ttl = 10 * time.Second                 // no reaper's Txn within the test
	mustAcquire(t, s, "warm", token(), "x", ttl) // the session's grant
	check := func(what string, want map[string]int) {
		t.Helper()
		got := cnt.take()
		delete(got, "LeaseKeepAlive") // when due; counted by TestStore/KeepaliveOnDemand
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: sent %v, want %v", what, got, want)
				return
			}
		}
		if total(got) != total(want) {
			t.Errorf("%s: sent %v, want %v", what, got, want)
		}
	}
	one := map[string]int{"Txn": 1}
	cnt.take()
	mustKind(t, s, "rw", "r", "r", driver.ModeRead, 0, ttl)
	check("a reader granted", one)
	_, err := tryKind(ctxT(t), s, "rw", "w", "w", driver.ModeWrite, 0, ttl)
	wantHeld(t, "a writer", err, "r", true)
	check("a writer refused", map[string]int{"Txn": 1, "LeaseTimeToLive": 1})
	_, err = tryKind(ctxT(t), s, "rw", "r2", "r2", driver.ModeRead, 0, ttl)
	wantHeld(t, "a reader", err, "w", false)
	check("a reader refused by a waiting writer", one)
	mustKind(t, s, "wo", "w", "w", driver.ModeWrite, 0, ttl)
	check("a writer granted", one)
	mustKind(t, s, "sem", "p1", "p", driver.ModePermit, 3, ttl)
	check("a permit on a free key", one)
	mustKind(t, s, "sem", "p2", "p", driver.ModePermit, 3, ttl)
	check("a permit beside another", map[string]int{"Txn": 2})

	m := token()
	mustAcquire(t, s, "m", m, "x", ttl)
	cnt.take()
	res, err := s.Renew(ctxT(t), []driver.RenewParams{
		{Key: "m", Token: m, TTL: ttl},
		{Key: "rw", Token: "r", TTL: ttl, Mode: driver.ModeRead},
		{Key: "rw", Token: "w", TTL: ttl, Mode: driver.ModeWrite}, // waiting: no hold
		{Key: "wo", Token: "w", TTL: ttl, Mode: driver.ModeWrite},
		{Key: "sem", Token: "p1", TTL: ttl, Mode: driver.ModePermit},
		{Key: "sem", Token: "p2", TTL: ttl, Mode: driver.ModeRead}, // another mode
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []error{nil, nil, driver.ErrNotHeld, nil, nil, driver.ErrNotHeld} {
		if !errors.Is(res[i], want) || (want == nil) != (res[i] == nil) {
			t.Errorf("Renew item %d: %v, want %v", i, res[i], want)
		}
	}
	check("a mixed Renew", one)
}

// testKindsExpiry: an unrenewed reader's entry, and a writer's waiting
// entry that is not asked again, are deleted by the Store at their
// deadline, not before; the others stay.
func testKindsExpiry(t *testing.T, c *clientv3.Client) {
	s := newStore(t, c, nil)
	kp := s.kindPrefix("exp")
	start := time.Now()
	mustKind(t, s, "exp", "short", "r", driver.ModeRead, 0, 300*time.Millisecond)
	mustKind(t, s, "exp", "long", "r", driver.ModeRead, 0, 5*time.Second)
	_, err := tryKind(ctxT(t), s, "exp", "w", "w", driver.ModeWrite, 0, 600*time.Millisecond)
	wantHeld(t, "a writer", err, "r", true)
	waitFor(t, 3*time.Second, "the short reader's entry deleted", func() bool {
		ok, _ := exists(t, c, kp+"r/short")
		return !ok
	})
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("deleted %v after the grant", el)
	}
	waitFor(t, 3*time.Second, "the waiting writer's entry deleted", func() bool {
		ok, _ := exists(t, c, kp+"q/w")
		return !ok
	})
	if el := time.Since(start); el < 600*time.Millisecond {
		t.Fatalf("waiting entry deleted %v after it was put", el)
	}
	if ok, _ := exists(t, c, kp+"r/long"); !ok {
		t.Fatal("the other reader's entry went too")
	}
	// With the waiting writer gone, readers come in again.
	mustKind(t, s, "exp", "r2", "r", driver.ModeRead, 0, time.Second)
}

// testKindsNotify: releases, expiries and removed waiting entries of
// kinds keys are announced under the key's plain name.
func testKindsNotify(t *testing.T, c *clientv3.Client) {
	s := newStore(t, c, nil)
	got, _ := subscribeKeys(t, s)
	expect := got.expect(t)
	mustKind(t, s, "a/r", "r", "x", driver.ModeRead, 0, 5*time.Second)
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "a/r", Token: "r", Mode: driver.ModeRead}); err != nil {
		t.Fatal(err)
	}
	expect("a/r")
	mustKind(t, s, "p", "p", "x", driver.ModePermit, 1, 100*time.Millisecond)
	expect("p") // expired
	mustKind(t, s, "w", "r", "x", driver.ModeRead, 0, 5*time.Second)
	if _, err := tryKind(ctxT(t), s, "w", "w", "x", driver.ModeWrite, 0, 5*time.Second); !errors.Is(err, driver.ErrHeld) {
		t.Fatal(err)
	}
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "w", Token: "w", Mode: driver.ModeWrite}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatal(err)
	}
	expect("w") // the waiting entry went
	got.none(t)
}

// testKindsLeases: Leases lists every entry, a mutex first; ForceRelease
// deletes the mutex and every kinds entry of the key, and the counter
// stays.
func testKindsLeases(t *testing.T, c *clientv3.Client) {
	s := newStore(t, c, &Options{SessionTTL: 20 * time.Second}) // TTLs capped by the locks', not the session's
	mf := mustAcquire(t, s, "k", "m", "mutex", 8*time.Second)
	rf := mustKind(t, s, "k", "r", "reader", driver.ModeRead, 0, 7*time.Second)
	_, err := tryKind(ctxT(t), s, "k", "w", "writer", driver.ModeWrite, 0, 6*time.Second)
	wantHeld(t, "a writer", err, "reader", true)
	pf := mustKind(t, s, "k2", "p", "sem", driver.ModePermit, 4, 5*time.Second)
	mustKind(t, s, "other", "p", "sem", driver.ModePermit, 4, 5*time.Second)
	leases, err := s.Leases(ctxT(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	want := []driver.Lease{
		{Key: "k", Owner: "mutex", Fence: mf, TTL: 8 * time.Second},
		{Key: "k", Owner: "reader", Fence: rf, TTL: 7 * time.Second, Mode: driver.ModeRead},
		{Key: "k", Owner: "writer", TTL: 6 * time.Second, Mode: driver.ModeWrite, Waiting: true},
		{Key: "k2", Owner: "sem", Fence: pf, TTL: 5 * time.Second, Mode: driver.ModePermit, Limit: 4},
	}
	if fmt.Sprint(leases) != fmt.Sprint(want) {
		t.Fatalf("Leases(k) =\n%+v\nwant\n%+v", leases, want)
	}
	if err := s.ForceRelease(ctxT(t), "k"); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(ctxT(t), s.prefix, clientv3.WithRange(s.prefix+"\xff"), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, strings.TrimPrefix(string(kv.Key), s.prefix))
	}
	if want := []string{"\xfekinds/k2/f", "\xfekinds/k2/p/p", "\xfekinds/other/f", "\xfekinds/other/p/p"}; fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Fatalf("keys after ForceRelease(k): %q, want %q", keys, want)
	}
	if err := s.ForceRelease(ctxT(t), "k"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("second ForceRelease: %v", err)
	}
	if err := s.ForceRelease(ctxT(t), "k2"); err != nil {
		t.Fatalf("ForceRelease of a semaphore alone: %v", err)
	}
	res, err := s.Renew(ctxT(t), []driver.RenewParams{{Key: "k", Token: "m", TTL: time.Second}, {Key: "k", Token: "r", TTL: time.Second, Mode: driver.ModeRead}, {Key: "k2", Token: "p", TTL: time.Second, Mode: driver.ModePermit}})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if !errors.Is(r, driver.ErrNotHeld) {
			t.Errorf("Renew item %d after ForceRelease: %v", i, r)
		}
	}
}

// testKindsRWLockers: through the root API on two Lockers: readers share,
// a waiting writer keeps new readers out and gets the key when the readers
// leave, with a fence a later reader sees.
func testKindsRWLockers(t *testing.T, c *clientv3.Client) {
	prefix := freshPrefix()
	a := newLocker(t, newStore(t, c, &Options{Prefix: prefix}), "a")
	b := newLocker(t, newStore(t, newClient(t, c.Endpoints(), nil), &Options{Prefix: prefix}), "b")
	opts := &tasklock.ObtainOptions{TTL: 2 * time.Second}
	r1, err := a.RWMutex("doc").RLock(ctxT(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.RWMutex("doc").RLock(ctxT(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	wrote := make(chan *tasklock.Lock, 1)
	go func() {
		w, err := b.RWMutex("doc").Lock(ctxT(t), opts)
		if err != nil {
			t.Error(err)
		}
		wrote <- w
	}()
	s := newStore(t, c, &Options{Prefix: prefix})
	waitFor(t, 5*time.Second, "the writer's waiting entry", func() bool {
		resp, err := c.Get(ctxT(t), s.kindPrefix("doc")+"q/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count > 0
	})
	if _, err := a.RWMutex("doc").TryRLock(ctxT(t), opts); !errors.Is(err, tasklock.ErrNotObtained) {
		t.Fatalf("a reader while a writer waits: %v", err)
	}
	for _, r := range []*tasklock.Lock{r1, r2} {
		if err := r.Release(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	var w *tasklock.Lock
	select {
	case w = <-wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not get the key")
	}
	if w == nil {
		t.FailNow()
	}
	if err := w.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	r3, err := a.RWMutex("doc").RLock(ctxT(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	if r3.Fence() != w.Fence() {
		t.Fatalf("reader's fence %d, want the writer's %d", r3.Fence(), w.Fence())
	}
	_ = r3.Release(ctxT(t))
}
