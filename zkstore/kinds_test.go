package zkstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
	"github.com/tasklock/tasklock/storetest/faulttest"
)

// acquireKind is one Acquire of the store for a kinds hold.
func acquireKind(t testing.TB, s *Store, key, tok string, m driver.Mode, limit int, ttl time.Duration) (driver.Grant, error) {
	t.Helper()
	return s.Acquire(ctxT(t), driver.AcquireParams{Key: key, Token: tok, Owner: "o-" + tok[:6], TTL: ttl, Mode: m, Limit: limit})
}

func mustKind(t testing.TB, s *Store, key, tok string, m driver.Mode, limit int, ttl time.Duration) uint64 {
	t.Helper()
	g, err := acquireKind(t, s, key, tok, m, limit, ttl)
	if err != nil {
		t.Fatalf("Acquire(%q, %v): %v", key, m, err)
	}
	return g.Fence
}

func mustRefused(t testing.TB, s *Store, key, tok string, m driver.Mode, limit int) *driver.HeldError {
	t.Helper()
	_, err := acquireKind(t, s, key, tok, m, limit, time.Second)
	var he *driver.HeldError
	if !errors.As(err, &he) {
		t.Fatalf("Acquire(%q, %v) = %v, want a *driver.HeldError", key, m, err)
	}
	return he
}

// TestKindsRules walks driver.Mode's rules at the store: readers share,
// a writer is alone, a refused writer's claim refuses new readers, the
// fences, the kind of a key, repeats, and Release of a claim.
func TestKindsRules(t *testing.T) {
	t.Parallel()
	_, c := shared(t)
	s := newStore(t, c, testSession, nil)
	ctx := ctxT(t)
	rel := func(key, tok string, m driver.Mode) error {
		return s.Release(ctx, driver.ReleaseParams{Key: key, Token: tok, Mode: m})
	}
	r1, r2, w1, w2 := token(), token(), token(), token()
	if f := mustKind(t, s, "rw", r1, driver.ModeRead, 0, 5*time.Second); f != 0 {
		t.Fatalf("first reader's fence %d, want 0 (no writer yet)", f)
	}
	mustKind(t, s, "rw", r2, driver.ModeRead, 0, 5*time.Second)
	// A mutex of the same name is another lock.
	mustAcquire(t, s, "rw", token(), "mutex", 5*time.Second)
	// The writer is refused, names a reader with its TTL, and leaves a
	// claim that refuses new readers (naming the waiting writer, TTL 0).
	if he := mustRefused(t, s, "rw", w1, driver.ModeWrite, 0); !strings.HasPrefix(he.Owner, "o-") || he.TTL != 5*time.Second {
		t.Fatalf("writer refused with %+v", he)
	}
	if he := mustRefused(t, s, "rw", token(), driver.ModeRead, 0); he.Owner != "o-"+w1[:6] || he.TTL != 0 {
		t.Fatalf("reader refused with %+v, want the waiting writer with TTL 0", he)
	}
	// The held readers renew; the claim does not count as a hold.
	res, err := s.Renew(ctx, []driver.RenewParams{
		{Key: "rw", Token: r1, TTL: 5 * time.Second, Mode: driver.ModeRead},
		{Key: "rw", Token: w1, TTL: 5 * time.Second, Mode: driver.ModeWrite},
		{Key: "rw", Token: r1, TTL: 5 * time.Second, Mode: driver.ModePermit},
		{Key: "rw", Token: r1, TTL: 5 * time.Second},
	})
	if err != nil || res[0] != nil || !errors.Is(res[1], driver.ErrNotHeld) || !errors.Is(res[2], driver.ErrNotHeld) || !errors.Is(res[3], driver.ErrNotHeld) {
		t.Fatalf("Renew = %v, %v", res, err)
	}
	// Kinds: the key is a read-write lock.
	if _, err := acquireKind(t, s, "rw", token(), driver.ModePermit, 2, time.Second); !errors.Is(err, driver.ErrKindMismatch) {
		t.Fatalf("permit on a read-write lock: %v", err)
	}
	for _, tok := range []string{r1, r2} {
		if err := rel("rw", tok, driver.ModeRead); err != nil {
			t.Fatal(err)
		}
	}
	// The writer asks again with its token: granted, its claim gone.
	fw1 := mustKind(t, s, "rw", w1, driver.ModeWrite, 0, 5*time.Second)
	// A repeat returns the same fence.
	if f := mustKind(t, s, "rw", w1, driver.ModeWrite, 0, 5*time.Second); f != fw1 {
		t.Fatalf("repeat: fence %d, want %d", f, fw1)
	}
	if he := mustRefused(t, s, "rw", w2, driver.ModeWrite, 0); he.Owner != "o-"+w1[:6] {
		t.Fatalf("second writer refused with %+v", he)
	}
	if err := rel("rw", w2, driver.ModeWrite); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Release of a claim = %v, want ErrNotHeld", err)
	}
	ls, err := s.Leases(ctx, "rw")
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 2 || ls[0].Mode != driver.ModeMutex || ls[1].Mode != driver.ModeWrite || ls[1].Waiting || ls[1].Fence != fw1 {
		t.Fatalf("Leases = %+v, want the mutex and the writer (no claim left)", ls)
	}
	if err := rel("rw", w1, driver.ModeWrite); err != nil {
		t.Fatal(err)
	}
	// The next reader gets the last writer's fence; the next writer a
	// higher one.
	if f := mustKind(t, s, "rw", token(), driver.ModeRead, 0, 5*time.Second); f != fw1 {
		t.Fatalf("reader after the writer: fence %d, want %d", f, fw1)
	}
	if he := mustRefused(t, s, "rw", w2, driver.ModeWrite, 0); he.TTL != 5*time.Second {
		t.Fatalf("writer refused with %+v", he)
	}

	// A semaphore: Limit permits, then refused; another limit is a
	// mismatch; fences increase, also after the key was empty.
	var last uint64
	toks := []string{token(), token()}
	for _, tok := range toks {
		f := mustKind(t, s, "sem", tok, driver.ModePermit, 2, 5*time.Second)
		if f <= last {
			t.Fatalf("permit fence %d after %d", f, last)
		}
		last = f
	}
	mustRefused(t, s, "sem", token(), driver.ModePermit, 2)
	for _, m := range []struct {
		mode  driver.Mode
		limit int
	}{{driver.ModePermit, 3}, {driver.ModeRead, 0}, {driver.ModeWrite, 0}} {
		if _, err := acquireKind(t, s, "sem", token(), m.mode, m.limit, time.Second); !errors.Is(err, driver.ErrKindMismatch) {
			t.Fatalf("%v with %d on a semaphore of 2: %v", m.mode, m.limit, err)
		}
	}
	for _, tok := range toks {
		if err := rel("sem", tok, driver.ModePermit); err != nil {
			t.Fatal(err)
		}
	}
	// Empty now: it takes the next Acquire's limit, and the fence goes on.
	if f := mustKind(t, s, "sem", token(), driver.ModePermit, 1, 5*time.Second); f <= last {
		t.Fatalf("fence %d after the key was empty, %d before", f, last)
	}
	if _, err := acquireKind(t, s, "sem", token(), driver.ModePermit, 0, time.Second); !errors.Is(err, driver.ErrUnsupported) {
		t.Fatalf("Limit 0 for a permit: %v", err)
	}
	if _, err := acquireKind(t, s, "sem", token(), driver.ModePermit, 1, 2*testSession); !errors.Is(err, ErrTTL) {
		t.Fatalf("TTL over the session timeout: %v", err)
	}
}

// TestKindsDeadline: an entry that is not renewed ends at its deadline
// (the reaper deletes it), so a semaphore's permit returns; a renewed one
// lives on; a MinHold release keeps the entry for KeepFor.
func TestKindsDeadline(t *testing.T) {
	t.Parallel()
	_, c := shared(t)
	s := newStore(t, c, testSession, nil)
	ctx := ctxT(t)
	short, kept := token(), token()
	mustKind(t, s, "p", short, driver.ModePermit, 2, 200*time.Millisecond)
	mustKind(t, s, "p", kept, driver.ModePermit, 2, 10*time.Second)
	mustRefused(t, s, "p", token(), driver.ModePermit, 2)
	waitFor(t, 10*time.Second, "the unrenewed permit returned", func() bool {
		_, err := acquireKind(t, s, "p", token(), driver.ModePermit, 2, 10*time.Second)
		return err == nil
	})
	if res, err := s.Renew(ctx, []driver.RenewParams{{Key: "p", Token: short, TTL: time.Second, Mode: driver.ModePermit}}); err != nil || !errors.Is(res[0], driver.ErrNotHeld) {
		t.Fatalf("Renew of the ended permit = %v, %v", res, err)
	}
	// MinHold: the writer's entry stays KeepFor after its release.
	w := token()
	mustKind(t, s, "w", w, driver.ModeWrite, 0, 10*time.Second)
	released := time.Now()
	if err := s.Release(ctx, driver.ReleaseParams{Key: "w", Token: w, Mode: driver.ModeWrite, KeepFor: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	mustRefused(t, s, "w", token(), driver.ModeRead, 0)
	waitFor(t, 10*time.Second, "the kept writer ended", func() bool {
		_, err := acquireKind(t, s, "w", token(), driver.ModeRead, 0, time.Second)
		return err == nil
	})
	if d := time.Since(released); d < 300*time.Millisecond {
		t.Fatalf("the kept writer ended %v after its release, before its KeepFor", d)
	}
}

// TestKindsSessionEnd: the entries of a Store whose session ends are gone
// at once, for every other Store.
func TestKindsSessionEnd(t *testing.T) {
	t.Parallel()
	z, c := shared(t)
	s := newStore(t, c, testSession, nil)
	c2 := connect(t, z.Addr(), testSession)
	s2 := newStore(t, c2, testSession, &Options{Root: s.Root()})
	mustKind(t, s2, "k", token(), driver.ModePermit, 1, 10*time.Second)
	mustRefused(t, s, "k", token(), driver.ModePermit, 1)
	c2.Close()
	waitFor(t, 10*time.Second, "the closed session's permit returned", func() bool {
		_, err := acquireKind(t, s, "k", token(), driver.ModePermit, 1, 10*time.Second)
		return err == nil
	})
}

// TestKindsForceRelease deletes the mutex and every entry of a key; the
// holders learn of it at their next renewal.
func TestKindsForceRelease(t *testing.T) {
	t.Parallel()
	z, c := shared(t)
	s := newStore(t, c, testSession, nil)
	other := newStore(t, connect(t, z.Addr(), testSession), testSession, &Options{Root: s.Root()})
	ctx := ctxT(t)
	const n = 70 // more than one multi (forceChunk), more than the marker names
	toks := make([]string, n)
	for i := range toks {
		toks[i] = token()
		mustKind(t, s, "f", toks[i], driver.ModeRead, 0, 10*time.Second)
	}
	mutex := token()
	mustAcquire(t, s, "f", mutex, "m", 10*time.Second)
	w := token()
	mustRefused(t, s, "f", w, driver.ModeWrite, 0) // a claim
	keep := token()
	mustKind(t, s, "g", keep, driver.ModeRead, 0, 10*time.Second)
	if err := other.ForceRelease(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	ls, err := other.Leases(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 || ls[0].Key != "g" {
		t.Fatalf("Leases after ForceRelease(f) = %+v", ls)
	}
	ps := []driver.RenewParams{{Key: "f", Token: mutex, TTL: time.Second}, {Key: "g", Token: keep, TTL: time.Second, Mode: driver.ModeRead}}
	for _, tok := range toks {
		ps = append(ps, driver.RenewParams{Key: "f", Token: tok, TTL: time.Second, Mode: driver.ModeRead})
	}
	res, err := s.Renew(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if (i == 1) != (r == nil) || (i != 1 && !errors.Is(r, driver.ErrNotHeld)) {
			t.Errorf("renewal %d (%s): %v", i, ps[i].Key, r)
		}
	}
	if err := other.ForceRelease(ctx, "f"); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("second ForceRelease = %v, want ErrNotHeld", err)
	}
	if err := other.ForceRelease(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if res, _ := s.Renew(ctx, ps[1:2]); !errors.Is(res[0], driver.ErrNotHeld) {
		t.Fatalf("renewal of the force-released reader of g: %v", res[0])
	}
}

// TestKindsLeases lists entries with their mode, limit, fence and claim.
func TestKindsLeases(t *testing.T) {
	t.Parallel()
	_, c := shared(t)
	s := newStore(t, c, testSession, nil)
	fp := mustKind(t, s, "sem", token(), driver.ModePermit, 3, 4*time.Second)
	fr := mustKind(t, s, "rw", token(), driver.ModeRead, 0, 5*time.Second)
	mustRefused(t, s, "rw", token(), driver.ModeWrite, 0)
	ls, err := s.Leases(ctxT(t), "")
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%+v", ls)
	want := fmt.Sprintf("%+v", []driver.Lease{
		{Key: "rw", Owner: ls[0].Owner, Fence: fr, TTL: 5 * time.Second, Mode: driver.ModeRead},
		{Key: "rw", Owner: ls[1].Owner, TTL: time.Second, Mode: driver.ModeWrite, Waiting: true},
		{Key: "sem", Owner: ls[2].Owner, Fence: fp, TTL: 4 * time.Second, Mode: driver.ModePermit, Limit: 3},
	})
	if got != want {
		t.Fatalf("Leases =\n%s\nwant\n%s", got, want)
	}
}

// TestKindsRenewRoundTrips renews a mixed batch (mutexes, readers, a
// writer, permits) with one request, as a batch of mutexes is.
func TestKindsRenewRoundTrips(t *testing.T) {
	t.Parallel()
	z := testserver.SharedZooKeeper(t)
	var d countingDialer
	c := connectVia(t, z.Addr(), testserver.ZooKeeperMaxSessionTimeout, d.dial)
	s := newStore(t, c, testserver.ZooKeeperMaxSessionTimeout, nil)
	var ps []driver.RenewParams
	add := func(key string, m driver.Mode, limit int) {
		tok := token()
		if m == driver.ModeMutex {
			mustAcquire(t, s, key, tok, "me", 30*time.Second)
		} else {
			mustKind(t, s, key, tok, m, limit, 30*time.Second)
		}
		ps = append(ps, driver.RenewParams{Key: key, Token: tok, TTL: 30 * time.Second, Mode: m})
	}
	for i := range 100 {
		add(fmt.Sprintf("m%d", i), driver.ModeMutex, 0)
		add("r", driver.ModeRead, 0)
		add("s", driver.ModePermit, 100)
	}
	add("w", driver.ModeWrite, 0)
	w0 := d.writes.Load()
	res, err := s.Renew(ctxT(t), ps)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r != nil {
			t.Fatalf("lease %d (%v): %v", i, ps[i].Mode, r)
		}
	}
	if writes := d.writes.Load() - w0; writes != 1 {
		t.Fatalf("renewing %d mixed leases took %d requests, want 1", len(ps), writes)
	}
}

// TestKindsNotify: a subscription is told of the release of a key whose
// entries this Store read (with the key's plain name), of an entry ended
// at its deadline, and of a force release; it stops cleanly.
func TestKindsNotify(t *testing.T) {
	t.Parallel()
	z, c := shared(t)
	s := newStore(t, c, testSession, nil)
	other := newStore(t, connect(t, z.Addr(), testSession), testSession, &Options{Root: s.Root()})
	ctx := ctxT(t)
	got := make(chan string, 100)
	stop, err := s.Subscribe(ctx, func(key string) { got <- key })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	expect := func(what, key string) {
		t.Helper()
		select {
		case k := <-got:
			if k != key {
				t.Fatalf("%s: told of %q, want %q", what, k, key)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no notification within 10s", what)
		}
	}
	// Released by another Store.
	tok := token()
	mustKind(t, other, "a/b", tok, driver.ModeWrite, 0, 10*time.Second)
	mustRefused(t, s, "a/b", token(), driver.ModeRead, 0)
	if err := other.Release(ctx, driver.ReleaseParams{Key: "a/b", Token: tok, Mode: driver.ModeWrite}); err != nil {
		t.Fatal(err)
	}
	expect("release", "a/b")
	// Ended at its deadline.
	mustKind(t, other, "p", token(), driver.ModePermit, 1, 300*time.Millisecond)
	mustRefused(t, s, "p", token(), driver.ModePermit, 1)
	expect("deadline", "p")
	// Force-released.
	mustKind(t, other, "f", token(), driver.ModeWrite, 0, 10*time.Second)
	mustRefused(t, s, "f", token(), driver.ModeRead, 0)
	if err := other.ForceRelease(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	expect("force release", "f")
}

// TestKindsSemaphoreLockers: storetest's SemaphorePermitsNeverExceeded
// across sessions: 32 goroutines on each of 3 Lockers, each on a
// connection and Store of its own (so that their decisions race at the
// server, not in one Store's turns), take permits of one semaphore of 3,
// over and over. The critical sections, logged outside the store, never
// number more than 3 at once, and every fence is distinct.
func TestKindsSemaphoreLockers(t *testing.T) {
	z := testserver.SharedZooKeeper(t)
	root := newRoot()
	const permits, lockers, goroutines, rounds = 3, 3, 32, 3
	var (
		log  faulttest.Sections
		wg   sync.WaitGroup
		errs = make(chan error, lockers*goroutines)
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range lockers {
		s := newStore(t, connect(t, z.Addr(), testSession), testSession, &Options{Root: root})
		sem := newLocker(t, s, fmt.Sprintf("locker%d", i)).Semaphore("pool", permits)
		for g := range goroutines {
			wg.Go(func() {
				for range rounds {
					l, err := sem.Acquire(ctx, nil)
					if err != nil {
						errs <- err
						return
					}
					log.Do(fmt.Sprintf("%d/%d", i, g), l, func() { time.Sleep(time.Millisecond) })
					if err := l.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	secs := log.List()
	if most := faulttest.CheckSections(t, permits, secs); most < 2 {
		t.Errorf("at most %d sections at once: the permits were not shared", most)
	}
	fences := map[uint64]bool{}
	for _, s := range secs {
		fences[s.Fence] = true
	}
	if len(secs) != lockers*goroutines*rounds || len(fences) != len(secs) {
		t.Fatalf("%d sections, %d distinct fences, for %d grants", len(secs), len(fences), lockers*goroutines*rounds)
	}
}

// TestKindsRWMutexLockers: through the root API, a writer waiting for
// readers is not starved by new readers, and is then alone.
func TestKindsRWMutexLockers(t *testing.T) {
	t.Parallel()
	z := testserver.SharedZooKeeper(t)
	root := newRoot()
	sa := newStore(t, connect(t, z.Addr(), testSession), testSession, &Options{Root: root})
	a := newLocker(t, sa, "a")
	b := newLocker(t, newStore(t, connect(t, z.Addr(), testSession), testSession, &Options{Root: root}), "b")
	ctx := ctxT(t)
	r, err := a.RWMutex("doc").RLock(ctx, &tasklock.ObtainOptions{TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.RWMutex("doc").TryRLock(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wrote := make(chan *tasklock.Lock, 1)
	go func() {
		w, err := b.RWMutex("doc").Lock(ctx, &tasklock.ObtainOptions{TTL: 2 * time.Second})
		if err != nil {
			t.Error(err)
		}
		wrote <- w
	}()
	// Once the writer's claim is there, new readers are refused.
	waitFor(t, 10*time.Second, "the writer's claim", func() bool {
		ls, err := sa.Leases(ctx, "doc")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if l.Waiting {
				return true
			}
		}
		return false
	})
	if _, err := a.RWMutex("doc").TryRLock(ctx, nil); !errors.Is(err, tasklock.ErrNotObtained) {
		t.Fatalf("TryRLock while a writer waits = %v, want ErrNotObtained", err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-wrote
	if w == nil {
		return
	}
	if w.Fence() == 0 {
		t.Fatalf("writer's fence 0")
	}
	if _, err := a.RWMutex("doc").TryRLock(ctx, nil); !errors.Is(err, tasklock.ErrNotObtained) {
		t.Fatalf("TryRLock while the writer holds = %v", err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r3, err := a.RWMutex("doc").RLock(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r3.Fence() != w.Fence() {
		t.Fatalf("reader after the writer: fence %d, want the writer's %d", r3.Fence(), w.Fence())
	}
	_ = r3.Release(ctx)
}

// TestKindsRotate: a guard whose version reached Store.rotateAt is
// replaced in the decision's multi; the counter and the last writer's
// fence go on, and a decision made on the guard before it was replaced
// loses.
func TestKindsRotate(t *testing.T) {
	t.Parallel()
	_, c := shared(t)
	s := newStore(t, c, testSession, nil)
	s.rotateAt = 3
	kp, guard := s.kindsPath("k"), s.kindsPath("k")+"/"+guardName
	var fw uint64
	seen := map[int64]bool{}
	for i := range 12 {
		tok := token()
		m := driver.ModeRead
		if i%3 == 0 {
			m = driver.ModeWrite
		}
		f := mustKind(t, s, "k", tok, m, 0, 10*time.Second)
		switch {
		case m == driver.ModeWrite && f <= fw:
			t.Fatalf("grant %d: writer's fence %d after %d", i, f, fw)
		case m == driver.ModeWrite:
			fw = f
		case f != fw:
			t.Fatalf("grant %d: reader's fence %d, want the last writer's %d", i, f, fw)
		}
		if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "k", Token: tok, Mode: m}); err != nil {
			t.Fatal(err)
		}
		_, st, err := c.Get(guard)
		if err != nil {
			t.Fatal(err)
		}
		if st.Version > 3 {
			t.Fatalf("grant %d: guard version %d, past rotateAt", i, st.Version)
		}
		seen[st.Czxid] = true
	}
	if len(seen) < 2 {
		t.Fatalf("the guard was never replaced")
	}
	// A look taken before a rotation loses the race.
	st, err := s.readKind(kp, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		tok := token()
		mustKind(t, s, "k", tok, driver.ModeRead, 0, time.Second)
		if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "k", Token: tok, Mode: driver.ModeRead}); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
	}
	p := driver.AcquireParams{Key: "k", Token: token(), Owner: "x", TTL: time.Second, Mode: driver.ModeWrite}
	if _, err := s.grantKind(p, kp, st, decide(p, st, nil)); !errors.Is(err, errKeyChanged) {
		t.Fatalf("a grant decided before the guard was replaced = %v, want errKeyChanged", err)
	}
}

// TestKindsClosed: after Close, kinds Acquires return ErrClosed, and
// Release still deletes an entry (with KeepFor too: no reaper is left to
// end it later).
func TestKindsClosed(t *testing.T) {
	t.Parallel()
	z, c := shared(t)
	s := newStore(t, connect(t, z.Addr(), testSession), testSession, nil)
	other := newStore(t, c, testSession, &Options{Root: s.Root()})
	r, w := token(), token()
	mustKind(t, s, "k", r, driver.ModeRead, 0, 10*time.Second)
	mustKind(t, s, "k", token(), driver.ModeRead, 0, 10*time.Second)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := acquireKind(t, s, "k", w, driver.ModeWrite, 0, time.Second); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire after Close = %v, want ErrClosed", err)
	}
	ls, err := other.Leases(ctxT(t), "k")
	if err != nil || len(ls) != 2 {
		t.Fatalf("Leases = %+v, %v: want the two readers and no claim", ls, err)
	}
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "k", Token: r, Mode: driver.ModeRead, KeepFor: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if ls, err := other.Leases(ctxT(t), "k"); err != nil || len(ls) != 1 {
		t.Fatalf("Leases after a KeepFor release past Close = %+v, %v: want one reader", ls, err)
	}
}
