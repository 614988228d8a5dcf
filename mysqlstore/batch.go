package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tasklock/tasklock/driver"
)

var _ driver.Batcher = (*Store)(nil)

// MaxBatch implements driver.Batcher. In connection mode it is 1: every
// lock holds a connection of its own, so a Locker sends each call alone.
// In lease mode a batch may carry any number of items.
func (s *Store) MaxBatch() int {
	if s.mode == ModeConnection {
		return 1
	}
	return math.MaxInt
}

// A batch acquire statement carries at most batchMaxRows rows or about
// batchMaxBytes of SQL, well within max_allowed_packet (see renewMaxBytes).
// A Locker's batches (512 items at most) fit in one.
const (
	batchMaxRows  = 1000
	batchMaxBytes = 4 << 20
)

// Values of Store.dialect.
const (
	dialectUnknown     = iota
	dialectReturning   // MariaDB: INSERT … RETURNING
	dialectNoReturning // MySQL
)

// AcquireBatch implements driver.Batcher: every item gets the answer
// Acquire would give it alone, in order, a key named twice going to its
// first item. A batch with one valid item is that item's Acquire.
//
// In lease mode the items are rows of one multi-row form of Acquire's
// statement, sorted by key (stably, so a key named twice keeps its items'
// order) so that concurrent batches lock rows in one order. On MariaDB it
// ends in RETURNING, which answers every row as the statement left it: one
// statement, one round trip, atomic on its own. MySQL has no RETURNING:
// there the upsert and a SELECT of its keys run in one transaction (four
// round trips: START TRANSACTION, INSERT, SELECT, COMMIT), so that a call
// that fails between them leaves nothing granted. An item is granted when
// its token holds the row afterwards, with the row's fence; otherwise the
// row names the holder and its remaining TTL. A batch too big for one
// statement (over 1,000 rows or 4 MiB of SQL) runs its statements in one
// transaction. The dialect is learnt from the server's VERSION() on the
// first batch.
//
// In connection mode each item must hold a connection of its own (so
// MaxBatch is 1, and a Locker does not batch): the items are Acquire calls
// run concurrently, up to 16 at a time, the items of one key one after the
// other. So are those of a batch with an item of another mode than
// driver.ModeMutex, which a Locker never sends.
func (s *Store) AcquireBatch(ctx context.Context, ps []driver.AcquireParams) ([]driver.AcquireResult, error) {
	res := make([]driver.AcquireResult, len(ps))
	todo := make([]int, 0, len(ps))
	for i, p := range ps {
		if res[i].Err = checkAcquire(p); res[i].Err == nil {
			todo = append(todo, i)
		}
	}
	switch {
	case len(todo) == 0:
		return res, nil
	case len(todo) == 1:
		i := todo[0]
		res[i].Grant, res[i].Err = s.Acquire(ctx, ps[i])
		return res, nil
	case s.mode == ModeConnection || hasKinds(len(ps), func(i int) driver.Mode { return ps[i].Mode }):
		return driver.AcquireEach(ctx, ps, s.Acquire), nil
	}
	if err := s.leaseAcquireBatch(ctx, ps, todo, res); err != nil {
		return nil, s.wrap(fmt.Sprintf("acquire %d keys", len(todo)), err)
	}
	return res, nil
}

// leaseAcquireBatch acquires ps[i] for i in todo and sets res[i].
func (s *Store) leaseAcquireBatch(ctx context.Context, ps []driver.AcquireParams, todo []int, res []driver.AcquireResult) error {
	returning, err := s.returning(ctx)
	if err != nil {
		return err
	}
	slices.SortStableFunc(todo, func(a, b int) int { return strings.Compare(ps[a].Key, ps[b].Key) })
	var chunks [][]int
	for start := 0; start < len(todo); {
		end, size := start, 0
		for end < len(todo) && end-start < batchMaxRows && (size < batchMaxBytes || end == start) {
			p := &ps[todo[end]]
			size += 120 + 2*(len(p.Key)+len(p.Token)+len(p.Owner))
			end++
		}
		chunks = append(chunks, todo[start:end])
		start = end
	}
	run := func(db querierExecer) error {
		for _, idx := range chunks {
			if err := s.acquireChunk(ctx, db, returning, ps, idx, res); err != nil {
				return err
			}
		}
		return nil
	}
	if returning && len(chunks) == 1 {
		return run(s.db)
	}
	return s.inTx(ctx, func(tx *sql.Tx) error { return run(tx) })
}

// querierExecer is what a batch's statements run on: the *sql.DB, or the
// batch's *sql.Tx.
type querierExecer interface {
	querier
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// acquireChunk runs one acquire statement for ps[i], i in idx (sorted by
// key), on db, and sets res[i] from the rows as the statement left them:
// from its RETURNING, or (returning unset, db a transaction) from a SELECT
// of the keys after it.
func (s *Store) acquireChunk(ctx context.Context, db querierExecer, returning bool, ps []driver.AcquireParams, idx []int, res []driver.AcquireResult) error {
	rows := make([]driver.AcquireParams, len(idx))
	for k, i := range idx {
		rows[k] = ps[i]
	}
	q := s.leaseAcquireSQL(rows, returning)
	if returning {
		got, err := queryLeaseRows(ctx, db, q)
		if err != nil {
			return err
		}
		if len(got) != len(rows) {
			return fmt.Errorf("RETURNING gave %d rows for %d", len(got), len(rows))
		}
		for k, i := range idx {
			if got[k].key != ps[i].Key {
				return fmt.Errorf("RETURNING gave row %q for key %q", got[k].key, ps[i].Key)
			}
			res[i] = got[k].acquireResult(ps[i])
		}
		return nil
	}
	if _, err := db.ExecContext(ctx, q); err != nil {
		return err
	}
	keys := make([]string, 0, len(rows))
	for k, p := range rows {
		if k == 0 || p.Key != rows[k-1].Key { // sorted: a key named again is next to its first
			keys = append(keys, p.Key)
		}
	}
	got, err := queryLeaseRows(ctx, db, s.leaseRowsSQL(keys))
	if err != nil {
		return err
	}
	byKey := make(map[string]*leaseRow, len(got))
	for j := range got {
		byKey[got[j].key] = &got[j]
	}
	for _, i := range idx {
		r := byKey[ps[i].Key]
		if r == nil {
			return fmt.Errorf("no row for key %q after its upsert", ps[i].Key)
		}
		res[i] = r.acquireResult(ps[i])
	}
	return nil
}

// ReleaseBatch implements driver.Batcher: every item gets the answer
// Release would give it alone, in order, each honouring its KeepFor
// (MinHold). A batch with one item to release is that item's Release.
//
// In lease mode on MariaDB one statement releases a batch of distinct
// keys (up to 1,000) and tells which leases it released (see
// releaseReturning). Otherwise one transaction releases the batch with one
// UPDATE of its (key, token) pairs (see leaseReleaseSQL). When the count
// of rows it changed says every lease was live, the transaction commits:
// three round trips (START TRANSACTION, UPDATE, COMMIT), whatever the
// number of items. The count does not say which lease was not, and MySQL
// has no RETURNING; so otherwise the transaction is rolled back, and
// another one finds the live leases with a SELECT … FOR UPDATE, which
// locks their rows, releases those with one UPDATE, and commits; should a
// lease end between the two statements, one more SELECT of the locked
// rows tells which. So does a batch that names one key with different
// tokens. A call that fails before its statement, or its COMMIT, releases
// nothing.
//
// In connection mode each lock is released on its own connection: the
// items are Release calls run concurrently, up to 16 at a time, the items
// of one key one after the other (see AcquireBatch).
func (s *Store) ReleaseBatch(ctx context.Context, ps []driver.ReleaseParams) ([]error, error) {
	errs := make([]error, len(ps))
	if s.mode == ModeConnection || hasKinds(len(ps), func(i int) driver.Mode { return ps[i].Mode }) {
		return driver.ReleaseEach(ctx, ps, s.Release), nil
	}
	// Distinct pairs; a pair named again finds the lease its first item
	// released (or did not hold), as a second Release would.
	first := make(map[leasePair]bool, len(ps))
	keys := make(map[string]bool, len(ps))
	distinctKeys := true
	todo := make([]int, 0, len(ps))
	for i, p := range ps {
		k := leasePair{p.Key, p.Token}
		if p.Token == "" || first[k] {
			errs[i] = driver.ErrNotHeld
			continue
		}
		first[k] = true
		distinctKeys = distinctKeys && !keys[p.Key]
		keys[p.Key] = true
		todo = append(todo, i)
	}
	switch len(todo) {
	case 0:
		return errs, nil
	case 1:
		i := todo[0]
		errs[i] = s.leaseRelease(ctx, ps[i])
		return errs, nil
	}
	slices.SortFunc(todo, func(a, b int) int { return strings.Compare(ps[a].Key, ps[b].Key) })
	pairs := make([]leasePair, len(todo))
	keep := make([]time.Duration, len(todo))
	for k, i := range todo {
		pairs[k] = leasePair{ps[i].Key, ps[i].Token}
		keep[k] = ps[i].KeepFor
	}
	var released map[leasePair]bool
	returning, err := s.returning(ctx)
	switch {
	case err != nil:
	case returning && distinctKeys && len(pairs) <= batchMaxRows:
		released, err = s.releaseReturning(ctx, pairs, keep)
	case distinctKeys:
		err = s.inTx(ctx, func(tx *sql.Tx) error {
			n, err := rowsAffected(tx.ExecContext(ctx, s.leaseReleaseSQL(pairs, keep)))
			if err == nil && n != int64(len(pairs)) {
				err = errNotAllHeld
			}
			return err
		})
		if err == nil {
			return errs, nil
		}
	default:
		err = errNotAllHeld
	}
	if errors.Is(err, errNotAllHeld) {
		err = s.inTx(ctx, func(tx *sql.Tx) error {
			var err error
			released, err = s.leasePairs(ctx, tx, pairs, leaseLiveForUpdate)
			if err != nil || len(released) == 0 {
				return err
			}
			// One token holds a key at a time: the live pairs' keys are
			// distinct, as leaseReleaseSQL needs.
			live := make([]leasePair, 0, len(released))
			liveKeep := make([]time.Duration, 0, len(released))
			for k, p := range pairs {
				if released[p] {
					live = append(live, p)
					liveKeep = append(liveKeep, keep[k])
				}
			}
			n, err := rowsAffected(tx.ExecContext(ctx, s.leaseReleaseSQL(live, liveKeep)))
			if err != nil || n == int64(len(live)) {
				return err
			}
			// A lease ended between the two statements. The rows are
			// locked: a pair whose token is still there was not released.
			kept, err := s.leasePairs(ctx, tx, live, "")
			for p := range kept {
				delete(released, p)
			}
			return err
		})
	}
	if err != nil {
		return nil, s.wrap(fmt.Sprintf("release %d keys", len(todo)), err)
	}
	for _, i := range todo {
		if !released[leasePair{ps[i].Key, ps[i].Token}] {
			errs[i] = driver.ErrNotHeld
		}
	}
	return errs, nil
}

// releaseReturning releases pairs (keys distinct), pairs[i] ending
// keepFor[i] from now, in one statement on MariaDB, and returns the pairs
// it released:
//
//	INSERT INTO t (lock_key, token, owner, fence, acquired_at, expires_at)
//	VALUES (key, token, '', LAST_INSERT_ID(0), now [+ keep], now), ...
//	ON DUPLICATE KEY UPDATE
//	  expires_at = IF(token = VALUES(token) AND expires_at > now,
//	                  IF(LAST_INSERT_ID(1), VALUES(acquired_at), expires_at),
//	                  IF(LAST_INSERT_ID(0), expires_at, expires_at)),
//	  token = IF(LAST_INSERT_ID() = 1, '', token)
//	RETURNING lock_key, LAST_INSERT_ID() = 1
//
// MariaDB has no UPDATE … RETURNING, and the count of changed rows does
// not say which lease of a batch was not live; this upsert's RETURNING
// does. Every row sets LAST_INSERT_ID, 1 when the statement releases its
// lease and 0 otherwise, and RETURNING, evaluated for each row as soon as
// it is written, reads it back. The inserted row carries the release's
// new expiry in acquired_at, as VALUES(acquired_at): a key that has no
// row yet (a release of a key never granted) gets one whose lease is
// over, as rows of keys no longer held are. One round trip, whatever the
// number of items and whether every lease was live, atomic on its own.
func (s *Store) releaseReturning(ctx context.Context, pairs []leasePair, keepFor []time.Duration) (map[leasePair]bool, error) {
	n := 600
	for _, p := range pairs {
		n += 120 + 2*len(p.key) + 2*len(p.token)
	}
	b := s.appendInsertValues(make([]byte, 0, n), len(pairs), func(b []byte, i int) []byte {
		b = append(appendPair(b, pairs[i]), ", '', LAST_INSERT_ID(0), "...)
		return append(appendReleaseExpiry(b, keepFor[i]), ", UTC_TIMESTAMP(6)"...)
	})
	b = append(b, " ON DUPLICATE KEY UPDATE expires_at = IF(token = VALUES(token) AND expires_at > UTC_TIMESTAMP(6), "+
		"IF(LAST_INSERT_ID(1), VALUES(acquired_at), expires_at), IF(LAST_INSERT_ID(0), expires_at, expires_at)), "+
		"token = IF(LAST_INSERT_ID() = 1, '', token) RETURNING lock_key, LAST_INSERT_ID() = 1"...)
	rows, err := s.db.QueryContext(ctx, string(b))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	released := make(map[leasePair]bool, len(pairs))
	i := 0
	for ; rows.Next(); i++ {
		var (
			key  string
			mine bool
		)
		if err := rows.Scan(&key, &mine); err != nil {
			return nil, err
		}
		if i >= len(pairs) || key != pairs[i].key {
			return nil, fmt.Errorf("RETURNING gave row %q out of order", key)
		}
		if mine {
			released[pairs[i]] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if i != len(pairs) {
		return nil, fmt.Errorf("RETURNING gave %d rows for %d", i, len(pairs))
	}
	return released, nil
}

// hasKinds reports whether any of n batch items, whose modes mode
// returns, is of another mode than ModeMutex. The Locker sends those one
// at a time; a batch that has them anyway is answered item by item, as in
// connection mode.
func hasKinds(n int, mode func(i int) driver.Mode) bool {
	for i := range n {
		if mode(i) != driver.ModeMutex {
			return true
		}
	}
	return false
}

// errNotAllHeld rolls back a release batch's optimistic transaction.
var errNotAllHeld = errors.New("mysqlstore: not every lease of the batch was held")

// inTx runs fn in a transaction and commits it. When fn fails, the
// transaction is rolled back; when ctx ends first, database/sql rolls it
// back (go-sql-driver closes the connection, which rolls it back at the
// server). Either way nothing fn wrote stays.
func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// returning reports whether the server takes INSERT … RETURNING: MariaDB
// does (10.5 and later), MySQL does not. It asks the server once, with
// SELECT VERSION(), on the first batch; a failed ask is retried by the
// next.
func (s *Store) returning(ctx context.Context) (bool, error) {
	switch s.dialect.Load() {
	case dialectReturning:
		return true, nil
	case dialectNoReturning:
		return false, nil
	}
	var v string
	if err := s.db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		return false, err
	}
	d := int32(dialectNoReturning)
	if strings.Contains(strings.ToLower(v), "mariadb") {
		d = dialectReturning
	}
	s.dialect.CompareAndSwap(dialectUnknown, d)
	return d == dialectReturning, nil
}
