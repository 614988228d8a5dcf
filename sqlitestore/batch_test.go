package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tasklock/tasklock/driver"
)

// TestBatchDuplicateKey names one key three times in a batch: the first
// item gets it with the next fence, the others find it held by the first,
// and in a release batch only the first release of a token counts.
func TestBatchDuplicateKey(t *testing.T) {
	db := openT(t, dbPath(t), nil)
	s := newStoreT(t, db)
	ctx := ctxT(t)
	if f := mustAcquire(t, s, "k", "old", time.Minute); f != 1 {
		t.Fatalf("first fence %d", f)
	}
	if err := s.Release(ctx, driver.ReleaseParams{Key: "k", Token: "old"}); err != nil {
		t.Fatal(err)
	}
	ps := []driver.AcquireParams{
		{Key: "k", Token: "a", Owner: "owner-a", TTL: time.Minute},
		{Key: "k", Token: "b", Owner: "owner-b", TTL: time.Minute},
		{Key: "k2", Token: "c", Owner: "owner-c", TTL: time.Minute},
		{Key: "k", Token: "d", Owner: "owner-d", TTL: time.Minute},
	}
	rs, err := s.AcquireBatch(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Err != nil || rs[0].Grant.Fence != 2 {
		t.Errorf("first item for k: %+v, want fence 2", rs[0])
	}
	if rs[2].Err != nil || rs[2].Grant.Fence != 1 {
		t.Errorf("k2: %+v, want fence 1", rs[2])
	}
	for _, i := range []int{1, 3} {
		var he *driver.HeldError
		if !errors.As(rs[i].Err, &he) || he.Owner != "owner-a" || he.TTL <= 50*time.Second {
			t.Errorf("item %d for k: %+v, want held by owner-a for about a minute", i, rs[i])
		}
	}
	if r := readRow(t, db, DefaultTable, "k"); r.token != "a" || r.fence != 2 {
		t.Errorf("row of k: %+v, want token a, fence 2", r)
	}

	errs, err := s.ReleaseBatch(ctx, []driver.ReleaseParams{
		{Key: "k", Token: "b"},
		{Key: "k", Token: "a"},
		{Key: "k", Token: "a"},
		{Key: "k2", Token: "c", KeepFor: time.Minute},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []error{driver.ErrNotHeld, nil, driver.ErrNotHeld, nil} {
		if (want == nil && errs[i] != nil) || !errors.Is(errs[i], want) {
			t.Errorf("release item %d: %v, want %v", i, errs[i], want)
		}
	}
	if r := readRow(t, db, DefaultTable, "k"); r.token != "" || r.expiresInUS > 0 {
		t.Errorf("k after release: %+v, want free", r)
	}
	// MinHold: k2 stays taken, by nobody, for KeepFor.
	if r := readRow(t, db, DefaultTable, "k2"); r.token != "" || r.expiresInUS < 50_000_000 {
		t.Errorf("k2 after a release keeping it a minute: %+v", r)
	}
	if _, err := s.Acquire(ctx, driver.AcquireParams{Key: "k2", Token: "e", TTL: time.Minute}); !errors.Is(err, driver.ErrHeld) {
		t.Errorf("k2 within KeepFor: %v, want ErrHeld", err)
	}
}

// TestBatchFailsPartWay makes a batch fail after some of its work was
// done — a statement fails, or the batch's context is cancelled before it
// runs — and checks that the whole batch was rolled back: every key is
// free for a later Acquire with no fence spent, and a failed release batch
// leaves every lease held. A batch is one statement (atomic on its own)
// up to batchMaxRows items, so the batches here are bigger, or name one
// key with two tokens (a release batch then runs an UPDATE per item).
func TestBatchFailsPartWay(t *testing.T) {
	db, cc := openCounting(t, dbPath(t))
	s := newStoreT(t, db)
	// failAt arms the hook to run at the nth statement from now: cancel
	// the context, or fail the statement.
	failAt := func(n int64, cancel context.CancelFunc) {
		var seen atomic.Int64
		h := func() error {
			if seen.Add(1) != n {
				return nil
			}
			if cancel != nil {
				cancel()
				return nil // the statement runs with an ended context
			}
			return errors.New("injected failure")
		}
		cc.hook.Store(&h)
	}
	hows := []string{"failed statement", "cancelled context"}
	// call runs fn with a context that the hook cancels, for "cancelled
	// context", at the nth statement, or with a statement that fails there.
	call := func(how string, n int64, fn func(ctx context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var cancelAt context.CancelFunc
		if how == "cancelled context" {
			cancelAt = cancel
		}
		failAt(n, cancelAt)
		err := fn(ctx)
		cc.hook.Store(nil)
		if err == nil {
			t.Fatalf("%s at statement %d: the batch succeeded, want an error", how, n)
		}
		t.Logf("%s: %v", how, err)
	}

	const n = batchMaxRows + 5
	for round, how := range hows {
		ps := make([]driver.AcquireParams, n)
		for i := range ps {
			ps[i] = driver.AcquireParams{Key: fmt.Sprintf("a%d/%04d", round, i), Token: fmt.Sprintf("t%d", i), Owner: "batch", TTL: time.Minute}
		}
		call(how, 2, func(ctx context.Context) error {
			_, err := s.AcquireBatch(ctx, ps)
			return err
		})
		if ls, err := s.Leases(ctxT(t), fmt.Sprintf("a%d/", round)); err != nil || len(ls) != 0 {
			t.Errorf("%s: %d leases left by the failed batch (%v), want none", how, len(ls), err)
		}
		for _, p := range []driver.AcquireParams{ps[0], ps[n-1]} {
			g, err := s.Acquire(ctxT(t), driver.AcquireParams{Key: p.Key, Token: "later", TTL: time.Minute})
			if err != nil || g.Fence != 1 {
				t.Errorf("%s: Acquire(%s) after the failed batch: %+v, %v; want fence 1 (nothing of the batch stayed)", how, p.Key, g, err)
			}
		}
	}

	// Release batches that fail part-way release nothing.
	ps := make([]driver.AcquireParams, n)
	for i := range ps {
		ps[i] = driver.AcquireParams{Key: fmt.Sprintf("r/%04d", i), Token: fmt.Sprintf("r%d", i), Owner: "me", TTL: time.Minute}
	}
	rs, err := s.AcquireBatch(ctxT(t), ps)
	if err != nil {
		t.Fatal(err)
	}
	rel := make([]driver.ReleaseParams, n)
	ren := make([]driver.RenewParams, n)
	for i, r := range rs {
		if r.Err != nil {
			t.Fatalf("item %d: %v", i, r.Err)
		}
		rel[i] = driver.ReleaseParams{Key: ps[i].Key, Token: ps[i].Token}
		ren[i] = driver.RenewParams{Key: ps[i].Key, Token: ps[i].Token, TTL: time.Minute}
	}
	// The same key with another token makes the batch run an UPDATE per
	// item: fail the third.
	mixed := append([]driver.ReleaseParams{{Key: "r/0000", Token: "not-it"}}, rel[:4]...)
	for _, how := range hows {
		for _, b := range []struct {
			ps []driver.ReleaseParams
			at int64
		}{{rel, 2}, {mixed, 3}} {
			call(how, b.at, func(ctx context.Context) error {
				_, err := s.ReleaseBatch(ctx, b.ps)
				return err
			})
			res, err := s.Renew(ctxT(t), ren)
			if err != nil {
				t.Fatal(err)
			}
			for i, err := range res {
				if err != nil {
					t.Fatalf("%s: lease %s after a failed release batch of %d: %v, want still held", how, ren[i].Key, len(b.ps), err)
				}
			}
		}
	}
	errs, err := s.ReleaseBatch(ctxT(t), mixed)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []error{driver.ErrNotHeld, nil, nil, nil, nil} {
		if (want == nil && errs[i] != nil) || !errors.Is(errs[i], want) {
			t.Errorf("release item %d of %+v: %v, want %v", i, mixed, errs[i], want)
		}
	}
}
