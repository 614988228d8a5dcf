package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tasklock/tasklock/driver"
)

// acq is one acquire of a kind.
func acq(t testing.TB, s *Store, key, tok string, m driver.Mode, limit int, ttl time.Duration) (driver.Grant, error) {
	t.Helper()
	return s.Acquire(ctxT(t), driver.AcquireParams{Key: key, Token: tok, Owner: "o-" + tok[:4], TTL: ttl, Mode: m, Limit: limit})
}

func mustKind(t testing.TB, s *Store, key, tok string, m driver.Mode, limit int) uint64 {
	t.Helper()
	g, err := acq(t, s, key, tok, m, limit, time.Minute)
	if err != nil {
		t.Fatalf("Acquire(%q, %v): %v", key, m, err)
	}
	return g.Fence
}

func mustHeld(t testing.TB, s *Store, key, tok string, m driver.Mode, limit int) *driver.HeldError {
	t.Helper()
	_, err := acq(t, s, key, tok, m, limit, time.Minute)
	var he *driver.HeldError
	if !errors.As(err, &he) {
		t.Fatalf("Acquire(%q, %v) = %v, want held", key, m, err)
	}
	return he
}

func relKind(t testing.TB, s *Store, key, tok string, m driver.Mode) error {
	t.Helper()
	return s.Release(ctxT(t), driver.ReleaseParams{Key: key, Token: tok, Mode: m})
}

func testReadersShare(t *testing.T, pool *pgxpool.Pool, mode Mode) {
	s := newStore(t, pool, &Options{Mode: mode})
	r1, r2, w := token(), token(), token()
	if f := mustKind(t, s, "rw", r1, driver.ModeRead, 0); f != 0 {
		t.Fatalf("a reader before any writer: fence %d, want 0", f)
	}
	mustKind(t, s, "rw", r2, driver.ModeRead, 0)
	he := mustHeld(t, s, "rw", w, driver.ModeWrite, 0)
	if he.Owner == "" || he.TTL <= 50*time.Second {
		t.Errorf("writer refused by readers: %+v, want a reader named with its TTL", he)
	}
	for _, r := range []string{r1, r2} {
		if err := relKind(t, s, "rw", r, driver.ModeRead); err != nil {
			t.Fatal(err)
		}
	}
	f1 := mustKind(t, s, "rw", w, driver.ModeWrite, 0)
	if f1 != 1 {
		t.Fatalf("first writer's fence %d, want 1", f1)
	}
	he = mustHeld(t, s, "rw", token(), driver.ModeRead, 0)
	if he.Owner != "o-"+w[:4] || he.TTL <= 0 {
		t.Errorf("reader refused by the writer: %+v", he)
	}
	w2 := token()
	mustHeld(t, s, "rw", w2, driver.ModeWrite, 0)
	if err := relKind(t, s, "rw", w2, driver.ModeWrite); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("release of a claim: %v, want ErrNotHeld", err)
	}
	if err := relKind(t, s, "rw", w, driver.ModeWrite); err != nil {
		t.Fatal(err)
	}
	if f := mustKind(t, s, "rw", token(), driver.ModeRead, 0); f != f1 {
		t.Errorf("reader after the writer: fence %d, want the writer's %d", f, f1)
	}
	if err := relKind(t, s, "rw", r1, driver.ModeRead); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("second release: %v, want ErrNotHeld", err)
	}
}

func testWriterClaim(t *testing.T, pool *pgxpool.Pool, mode Mode) {
	s := newStore(t, pool, &Options{Mode: mode})
	r1, w := token(), token()
	mustKind(t, s, "rw", r1, driver.ModeRead, 0)
	mustHeld(t, s, "rw", w, driver.ModeWrite, 0) // leaves a claim
	he := mustHeld(t, s, "rw", token(), driver.ModeRead, 0)
	if he.Owner != "o-"+w[:4] || he.TTL != 0 {
		t.Errorf("reader refused by the waiting writer: %+v, want it named with TTL 0", he)
	}
	// The claim is no hold: it cannot be renewed.
	res, err := s.Renew(ctxT(t), []driver.RenewParams{{Key: "rw", Token: w, TTL: time.Minute, Mode: driver.ModeWrite}})
	if err != nil || !errors.Is(res[0], driver.ErrNotHeld) {
		t.Fatalf("Renew of a claim: %v %v, want ErrNotHeld", res, err)
	}
	// Another writer is refused by the reader too, and the claim does not
	// keep it out once the reader goes.
	w2 := token()
	mustHeld(t, s, "rw", w2, driver.ModeWrite, 0)
	if err := relKind(t, s, "rw", r1, driver.ModeRead); err != nil {
		t.Fatal(err)
	}
	f := mustKind(t, s, "rw", w, driver.ModeWrite, 0)
	if f != 1 {
		t.Errorf("the claim's grant: fence %d, want 1", f)
	}
	mustHeld(t, s, "rw", w2, driver.ModeWrite, 0)
	if err := relKind(t, s, "rw", w, driver.ModeWrite); err != nil {
		t.Fatal(err)
	}
	// A writer that gives up deletes its claim: ErrNotHeld, and readers
	// come back.
	if err := relKind(t, s, "rw", w2, driver.ModeWrite); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("release of a claim: %v, want ErrNotHeld", err)
	}
	if f := mustKind(t, s, "rw", token(), driver.ModeRead, 0); f != 1 {
		t.Errorf("reader after the claim left: fence %d, want 1", f)
	}
}

func testPermits(t *testing.T, pool *pgxpool.Pool, mode Mode) {
	s := newStore(t, pool, &Options{Mode: mode})
	var toks []string
	var last uint64
	for range 3 {
		tok := token()
		f := mustKind(t, s, "sem", tok, driver.ModePermit, 3)
		if f <= last {
			t.Fatalf("permit fence %d after %d", f, last)
		}
		last = f
		toks = append(toks, tok)
	}
	he := mustHeld(t, s, "sem", token(), driver.ModePermit, 3)
	if he.Owner != "o-"+toks[0][:4] {
		t.Errorf("refused permit names %q, want the first holder (ends first)", he.Owner)
	}
	if err := relKind(t, s, "sem", toks[1], driver.ModePermit); err != nil {
		t.Fatal(err)
	}
	if f := mustKind(t, s, "sem", token(), driver.ModePermit, 3); f != last+1 {
		t.Errorf("fence %d, want %d", f, last+1)
	}
	mustHeld(t, s, "sem", token(), driver.ModePermit, 3)
}

func testKindMismatch(t *testing.T, pool *pgxpool.Pool, mode Mode) {
	s := newStore(t, pool, &Options{Mode: mode})
	mustKind(t, s, "k", token(), driver.ModePermit, 2)
	for _, c := range []struct {
		m     driver.Mode
		limit int
	}{{driver.ModePermit, 3}, {driver.ModeRead, 0}, {driver.ModeWrite, 0}} {
		_, err := acq(t, s, "k", token(), c.m, c.limit, time.Minute)
		if !errors.Is(err, driver.ErrKindMismatch) {
			t.Errorf("Acquire %v/%d of a semaphore of 2: %v, want ErrKindMismatch", c.m, c.limit, err)
		}
	}
	mustKind(t, s, "rw", token(), driver.ModeRead, 0)
	if _, err := acq(t, s, "rw", token(), driver.ModePermit, 1, time.Minute); !errors.Is(err, driver.ErrKindMismatch) {
		t.Errorf("permit of a read-write lock: %v, want ErrKindMismatch", err)
	}
	// A refused writer's mismatch leaves no claim: readers still come.
	mustKind(t, s, "rw", token(), driver.ModeRead, 0)
	// A key whose entries all ended takes the next kind.
	tok := token()
	g, err := acq(t, s, "short", tok, driver.ModePermit, 1, 30*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	rt := token()
	waitFor(t, 5*time.Second, "the permit's expiry", func() bool {
		_, err := acq(t, s, "short", rt, driver.ModeRead, 0, time.Minute)
		return err == nil
	})
	if err := relKind(t, s, "short", rt, driver.ModeRead); err != nil {
		t.Fatal(err)
	}
	if f := mustKind(t, s, "short", token(), driver.ModeWrite, 0); f != g.Fence+1 {
		t.Errorf("writer after the semaphore's permit %d: fence %d", g.Fence, f)
	}
}

func testKindRepeat(t *testing.T, pool *pgxpool.Pool, mode Mode) {
	s := newStore(t, pool, &Options{Mode: mode})
	for _, m := range []driver.Mode{driver.ModeRead, driver.ModeWrite, driver.ModePermit} {
		key := "repeat-" + m.String()
		limit := 0
		if m == driver.ModePermit {
			limit = 1
		}
		tok := token()
		f1 := mustKind(t, s, key, tok, m, limit)
		f2 := mustKind(t, s, key, tok, m, limit)
		if f1 != f2 {
			t.Errorf("%v repeated: fence %d then %d", m, f1, f2)
		}
	}
}

func testKindKeepFor(t *testing.T, pool *pgxpool.Pool, mode Mode) {
	s := newStore(t, pool, &Options{Mode: mode})
	tok := token()
	mustKind(t, s, "sem", tok, driver.ModePermit, 1)
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "sem", Token: tok, Mode: driver.ModePermit, KeepFor: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	he := mustHeld(t, s, "sem", token(), driver.ModePermit, 1)
	if he.TTL > 300*time.Millisecond {
		t.Errorf("kept permit's TTL %v", he.TTL)
	}
	waitFor(t, 5*time.Second, "the kept permit's end", func() bool {
		_, err := acq(t, s, "sem", token(), driver.ModePermit, 1, time.Minute)
		return err == nil
	})
}

func testKindRenewMixed(t *testing.T, pool *pgxpool.Pool, mode Mode) {
	s := newStore(t, pool, &Options{Mode: mode})
	ctx := ctxT(t)
	m, r, p := token(), token(), token()
	mustAcquire(t, s, "x", m, "me", time.Minute)
	mustKind(t, s, "x", r, driver.ModeRead, 0)
	mustKind(t, s, "y", p, driver.ModePermit, 2)
	ps := []driver.RenewParams{
		{Key: "x", Token: m, TTL: time.Minute},
		{Key: "x", Token: r, TTL: time.Minute, Mode: driver.ModeRead},
		{Key: "x", Token: r, TTL: time.Minute, Mode: driver.ModeWrite}, // not the mode held
		{Key: "y", Token: p, TTL: time.Minute, Mode: driver.ModePermit},
		{Key: "y", Token: token(), TTL: time.Minute, Mode: driver.ModePermit},
		{Key: "x", Token: r, TTL: time.Minute}, // a reader's token is no mutex's
	}
	res, err := s.Renew(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{true, true, false, true, false, false}
	for i, ok := range want {
		if ok != (res[i] == nil) || (!ok && !errors.Is(res[i], driver.ErrNotHeld)) {
			t.Errorf("item %d (%+v): %v, want renewed %v", i, ps[i], res[i], ok)
		}
	}
	// Kinds alone, too.
	res, err = s.Renew(ctx, ps[3:5])
	if err != nil || res[0] != nil || !errors.Is(res[1], driver.ErrNotHeld) {
		t.Errorf("Renew of permits: %v %v", res, err)
	}
}

func testKindExpired(t *testing.T, pool *pgxpool.Pool, mode Mode) {
	s := newStore(t, pool, &Options{Mode: mode})
	tok := token()
	if _, err := acq(t, s, "sem", tok, driver.ModePermit, 1, 30*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	var f uint64
	waitFor(t, 5*time.Second, "the permit's expiry", func() bool {
		g, err := acq(t, s, "sem", token(), driver.ModePermit, 1, time.Minute)
		f = g.Fence
		return err == nil
	})
	if f != 2 {
		t.Errorf("fence %d after an expired permit, want 2", f)
	}
	res, err := s.Renew(ctxT(t), []driver.RenewParams{{Key: "sem", Token: tok, TTL: time.Minute, Mode: driver.ModePermit}})
	if err != nil || !errors.Is(res[0], driver.ErrNotHeld) {
		t.Errorf("Renew of an expired permit: %v %v", res, err)
	}
	if err := relKind(t, s, "sem", tok, driver.ModePermit); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Release of an expired permit: %v", err)
	}
}

func testKindNotify(t *testing.T, pool *pgxpool.Pool, mode Mode) {
	s := newStore(t, pool, &Options{Mode: mode})
	woken := make(chan string, 16)
	stop, err := s.Subscribe(ctxT(t), func(key string) { woken <- key })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	expect := func(what string, want bool) {
		t.Helper()
		wait := 5 * time.Second
		if !want {
			wait = 300 * time.Millisecond // what would have come by then
		}
		select {
		case k := <-woken:
			if !want || k != "sem" {
				t.Errorf("%s: notified %q", what, k)
			}
		case <-time.After(wait):
			if want {
				t.Errorf("%s: no notification", what)
			}
		}
	}
	tok := token()
	mustKind(t, s, "sem", tok, driver.ModePermit, 1)
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "sem", Token: tok, Mode: driver.ModePermit, KeepFor: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	expect("a release keeping the permit (MinHold)", false)
	mustKind(t, s, "sem", tok, driver.ModePermit, 1)
	if err := relKind(t, s, "sem", tok, driver.ModePermit); err != nil {
		t.Fatal(err)
	}
	expect("a release", true)
	w := token()
	mustKind(t, s, "rw", token(), driver.ModeRead, 0)
	mustHeld(t, s, "rw", w, driver.ModeWrite, 0)
	if err := relKind(t, s, "rw", w, driver.ModeWrite); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatal(err)
	}
	select {
	case k := <-woken:
		if k != "rw" {
			t.Errorf("a withdrawn claim: notified %q", k)
		}
	case <-time.After(5 * time.Second):
		t.Error("a withdrawn claim: no notification")
	}
	// An expired permit that an acquire deletes is announced too.
	if _, err := acq(t, s, "sem", tok, driver.ModePermit, 1, 30*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the permit's expiry", func() bool {
		_, err := acq(t, s, "sem", token(), driver.ModePermit, 1, time.Minute)
		return err == nil
	})
	expect("an expired permit deleted", true)
}

func testKindLeases(t *testing.T, pool *pgxpool.Pool, mode Mode) {
	s := newStore(t, pool, &Options{Mode: mode})
	ctx := ctxT(t)
	mustAcquire(t, s, "job", token(), "m", time.Minute)
	mustKind(t, s, "job", token(), driver.ModeRead, 0)
	w := token()
	mustHeld(t, s, "job", w, driver.ModeWrite, 0)
	mustKind(t, s, "pool", token(), driver.ModePermit, 4)
	mustKind(t, s, "pool", token(), driver.ModePermit, 4)
	ls, err := s.Leases(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	type sum struct {
		key     string
		mode    driver.Mode
		limit   int
		waiting bool
	}
	want := []sum{{"job", driver.ModeMutex, 0, false}, {"job", driver.ModeRead, 0, false}, {"job", driver.ModeWrite, 0, true}, {"pool", driver.ModePermit, 4, false}, {"pool", driver.ModePermit, 4, false}}
	if len(ls) != len(want) {
		t.Fatalf("Leases: %+v", ls)
	}
	for i, l := range ls {
		if (sum{l.Key, l.Mode, l.Limit, l.Waiting}) != want[i] || l.TTL <= 0 {
			t.Errorf("lease %d: %+v, want %+v", i, l, want[i])
		}
	}
	if err := s.ForceRelease(ctx, "pool"); err != nil {
		t.Fatal(err)
	}
	if err := s.ForceRelease(ctx, "pool"); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("second ForceRelease: %v", err)
	}
	if err := s.ForceRelease(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	if ls, err := s.Leases(ctx, ""); err != nil || len(ls) != 0 {
		t.Errorf("Leases after ForceRelease: %+v %v", ls, err)
	}
	// The counter outlives the entries.
	if f := mustKind(t, s, "pool", token(), driver.ModePermit, 1); f != 3 {
		t.Errorf("permit after a forced release: fence %d, want 3", f)
	}
}

func testKindNamespaces(t *testing.T, pool *pgxpool.Pool, mode Mode) {
	s := newStore(t, pool, &Options{Mode: mode})
	m := token()
	if f := mustAcquire(t, s, "x", m, "m", time.Minute); f != 1 {
		t.Fatal(f)
	}
	if f := mustKind(t, s, "x", token(), driver.ModeWrite, 0); f != 1 {
		t.Errorf("writer of a name a mutex holds: fence %d, want 1", f)
	}
	if err := relKind(t, s, "x", m, driver.ModeWrite); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("the mutex's token released as a writer: %v", err)
	}
	if err := s.Release(ctxT(t), driver.ReleaseParams{Key: "x", Token: m}); err != nil {
		t.Fatal(err)
	}
}

// TestKindsClockAfterLock: an acquire that waits for its key's lock
// decides by the database's clock once it holds the lock, so its grant is a
// full TTL from then (now(), the transaction's start, would be before the
// wait).
func TestKindsClockAfterLock(t *testing.T) {
	t.Parallel()
	pool := newPool(t, newDB(t), nil)
	s := newStore(t, pool, nil)
	ctx := ctxT(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, s.sql.lockKind, "k", s.o.seed^kindsSalt, "0"); err != nil {
		t.Fatal(err)
	}
	const ttl = 10 * time.Second
	done := make(chan error, 1)
	go func() {
		_, err := acq(t, s, "k", "AAAAtoken", driver.ModePermit, 1, ttl)
		done <- err
	}()
	waitFor(t, 10*time.Second, "the acquire waiting for the key's lock", func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&n)
		return err == nil && n > 0
	})
	var released time.Time
	if err := tx.QueryRow(ctx, `SELECT clock_timestamp() FROM pg_sleep(0.3)`).Scan(&released); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var acquired, expires time.Time
	if err := pool.QueryRow(ctx, "SELECT acquired_at, expires_at FROM "+tablesOf(s.o).kinds+" WHERE key = 'k'").
		Scan(&acquired, &expires); err != nil {
		t.Fatal(err)
	}
	t.Logf("lock released at %v, grant at %v, lease %v", released.Format(time.StampMicro), acquired.Format(time.StampMicro), expires.Sub(acquired))
	if acquired.Before(released) || expires.Sub(acquired) != ttl {
		t.Errorf("grant decided at %v (lease %v), before the key's lock was released at %v", acquired, expires.Sub(acquired), released)
	}
}

// TestKindsAcquireCancelled: an acquire blocked on its key's lock ends
// with its context (the pipeline's socket gets ctx's deadline), leaves no
// goroutine behind (TestMain's leak check), and no grant once the lock is
// free: the key's only permit is free after.
func TestKindsAcquireCancelled(t *testing.T) {
	t.Parallel()
	pool := newPool(t, newDB(t), nil)
	s := newStore(t, pool, nil)
	tx, err := pool.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctxT(t), s.sql.lockKind, "k", s.o.seed^kindsSalt, "0"); err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{0, 200 * time.Millisecond} {
		var ctx context.Context
		var cancel context.CancelFunc
		if d == 0 { // cancelled while it waits
			ctx, cancel = context.WithCancel(context.Background())
			time.AfterFunc(200*time.Millisecond, cancel)
		} else { // past its deadline while it waits
			ctx, cancel = context.WithTimeout(context.Background(), d)
		}
		start := time.Now()
		_, err := s.Acquire(ctx, driver.AcquireParams{Key: "k", Token: token(), Owner: "o", TTL: time.Minute, Mode: driver.ModePermit, Limit: 1})
		cancel()
		took := time.Since(start)
		t.Logf("blocked acquire ended after %v: %v", took.Round(time.Millisecond), err)
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("blocked acquire: %v, want the context's error", err)
		}
		if took > 5*time.Second {
			t.Errorf("blocked acquire took %v to end", took)
		}
		// The server ends the wait too (lock_timeout at the deadline, the
		// cancel request pgx sends at a cancellation): no grant is made
		// after the caller has gone.
		waitFor(t, 5*time.Second, "the server ending the wait", func() bool {
			var n int
			err := pool.QueryRow(ctxT(t), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&n)
			return err == nil && n == 0
		})
	}
	if err := tx.Rollback(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	mustKind(t, s, "k", token(), driver.ModePermit, 1)
}

// TestRenewMixedOneStatement: a Renew of mutexes, readers and permits
// together is one statement, as a Renew of mutexes alone is.
func TestRenewMixedOneStatement(t *testing.T) {
	t.Parallel()
	pool, tr := tracedPool(t, newDB(t))
	s := newStore(t, pool, nil)
	const n = 300
	var ps []driver.RenewParams
	for i := range n {
		key, tok := fmt.Sprintf("k%d", i%100), token()
		m, limit := []driver.Mode{driver.ModeMutex, driver.ModeRead, driver.ModePermit}[i/100], 0
		switch m {
		case driver.ModeMutex:
			mustAcquire(t, s, key, tok, "me", time.Minute)
		case driver.ModePermit:
			key, limit = "pool", n
		}
		if m != driver.ModeMutex {
			mustKind(t, s, key, tok, m, limit)
		}
		ps = append(ps, driver.RenewParams{Key: key, Token: tok, TTL: time.Minute, Mode: m})
	}
	tr.reset()
	res, err := s.Renew(ctxT(t), ps)
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range res {
		if err != nil {
			t.Errorf("item %d (%v): %v", i, ps[i].Mode, err)
		}
	}
	all, mixed := tr.count(s.sql.renewMixed)
	t.Logf("Renew of %d mutexes, readers and permits: %d statement(s)", n, all)
	if all != 1 || mixed != 1 {
		t.Fatalf("%d statements (%d mixed renewals), want 1", all, mixed)
	}
}

// migrateTo migrates table as an older library would have: up to
// version (the first version migrations).
func migrateTo(t *testing.T, pool *pgxpool.Pool, table string, version int) {
	t.Helper()
	o, err := resolve(pool, &Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := migrateWith(ctxT(t), pool, o, migrations[:version]); err != nil {
		t.Fatal(err)
	}
}

// TestKindsMigration: a table migrated by an older library (before
// 0006_kinds) refuses read-write locks and semaphores with an error that
// says to migrate, and Migrate adds what they need beside it, the mutexes'
// leases kept.
func TestKindsMigration(t *testing.T) {
	t.Parallel()
	pool := newPool(t, newDB(t), nil)
	ctx := ctxT(t)
	migrateTo(t, pool, "old_locks", 5)
	s, err := New(pool, &Options{Table: "old_locks"})
	if err != nil {
		t.Fatal(err)
	}
	tok := token()
	f := mustAcquire(t, s, "job", tok, "me", time.Minute)
	_, err = s.Acquire(ctx, driver.AcquireParams{Key: "job", Token: token(), Owner: "me", TTL: time.Minute, Mode: driver.ModePermit, Limit: 1})
	if !errors.Is(err, errNoTable) || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("a permit on a table before 0006: %v, want a hint to migrate", err)
	}
	if err := Migrate(ctx, pool, &Options{Table: "old_locks"}); err != nil {
		t.Fatal(err)
	}
	mustKind(t, s, "job", token(), driver.ModePermit, 1)
	res, err := s.Renew(ctx, []driver.RenewParams{{Key: "job", Token: tok, TTL: time.Minute}})
	if err != nil || res[0] != nil {
		t.Fatalf("the mutex's lease after the migration: %v %v", res, err)
	}
	if r := readRow(t, s, "job"); r.fence != int64(f) {
		t.Fatalf("row after the migration: %+v", r)
	}
}
