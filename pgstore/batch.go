package pgstore

import (
	"context"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/tasklock/tasklock/driver"
)

var _ driver.Batcher = (*Store)(nil)

// MaxBatch implements driver.Batcher. In connection mode it is 1: every
// lock holds a connection of its own, so a Locker sends each call alone
// (batching would only make it open and close connections in bursts). In
// lease mode a batch may carry any number of items.
func (s *Store) MaxBatch() int {
	if s.conns != nil {
		return 1
	}
	return math.MaxInt
}

// AcquireBatch implements driver.Batcher. In lease mode the whole batch is
// one round trip on one pooled connection: one upsert over unnest()ed
// arrays (the statement of Acquire, over rows taken in key order), with
// each item answered as Acquire would answer it. A key named twice goes to
// its first item: the upsert cannot change a row twice, so the second
// items of keys go in a second statement, and so on, all sent together in
// one pgx.Batch (one transaction), each seeing the ones before it exactly
// as calls made in turn would. In connection mode every grant needs a
// connection of its own: the items are Acquire calls, run concurrently
// (a key's later items after its earlier ones).
func (s *Store) AcquireBatch(ctx context.Context, ps []driver.AcquireParams) ([]driver.AcquireResult, error) {
	res := make([]driver.AcquireResult, len(ps))
	if len(ps) == 0 {
		return res, nil
	}
	if s.conns != nil || len(ps) == 1 || !acquireText(ps) || !allMutexes(len(ps), func(i int) driver.Mode { return ps[i].Mode }) {
		// A lone item, an item the database would reject (one bad item
		// must not fail the others' statement), or a hold of another
		// kind than a mutex: each alone, as Acquire.
		return driver.AcquireEach(ctx, ps, s.Acquire), nil
	}
	rounds := byOccurrence(len(ps), func(i int) string { return ps[i].Key })
	args := func(round []int) []any {
		keys, tokens := make([]string, len(round)), make([]string, len(round))
		owners, ttls := make([]string, len(round)), make([]int64, len(round))
		for j, i := range round {
			p := &ps[i]
			keys[j], tokens[j], owners[j], ttls[j] = p.Key, p.Token, p.Owner, micros(p.TTL)
		}
		return []any{keys, tokens, owners, ttls}
	}
	seen := make([]bool, len(ps))
	var (
		idx int64
		row acquireRow
	)
	dest := append([]any{&idx}, row.dest()...)
	err := s.sendRounds(ctx, s.sql.acquireBatch, rounds, args, dest, func(round []int) error {
		if idx < 1 || idx > int64(len(round)) || seen[round[idx-1]] {
			return fmt.Errorf("unexpected row %d", idx)
		}
		i := round[idx-1]
		seen[i] = true
		res[i].Grant, res[i].Err = row.result()
		return nil
	})
	if err != nil {
		return nil, s.wrap(fmt.Sprintf("acquire %d keys", len(ps)), "", err)
	}
	for i, ok := range seen {
		if !ok {
			// Every item joins its key's upserted row; kept for safety,
			// as in Acquire.
			res[i].Err = &driver.HeldError{}
		}
	}
	return res, nil
}

// ReleaseBatch implements driver.Batcher. In lease mode it is one UPDATE
// over unnest()ed arrays in one round trip: the statement of Release
// (token-checked, MinHold kept, NOTIFY only for a plain release of a key an
// acquire found held), on rows locked in key order. A key named twice has
// its later items in later statements of the same round trip, as in
// AcquireBatch. In connection mode each item is a Release on its lock's own
// connection, run concurrently.
func (s *Store) ReleaseBatch(ctx context.Context, ps []driver.ReleaseParams) ([]error, error) {
	res := make([]error, len(ps))
	if len(ps) == 0 {
		return res, nil
	}
	if s.conns != nil || len(ps) == 1 || !releaseText(ps) || !allMutexes(len(ps), func(i int) driver.Mode { return ps[i].Mode }) {
		return driver.ReleaseEach(ctx, ps, s.Release), nil
	}
	rounds := byOccurrence(len(ps), func(i int) string { return ps[i].Key })
	args := func(round []int) []any {
		keys, tokens, keeps := make([]string, len(round)), make([]string, len(round)), make([]int64, len(round))
		for j, i := range round {
			p := &ps[i]
			keys[j], tokens[j], keeps[j] = p.Key, p.Token, micros(p.KeepFor)
		}
		return []any{keys, tokens, keeps, s.o.channel}
	}
	released := make([]bool, len(ps))
	var idx int64
	err := s.sendRounds(ctx, s.sql.releaseBatch, rounds, args, []any{&idx, nil}, func(round []int) error {
		if idx < 1 || idx > int64(len(round)) || released[round[idx-1]] {
			return fmt.Errorf("unexpected row %d", idx)
		}
		released[round[idx-1]] = true
		return nil
	})
	if err != nil {
		return nil, s.wrap(fmt.Sprintf("release %d keys", len(ps)), "", err)
	}
	for i, ok := range released {
		if !ok {
			res[i] = driver.ErrNotHeld
		}
	}
	return res, nil
}

// sendRounds runs sql once per round, with args(round) as its arguments,
// on one pooled connection and in one round trip, and calls row for every
// row it returns, once dest holds it. Several rounds go as one pgx.Batch
// (see sendBatch): one implicit transaction, its statements run in turn.
// Rows are read as they come, but only a nil error means the batch
// committed.
func (s *Store) sendRounds(ctx context.Context, sql string, rounds [][]int, args func([]int) []any, dest []any, row func(round []int) error) error {
	// On a connection of its own rather than through the Pool: see
	// Acquire.
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	if len(rounds) == 1 {
		rows, _ := c.Conn().Query(ctx, sql, args(rounds[0])...)
		_, err := pgx.ForEachRow(rows, dest, func() error { return row(rounds[0]) })
		return err
	}
	b := &pgx.Batch{}
	for _, round := range rounds {
		b.Queue(sql, args(round)...)
	}
	return sendBatch(ctx, c.Conn(), b, func(br pgx.BatchResults) error {
		for _, round := range rounds {
			rows, _ := br.Query()
			if _, err := pgx.ForEachRow(rows, dest, func() error { return row(round) }); err != nil {
				return err
			}
		}
		return nil
	})
}

// byOccurrence groups the items 0..n-1 into rounds by how many earlier
// items name the same key: round k holds the (k+1)-th item of each key, in
// order. A batch without a repeated key is one round.
func byOccurrence(n int, key func(int) string) [][]int {
	first := make([]int, 0, n)
	var later [][]int
	count := make(map[string]int, n)
	for i := range n {
		k := count[key(i)]
		count[key(i)] = k + 1
		if k == 0 {
			first = append(first, i)
			continue
		}
		for len(later) < k {
			later = append(later, nil)
		}
		later[k-1] = append(later[k-1], i)
	}
	return append([][]int{first}, later...)
}

// dbText reports whether the database takes s as text: valid UTF-8
// without NUL.
func dbText(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// acquireText reports whether the database takes every item's text.
func acquireText(ps []driver.AcquireParams) bool {
	for i := range ps {
		if !dbText(ps[i].Key) || !dbText(ps[i].Token) || !dbText(ps[i].Owner) {
			return false
		}
	}
	return true
}

// releaseText reports whether the database takes every item's text.
func releaseText(ps []driver.ReleaseParams) bool {
	for i := range ps {
		if !dbText(ps[i].Key) || !dbText(ps[i].Token) {
			return false
		}
	}
	return true
}
