package storetest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/driver"
)

// kindsTests run against stores that implement driver.Kinder: read-write
// locks (names starting "RWMutex") and semaphores ("Semaphore"), through
// the root API with several Lockers on one store, and the store's rules
// (driver.Mode) called directly.
var kindsTests = []struct {
	name string
	fn   func(t *testing.T, s driver.Store)
}{
	{"RWMutexDriverRules", testRWDriverRules},
	{"RWMutexWritersExclude", testRWWritersExclude},
	{"RWMutexReadersShare", testRWReadersShare},
	{"RWMutexReadersAndWritersExclude", testRWReadersAndWriters},
	{"RWMutexWriterNotStarved", testRWWriterNotStarved},
	{"RWMutexReaderSeesWriterFence", testRWReaderFence},
	{"RWMutexDeadReaderFreesOnlyItself", testRWDeadReader},
	{"RWMutexTryLockLeavesNoClaim", testRWTryLockNoClaim},
	{"RWMutexCancelledLockLeavesNoClaim", testRWCancelledLock},
	{"RWMutexKindMismatch", testRWKindMismatch},
	{"RWMutexApartFromMutex", testRWApartFromMutex},
	{"RWMutexRenewedWithOtherKinds", testRWRenewMixed},
	{"RWMutexListed", testRWListed},
	{"RWMutexWakeOnRelease", testRWWakeOnRelease},
	{"RWMutexCloseReleases", testRWClose},
	{"SemaphoreDriverRules", testSemDriverRules},
	{"SemaphorePermitsNeverExceeded", testSemNeverExceeded},
	{"SemaphoreDeadHolderReturns", testSemDeadHolder},
	{"SemaphoreLimitMismatch", testSemLimitMismatch},
	{"SemaphoreFencesIncrease", testSemFences},
	{"SemaphoreWakeOnRelease", testSemWakeOnRelease},
}

// skipUnlessKinds skips the test unless the store keeps holds of every
// mode in modes, logging why not.
func skipUnlessKinds(t *testing.T, s driver.Store, modes ...driver.Mode) {
	t.Helper()
	k, ok := s.(driver.Kinder)
	if !ok {
		t.Skipf("store %T does not implement driver.Kinder: it keeps only mutexes", s)
	}
	for _, m := range modes {
		if err := k.Kinds(m); err != nil {
			t.Skipf("store %T keeps no %v holds: %v", s, m, err)
		}
	}
}

func skipUnlessRW(t *testing.T, s driver.Store) {
	t.Helper()
	skipUnlessKinds(t, s, driver.ModeRead, driver.ModeWrite)
}

func skipUnlessSem(t *testing.T, s driver.Store) {
	t.Helper()
	skipUnlessKinds(t, s, driver.ModePermit)
}

// got returns a function that fails the test unless its err is nil, and
// returns its l: got(t, "RLock")(rw.RLock(ctx, nil)).
func got(t *testing.T, what string) func(l *tasklock.Lock, err error) *tasklock.Lock {
	t.Helper()
	return func(l *tasklock.Lock, err error) *tasklock.Lock {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return l
	}
}

// refused fails the test unless err says the key is held (ErrNotObtained).
func refused(t *testing.T, what string, l *tasklock.Lock, err error) {
	t.Helper()
	if l != nil {
		_ = l.Release(context.Background())
		t.Fatalf("%s: granted (fence %d), want ErrNotObtained", what, l.Fence())
	}
	if !errors.Is(err, tasklock.ErrNotObtained) {
		t.Fatalf("%s = %v, want an error matching ErrNotObtained", what, err)
	}
}

// mismatched fails the test unless err matches ErrKindMismatch.
func mismatched(t *testing.T, what string, l *tasklock.Lock, err error) {
	t.Helper()
	if l != nil {
		_ = l.Release(context.Background())
		t.Fatalf("%s: granted (fence %d), want ErrKindMismatch", what, l.Fence())
	}
	if !errors.Is(err, tasklock.ErrKindMismatch) {
		t.Fatalf("%s = %v, want an error matching ErrKindMismatch", what, err)
	}
}

func release(t *testing.T, ls ...*tasklock.Lock) {
	t.Helper()
	for _, l := range ls {
		if err := l.Release(ctxT(t, 5*time.Second)); err != nil {
			t.Fatalf("Release %v hold of %q (fence %d): %v", l.Mode(), l.Key(), l.Fence(), err)
		}
	}
}

// waiting runs obtain on a goroutine and returns its outcome on the
// channel.
func waiting(obtain func() (*tasklock.Lock, error)) <-chan obtained {
	ch := make(chan obtained, 1)
	go func() {
		l, err := obtain()
		ch <- obtained{l, err, time.Now()}
	}()
	return ch
}

type obtained struct {
	l   *tasklock.Lock
	err error
	at  time.Time
}

// await waits up to d for an outcome of waiting.
func await(t *testing.T, what string, ch <-chan obtained, d time.Duration) obtained {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(d):
		t.Fatalf("%s: no answer within %v", what, d)
		return obtained{}
	}
}

// noClaims fails the test when the store (a driver.Lister) lists a
// waiting writer on a key starting with prefix.
func noClaims(t *testing.T, s driver.Store, prefix string) {
	t.Helper()
	if le := claimLeft(t, s, prefix); le != nil {
		t.Fatalf("a writer's claim left behind: %+v", *le)
	}
}

// noClaimsSoon is noClaims for a claim a cancelled wait may have left
// behind: a store may learn of it only when the cancelled call's request
// lands after all (the writer's re-ask was under way when its wait ended),
// and then delete it in the background. It must be gone within d, well
// before its TTL would end it.
func noClaimsSoon(t *testing.T, s driver.Store, prefix string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for le := claimLeft(t, s, prefix); le != nil; le = claimLeft(t, s, prefix) {
		if time.Now().After(deadline) {
			t.Fatalf("a writer's claim left behind %v after its wait was cancelled: %+v", d, *le)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// claimLeft returns a waiting writer the store (a driver.Lister) lists on
// a key starting with prefix, or nil (also when the store lists nothing).
func claimLeft(t *testing.T, s driver.Store, prefix string) *driver.Lease {
	t.Helper()
	ls, ok := s.(driver.Lister)
	if !ok {
		return nil
	}
	leases, err := ls.Leases(ctxT(t, 5*time.Second), prefix)
	if err != nil {
		t.Fatal(err)
	}
	for i := range leases {
		if leases[i].Waiting {
			return &leases[i]
		}
	}
	return nil
}

// heldBy fails the test unless err is a *driver.HeldError naming one of
// owners (or no one: a store may not know) with a remaining TTL in
// [minTTL, maxTTL] (a known TTL; 0 is allowed only when minTTL is 0).
func heldBy(t *testing.T, what string, err error, minTTL, maxTTL time.Duration, owners ...string) {
	t.Helper()
	var he *driver.HeldError
	if !errors.As(err, &he) {
		t.Fatalf("%s = %v, want a *driver.HeldError", what, err)
	}
	if he.Owner != "" && !slices.Contains(owners, he.Owner) {
		t.Errorf("%s names %q, want one of %q", what, he.Owner, owners)
	}
	if he.TTL < minTTL || he.TTL > maxTTL {
		t.Errorf("%s: holder's TTL %v, want within [%v, %v]", what, he.TTL, minTTL, maxTTL)
	}
}

// announcements records the keys a driver.Notifier announces.
type announcements struct {
	mu   sync.Mutex
	keys map[string]int
	ch   chan struct{} // closed and replaced on every announcement
}

// subscribe subscribes to s's releases, or returns nil when s is no
// driver.Notifier. The subscription ends with the test.
func subscribe(t *testing.T, s driver.Store) *announcements {
	t.Helper()
	n, ok := s.(driver.Notifier)
	if !ok {
		return nil
	}
	a := &announcements{keys: map[string]int{}, ch: make(chan struct{})}
	stop, err := n.Subscribe(ctxT(t, 5*time.Second), func(key string) {
		a.mu.Lock()
		a.keys[key]++
		close(a.ch)
		a.ch = make(chan struct{})
		a.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return a
}

func (a *announcements) count(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.keys[key]
}

// waitFor waits until key was announced more than after times.
func (a *announcements) waitFor(t *testing.T, what, key string, after int) {
	t.Helper()
	if a == nil {
		return
	}
	deadline := time.After(5 * time.Second)
	for {
		a.mu.Lock()
		n, ch := a.keys[key], a.ch
		a.mu.Unlock()
		if n > after {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%s: %q not announced to subscribers within 5s", what, key)
		}
	}
}

// testRWDriverRules calls the store directly, by the rules of driver.Mode
// for read-write locks: readers share and see the last writer's fence, a
// refused writer's claim refuses new readers until it is granted or taken
// back (Release returning ErrNotHeld), a repeated Acquire returns its
// fence again, Renew takes mixed batches, every release and removed claim
// is announced, and ForceRelease deletes the mutex and every entry.
func testRWDriverRules(t *testing.T, s driver.Store) {
	skipUnlessRW(t, s)
	ctx := ctxT(t, 20*time.Second)
	const ttl = 10 * time.Second
	ann := subscribe(t, s)
	acq := func(token, owner string, mode driver.Mode) (driver.Grant, error) {
		return s.Acquire(ctx, driver.AcquireParams{Key: "rwd", Token: token, Owner: owner, TTL: ttl, Mode: mode})
	}
	grant := func(what, token, owner string, mode driver.Mode) uint64 {
		t.Helper()
		g, err := acq(token, owner, mode)
		if err != nil {
			t.Fatalf("%s: Acquire = %v, want a grant", what, err)
		}
		return g.Fence
	}
	rel := func(what, token string, mode driver.Mode, want error) {
		t.Helper()
		err := s.Release(ctx, driver.ReleaseParams{Key: "rwd", Token: token, Mode: mode})
		if !errors.Is(err, want) || (want == nil && err != nil) {
			t.Fatalf("%s: Release = %v, want %v", what, err, want)
		}
	}

	// Readers share, with the fence of the last writer: none yet.
	if f := grant("first reader", "r1", "reader-1", driver.ModeRead); f != 0 {
		t.Errorf("a reader before any writer has fence %d, want 0", f)
	}
	if f := grant("second reader", "r2", "reader-2", driver.ModeRead); f != 0 {
		t.Errorf("a reader before any writer has fence %d, want 0", f)
	}
	// A mutex of the same name is another lock.
	mg, err := s.Acquire(ctx, driver.AcquireParams{Key: "rwd", Token: "m1", Owner: "mutex", TTL: ttl})
	if err != nil {
		t.Fatalf("a mutex named like a read-write lock: %v", err)
	}
	// A writer is refused, and its claim refuses new readers.
	_, err = acq("w1", "writer-1", driver.ModeWrite)
	heldBy(t, "a writer while readers hold", err, time.Millisecond, ttl, "reader-1", "reader-2")
	_, err = acq("r3", "reader-3", driver.ModeRead)
	heldBy(t, "a reader while a writer waits", err, 0, 0, "writer-1")
	// The repeat of a granted reader's Acquire is granted again.
	if f := grant("a reader's repeated Acquire", "r1", "reader-1", driver.ModeRead); f != 0 {
		t.Errorf("a repeated reader's fence %d, want 0", f)
	}

	// Renew: one call mixes modes and a mutex; a claim is no hold, nor is
	// a hold of another mode.
	res, err := s.Renew(ctx, []driver.RenewParams{
		{Key: "rwd", Token: "r1", TTL: ttl, Mode: driver.ModeRead},
		{Key: "rwd", Token: "w1", TTL: ttl, Mode: driver.ModeWrite},
		{Key: "rwd", Token: "m1", TTL: ttl},
		{Key: "rwd", Token: "r1", TTL: ttl, Mode: driver.ModeWrite},
		{Key: "rwd", Token: "r2", TTL: ttl, Mode: driver.ModeRead},
		{Key: "rwd", Token: "r1", TTL: ttl}, // a mutex it does not hold
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []error{nil, driver.ErrNotHeld, nil, driver.ErrNotHeld, nil, driver.ErrNotHeld}
	if len(res) != len(want) {
		t.Fatalf("Renew returned %d results for %d leases", len(res), len(want))
	}
	for i, w := range want {
		if !errors.Is(res[i], w) || (w == nil && res[i] != nil) {
			t.Errorf("Renew item %d = %v, want %v", i, res[i], w)
		}
	}

	// Taking the claim back answers ErrNotHeld, is announced, and lets
	// readers in again.
	before := 0
	if ann != nil {
		before = ann.count("rwd")
	}
	rel("the waiting writer", "w1", driver.ModeWrite, driver.ErrNotHeld)
	ann.waitFor(t, "a removed claim", "rwd", before)
	if f := grant("a reader after the claim went", "r3", "reader-3", driver.ModeRead); f != 0 {
		t.Errorf("reader fence %d, want 0", f)
	}
	for _, tok := range []string{"r1", "r2", "r3"} {
		if ann != nil {
			before = ann.count("rwd")
		}
		rel("a reader", tok, driver.ModeRead, nil)
		ann.waitFor(t, "a reader's release", "rwd", before)
	}
	rel("a released reader", "r1", driver.ModeRead, driver.ErrNotHeld)

	// A writer alone: granted with a fence; its repeat returns it again;
	// readers and other writers are refused.
	f1 := grant("a writer on a free key", "w2", "writer-2", driver.ModeWrite)
	if f1 == 0 {
		t.Fatal("a writer's fence is 0")
	}
	if f := grant("a writer's repeated Acquire", "w2", "writer-2", driver.ModeWrite); f != f1 {
		t.Errorf("a repeated writer's fence %d, want %d", f, f1)
	}
	_, err = acq("r4", "reader-4", driver.ModeRead)
	heldBy(t, "a reader while a writer holds", err, time.Millisecond, ttl, "writer-2")
	_, err = acq("w3", "writer-3", driver.ModeWrite)
	heldBy(t, "a writer while a writer holds", err, time.Millisecond, ttl, "writer-2")
	rel("the writer", "w2", driver.ModeWrite, nil)
	// w3's claim outlives the holder it waited for.
	_, err = acq("r4", "reader-4", driver.ModeRead)
	heldBy(t, "a reader while a writer's claim stands", err, 0, 0, "writer-3")
	// The claim becomes the hold: a higher fence.
	f2 := grant("the waiting writer, the key free", "w3", "writer-3", driver.ModeWrite)
	if f2 <= f1 {
		t.Errorf("second writer's fence %d, want above %d", f2, f1)
	}
	rel("the second writer", "w3", driver.ModeWrite, nil)
	if f := grant("a reader after two writers", "r4", "reader-4", driver.ModeRead); f != f2 {
		t.Errorf("a reader's fence %d, want the last writer's %d", f, f2)
	}

	// ForceRelease deletes the mutex and every entry; the fence counter
	// outlives them.
	if fr, ok := s.(driver.ForceReleaser); ok {
		_, err = acq("w4", "writer-4", driver.ModeWrite) // a claim
		heldBy(t, "a writer while a reader holds", err, time.Millisecond, ttl, "reader-4")
		if err := fr.ForceRelease(ctx, "rwd"); err != nil {
			t.Fatalf("ForceRelease: %v", err)
		}
		res, err := s.Renew(ctx, []driver.RenewParams{
			{Key: "rwd", Token: "r4", TTL: ttl, Mode: driver.ModeRead},
			{Key: "rwd", Token: "m1", TTL: ttl},
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if !errors.Is(r, driver.ErrNotHeld) {
				t.Errorf("Renew item %d after ForceRelease = %v, want ErrNotHeld", i, r)
			}
		}
		if err := fr.ForceRelease(ctx, "rwd"); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("ForceRelease of a free key = %v, want ErrNotHeld", err)
		}
		if f := grant("a writer after ForceRelease", "w5", "writer-5", driver.ModeWrite); f <= f2 {
			t.Errorf("fence %d after ForceRelease, want above %d", f, f2)
		}
		return
	}
	t.Logf("store %T does not implement driver.ForceReleaser", s)
	rel("a reader", "r4", driver.ModeRead, nil)
	if err := s.Release(ctx, driver.ReleaseParams{Key: "rwd", Token: "m1"}); err != nil || mg.Fence == 0 {
		t.Errorf("mutex: fence %d, Release = %v", mg.Fence, err)
	}
}

// testSemDriverRules calls the store directly, by the rules of driver.Mode
// for semaphores: Limit permits at once, each with a fence above every
// earlier one; the refusal names the permit that ends first; another Limit
// or mode is ErrKindMismatch while the key is live, and is taken once it
// is free.
func testSemDriverRules(t *testing.T, s driver.Store) {
	skipUnlessSem(t, s)
	ctx := ctxT(t, 20*time.Second)
	acq := func(token, owner string, ttl time.Duration, mode driver.Mode, limit int) (driver.Grant, error) {
		return s.Acquire(ctx, driver.AcquireParams{Key: "semd", Token: token, Owner: owner, TTL: ttl, Mode: mode, Limit: limit})
	}
	permit := func(what, token, owner string, ttl time.Duration, limit int) uint64 {
		t.Helper()
		g, err := acq(token, owner, ttl, driver.ModePermit, limit)
		if err != nil {
			t.Fatalf("%s: Acquire = %v, want a grant", what, err)
		}
		return g.Fence
	}
	f1 := permit("first permit", "p1", "holder-1", 5*time.Second, 2)
	f2 := permit("second permit", "p2", "holder-2", 10*time.Second, 2)
	if f1 == 0 || f2 <= f1 {
		t.Errorf("permit fences %d, %d: want increasing from above 0", f1, f2)
	}
	_, err := acq("p3", "holder-3", 10*time.Second, driver.ModePermit, 2)
	heldBy(t, "a third permit of two", err, time.Millisecond, 5*time.Second, "holder-1")
	if f := permit("a permit's repeated Acquire", "p1", "holder-1", 5*time.Second, 2); f != f1 {
		t.Errorf("a repeated permit's fence %d, want %d", f, f1)
	}
	for _, c := range []struct {
		what  string
		mode  driver.Mode
		limit int
	}{
		{"a permit of three on a semaphore of two", driver.ModePermit, 3},
		{"a reader on a semaphore", driver.ModeRead, 0},
		{"a writer on a semaphore", driver.ModeWrite, 0},
	} {
		if _, err := acq("x", "x", time.Second, c.mode, c.limit); !errors.Is(err, driver.ErrKindMismatch) {
			t.Errorf("%s: Acquire = %v, want ErrKindMismatch", c.what, err)
		}
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "semd", Token: "p1", Mode: driver.ModePermit}); err != nil {
		t.Fatal(err)
	}
	f3 := permit("a permit after a release", "p3", "holder-3", 10*time.Second, 2)
	if f3 <= f2 {
		t.Errorf("fence %d after %d", f3, f2)
	}
	res, err := s.Renew(ctx, []driver.RenewParams{
		{Key: "semd", Token: "p2", TTL: time.Minute, Mode: driver.ModePermit},
		{Key: "semd", Token: "p1", TTL: time.Minute, Mode: driver.ModePermit},
		{Key: "semd", Token: "p3", TTL: time.Minute, Mode: driver.ModeRead},
		{Key: "semd", Token: "p3", TTL: time.Minute, Mode: driver.ModePermit},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range []error{nil, driver.ErrNotHeld, driver.ErrNotHeld, nil} {
		if len(res) != 4 || !errors.Is(res[i], w) || (w == nil && res[i] != nil) {
			t.Fatalf("Renew results %v, want [nil ErrNotHeld ErrNotHeld nil]", res)
		}
	}
	for _, tok := range []string{"p2", "p3"} {
		if err := s.Release(ctx, driver.ReleaseParams{Key: "semd", Token: tok, Mode: driver.ModePermit}); err != nil {
			t.Fatal(err)
		}
	}
	// Free, the key takes the next Acquire's kind.
	if f := permit("a permit of three on the free key", "p4", "holder-4", time.Second, 3); f <= f3 {
		t.Errorf("fence %d after %d", f, f3)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "semd", Token: "p4", Mode: driver.ModePermit}); err != nil {
		t.Fatal(err)
	}
	if s.(driver.Kinder).Kinds(driver.ModeRead) != nil {
		return
	}
	if _, err := acq("r1", "reader", time.Second, driver.ModeRead, 0); err != nil {
		t.Errorf("a reader on the free key: %v", err)
	}
}
