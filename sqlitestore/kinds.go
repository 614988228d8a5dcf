package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/tasklock/tasklock/driver"
)

var _ driver.Kinder = (*Store)(nil)

// The states of an entry of a read-write lock or semaphore (the state
// column of migration 0005).
const (
	entryHeld    = 0 // a hold: renewed and released by its token
	entryWaiting = 1 // a writer's waiting claim (ModeWrite), not a hold
	entryKept    = 2 // a hold released with MinHold, kept until it ends
)

// kindsSQL are the statements of read-write locks and semaphores
// (driver.Kinder) and of the fair queue (driver.FairQueuer), over the
// tables migration 0005 creates beside the lock table. In each but
// renewAll, ?1 is the key; the other parameters are named where the
// statement is made.
type kindsSQL struct {
	fences, entries, queue string // quoted table names

	// Acquire, in one transaction: prune, state, then renew (a repeat),
	// take (after bump for a writer or a permit), claim, or holder.
	prune, state, renew, bump, take, claim, holder string
	// Release, one statement: release (KeepFor 0) or keep (MinHold).
	release, keep string
	renewAll      string // Renew's statement for every entry of a batch
	force         string // ForceRelease's second statement
	// The fair queue.
	enqueue, queueRenew, queueHead, queuePoll, queueGrant, queueLeave string
}

func newKindsSQL(c config, locks string) *kindsSQL {
	q := func(suffix string) string { return `"` + c.table + suffix + `"` }
	k := &kindsSQL{fences: q("_kinds"), entries: q("_entries"), queue: q("_queue")}
	e := k.entries
	// The first statement of Acquire's transaction writes, so that it takes
	// SQLite's write lock before anything is read, whatever the DSN's
	// _txlock. The second reads SQLite's now once, which the rest take as
	// a parameter: one instant decides the whole call.
	k.prune = `DELETE FROM ` + e + ` WHERE "key" = ?1 AND expires_at <= ` + nowUS
	// ?2 token, ?3 mode. One row: now, the key's fence counter (NULL
	// before its first grant), its live entries (count, smallest and
	// largest lim), its readers, writers holding and writers waiting, its
	// permits, and the fence of the token's own hold of mode ?3 (NULL when
	// it holds none).
	k.state = `SELECT n.now, (SELECT fence FROM ` + k.fences + ` WHERE "key" = ?1),
  count(e."key"), min(e.lim), max(e.lim),
  coalesce(sum(e.mode = 1), 0), coalesce(sum(e.mode = 2 AND e.state <> 1), 0),
  coalesce(sum(e.mode = 2 AND e.state = 1), 0), coalesce(sum(e.mode = 3), 0),
  max(iif(e.token = ?2 AND e.mode = ?3 AND e.state = 0, e.fence, NULL))
FROM (SELECT ` + nowUS + ` AS now) AS n
LEFT JOIN ` + e + ` AS e ON e."key" = ?1 AND e.expires_at > n.now`
	// ?2 token, ?3 mode, ?4 now, ?5 TTL in µs.
	k.renew = `UPDATE ` + e + ` SET expires_at = ?4 + ?5 WHERE "key" = ?1 AND token = ?2 AND mode = ?3`
	k.bump = `INSERT INTO ` + k.fences + ` ("key", fence) VALUES (?1, 1)
ON CONFLICT ("key") DO UPDATE SET fence = fence + 1
RETURNING fence`
	// ?2 token, ?3 mode, ?4 now, ?5 TTL in µs, ?6 lim, ?7 owner, ?8
	// fence. The token's row, if any (a writer's claim, or a hold it
	// released with MinHold), becomes the hold.
	k.take = `INSERT INTO ` + e + ` ("key", token, mode, state, lim, owner, fence, expires_at)
VALUES (?1, ?2, ?3, 0, ?6, ?7, ?8, ?4 + ?5)
ON CONFLICT ("key", token, mode) DO UPDATE SET
  state = 0, lim = excluded.lim, owner = excluded.owner, fence = excluded.fence, expires_at = excluded.expires_at`
	// ?2 token, ?3 now, ?4 TTL in µs, ?5 owner: a writer's waiting claim,
	// created or renewed (a hold kept after a MinHold release stays).
	k.claim = `INSERT INTO ` + e + ` ("key", token, mode, state, lim, owner, fence, expires_at)
VALUES (?1, ?2, 2, 1, 0, ?5, 0, ?3 + ?4)
ON CONFLICT ("key", token, mode) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
WHERE state = 1`
	// ?2 token, ?3 and ?4 the modes to look at, ?5 now: the other
	// entry that refused an Acquire, holds before claims, the one
	// ending first.
	k.holder = `SELECT owner, expires_at - ?5, state FROM ` + e + `
WHERE "key" = ?1 AND expires_at > ?5 AND mode IN (?3, ?4) AND token <> ?2
ORDER BY state = 1, expires_at LIMIT 1`
	// ?2 token, ?3 mode, ?4 KeepFor in µs. Both return the state the row
	// had (keep: 2 for a hold, now kept; 1 for a claim, which ends now).
	own := ` WHERE "key" = ?1 AND token = ?2 AND mode = ?3 AND state < 2 AND expires_at > ` + nowUS + `
RETURNING state`
	k.release = `DELETE FROM ` + e + own
	k.keep = `UPDATE ` + e + ` SET state = iif(state = 0, 2, state),
  expires_at = iif(state = 0, ` + nowUS + ` + ?4, ` + nowUS + `)` + own
	// ?1 a JSON array of {"k": key, "t": token, "m": mode, "d": TTL in
	// µs}; every row found by primary key.
	k.renewAll = `UPDATE ` + e + ` SET expires_at = ` + nowUS + ` + (r.value ->> '$.d')
FROM json_each(?1) AS r
WHERE ` + e + `."key" = (r.value ->> '$.k') AND ` + e + `.token = (r.value ->> '$.t')
  AND ` + e + `.mode = (r.value ->> '$.m') AND ` + e + `.state = 0 AND ` + e + `.expires_at > ` + nowUS + `
RETURNING "key", token, mode`
	k.force = `DELETE FROM ` + e + ` WHERE "key" = ?1 RETURNING expires_at > ` + nowUS
	k.queueSQL(locks)
	return k
}

// Kinds implements driver.Kinder: the Store keeps read-write locks and
// semaphores as well as mutexes.
func (s *Store) Kinds(m driver.Mode) error {
	if m > driver.ModePermit {
		return fmt.Errorf("%w: sqlitestore keeps no holds of mode %v", driver.ErrUnsupported, m)
	}
	return nil
}

// kindState is what kindsSQL.state reads of a key, at now.
type kindState struct {
	now              int64 // SQLite's now, µs
	fence            int64 // the key's fence counter, 0 before any grant
	entries          int64 // live entries
	minLim, maxLim   int64 // the live entries' lim
	readers, writers int64 // holds of ModeRead and ModeWrite
	waiting, permits int64 // writers' claims, holds of ModePermit
	own              int64 // the fence of the token's hold of the mode asked
	holds            bool  // the token holds the mode asked
}

// acquireKind is Acquire for a read-write lock or a semaphore (p.Mode is
// not ModeMutex): one write transaction that prunes the key's expired
// entries, reads its live ones, and grants, renews a repeat, or refuses
// — leaving a writer's waiting claim — as driver.Mode's rules say.
func (s *Store) acquireKind(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	k := s.kinds
	var (
		g    driver.Grant
		held *driver.HeldError
	)
	ttl := micros(p.TTL)
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, k.prune, p.Key); err != nil {
			return err
		}
		st, err := readKindState(ctx, tx, k, p)
		if err != nil {
			return err
		}
		if err := st.check(p); err != nil {
			return err
		}
		if st.holds { // an earlier attempt whose answer was lost
			g.Fence = uint64(st.own)
			_, err := tx.ExecContext(ctx, k.renew, p.Key, p.Token, int(p.Mode), st.now, ttl)
			return err
		}
		if !st.grants(p.Mode, p.Limit) {
			if p.Mode == driver.ModeWrite {
				if _, err := tx.ExecContext(ctx, k.claim, p.Key, p.Token, st.now, ttl, p.Owner); err != nil {
					return err
				}
			}
			held, err = kindHolder(ctx, tx, k, p, st.now)
			return err
		}
		fence := st.fence // a reader's: the last writer's
		if p.Mode != driver.ModeRead {
			if err := tx.QueryRowContext(ctx, k.bump, p.Key).Scan(&fence); err != nil {
				return err
			}
		}
		g.Fence = uint64(fence)
		_, err = tx.ExecContext(ctx, k.take, p.Key, p.Token, int(p.Mode), st.now, ttl, p.Limit, p.Owner, fence)
		return err
	})
	switch {
	case err != nil:
		return driver.Grant{}, wrap(ctx, "acquire", p.Key, err)
	case held != nil:
		return driver.Grant{}, held
	}
	return g, nil
}

// readKindState runs kindsSQL.state for p.
func readKindState(ctx context.Context, tx *sql.Tx, k *kindsSQL, p driver.AcquireParams) (kindState, error) {
	var (
		st             kindState
		fence, own     sql.NullInt64
		minLim, maxLim sql.NullInt64
	)
	err := tx.QueryRowContext(ctx, k.state, p.Key, p.Token, int(p.Mode)).Scan(&st.now, &fence,
		&st.entries, &minLim, &maxLim, &st.readers, &st.writers, &st.waiting, &st.permits, &own)
	st.fence, st.minLim, st.maxLim, st.own, st.holds = fence.Int64, minLim.Int64, maxLim.Int64, own.Int64, own.Valid
	return st, err
}

// check returns the error wrapping driver.ErrKindMismatch when the key's
// live entries are of another kind than p asks, and nil otherwise. The
// transaction then rolls back: the call changes nothing.
func (st kindState) check(p driver.AcquireParams) error {
	lim := int64(p.Limit)
	if st.entries == 0 || (st.minLim == lim && st.maxLim == lim) {
		return nil
	}
	return fmt.Errorf("%w: %s, asked as %s", driver.ErrKindMismatch, kindName(st.minLim), kindName(lim))
}

// kindName names the kind of a key whose entries have lim lim.
func kindName(lim int64) string {
	if lim == 0 {
		return "a read-write lock"
	}
	return fmt.Sprintf("a semaphore of %d permits", lim)
}

// grants reports whether a new hold of mode m is granted on the key's
// live entries st (of the kind asked: see check).
func (st kindState) grants(m driver.Mode, limit int) bool {
	switch m {
	case driver.ModeRead:
		return st.writers == 0 && st.waiting == 0
	case driver.ModeWrite:
		return st.readers == 0 && st.writers == 0
	}
	return st.permits < int64(limit)
}

// kindHolder reads the entry that refused p, for its *driver.HeldError:
// for a reader, a writer (holding, or else waiting, whose TTL is then 0);
// for a writer, a reader or writer holding; for a permit, the permit that
// ends first.
func kindHolder(ctx context.Context, tx *sql.Tx, k *kindsSQL, p driver.AcquireParams, now int64) (*driver.HeldError, error) {
	m1, m2 := p.Mode, p.Mode
	switch p.Mode {
	case driver.ModeRead:
		m1, m2 = driver.ModeWrite, driver.ModeWrite
	case driver.ModeWrite:
		m1 = driver.ModeRead
	}
	var (
		he    driver.HeldError
		rest  int64
		state int
	)
	err := tx.QueryRowContext(ctx, k.holder, p.Key, p.Token, int(m1), int(m2), now).Scan(&he.Owner, &rest, &state)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return &he, nil
	case err != nil:
		return nil, err
	case state != entryWaiting:
		he.TTL = time.Duration(rest) * time.Microsecond
	}
	return &he, nil
}

// releaseKind is Release for a read-write lock or a semaphore: one
// statement that deletes the token's entry of p.Mode (or, with KeepFor,
// keeps a hold until then, no longer the token's). A writer's waiting
// claim is deleted too (ended, with KeepFor), and then the answer is
// driver.ErrNotHeld.
func (s *Store) releaseKind(ctx context.Context, p driver.ReleaseParams) error {
	q, args := s.kinds.release, []any{p.Key, p.Token, int(p.Mode)}
	if p.KeepFor > 0 {
		q, args = s.kinds.keep, append(args, micros(p.KeepFor))
	}
	state := -1
	err := s.write(ctx, func(ctx context.Context) error {
		return readRows(s.db.QueryContext(ctx, q, args...))(func(rows *sql.Rows) error {
			return rows.Scan(&state)
		})
	})
	switch {
	case err != nil:
		return wrap(ctx, "release", p.Key, err)
	case state == entryWaiting, state < 0:
		return driver.ErrNotHeld
	}
	return nil
}

// renewKinds runs kindsSQL.renewAll on q for the JSON array arg and
// records in renewed every entry it renewed.
func (s *Store) renewKinds(ctx context.Context, q querier, arg string, renewed map[entryKey]bool) error {
	return readRows(q.QueryContext(ctx, s.kinds.renewAll, arg))(func(rows *sql.Rows) error {
		var (
			e entryKey
			m int
		)
		if err := rows.Scan(&e.key, &e.token, &m); err != nil {
			return err
		}
		e.mode = driver.Mode(m)
		renewed[e] = true
		return nil
	})
}

// entryKey names an entry of a read-write lock or semaphore.
type entryKey struct {
	key, token string
	mode       driver.Mode
}
