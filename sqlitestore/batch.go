package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"math"

	"github.com/tasklock/tasklock/driver"
)

var _ driver.Batcher = (*Store)(nil)

// batchMaxRows bounds the rows of one batch statement: 4,000 parameters
// at most, well within SQLite's 32,766, and about 200 kB of SQL. A Locker's
// batches (512 items at most) fit in one.
const batchMaxRows = 1000

// MaxBatch implements driver.Batcher: a batch may carry any number of
// items, in statements of up to 1,000 rows.
func (s *Store) MaxBatch() int { return math.MaxInt }

// AcquireBatch implements driver.Batcher with Acquire's statement in its
// multi-row form: one INSERT … ON CONFLICT DO UPDATE … RETURNING with a row
// per item, in order, run as its own write transaction. SQLite's single
// writer then takes its lock and commits once per batch instead of once
// per item, and every item gets the answer Acquire would give it alone:
// each row reads SQLite's clock (one instant for the statement), and a key
// named twice goes to its first row, whose fresh lease the later one finds
// live. The holders of the keys found held are read afterwards, one SELECT
// each, as Acquire reads them. A batch of more than 1,000 items takes a
// statement per 1,000, all in one transaction (BEGIN IMMEDIATE … COMMIT).
// A statement that fails, or a ctx that ends before the last statement
// of a transaction has run, changes nothing: the call returns its error
// and no item is granted. A batch with
// one valid item is that item's Acquire. Items of read-write locks and
// semaphores (which the Locker never batches) are each an Acquire of
// their own, after the batch's mutexes.
func (s *Store) AcquireBatch(ctx context.Context, ps []driver.AcquireParams) ([]driver.AcquireResult, error) {
	res := make([]driver.AcquireResult, len(ps))
	todo := make([]int, 0, len(ps))
	var kinds []int
	for i, p := range ps {
		switch res[i].Err = checkAcquire(p); {
		case res[i].Err != nil:
		case p.Mode != driver.ModeMutex:
			kinds = append(kinds, i)
		default:
			todo = append(todo, i)
		}
	}
	if err := s.acquireMutexes(ctx, ps, todo, res); err != nil {
		return nil, err
	}
	for _, i := range kinds {
		res[i].Grant, res[i].Err = s.Acquire(ctx, ps[i])
	}
	return res, nil
}

// acquireMutexes is AcquireBatch for the mutexes ps[i], i in todo, whose
// results it sets in res.
func (s *Store) acquireMutexes(ctx context.Context, ps []driver.AcquireParams, todo []int, res []driver.AcquireResult) error {
	switch len(todo) {
	case 0:
		return nil
	case 1:
		i := todo[0]
		res[i].Grant, res[i].Err = s.Acquire(ctx, ps[i])
		return nil
	}
	var held []int
	err := s.inChunks(ctx, len(todo), func(ctx context.Context, q querier, start, end int) error {
		chunk := todo[start:end]
		args := make([]any, 0, 4*len(chunk))
		for _, i := range chunk {
			args = acquireArgs(args, ps[i])
		}
		type grantKey struct{ key, token string }
		granted := make(map[grantKey]driver.Grant, len(chunk))
		err := readRows(s.queryBatch(ctx, q, batchShape{rows: len(chunk)}, args))(func(rows *sql.Rows) error {
			k, t, g, err := scanGrant(rows)
			granted[grantKey{k, t}] = g
			return err
		})
		if err != nil {
			return err
		}
		for _, i := range chunk {
			k := grantKey{ps[i].Key, ps[i].Token}
			if g, ok := granted[k]; ok {
				res[i].Grant = g
				delete(granted, k) // the same token named again found the key held
			} else {
				held = append(held, i)
			}
		}
		return nil
	})
	if err != nil {
		return wrap(ctx, "acquire", fmt.Sprintf("%d keys", len(todo)), err)
	}
	for _, i := range held {
		res[i].Err = s.heldBy(ctx, ps[i].Key)
	}
	return nil
}

// ReleaseBatch implements driver.Batcher with Release's statement in its
// multi-row form: one UPDATE … FROM (VALUES …) … RETURNING of the batch's
// live (key, token) pairs, each lease ending now plus its item's KeepFor
// (MinHold), run as its own write transaction; a batch of more than 1,000
// items takes a statement per 1,000 in one transaction. Every item gets
// the answer Release would give it alone, in order: a (key, token) named
// again finds the lease its first item released. When the batch names one
// key with different tokens, the statement's answer (the keys released)
// cannot tell which token held it, and the items run one by one, each
// with Release's statement, in one transaction. A call that fails changes
// nothing. A batch with one item to release is that item's Release. Items
// of read-write locks and semaphores (which the Locker never batches) are
// each a Release of their own, after the batch's mutexes.
func (s *Store) ReleaseBatch(ctx context.Context, ps []driver.ReleaseParams) ([]error, error) {
	errs := make([]error, len(ps))
	var kinds []int
	for i, p := range ps {
		if p.Mode != driver.ModeMutex {
			kinds = append(kinds, i)
		}
	}
	if err := s.releaseMutexes(ctx, ps, errs); err != nil {
		return nil, err
	}
	for _, i := range kinds {
		errs[i] = s.Release(ctx, ps[i])
	}
	return errs, nil
}

// releaseMutexes is ReleaseBatch for the mutexes of ps, whose results it
// sets in errs; it wakes this Store's fair waiters on the keys released.
func (s *Store) releaseMutexes(ctx context.Context, ps []driver.ReleaseParams, errs []error) error {
	type pair struct{ key, token string }
	seen := make(map[pair]bool, len(ps))
	tokens := make(map[string]string, len(ps)) // key → the token its items name
	mixed := false
	todo := make([]int, 0, len(ps))
	for i, p := range ps {
		if p.Mode != driver.ModeMutex {
			continue
		}
		if p.Token == "" || seen[pair{p.Key, p.Token}] {
			errs[i] = driver.ErrNotHeld
			continue
		}
		seen[pair{p.Key, p.Token}] = true
		if t, ok := tokens[p.Key]; ok && t != p.Token {
			mixed = true
		}
		tokens[p.Key] = p.Token
		todo = append(todo, i)
	}
	switch {
	case len(todo) == 0:
		return nil
	case len(todo) == 1:
		i := todo[0]
		errs[i] = s.Release(ctx, ps[i])
		return nil
	case mixed:
		if err := s.releaseOneByOne(ctx, ps, todo, errs); err != nil {
			return err
		}
		s.wakeReleased(ps, todo, errs)
		return nil
	}
	released := make(map[string]bool, len(todo))
	err := s.inChunks(ctx, len(todo), func(ctx context.Context, q querier, start, end int) error {
		chunk := todo[start:end]
		args := make([]any, 0, 3*len(chunk))
		for _, i := range chunk {
			args = releaseArgs(args, ps[i])
		}
		return readRows(s.queryBatch(ctx, q, batchShape{release: true, rows: len(chunk)}, args))(func(rows *sql.Rows) error {
			var k string
			err := rows.Scan(&k)
			released[k] = true
			return err
		})
	})
	if err != nil {
		return wrap(ctx, "release", fmt.Sprintf("%d keys", len(todo)), err)
	}
	for _, i := range todo {
		if !released[ps[i].Key] {
			errs[i] = driver.ErrNotHeld
		}
	}
	s.wakeReleased(ps, todo, errs)
	return nil
}

// wakeReleased wakes this Store's fair waiters on the keys of ps[i], i in
// todo, that were released (not kept: see ReleaseParams.KeepFor).
func (s *Store) wakeReleased(ps []driver.ReleaseParams, todo []int, errs []error) {
	for _, i := range todo {
		if errs[i] == nil && ps[i].KeepFor <= 0 {
			s.wake.wake(ps[i].Key)
		}
	}
}

// releaseOneByOne releases ps[i] for i in todo, in order, each with
// Release's prepared statement, all in one transaction, and sets errs[i].
func (s *Store) releaseOneByOne(ctx context.Context, ps []driver.ReleaseParams, todo []int, errs []error) error {
	err := s.inTx(ctx, func(sctx context.Context, tx *sql.Tx) error {
		st := tx.StmtContext(sctx, s.st.release)
		for _, i := range todo {
			if err := ctx.Err(); err != nil {
				return err
			}
			released, err := releaseOne(sctx, st, ps[i])
			if err != nil {
				return err
			}
			if !released {
				errs[i] = driver.ErrNotHeld
			}
		}
		return nil
	})
	if err != nil {
		return wrap(ctx, "release", fmt.Sprintf("%d keys", len(todo)), err)
	}
	return nil
}

// querier runs a statement: the *sql.DB, or a transaction's *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// batchCachedRows bounds the rows of the batch statements a Store keeps
// prepared. A Locker's batches under load carry a few to a few dozen
// items; compiling each one's statement, inside the write turn, was a
// quarter of the turn's time with 16 goroutines (bench/README.md).
const batchCachedRows = 64

// queryBatch runs the multi-row statement of shape sh with args on q. On
// the *sql.DB, with up to batchCachedRows rows, the statement is prepared
// the first time and kept, so SQLite compiles it once per connection, not
// for every batch; otherwise it is sent as text.
func (s *Store) queryBatch(ctx context.Context, q querier, sh batchShape, args []any) (*sql.Rows, error) {
	text := func() string {
		if sh.release {
			return releaseSQL(s.table, sh.rows)
		}
		return acquireSQL(s.table, sh.rows, grantColumns)
	}
	if _, ok := q.(*sql.DB); !ok || sh.rows > batchCachedRows {
		return q.QueryContext(ctx, text(), args...)
	}
	st, err := s.st.batch(ctx, s.db, sh, text)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// batch returns the prepared statement of shape sh, preparing text() on
// db the first time.
func (p *prepared) batch(ctx context.Context, db *sql.DB, sh batchShape, text func() string) (*sql.Stmt, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := p.batches[sh]; st != nil {
		return st, nil
	}
	st, err := db.PrepareContext(ctx, text())
	if err != nil {
		return nil, err
	}
	if p.batches == nil {
		p.batches = make(map[batchShape]*sql.Stmt)
	}
	p.batches[sh] = st
	return st, nil
}

// inChunks calls run for the items [start, end) of each chunk of n items
// of up to batchMaxRows, in the Store's write turn, with the statement
// context of write: one chunk on s.db, where its statement is a write
// transaction of its own, several in one transaction (see inTx), checking
// before each chunk that ctx has not ended.
func (s *Store) inChunks(ctx context.Context, n int, run func(sctx context.Context, q querier, start, end int) error) error {
	if n <= batchMaxRows {
		return s.write(ctx, func(sctx context.Context) error { return run(sctx, s.db, 0, n) })
	}
	return s.inTx(ctx, func(sctx context.Context, tx *sql.Tx) error {
		for start := 0; start < n; start += batchMaxRows {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := run(sctx, tx, start, min(start+batchMaxRows, n)); err != nil {
				return err
			}
		}
		return nil
	})
}

// inTx runs fn in one write transaction, in the Store's write turn, and
// commits it. fn gets the statement context of write, which ctx's end
// does not interrupt (see stmtCtx); it checks ctx between its statements.
// When fn or the commit fails, the transaction is rolled back, so nothing
// fn wrote stays.
func (s *Store) inTx(ctx context.Context, fn func(sctx context.Context, tx *sql.Tx) error) error {
	return s.write(ctx, func(sctx context.Context) error {
		// Open's DSN makes this BEGIN IMMEDIATE (_txlock=immediate). On a
		// db opened otherwise it is BEGIN DEFERRED, and the first
		// statement, a write, takes the write lock: either way nothing is
		// read before it.
		tx, err := s.db.BeginTx(sctx, nil)
		if err != nil {
			return err
		}
		if err := fn(sctx, tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		if err := ctx.Err(); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
}
