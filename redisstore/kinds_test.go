package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tasklock/tasklock/driver"
)

// runKindsSuite runs the read-write lock, semaphore and fair queue tests
// of this store's own keys and round trips on every deployment; what
// every store does with them through a Locker is storetest's (runs in
// TestConformance*).
func runKindsSuite(t *testing.T, d deployment) {
	t.Run("KindsReadWrite", func(t *testing.T) { testKindsReadWrite(t, d) })
	t.Run("KindsSemaphore", func(t *testing.T) { testKindsSemaphore(t, d) })
	t.Run("KindsRepeatAndExpiry", func(t *testing.T) { testKindsRepeatAndExpiry(t, d) })
	t.Run("KindsContainersExpire", func(t *testing.T) { testKindsContainers(t, d) })
	t.Run("KindsRenewMixed", func(t *testing.T) { testKindsRenewMixed(t, d) })
	t.Run("KindsBatch", func(t *testing.T) { testKindsBatch(t, d) })
	t.Run("KindsLeasesAndForceRelease", func(t *testing.T) { testKindsLeases(t, d) })
	t.Run("FairStore", func(t *testing.T) { testFairStore(t, d) })
}

func acquireKind(s *Store, key, tok, owner string, m driver.Mode, limit int, ttl time.Duration) (uint64, error) {
	g, err := s.Acquire(context.Background(), driver.AcquireParams{Key: key, Token: tok, Owner: owner, TTL: ttl, Mode: m, Limit: limit})
	return g.Fence, err
}

func mustKind(t *testing.T, s *Store, key, tok, owner string, m driver.Mode, limit int, ttl time.Duration) uint64 {
	t.Helper()
	f, err := acquireKind(s, key, tok, owner, m, limit, ttl)
	if err != nil {
		t.Fatalf("Acquire(%q, %v, %d) by %s: %v", key, m, limit, owner, err)
	}
	return f
}

// heldBy checks that err is a *driver.HeldError naming owner, with a TTL
// that is known (positive) when known is set, and 0 otherwise.
func heldBy(t *testing.T, err error, owner string, known bool) {
	t.Helper()
	var he *driver.HeldError
	if !errors.As(err, &he) {
		t.Fatalf("got %v, want a *HeldError naming %s", err, owner)
	}
	if he.Owner != owner || (he.TTL > 0) != known {
		t.Fatalf("refused by %q (TTL %v), want %q (TTL known: %v)", he.Owner, he.TTL, owner, known)
	}
}

func testKindsReadWrite(t *testing.T, d deployment) {
	s := newStore(t, d.newClient(t), nil)
	ctx := ctxT(t)
	r1, r2, w := token(), token(), token()
	ttl := time.Minute
	if f := mustKind(t, s, "rw", r1, "r1", driver.ModeRead, 0, ttl/2); f != 0 {
		t.Fatalf("first reader's fence %d, want 0 (no writer yet)", f)
	}
	mustKind(t, s, "rw", r2, "r2", driver.ModeRead, 0, ttl)
	// A mutex of the same name is another lock.
	mustAcquire(t, s, "rw", token(), "m", ttl)

	// The writer is refused while readers hold, and leaves a claim. The
	// refusal names the hold that ends first.
	_, err := acquireKind(s, "rw", w, "w", driver.ModeWrite, 0, ttl)
	heldBy(t, err, "r1", true)
	// New readers wait behind the claim.
	_, err = acquireKind(s, "rw", token(), "r3", driver.ModeRead, 0, ttl)
	heldBy(t, err, "w", false)
	// A reader already holding asks again (a retry): still granted.
	mustKind(t, s, "rw", r2, "r2", driver.ModeRead, 0, ttl)

	for _, tok := range []string{r1, r2} {
		if err := s.Release(ctx, driver.ReleaseParams{Key: "rw", Token: tok, Mode: driver.ModeRead}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "rw", Token: r1, Mode: driver.ModeRead}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}
	if f := mustKind(t, s, "rw", w, "w", driver.ModeWrite, 0, ttl); f != 1 {
		t.Fatalf("writer's fence %d, want 1", f)
	}
	_, err = acquireKind(s, "rw", token(), "r4", driver.ModeRead, 0, ttl)
	heldBy(t, err, "w", true)
	other := token()
	_, err = acquireKind(s, "rw", other, "w2", driver.ModeWrite, 0, ttl)
	heldBy(t, err, "w", true)
	if err := s.Release(ctx, driver.ReleaseParams{Key: "rw", Token: other, Mode: driver.ModeWrite}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Release of a claim: %v, want ErrNotHeld", err)
	}
	// The writer's hold is not a reader's.
	if err := s.Release(ctx, driver.ReleaseParams{Key: "rw", Token: w, Mode: driver.ModeRead}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Release of the writer as a reader: %v, want ErrNotHeld", err)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "rw", Token: w, Mode: driver.ModeWrite}); err != nil {
		t.Fatal(err)
	}
	// w2's claim still refuses readers; the writer that stops waiting
	// takes it away (ErrNotHeld: it held nothing).
	var w2 string
	func() {
		w2 = token()
		mustKind(t, s, "rw", token(), "r5", driver.ModeRead, 0, ttl)
		_, err := acquireKind(s, "rw", w2, "w2", driver.ModeWrite, 0, ttl)
		heldBy(t, err, "r5", true)
	}()
	_, err = acquireKind(s, "rw", token(), "r6", driver.ModeRead, 0, ttl)
	heldBy(t, err, "w2", false)
	if err := s.Release(ctx, driver.ReleaseParams{Key: "rw", Token: w2, Mode: driver.ModeWrite}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("Release of a claim: %v, want ErrNotHeld", err)
	}
	if f := mustKind(t, s, "rw", token(), "r6", driver.ModeRead, 0, ttl); f != 1 {
		t.Fatalf("reader's fence %d, want 1 (the last writer's)", f)
	}
	// A semaphore cannot share the key while it is a live read-write lock.
	_, err = acquireKind(s, "rw", token(), "p", driver.ModePermit, 2, ttl)
	if !errors.Is(err, driver.ErrKindMismatch) {
		t.Fatalf("permit on a read-write lock: %v, want ErrKindMismatch", err)
	}
}

func testKindsSemaphore(t *testing.T, d deployment) {
	s := newStore(t, d.newClient(t), nil)
	ctx := ctxT(t)
	a, b := token(), token()
	fa := mustKind(t, s, "sem", a, "a", driver.ModePermit, 2, 10*time.Second)
	fb := mustKind(t, s, "sem", b, "b", driver.ModePermit, 2, time.Minute)
	if fa != 1 || fb != 2 {
		t.Fatalf("fences %d, %d, want 1, 2", fa, fb)
	}
	_, err := acquireKind(s, "sem", token(), "c", driver.ModePermit, 2, time.Minute)
	heldBy(t, err, "a", true) // the permit that ends first
	for _, bad := range []struct {
		m     driver.Mode
		limit int
	}{{driver.ModePermit, 3}, {driver.ModePermit, 1}, {driver.ModeRead, 0}, {driver.ModeWrite, 0}} {
		_, err := acquireKind(s, "sem", token(), "x", bad.m, bad.limit, time.Minute)
		if !errors.Is(err, driver.ErrKindMismatch) {
			t.Errorf("%v with limit %d on a semaphore of 2: %v, want ErrKindMismatch", bad.m, bad.limit, err)
		}
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "sem", Token: a, Mode: driver.ModePermit}); err != nil {
		t.Fatal(err)
	}
	if f := mustKind(t, s, "sem", token(), "c", driver.ModePermit, 2, time.Minute); f != 3 {
		t.Fatalf("fence %d, want 3", f)
	}
	// Once every permit is gone, the key takes the next limit.
	if err := s.ForceRelease(ctx, "sem"); err != nil {
		t.Fatal(err)
	}
	if f := mustKind(t, s, "sem", token(), "d", driver.ModePermit, 5, time.Minute); f != 4 {
		t.Fatalf("fence %d after ForceRelease, want 4 (the counter stays)", f)
	}
	for _, bad := range []driver.AcquireParams{
		{Key: "sem", Token: token(), TTL: time.Second, Mode: driver.ModePermit},
		{Key: "sem", Token: token(), TTL: time.Second, Mode: driver.ModeRead, Limit: 1},
		{Key: "sem", Token: token(), TTL: time.Second, Mode: driver.Mode(9)},
		{Key: "}x", Token: token(), TTL: time.Second, Mode: driver.ModeRead},
	} {
		if _, err := s.Acquire(ctx, bad); err == nil {
			t.Errorf("Acquire(%+v) succeeded", bad)
		}
	}
}

func testKindsRepeatAndExpiry(t *testing.T, d deployment) {
	c := d.newClient(t)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	woken := make(chan string, 100)
	stop, err := s.Subscribe(ctx, func(key string) { woken <- key })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	tok := token()
	f := mustKind(t, s, "sem", tok, "a", driver.ModePermit, 1, 100*time.Millisecond)
	// The same token again renews and returns the same fence.
	if g := mustKind(t, s, "sem", tok, "a", driver.ModePermit, 1, time.Minute); g != f {
		t.Fatalf("repeat fence %d, want %d", g, f)
	}
	score := c.ZScore(ctx, s.kindsKeys("sem").held, tok).Val()
	if left := time.Duration(int64(score)-time.Now().UnixMilli()) * time.Millisecond; left < 50*time.Second {
		t.Fatalf("the repeat did not renew: %v left", left)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "sem", Token: tok, Mode: driver.ModePermit}); err != nil {
		t.Fatal(err)
	}
	if got := <-woken; got != "sem" {
		t.Fatalf("woken for %q", got)
	}

	// A holder that stops renewing: its permit returns at its TTL, and
	// the access that prunes it announces it (while another entry keeps
	// the key: an abandoned key vanishes at its last entry's expiry).
	mustKind(t, s, "sem2", token(), "alive", driver.ModePermit, 2, time.Minute)
	mustKind(t, s, "sem2", token(), "dead", driver.ModePermit, 2, 100*time.Millisecond)
	start := time.Now()
	var next uint64
	waitFor(t, 5*time.Second, func() bool {
		f, err := acquireKind(s, "sem2", token(), "b", driver.ModePermit, 2, time.Minute)
		next = f
		return err == nil
	})
	if took := time.Since(start); took < 80*time.Millisecond {
		t.Fatalf("the dead holder's permit returned after %v, before its TTL", took)
	}
	if next <= f {
		t.Fatalf("fence %d after %d", next, f)
	}
	select {
	case got := <-woken:
		if got != "sem2" {
			t.Fatalf("woken for %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pruning the dead holder's permit was not announced")
	}
}

func testKindsContainers(t *testing.T, d deployment) {
	c := d.newClient(t)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	k := s.kindsKeys("x")
	mustKind(t, s, "x", token(), "r", driver.ModeRead, 0, 2*time.Second)
	w := token()
	_, err := acquireKind(s, "x", w, "w", driver.ModeWrite, 0, 5*time.Second)
	heldBy(t, err, "r", true)
	for _, key := range []string{k.h, k.held, k.wait} {
		if ttl := c.PTTL(ctx, key).Val(); ttl <= 4*time.Second || ttl > 5*time.Second {
			t.Errorf("%s: PTTL %v, want the last entry's ≈5s", key, ttl)
		}
		if slot(key) != slot(s.lockKey("x")) || slot(key) != slot(k.fence) {
			t.Errorf("%s is not in the mutex's slot", key)
		}
	}
	// Abandoned: everything but the fence counter vanishes by itself.
	waitFor(t, 10*time.Second, func() bool {
		return c.Exists(ctx, k.h, k.held, k.wait).Val() == 0
	})
	// Released: deleted at once, but for the fence counter.
	tok := token()
	mustKind(t, s, "x", tok, "w", driver.ModeWrite, 0, time.Minute)
	if err := s.Release(ctx, driver.ReleaseParams{Key: "x", Token: tok, Mode: driver.ModeWrite}); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, k.h, k.held, k.wait).Val(); n != 0 {
		t.Fatalf("%d containers left after the last release", n)
	}
	if c.Exists(ctx, k.fence).Val() != 1 || c.PTTL(ctx, k.fence).Val() != -1 {
		t.Fatalf("the fence counter does not persist: PTTL %v", c.PTTL(ctx, k.fence).Val())
	}
}

func testKindsRenewMixed(t *testing.T, d deployment) {
	c := d.newClient(t)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	tok := token()
	ttl := 2 * time.Second
	var ps []driver.RenewParams
	var want []error
	for i := range 20 {
		key := fmt.Sprintf("k%d", i)
		mustAcquire(t, s, key, tok, "me", ttl)
		mustKind(t, s, key, tok, "me", driver.ModeRead, 0, ttl)
		ps = append(ps,
			driver.RenewParams{Key: key, Token: tok, TTL: time.Minute},
			driver.RenewParams{Key: key, Token: tok, TTL: time.Minute, Mode: driver.ModeRead},
			driver.RenewParams{Key: key, Token: tok, TTL: time.Minute, Mode: driver.ModeWrite}, // not held
		)
		want = append(want, nil, nil, driver.ErrNotHeld)
	}
	mustKind(t, s, "sem", tok, "me", driver.ModePermit, 3, ttl)
	w := token()
	mustKind(t, s, "rw", token(), "r", driver.ModeRead, 0, time.Minute)
	_, err := acquireKind(s, "rw", w, "w", driver.ModeWrite, 0, ttl)
	heldBy(t, err, "r", true)
	ps = append(ps,
		driver.RenewParams{Key: "sem", Token: tok, TTL: time.Minute, Mode: driver.ModePermit},
		driver.RenewParams{Key: "sem", Token: token(), TTL: time.Minute, Mode: driver.ModePermit},
		driver.RenewParams{Key: "rw", Token: w, TTL: time.Minute, Mode: driver.ModeWrite}, // a claim is not a hold
	)
	want = append(want, nil, driver.ErrNotHeld, driver.ErrNotHeld)

	if _, err := s.Renew(ctx, ps); err != nil { // load the script on every node
		t.Fatal(err)
	}
	hook := &countHook{}
	c.AddHook(hook)
	res, err := s.Renew(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if !errors.Is(res[i], want[i]) || (want[i] == nil) != (res[i] == nil) {
			t.Errorf("result %d (%+v): %v, want %v", i, ps[i], res[i], want[i])
		}
	}
	evalsha, eval, pipelines, keys := hook.snapshot()
	slots := map[uint16]bool{}
	for _, p := range ps {
		slots[slot(s.lockKey(p.Key))] = true
	}
	wantCalls := 1
	if d.cluster {
		wantCalls = len(slots)
	}
	if pipelines != 1 || eval != 0 || evalsha != wantCalls {
		t.Errorf("%d pipelines, %d EVALSHA, %d EVAL; want 1 pipeline of %d EVALSHA", pipelines, evalsha, eval, wantCalls)
	}
	for _, ks := range keys {
		for _, k := range ks[1:] {
			if d.cluster && slot(k) != slot(ks[0]) {
				t.Fatalf("one script call spans slots %d and %d", slot(ks[0]), slot(k))
			}
		}
	}
	k := s.kindsKeys("k3")
	if ttl := c.PTTL(ctx, k.held).Val(); ttl < 50*time.Second {
		t.Errorf("renewed read hold's container: PTTL %v", ttl)
	}
	// The claim was not renewed: it ends at its own TTL.
	claimEnds := int64(c.ZScore(ctx, s.kindsKeys("rw").wait, w).Val())
	if left := time.Duration(claimEnds-time.Now().UnixMilli()) * time.Millisecond; left > ttl {
		t.Errorf("the claim was renewed: %v left, want at most %v", left, ttl)
	}
}

func testKindsLeases(t *testing.T, d deployment) {
	c := d.newClient(t)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	mustAcquire(t, s, "job", token(), "m", time.Minute)
	mustKind(t, s, "job", token(), "r", driver.ModeRead, 0, time.Minute)
	_, err := acquireKind(s, "job", token(), "w", driver.ModeWrite, 0, time.Minute)
	heldBy(t, err, "r", true)
	mustKind(t, s, "pool", token(), "p1", driver.ModePermit, 3, time.Minute)
	mustKind(t, s, "pool", token(), "p2", driver.ModePermit, 3, time.Minute)
	mustKind(t, s, "x}:kinds", token(), "odd", driver.ModePermit, 1, time.Minute)

	all, err := s.Leases(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]driver.Lease{}
	for i, l := range all {
		got[l.Key+"/"+l.Owner] = l
		if i > 0 && all[i-1].Key > l.Key {
			t.Errorf("not sorted: %q before %q", all[i-1].Key, l.Key)
		}
		if l.TTL <= 50*time.Second || l.TTL > time.Minute {
			t.Errorf("%+v: TTL", l)
		}
	}
	want := map[string]driver.Lease{
		"job/m":        {Mode: driver.ModeMutex, Fence: 1},
		"job/r":        {Mode: driver.ModeRead},
		"job/w":        {Mode: driver.ModeWrite, Waiting: true},
		"pool/p1":      {Mode: driver.ModePermit, Limit: 3, Fence: 1},
		"pool/p2":      {Mode: driver.ModePermit, Limit: 3, Fence: 2},
		"x}:kinds/odd": {Mode: driver.ModePermit, Limit: 1, Fence: 1},
	}
	if len(all) != len(want) {
		t.Fatalf("listed %+v, want %d leases", all, len(want))
	}
	for id, w := range want {
		l, ok := got[id]
		if !ok || l.Mode != w.Mode || l.Limit != w.Limit || l.Fence != w.Fence || l.Waiting != w.Waiting {
			t.Errorf("%s: %+v, want %+v", id, l, w)
		}
	}
	if ls, err := s.Leases(ctx, "po"); err != nil || len(ls) != 2 {
		t.Errorf("Leases(po): %+v, %v", ls, err)
	}

	for _, key := range []string{"job", "pool"} {
		if err := s.ForceRelease(ctx, key); err != nil {
			t.Fatalf("ForceRelease(%q): %v", key, err)
		}
		if err := s.ForceRelease(ctx, key); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("second ForceRelease(%q): %v", key, err)
		}
	}
	if ls, _ := s.Leases(ctx, ""); len(ls) != 1 {
		t.Fatalf("after ForceRelease: %+v", ls)
	}
}

// testKindsBatch: AcquireBatch and ReleaseBatch carry read, write and permit
// items with the mutexes, in one pipeline, each answered as Acquire and
// Release would: a semaphore's permits up to its limit and a refusal after
// them, a writer refused while a reader holds, a limit that disagrees with
// the stored one, a bad limit refused without a call.
func testKindsBatch(t *testing.T, d deployment) {
	c := d.newClient(t)
	s := newStore(t, c, nil)
	ctx := ctxT(t)
	if !s.BatchesKinds() {
		t.Fatal("BatchesKinds is false without WaitReplicas")
	}
	ttl := time.Minute
	reader := token()
	mustKind(t, s, "rw", reader, "r", driver.ModeRead, 0, ttl)
	toks := []string{token(), token(), token(), token(), token(), token()}
	ps := []driver.AcquireParams{
		{Key: "m", Token: toks[0], TTL: ttl, Owner: "o"},
		{Key: "sem", Token: toks[1], TTL: ttl, Owner: "o", Mode: driver.ModePermit, Limit: 2},
		{Key: "sem", Token: toks[2], TTL: ttl, Owner: "o", Mode: driver.ModePermit, Limit: 2},
		{Key: "sem", Token: toks[3], TTL: ttl, Owner: "o", Mode: driver.ModePermit, Limit: 2}, // the limit is reached
		{Key: "rw", Token: toks[4], TTL: ttl, Owner: "w", Mode: driver.ModeWrite},             // a reader holds
		{Key: "sem", Token: toks[5], TTL: ttl, Owner: "o", Mode: driver.ModePermit, Limit: 3}, // another limit
		{Key: "bad", Token: token(), TTL: ttl, Owner: "o", Mode: driver.ModePermit},           // no limit: refused before any call
	}
	// Load both scripts of each kind on the nodes of these keys' slots.
	warm := token()
	if _, err := s.AcquireBatch(ctx, []driver.AcquireParams{ps[0], {Key: "sem", Token: warm, TTL: ttl, Owner: "o", Mode: driver.ModePermit, Limit: 2}, ps[4]}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReleaseBatch(ctx, []driver.ReleaseParams{{Key: "m", Token: toks[0]}, {Key: "sem", Token: warm, Mode: driver.ModePermit}, {Key: "rw", Token: toks[4], Mode: driver.ModeWrite}}); err != nil {
		t.Fatal(err)
	}
	hook := &countHook{}
	c.AddHook(hook)
	res, err := s.AcquireBatch(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if res[i].Err != nil {
			t.Errorf("item %d (%s): %v", i, ps[i].Key, res[i].Err)
		}
	}
	var held *driver.HeldError
	if !errors.As(res[3].Err, &held) {
		t.Errorf("a third permit of 2: %v, want a HeldError", res[3].Err)
	}
	heldBy(t, res[4].Err, "r", true)
	if !errors.Is(res[5].Err, driver.ErrKindMismatch) {
		t.Errorf("a permit with another limit: %v, want ErrKindMismatch", res[5].Err)
	}
	if res[6].Err == nil {
		t.Error("a permit without a limit was granted")
	}
	if _, _, pipelines, _ := hook.snapshot(); pipelines != 1 {
		t.Errorf("AcquireBatch sent %d pipelines, want 1", pipelines)
	}

	hook.reset()
	rel := []driver.ReleaseParams{
		{Key: "m", Token: toks[0]},
		{Key: "sem", Token: toks[1], Mode: driver.ModePermit},
		{Key: "sem", Token: toks[3], Mode: driver.ModePermit}, // never granted
		{Key: "rw", Token: reader, Mode: driver.ModeRead},
	}
	errs, err := s.ReleaseBatch(ctx, rel)
	if err != nil {
		t.Fatal(err)
	}
	want := []error{nil, nil, driver.ErrNotHeld, nil}
	for i := range want {
		if !errors.Is(errs[i], want[i]) || (want[i] == nil) != (errs[i] == nil) {
			t.Errorf("release %d (%s): %v, want %v", i, rel[i].Key, errs[i], want[i])
		}
	}
	if _, _, pipelines, _ := hook.snapshot(); pipelines != 1 {
		t.Errorf("ReleaseBatch sent %d pipelines, want 1", pipelines)
	}
	// The released permit is free again: one more fits, then none.
	mustKind(t, s, "sem", token(), "o", driver.ModePermit, 2, ttl)
	if _, err := acquireKind(s, "sem", token(), "o", driver.ModePermit, 2, ttl); !errors.As(err, &held) {
		t.Errorf("a permit beyond the limit after the batch release: %v", err)
	}
}
