package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"github.com/go-sql-driver/mysql"

	"github.com/tasklock/tasklock/driver"
)

var _ driver.Kinder = (*Store)(nil)

// States of an entry of a read-write lock or semaphore (the holds table's
// state column).
const (
	stateHeld    = 0 // a hold: a reader, the writer, or a permit
	stateWaiting = 1 // a writer's claim to be next, which refuses new readers
	stateKept    = 2 // a hold released with KeepFor: it counts until it ends
)

// Kinds implements driver.Kinder. In lease mode the Store keeps every
// mode. In connection mode it keeps only mutexes: there a lock is a
// GET_LOCK held by a session of its own, one holder per name, and the
// server has no shared or counted form of it.
func (s *Store) Kinds(m driver.Mode) error {
	switch {
	case m == driver.ModeMutex:
		return nil
	case m > driver.ModePermit:
		return fmt.Errorf("%w: mysqlstore: unknown lock mode %v", driver.ErrUnsupported, m)
	case s.mode == ModeConnection:
		return fmt.Errorf("%w: mysqlstore: connection mode holds each lock with GET_LOCK on a session of its own, one holder per name, so it keeps only mutexes; %v holds need lease mode (Options.Mode %q)",
			driver.ErrUnsupported, m, ModeLease)
	}
	return nil
}

// checkKind checks the mode and limit of an acquire of another mode than
// ModeMutex.
func (s *Store) checkKind(p driver.AcquireParams) error {
	if err := s.Kinds(p.Mode); err != nil {
		return err
	}
	switch {
	case p.Mode == driver.ModePermit && p.Limit < 1:
		return fmt.Errorf("mysqlstore: acquire %q: a semaphore's Limit is %d, must be at least 1", p.Key, p.Limit)
	case p.Mode != driver.ModePermit && p.Limit != 0:
		return fmt.Errorf("mysqlstore: acquire %q: Limit is %d, must be 0 for a %v hold", p.Key, p.Limit, p.Mode)
	}
	return nil
}

// errNoKindRow says that the key has no row in the kinds table yet.
var errNoKindRow = errors.New("mysqlstore: no row for the key in the kinds table")

// kindAcquire grants a read, write or permit hold of p.Key (see
// driver.Mode for the rules) in one transaction that first locks the key's
// row in the kinds table, so that the acquires of one key take turns:
//
//	START TRANSACTION
//	SELECT k.fence, h.* FROM kinds k LEFT JOIN holds h ON h.lock_key = k.lock_key
//	  WHERE k.lock_key = key FOR UPDATE
//	-- decided here from the live entries (expires_at > now), then:
//	REPLACE INTO holds ...                           -- the token's entry
//	UPDATE kinds SET fence = fence + 1 ...           -- a writer's or a permit's grant
//	DELETE FROM holds WHERE ... expires_at <= now    -- only when entries expired
//	COMMIT                                          -- or ROLLBACK when nothing changed
//
// A grant of a writer or a permit takes five round trips, of a reader
// four, a refusal three (four for a writer, which leaves or renews its
// waiting entry). The first acquire of a key ever also inserts its row
// (INSERT IGNORE, on its own) and starts again. A deadlock or lock wait
// timeout is tried again twice, then reported as driver.ErrTryAgain.
func (s *Store) kindAcquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	if err := s.checkKind(p); err != nil {
		return driver.Grant{}, err
	}
	op := fmt.Sprintf("acquire %q (%v)", p.Key, p.Mode)
	created := false
	for attempt := 1; ; attempt++ {
		g, err := s.kindAcquireTx(ctx, p)
		switch {
		case errors.Is(err, errNoKindRow) && !created:
			created = true
			if _, err := s.db.ExecContext(ctx, s.kindRowSQL(p.Key)); err != nil {
				return driver.Grant{}, s.wrap(op, err)
			}
			continue
		case lockConflict(err) && attempt < 3:
			continue
		case lockConflict(err):
			return driver.Grant{}, fmt.Errorf("mysqlstore: %s: %w: %w", op, driver.ErrTryAgain, err)
		case err == nil:
			return g, nil
		}
		var he *driver.HeldError
		if errors.As(err, &he) || errors.Is(err, driver.ErrKindMismatch) || errors.Is(err, driver.ErrUnsupported) {
			return driver.Grant{}, err
		}
		return driver.Grant{}, s.wrap(op, err)
	}
}

// lockConflict reports whether err is InnoDB's deadlock (1213) or lock
// wait timeout (1205): the statement lost a race for row locks.
func lockConflict(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// kindRowSQL inserts key's row in the kinds table, fence 0, unless it is
// there.
func (s *Store) kindRowSQL(key string) string {
	b := make([]byte, 0, 80+2*len(key))
	b = append(b, "INSERT IGNORE INTO "...)
	b = append(b, s.qKinds...)
	b = append(b, " (lock_key, fence) VALUES ("...)
	b = appendHex(b, key)
	return string(append(b, ", 0)"...))
}

// kindEntry is an entry of a key as kindAcquire reads it.
type kindEntry struct {
	token string
	mode  driver.Mode
	state int
	limit int
	owner string
	fence uint64
	us    int64 // left of its lease, by the server's clock; <= 0: expired
}

// live reports whether e's lease is still running.
func (e *kindEntry) live() bool { return e.us > 0 }

// holds reports whether e is a live hold (a kept one included), not a
// waiting writer.
func (e *kindEntry) holds() bool { return e.live() && e.state != stateWaiting }

// held returns the *driver.HeldError naming e, with its remaining TTL.
func (e *kindEntry) held() *driver.HeldError {
	return &driver.HeldError{Owner: e.owner, TTL: fromMicros(e.us)}
}

// kindAcquireTx is one attempt of kindAcquire: one transaction.
func (s *Store) kindAcquireTx(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return driver.Grant{}, err
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback()
		}
	}()
	counter, entries, err := s.readKind(ctx, tx, p.Key)
	if err != nil {
		return driver.Grant{}, err
	}
	d := decideKind(p, counter, entries)
	if d.err != nil {
		return driver.Grant{}, d.err
	}
	write := d.grant || d.wait
	if write {
		state := stateHeld
		if d.wait {
			state = stateWaiting
		}
		if _, err := tx.ExecContext(ctx, s.kindEntrySQL(p, state, d.fence)); err != nil {
			return driver.Grant{}, err
		}
	}
	if d.bump {
		if _, err := tx.ExecContext(ctx, s.kindFenceSQL(p.Key, d.fence)); err != nil {
			return driver.Grant{}, err
		}
	}
	if d.prune {
		if _, err := tx.ExecContext(ctx, s.kindPruneSQL(p.Key, p.Token)); err != nil {
			return driver.Grant{}, err
		}
	}
	done = true
	if !write && !d.prune {
		err = tx.Rollback()
	} else {
		err = tx.Commit()
	}
	if err != nil {
		return driver.Grant{}, err
	}
	if !d.grant {
		return driver.Grant{}, d.held
	}
	return driver.Grant{Fence: d.fence}, nil
}

// readKind reads, and locks, key's row in the kinds table and every entry
// of the key, expired ones included. It returns errNoKindRow when the key
// has no row yet.
func (s *Store) readKind(ctx context.Context, tx *sql.Tx, key string) (uint64, []kindEntry, error) {
	b := make([]byte, 0, 400+2*len(key))
	b = append(b, "SELECT k.fence, h.token, h.mode, h.state, h.lim, h.owner, h.fence, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), h.expires_at) FROM "...)
	b = append(b, s.qKinds...)
	b = append(b, " k LEFT JOIN "...)
	b = append(b, s.qHolds...)
	b = append(b, " h ON h.lock_key = k.lock_key WHERE k.lock_key = "...)
	b = appendHex(b, key)
	b = append(b, " FOR UPDATE"...)
	rows, err := tx.QueryContext(ctx, string(b))
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	var (
		counter uint64
		entries []kindEntry
		found   bool
	)
	for rows.Next() {
		found = true
		var (
			token                   []byte
			mode, state, lim, fence sql.NullInt64
			owner                   sql.NullString
			us                      sql.NullInt64
		)
		if err := rows.Scan(&counter, &token, &mode, &state, &lim, &owner, &fence, &us); err != nil {
			return 0, nil, err
		}
		if token == nil {
			continue // the key has no entries
		}
		entries = append(entries, kindEntry{
			token: string(token), mode: driver.Mode(mode.Int64), state: int(state.Int64), limit: int(lim.Int64),
			owner: owner.String, fence: uint64(fence.Int64), us: us.Int64,
		})
	}
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	if !found {
		return 0, nil, errNoKindRow
	}
	return counter, entries, nil
}

// kindDecision is what an acquire does, decided from the key's entries.
type kindDecision struct {
	grant bool   // the token gets the hold it asked for
	fence uint64 // the grant's fence
	bump  bool   // the key's counter becomes fence
	wait  bool   // a writer refused: its waiting entry is made or renewed
	prune bool   // other entries have expired: delete them
	held  *driver.HeldError
	err   error
}

// decideKind applies driver.Mode's rules to an acquire p of a key whose
// counter and entries (live and expired) readKind returned.
func decideKind(p driver.AcquireParams, counter uint64, entries []kindEntry) kindDecision {
	var d kindDecision
	var self *kindEntry
	for i := range entries {
		e := &entries[i]
		switch {
		case e.token == p.Token:
			self = e
		case !e.live():
			d.prune = true
		}
	}
	for i := range entries {
		if e := &entries[i]; e.live() && e.limit != p.Limit {
			if p.Limit == 0 {
				d.err = fmt.Errorf("mysqlstore: acquire %q as a read-write lock: %w (a semaphore of %d permits)", p.Key, driver.ErrKindMismatch, e.limit)
			} else if e.limit == 0 {
				d.err = fmt.Errorf("mysqlstore: acquire %q as a semaphore: %w (a read-write lock)", p.Key, driver.ErrKindMismatch)
			} else {
				d.err = fmt.Errorf("mysqlstore: acquire %q as a semaphore of %d permits: %w (one of %d)", p.Key, p.Limit, driver.ErrKindMismatch, e.limit)
			}
			return d
		}
	}
	if self != nil && self.live() {
		switch {
		case self.mode == p.Mode && self.state == stateHeld:
			// Repeat: the answer to an earlier grant was lost.
			d.grant, d.fence = true, self.fence
			return d
		case self.mode == driver.ModeWrite && self.state == stateWaiting && p.Mode == driver.ModeWrite:
			// The waiting writer asks again: decided below.
		default:
			d.err = fmt.Errorf("%w: mysqlstore: acquire %q (%v): the token already has a %v entry", driver.ErrUnsupported, p.Key, p.Mode, self.mode)
			return d
		}
	}
	// first is the live hold of another token that ends first; writer the
	// live writer, or failing that a waiting one.
	var first, writer *kindEntry
	holds := 0
	for i := range entries {
		e := &entries[i]
		if e.token == p.Token || !e.live() {
			continue
		}
		if e.holds() {
			holds++
			if first == nil || e.us < first.us {
				first = e
			}
		}
		if e.mode == driver.ModeWrite && (writer == nil || writer.state == stateWaiting && e.state != stateWaiting) {
			writer = e
		}
	}
	switch p.Mode {
	case driver.ModeRead:
		if writer != nil {
			d.held = writer.held()
			if writer.state == stateWaiting {
				d.held.TTL = 0
			}
			return d
		}
		d.grant, d.fence = true, counter
	case driver.ModeWrite:
		if holds > 0 {
			d.held, d.wait = first.held(), true
			return d
		}
		d.grant, d.fence, d.bump = true, counter+1, true
	case driver.ModePermit:
		if holds >= p.Limit {
			d.held = first.held()
			return d
		}
		d.grant, d.fence, d.bump = true, counter+1, true
	}
	return d
}

// kindEntrySQL writes p's entry, in state with fence, for p.TTL from now,
// whether or not the token has a row already (the key's row is locked:
// nobody else writes the key's entries meanwhile):
//
//	REPLACE INTO holds (lock_key, token, mode, state, lim, owner, fence, acquired_at, expires_at)
//	VALUES (key, token, mode, state, limit, owner, fence, now, now + ttl)
func (s *Store) kindEntrySQL(p driver.AcquireParams, state int, fence uint64) string {
	b := make([]byte, 0, 400+2*len(p.Key)+2*len(p.Token)+2*len(p.Owner))
	b = append(b, "REPLACE INTO "...)
	b = append(b, s.qHolds...)
	b = append(b, " (lock_key, token, mode, state, lim, owner, fence, acquired_at, expires_at) VALUES ("...)
	b = appendHex(b, p.Key)
	b = append(b, ", "...)
	b = appendHex(b, p.Token)
	for _, n := range []int64{int64(p.Mode), int64(state), int64(p.Limit)} {
		b = append(b, ", "...)
		b = strconv.AppendInt(b, n, 10)
	}
	b = append(b, ", "...)
	b = appendText(b, p.Owner)
	b = append(b, ", "...)
	b = strconv.AppendUint(b, fence, 10)
	b = append(b, ", UTC_TIMESTAMP(6), "...)
	b = appendExpiry(b, p.TTL)
	return string(append(b, ')'))
}

// kindFenceSQL sets key's counter to fence.
func (s *Store) kindFenceSQL(key string, fence uint64) string {
	b := make([]byte, 0, 100+2*len(key))
	b = append(b, "UPDATE "...)
	b = append(b, s.qKinds...)
	b = append(b, " SET fence = "...)
	b = strconv.AppendUint(b, fence, 10)
	b = append(b, " WHERE lock_key = "...)
	b = appendHex(b, key)
	return string(b)
}

// kindPruneSQL deletes key's expired entries, but token's, which the
// acquire has just rewritten.
func (s *Store) kindPruneSQL(key, token string) string {
	b := make([]byte, 0, 150+2*len(key)+2*len(token))
	b = append(b, "DELETE FROM "...)
	b = append(b, s.qHolds...)
	b = append(b, " WHERE lock_key = "...)
	b = appendHex(b, key)
	b = append(b, " AND expires_at <= UTC_TIMESTAMP(6) AND token <> "...)
	b = appendHex(b, token)
	return string(b)
}

// kindRelease ends the token's hold of p.Mode in one statement: a DELETE
// of its entry, or with KeepFor an UPDATE that keeps it, counting, until
// KeepFor from now, without letting the token renew or release it again.
// A writer that holds nothing has its waiting entry, if any, deleted by a
// second statement, and gets driver.ErrNotHeld.
func (s *Store) kindRelease(ctx context.Context, p driver.ReleaseParams) error {
	if p.Token == "" || s.mode == ModeConnection {
		return driver.ErrNotHeld
	}
	b := make([]byte, 0, 300+2*len(p.Key)+2*len(p.Token))
	if p.KeepFor > 0 {
		b = append(b, "UPDATE "...)
		b = append(b, s.qHolds...)
		b = append(b, " SET state = "+strconv.Itoa(stateKept)+", expires_at = "...)
		b = appendExpiry(b, p.KeepFor)
	} else {
		b = append(b, "DELETE FROM "...)
		b = append(b, s.qHolds...)
	}
	b = append(b, " WHERE "...)
	b = appendPairFilter(b, "", []leasePair{{p.Key, p.Token}})
	b = append(b, " AND mode = "...)
	b = strconv.AppendUint(b, uint64(p.Mode), 10)
	b = append(b, " AND state = "+strconv.Itoa(stateHeld)+" AND expires_at > UTC_TIMESTAMP(6)"...)
	n, err := s.execRows(ctx, string(b))
	if err != nil {
		return s.wrap(fmt.Sprintf("release %q (%v)", p.Key, p.Mode), err)
	}
	if n > 0 {
		return nil
	}
	if p.Mode == driver.ModeWrite {
		b = append(b[:0], "DELETE FROM "...)
		b = append(b, s.qHolds...)
		b = append(b, " WHERE "...)
		b = appendPairFilter(b, "", []leasePair{{p.Key, p.Token}})
		b = append(b, " AND mode = "+strconv.Itoa(int(driver.ModeWrite))+" AND state = "+strconv.Itoa(stateWaiting)...)
		if _, err := s.db.ExecContext(ctx, string(b)); err != nil {
			return s.wrap(fmt.Sprintf("release %q (%v): delete the waiting entry", p.Key, p.Mode), err)
		}
	}
	return driver.ErrNotHeld
}

// kindForceRelease deletes every live entry of key, whoever holds it, and
// returns how many it deleted.
func (s *Store) kindForceRelease(ctx context.Context, key string) (int64, error) {
	b := make([]byte, 0, 150+2*len(key))
	b = append(b, "DELETE FROM "...)
	b = append(b, s.qHolds...)
	b = append(b, " WHERE lock_key = "...)
	b = appendHex(b, key)
	b = append(b, " AND expires_at > UTC_TIMESTAMP(6)"...)
	return s.execRows(ctx, string(b))
}
