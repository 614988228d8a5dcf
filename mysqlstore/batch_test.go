package mysqlstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/testserver"
)

// batchVariants are the ways a Store batches: lease mode with MariaDB's
// INSERT … RETURNING, lease mode as on MySQL (a transaction of the upsert
// and a SELECT), and connection mode.
var batchVariants = []struct {
	name  string
	mode  Mode
	mysql bool // lease mode as on MySQL
}{
	{"Lease", ModeLease, false},
	{"LeaseMySQL", ModeLease, true},
	{"Connection", ModeConnection, false},
}

// newBatchStore returns a Store of the variant on a fresh database, over a
// pool whose statements c counts (and c.hook can fail).
func newBatchStore(t *testing.T, mode Mode, mysqlDialect bool) (*Store, *counter) {
	t.Helper()
	dsn := testserver.SharedMariaDB(t).CreateDB(t)
	c := &counter{}
	s := mustNew(t, openCountingDB(t, dsn, c), &Options{Mode: mode, Migrate: true})
	if mysqlDialect {
		s.dialect.Store(dialectNoReturning)
	}
	return s, c
}

// eachLeaseDialect runs fn in a parallel subtest on a lease-mode Store of
// each dialect, MariaDB's and MySQL's (no RETURNING), each on a fresh
// database over a pool whose statements c counts.
func eachLeaseDialect(t *testing.T, fn func(t *testing.T, mysql bool, s *Store, c *counter)) {
	t.Helper()
	for _, v := range batchVariants[:2] {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			s, c := newBatchStore(t, v.mode, v.mysql)
			fn(t, v.mysql, s, c)
		})
	}
}

// TestBatchDuplicateKey names one key three times in a batch: the first
// item gets it with the next fence and the others find it held by the
// first; in a release batch only the first release of a token counts.
func TestBatchDuplicateKey(t *testing.T) {
	t.Parallel()
	for _, v := range batchVariants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newBatchStore(t, v.mode, v.mysql)
			ctx := ctxT(t)
			holder := token()
			mustAcquire(t, s, "held", holder, "holder", time.Minute)
			old := token()
			f0 := mustAcquire(t, s, "k", old, "me", time.Minute)
			if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: old}); err != nil {
				t.Fatal(err)
			}
			ps := []driver.AcquireParams{
				{Key: "k", Token: token(), Owner: "owner-a", TTL: time.Minute},
				{Key: "k", Token: token(), Owner: "owner-b", TTL: time.Minute},
				{Key: "held", Token: token(), Owner: "owner-c", TTL: time.Minute},
				{Key: "k2", Token: token(), Owner: "owner-d", TTL: time.Minute},
				{Key: "k", Token: token(), Owner: "owner-e", TTL: time.Minute},
			}
			rs, err := s.AcquireBatch(ctx, ps)
			if err != nil {
				t.Fatal(err)
			}
			if rs[0].Err != nil || rs[0].Grant.Fence != f0+1 {
				t.Errorf("first item for k: %+v, want fence %d", rs[0], f0+1)
			}
			if rs[3].Err != nil || rs[3].Grant.Fence != 1 {
				t.Errorf("k2: %+v, want fence 1", rs[3])
			}
			for i, want := range map[int]string{1: "owner-a", 2: "holder", 4: "owner-a"} {
				var he *driver.HeldError
				if !errors.As(rs[i].Err, &he) || he.Owner != want {
					t.Errorf("item %d (%s): %+v, want held by %s", i, ps[i].Key, rs[i], want)
				} else if v.mode == ModeLease && he.TTL < 50*time.Second {
					t.Errorf("item %d (%s): holder's TTL %v, want about a minute", i, ps[i].Key, he.TTL)
				}
			}

			errs, err := s.ReleaseBatch(ctx, []driver.ReleaseParams{
				{Key: "k", Token: ps[1].Token},
				{Key: "k", Token: ps[0].Token},
				{Key: "k", Token: ps[0].Token},
				{Key: "k2", Token: ps[3].Token, KeepFor: time.Minute},
				{Key: "held", Token: ps[2].Token},
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range []error{driver.ErrNotHeld, nil, driver.ErrNotHeld, nil, driver.ErrNotHeld} {
				if (want == nil && errs[i] != nil) || !errors.Is(errs[i], want) {
					t.Errorf("release item %d: %v, want %v", i, errs[i], want)
				}
			}
			if f := mustAcquire(t, s, "k", token(), "me", time.Minute); f != f0+2 {
				t.Errorf("k after the batch release: fence %d, want %d", f, f0+2)
			}
			// MinHold: k2 stays taken for KeepFor.
			if _, err := s.Acquire(ctx, driver.AcquireParams{Key: "k2", Token: token(), Owner: "x", TTL: time.Minute}); !errors.Is(err, driver.ErrHeld) {
				t.Errorf("k2 within KeepFor: %v, want ErrHeld", err)
			}
			if res, err := s.Renew(ctx, []driver.RenewParams{{Key: "held", Token: holder, TTL: time.Minute}}); err != nil || res[0] != nil {
				t.Errorf("the other owner's lease after a release with the wrong token: %v, %v", res, err)
			}
		})
	}
}

// failOn makes the nth statement (from 1) that starts with prefix fail or,
// with cancel, cancels the call's context just before it is sent.
func failOn(c *counter, prefix string, n int32, cancel context.CancelFunc) {
	var seen atomic.Int32
	c.setHook(func(q string) error {
		if !strings.HasPrefix(q, prefix) || seen.Add(1) != n {
			return nil
		}
		if cancel != nil {
			cancel()
			return nil // the driver finds the context ended
		}
		return errors.New("injected failure")
	})
}

// TestBatchFailsPartWay fails a lease-mode batch after some of its work
// reached the server — a statement fails, or the call's context is
// cancelled — and checks that the whole batch was rolled back: every key
// is free for a later Acquire with no fence spent, and a failed release
// batch leaves every lease held.
func TestBatchFailsPartWay(t *testing.T) {
	t.Parallel()
	eachLeaseDialect(t, func(t *testing.T, mysql bool, s *Store, c *counter) {
		// Where the batch fails: on MySQL at the SELECT after the
		// upsert; on MariaDB, where a batch of up to 1,000 rows is one
		// statement, at the second statement of a bigger one.
		n, prefix, nth := 5, "SELECT "+leaseCols, int32(1)
		if !mysql {
			n, prefix, nth = batchMaxRows+1, "INSERT INTO", 2
		}
		for round, how := range []string{"failed statement", "cancelled context"} {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			ps := make([]driver.AcquireParams, n)
			for i := range ps {
				ps[i] = driver.AcquireParams{Key: fmt.Sprintf("pw%d/%04d", round, i), Token: token(), Owner: "batch", TTL: time.Minute}
			}
			var cancelAt context.CancelFunc
			if how == "cancelled context" {
				cancelAt = cancel
			}
			failOn(c, prefix, nth, cancelAt)
			rs, err := s.AcquireBatch(ctx, ps)
			c.setHook(nil)
			cancel()
			if err == nil {
				t.Fatalf("%s: AcquireBatch = %d results, want an error", how, len(rs))
			}
			t.Logf("%s: %.200s", how, err)
			if ls, err := s.Leases(ctxT(t), fmt.Sprintf("pw%d/", round)); err != nil || len(ls) != 0 {
				t.Errorf("%s: %d leases left by the failed batch (%v), want 0", how, len(ls), err)
			}
			for _, i := range []int{0, n - 1} {
				if f := mustAcquire(t, s, ps[i].Key, token(), "later", time.Minute); f != 1 {
					t.Errorf("%s: Acquire(%s) after the failed batch: fence %d, want 1 (nothing of the batch stayed)", how, ps[i].Key, f)
				}
			}
		}

		// A release batch that fails part-way releases nothing: on
		// MySQL in the transaction that finds which leases are held,
		// after an optimistic one was rolled back (the whole
		// optimistic transaction is one UPDATE); on MariaDB, where the
		// batch is one statement whatever its leases, at that one.
		for _, how := range []string{"failed statement", "cancelled context"} {
			ps := make([]driver.ReleaseParams, 4)
			rps := make([]driver.RenewParams, len(ps))
			for i := range ps {
				key, tok := fmt.Sprintf("rel/%d", i), token()
				mustAcquire(t, s, key, tok, "me", time.Minute)
				ps[i] = driver.ReleaseParams{Key: key, Token: tok}
				rps[i] = driver.RenewParams{Key: key, Token: tok, TTL: time.Minute}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			var cancelAt context.CancelFunc
			if how == "cancelled context" {
				cancelAt = cancel
			}
			// On MySQL the second UPDATE is the exact path's, after
			// the optimistic one found a lease not held.
			if mysql {
				failOn(c, "UPDATE", 2, cancelAt)
			} else {
				failOn(c, "INSERT INTO", 1, cancelAt)
			}
			errs, err := s.ReleaseBatch(ctx, append(ps, driver.ReleaseParams{Key: "rel/none", Token: token()}))
			c.setHook(nil)
			cancel()
			if err == nil {
				t.Fatalf("%s: ReleaseBatch = %v, want an error", how, errs)
			}
			res, err := s.Renew(ctxT(t), rps)
			if err != nil {
				t.Fatal(err)
			}
			for i, err := range res {
				if err != nil {
					t.Errorf("%s: lease %s after the failed release batch: %v, want still held", how, ps[i].Key, err)
				}
			}
			if errs, err := s.ReleaseBatch(ctxT(t), ps); err != nil || errs[0] != nil || errs[3] != nil {
				t.Fatalf("%s: ReleaseBatch again: %v, %v", how, errs, err)
			}
		}
	})
}

// TestBatchConnectionFails fails connection-mode batch items part-way:
// each item is an Acquire of its own, so the others are granted, and no
// item leaves its key taken for a later Acquire: a failed item's
// connection is closed, which frees its lock at the server.
func TestBatchConnectionFails(t *testing.T) {
	t.Parallel()
	s, c := newBatchStore(t, ModeConnection, false)
	for round, how := range []string{"failed statement", "cancelled context"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		ps := make([]driver.AcquireParams, 6)
		for i := range ps {
			ps[i] = driver.AcquireParams{Key: fmt.Sprintf("cf%d/%d", round, i), Token: token(), Owner: "batch", TTL: time.Minute}
		}
		var cancelAt context.CancelFunc
		if how == "cancelled context" {
			cancelAt = cancel
		}
		failOn(c, "INSERT INTO", 3, cancelAt)
		rs, err := s.AcquireBatch(ctx, ps)
		c.setHook(nil)
		cancel()
		if err != nil {
			t.Fatalf("%s: AcquireBatch: %v, want per-item results", how, err)
		}
		failed := 0
		for i, r := range rs {
			if r.Err != nil {
				failed++
				t.Logf("%s: item %s: %v", how, ps[i].Key, r.Err)
				continue
			}
			// A connection whose query was under way when its context
			// was cancelled may be closed by go-sql-driver even though
			// the query succeeded, which ends the lock as a failed
			// renewal would: its Release then finds it gone.
			err := s.Release(ctxT(t), driver.ReleaseParams{Key: ps[i].Key, Token: ps[i].Token})
			if err != nil && (cancelAt == nil || !errors.Is(err, driver.ErrNotHeld)) {
				t.Errorf("%s: Release of granted item %s: %v", how, ps[i].Key, err)
			}
		}
		if failed == 0 {
			t.Errorf("%s: no item failed", how)
		}
		for _, p := range ps {
			tok := token()
			waitFor(t, 5*time.Second, p.Key+" free after the batch", func() bool {
				_, err := s.Acquire(ctxT(t), driver.AcquireParams{Key: p.Key, Token: tok, Owner: "later", TTL: time.Minute})
				return err == nil
			})
			if err := s.Release(ctxT(t), driver.ReleaseParams{Key: p.Key, Token: tok}); err != nil {
				t.Error(err)
			}
		}
	}
}

// TestReleaseBatchEachItem releases, in one batch, a live lease, one with
// a MinHold to run, one held by another token, one force-released before
// (its token no longer holds it, though nobody else does) and a key never
// granted: on MariaDB in one statement, on MySQL in transactions. Each
// item gets the answer Release alone would give, and the store is left
// as those Releases would leave it.
func TestReleaseBatchEachItem(t *testing.T) {
	t.Parallel()
	eachLeaseDialect(t, func(t *testing.T, mysql bool, s *Store, c *counter) {
		ctx := ctxT(t)
		live, kept, forced := token(), token(), token()
		liveFence := mustAcquire(t, s, "each/live", live, "me", time.Minute)
		mustAcquire(t, s, "each/kept", kept, "me", time.Minute)
		mustAcquire(t, s, "each/other", token(), "other", time.Minute)
		mustAcquire(t, s, "each/forced", forced, "me", time.Minute)
		if err := s.ForceRelease(ctx, "each/forced"); err != nil {
			t.Fatal(err)
		}
		c.reset()
		errs, err := s.ReleaseBatch(ctx, []driver.ReleaseParams{
			{Key: "each/live", Token: live},
			{Key: "each/kept", Token: kept, KeepFor: 30 * time.Second},
			{Key: "each/other", Token: token()},
			{Key: "each/forced", Token: forced},
			{Key: "each/never", Token: token()},
		})
		if err != nil {
			t.Fatal(err)
		}
		stmts, _ := c.count()
		t.Logf("%d statements", stmts)
		for i, want := range []error{nil, nil, driver.ErrNotHeld, driver.ErrNotHeld, driver.ErrNotHeld} {
			if errs[i] != want {
				t.Errorf("item %d: %v, want %v", i, errs[i], want)
			}
		}
		ls, err := s.Leases(ctx, "each/")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]driver.Lease{}
		for _, l := range ls {
			got[l.Key] = l
		}
		if len(got) != 2 || got["each/other"].Owner != "other" || got["each/kept"].Owner != "me" ||
			got["each/kept"].TTL <= 0 || got["each/kept"].TTL > 30*time.Second {
			t.Errorf("leases after the batch: %+v, want each/other's and each/kept's MinHold (≤ 30s)", ls)
		}
		if f := mustAcquire(t, s, "each/live", token(), "later", time.Minute); f != liveFence+1 {
			t.Errorf("each/live after its release: fence %d, want %d", f, liveFence+1)
		}
		for _, key := range []string{"each/forced", "each/never"} {
			mustAcquire(t, s, key, token(), "later", time.Minute)
		}
	})
}
