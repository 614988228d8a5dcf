package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tasklock/tasklock/driver"
)

// Read-write locks and semaphores (driver.Kinder). Their entries live in
// <Table>_kinds, one row per hold or writer's claim, and each key's fence
// counter in <Table>_kind_keys; see the package documentation.

var _ driver.Kinder = (*Store)(nil)

// kindsSalt keeps the advisory locks that serialize a read-write lock's or
// semaphore's acquires and releases apart from connection mode's, which
// hash the same key with the table's seed.
const kindsSalt = 0x6b696e6473 // "kinds"

// Kinds implements driver.Kinder: a Store keeps read-write locks and
// semaphores in either mode (as lease rows: in connection mode too, only
// mutexes are bound to connections).
func (s *Store) Kinds(m driver.Mode) error {
	switch m {
	case driver.ModeMutex, driver.ModeRead, driver.ModeWrite, driver.ModePermit:
		return nil
	}
	return fmt.Errorf("%w: pgstore keeps no holds of %v", driver.ErrUnsupported, m)
}

// checkKind validates the mode and limit of an acquire of a kind.
func checkKind(p driver.AcquireParams) error {
	switch p.Mode {
	case driver.ModeRead, driver.ModeWrite:
		if p.Limit == 0 {
			return nil
		}
	case driver.ModePermit:
		if p.Limit >= 1 {
			return nil
		}
	default:
		return fmt.Errorf("%w: pgstore keeps no holds of %v", driver.ErrUnsupported, p.Mode)
	}
	return fmt.Errorf("%w: a %v hold with Limit %d", driver.ErrUnsupported, p.Mode, p.Limit)
}

// underKeyLock runs sql with args as the second statement of a pipeline
// whose first takes the transaction-level advisory lock of key's kinds
// entries, and scans its one row into dest: one round trip, one
// transaction. The lock serializes every acquire and release of the key,
// and the statement after it reads the entries with a snapshot taken once
// the lock is held, so it sees every change committed before.
func (s *Store) underKeyLock(ctx context.Context, key, sql string, args []any, dest ...any) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	b := &pgx.Batch{}
	b.Queue(s.sql.lockKind, key, s.o.seed^kindsSalt, lockTimeout(ctx))
	b.Queue(sql, args...)
	err = sendBatch(ctx, c.Conn(), b, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		return br.QueryRow().Scan(dest...)
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "55P03" && ctx.Err() == nil { // lock_not_available
		return fmt.Errorf("%w: %w", driver.ErrTryAgain, err)
	}
	return err
}

// maxLockWait bounds the wait for a key's lock when ctx has no deadline:
// the lock is held for one statement at a time, so a longer wait is a
// pile-up, which the Locker retries (driver.ErrTryAgain).
const maxLockWait = 5 * time.Second

// lockTimeout is the server's lock_timeout for a pipeline under ctx, in
// whole milliseconds: ctx's time left (at least 1 ms), at most maxLockWait.
// The server then ends a wait for the key's lock itself when ctx's
// deadline passes, rather than grant it to a caller that has gone.
func lockTimeout(ctx context.Context) string {
	d := maxLockWait
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return strconv.FormatInt(max(driver.Units(d, time.Millisecond), 1), 10)
}

// sendBatch sends b on c in one round trip (a pipeline: one implicit
// transaction), calls read with its results, and closes them; only a nil
// error means the batch committed.
//
// pgx v5.7 leaves a goroutine behind for every pipeline whose connection
// breaks while the pipeline's context could still end: its context
// watcher is never stopped (jackc/pgx#1999). So the batch goes with a
// context that cannot end (ctx's values kept), and ctx's deadline and
// cancellation are put on the connection's socket instead: a read or write
// blocked past them fails, and pgx closes the connection.
func sendBatch(ctx context.Context, c *pgx.Conn, b *pgx.Batch, read func(pgx.BatchResults) error) error {
	nc := c.PgConn().Conn()
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	ended := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = nc.SetDeadline(time.Now())
		close(ended)
	})
	br := c.SendBatch(context.WithoutCancel(ctx), b)
	err := read(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if !stop() {
		<-ended
	}
	_ = nc.SetDeadline(time.Time{})
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w: %w", cerr, err)
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		// The socket's deadline passed before ctx's timer fired.
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return err
}

// acquireKind is Acquire of a read-write lock's side or a semaphore's
// permit: see the package documentation.
func (s *Store) acquireKind(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	if err := checkKind(p); err != nil {
		return driver.Grant{}, fmt.Errorf("pgstore: acquire %q: %w", p.Key, err)
	}
	var (
		fence, ttl, keyPermits *int64
		owner                  *string
		mismatch, otherMode    bool
	)
	err := s.underKeyLock(ctx, p.Key, s.sql.acquireKind,
		[]any{p.Key, p.Token, p.Owner, micros(p.TTL), int16(p.Mode), int32(p.Limit), s.o.channel},
		&fence, &mismatch, &otherMode, &keyPermits, &owner, &ttl, nil)
	switch {
	case err != nil:
		return driver.Grant{}, s.wrap("acquire", p.Key, err)
	case mismatch:
		held := "a read-write lock"
		if keyPermits != nil && *keyPermits > 0 {
			held = fmt.Sprintf("a semaphore of %d permits", *keyPermits)
		}
		return driver.Grant{}, fmt.Errorf("pgstore: acquire %q as %s: %w: it is held as %s", p.Key, describeKind(p), driver.ErrKindMismatch, held)
	case otherMode:
		return driver.Grant{}, fmt.Errorf("pgstore: acquire %q as %s: %w: the token holds it in another mode", p.Key, describeKind(p), driver.ErrUnsupported)
	case fence == nil:
		return driver.Grant{}, heldError(owner, ttl)
	}
	return driver.Grant{Fence: uint64(*fence)}, nil
}

// describeKind names what an acquire asks for, for errors.
func describeKind(p driver.AcquireParams) string {
	if p.Mode == driver.ModePermit {
		return fmt.Sprintf("a semaphore of %d permits", p.Limit)
	}
	return "a read-write lock's " + p.Mode.String() + " side"
}

// releaseKind is Release of a read-write lock's side or a semaphore's
// permit. A writer's claim is deleted too, and then the answer is
// ErrNotHeld.
func (s *Store) releaseKind(ctx context.Context, p driver.ReleaseParams) error {
	var released int64
	err := s.underKeyLock(ctx, p.Key, s.sql.releaseKind,
		[]any{p.Key, p.Token, int16(p.Mode), micros(p.KeepFor), s.o.channel}, &released, nil)
	if err != nil {
		return s.wrap("release", p.Key, err)
	}
	if released == 0 {
		return driver.ErrNotHeld
	}
	return nil
}

// renewWith runs a renewal statement over the unnest()ed arrays of ps
// (keys, tokens, TTLs in µs and, with modes, the modes), which returns the
// 1-based position of every lease it renewed, and returns ErrNotHeld for
// the others. It runs on a connection of its own and in the simple
// protocol: see Renew.
func (s *Store) renewWith(ctx context.Context, sql string, ps []driver.RenewParams, modes bool) ([]error, error) {
	keys, tokens, ttls := make([]string, len(ps)), make([]string, len(ps)), make([]int64, len(ps))
	for i := range ps {
		keys[i], tokens[i], ttls[i] = ps[i].Key, ps[i].Token, micros(ps[i].TTL)
	}
	args := []any{pgx.QueryExecModeSimpleProtocol, keys, tokens, ttls}
	if modes {
		ms := make([]int16, len(ps))
		for i := range ps {
			ms[i] = int16(ps[i].Mode)
		}
		args = append(args, ms)
	}
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	rows, err := c.Conn().Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	renewed := make([]bool, len(ps))
	var i int64
	_, err = pgx.ForEachRow(rows, []any{&i}, func() error {
		if i >= 1 && i <= int64(len(ps)) {
			renewed[i-1] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	res := make([]error, len(ps))
	for i, ok := range renewed {
		if !ok {
			res[i] = driver.ErrNotHeld
		}
	}
	return res, nil
}

// allMutexes reports whether every one of n items asks for a mutex.
func allMutexes(n int, mode func(i int) driver.Mode) bool {
	for i := range n {
		if mode(i) != driver.ModeMutex {
			return false
		}
	}
	return true
}

// kindsNow is the instant a kinds statement decides by: the database's
// clock when the statement starts, which, as the statement runs after
// lockKind in the same pipeline, is once the key's lock is held (now()
// would be the transaction's start, before any wait for the lock).
const kindsNow = "statement_timestamp()"

// buildKinds adds the statements of read-write locks and semaphores.
func buildKinds(st *statements, tb tables) {
	// The key's lock, waited for at most lock_timeout $3 ms (for this
	// transaction only), set first.
	st.lockKind = `WITH t AS MATERIALIZED (SELECT set_config('lock_timeout', $3, true))
SELECT pg_advisory_xact_lock(hashtextextended($1, $2)) FROM t`

	// One acquire, under the key's lock. dead deletes the key's expired
	// entries (but the token's own), locking them in token order and
	// rechecking each on its latest version: an entry a concurrent Renew
	// extended is not dead, and stays in e, the live entries (the token's
	// own only while live). v and dec decide: a repeat (the token holds
	// an entry of this mode), a kind mismatch, a grant, or a refusal.
	// ctr increments the key's counter row for a writer's or a permit's
	// grant. ent writes the token's entry: the hold, or a refused writer's
	// claim (a granted writer's claim becomes its hold). The reply: the
	// fence of a grant; else whether the kind mismatched (with the key's
	// permits), and the holder to name: for a reader the writer (holding,
	// else waiting, with no TTL), for a writer the hold that ends last,
	// for a permit the one that ends first; and a NOTIFY when expired
	// entries were deleted.
	st.acquireKind = fmt.Sprintf(`WITH dead AS (
	DELETE FROM %[1]s AS d
	USING (
		SELECT x.token FROM %[1]s x
		WHERE x.key = $1 AND x.token <> $2 AND x.expires_at <= %[3]s
		ORDER BY x.token FOR UPDATE
	) AS x
	WHERE d.key = $1 AND d.token = x.token
	RETURNING d.token
), e AS MATERIALIZED (
	SELECT k.token, k.owner, k.mode, k.permits, k.waiting, k.fence, k.expires_at
	FROM %[1]s k
	WHERE k.key = $1 AND k.token NOT IN (SELECT token FROM dead)
	  AND (k.token <> $2 OR k.expires_at > %[3]s)
), v AS MATERIALIZED (
	SELECT m.fence AS my_fence,
		COALESCE(m.mode = $5::smallint AND NOT m.waiting, false) AS again,
		COALESCE(m.mode <> $5::smallint, false) AS other_mode,
		EXISTS (SELECT 1 FROM e WHERE e.token <> $2 AND e.permits <> $6::integer) AS mismatch,
		CASE $5::smallint
			WHEN 1 THEN NOT EXISTS (SELECT 1 FROM e WHERE e.token <> $2 AND e.mode = 2)
			WHEN 2 THEN NOT EXISTS (SELECT 1 FROM e WHERE e.token <> $2 AND (e.mode = 1 OR (e.mode = 2 AND NOT e.waiting)))
			ELSE (SELECT count(*) FROM e WHERE e.token <> $2 AND e.mode = 3) < $6::integer
		END AS free,
		EXISTS (SELECT 1 FROM dead) AS pruned,
		COALESCE(kk.fence, 0) AS key_fence
	FROM (SELECT 1) one
	LEFT JOIN e m ON m.token = $2
	LEFT JOIN %[2]s kk ON kk.key = $1
), dec AS MATERIALIZED (
	SELECT v.*,
		v.ok AND (v.again OR v.free) AS granted,
		v.ok AND NOT v.again AND v.free AND $5::smallint IN (2, 3) AS counts,
		v.ok AND NOT v.again AND NOT v.free AS refused
	FROM (SELECT v.*, NOT v.mismatch AND NOT v.other_mode AS ok FROM v) v
), ctr AS (
	INSERT INTO %[2]s AS c (key, fence)
	SELECT $1, 1 FROM dec WHERE dec.counts
	ON CONFLICT (key) DO UPDATE SET fence = c.fence + 1
	RETURNING c.fence
), ent AS (
	INSERT INTO %[1]s AS k (key, token, owner, mode, permits, waiting, fence, acquired_at, expires_at)
	SELECT $1, $2, $3, $5::smallint, $6::integer, NOT dec.granted,
		CASE WHEN NOT dec.granted THEN 0
		     WHEN dec.again THEN dec.my_fence
		     WHEN dec.counts THEN (SELECT fence FROM ctr)
		     ELSE dec.key_fence END,
		%[3]s, %[3]s + $4::bigint * interval '1 microsecond'
	FROM dec WHERE dec.granted OR (dec.refused AND $5::smallint = 2)
	ON CONFLICT (key, token) DO UPDATE SET
		owner = EXCLUDED.owner,
		mode = EXCLUDED.mode,
		permits = EXCLUDED.permits,
		waiting = EXCLUDED.waiting,
		fence = EXCLUDED.fence,
		acquired_at = CASE WHEN (SELECT again FROM dec) THEN k.acquired_at ELSE EXCLUDED.acquired_at END,
		expires_at = EXCLUDED.expires_at
	RETURNING k.fence
)
SELECT CASE WHEN dec.granted THEN (SELECT fence FROM ent) END,
	dec.mismatch,
	dec.other_mode,
	(SELECT e.permits FROM e WHERE e.token <> $2 LIMIT 1),
	h.owner,
	h.ttl,
	CASE WHEN dec.pruned THEN pg_notify($7, $1) END
FROM dec LEFT JOIN LATERAL (
	SELECT e.owner, CASE WHEN NOT e.waiting THEN %[4]s END AS ttl
	FROM e
	WHERE e.token <> $2 AND CASE $5::smallint
		WHEN 1 THEN e.mode = 2
		WHEN 2 THEN e.mode IN (1, 2) AND NOT e.waiting
		ELSE e.mode = 3 END
	ORDER BY e.waiting, CASE WHEN $5::smallint = 2 THEN e.expires_at END DESC, e.expires_at
	LIMIT 1
) h ON NOT dec.granted`, tb.kinds, tb.keys, kindsNow,
		`(extract(epoch FROM e.expires_at - `+kindsNow+`) * 1000000)::bigint`)

	// One release, under the key's lock: the token's entry of the mode
	// goes, announced (a writer's claim too, which then does not count as
	// released), or is shortened to end keep µs from now (MinHold, waking
	// nobody).
	st.releaseKind = fmt.Sprintf(`WITH gone AS (
	DELETE FROM %[1]s k
	WHERE k.key = $1 AND k.token = $2 AND k.mode = $3::smallint AND (k.waiting OR $4::bigint = 0)
	RETURNING NOT k.waiting AND k.expires_at > %[2]s AS held
), kept AS (
	UPDATE %[1]s k SET expires_at = %[2]s + $4::bigint * interval '1 microsecond'
	WHERE k.key = $1 AND k.token = $2 AND k.mode = $3::smallint AND NOT k.waiting
	  AND $4::bigint > 0 AND k.expires_at > %[2]s
	RETURNING 1
)
SELECT (SELECT count(*) FROM gone WHERE held) + (SELECT count(*) FROM kept),
	CASE WHEN EXISTS (SELECT 1 FROM gone) THEN pg_notify($5, $1) END`, tb.kinds, kindsNow)

	// Renewals take no key lock: each locks its entries in (key, token)
	// order and rechecks them, so that an acquire deleting an expired
	// entry either sees it renewed or deletes it first (the renewal then
	// finds it gone).
	src := `unnest($1::text[], $2::text[], $3::bigint[], $4::smallint[]) WITH ORDINALITY AS r(key, token, ttl, mode, i)`
	st.renewKinds = renewEntries(tb.kinds, src)
	st.renewMixed = fmt.Sprintf(`WITH m AS (
%[1]s
), k AS (
%[2]s
)
SELECT i FROM m UNION ALL SELECT i FROM k`,
		renewMutexes(tb.locks, `(SELECT * FROM `+src+` WHERE r.mode = 0) AS r`),
		renewEntries(tb.kinds, `(SELECT * FROM `+src+` WHERE r.mode <> 0) AS r`))
}

// renewEntries renews the kinds entries of src (a FROM item r with
// columns key, token, ttl µs, mode and i): one UPDATE, rows locked in
// (key, token) order, returning the i of each hold renewed.
func renewEntries(table, src string) string {
	return fmt.Sprintf(`UPDATE %[1]s AS k
SET expires_at = %[2]s
FROM (
	SELECT r.* FROM %[3]s
	JOIN %[1]s x ON x.key = r.key AND x.token = r.token AND x.mode = r.mode
		AND NOT x.waiting AND x.expires_at > now()
	ORDER BY x.key, x.token FOR UPDATE OF x
) AS r
WHERE k.key = r.key AND k.token = r.token AND k.expires_at > now()
RETURNING r.i`, table, leaseEnd("r.ttl"), src)
}
