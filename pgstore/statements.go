package pgstore

import (
	"fmt"

	"github.com/jackc/pgx/v5"
)

// statements are the SQL a Store runs, built once for its table. Durations
// are passed as microseconds ($n::bigint) and every instant is the
// database's now(): no client clock reaches the table.
type statements struct {
	// lease mode
	grant        string // $1 key, $2 token, $3 owner, $4 ttl µs: acquire's grant alone
	acquire      string // $1 key, $2 token, $3 owner, $4 ttl µs
	acquireBatch string // $1 keys[] (distinct), $2 tokens[], $3 owners[], $4 ttls[] µs
	renew        string // $1 keys[], $2 tokens[], $3 ttls[] µs
	release      string // $1 key, $2 token, $3 keep µs, $4 channel
	releaseNow   string // $1 key, $2 token, $3 channel: release with no keep
	releaseBatch string // $1 keys[], $2 tokens[], $3 keeps[] µs, $4 channel

	// connection mode
	acquireConn string // $1 key, $2 token, $3 owner, $4 ttl µs, $5 seed, $6 idle ms
	renewConn   string // $1 key, $2 token, $3 ttl µs, $4 idle ms
	releaseConn string // $1 key, $2 token, $3 keep µs, $4 seed, $5 channel, $6 parked idle ms

	// both
	leases       string // $1 prefix, $2 seed
	forceRelease string // $1 key, $2 channel, $3 seed; after lockKind

	// read-write locks and semaphores (kinds.go), in both modes
	lockKind    string // $1 key, $2 seed, $3 lock_timeout ms: the key's transaction-level lock
	acquireKind string // $1 key, $2 token, $3 owner, $4 ttl µs, $5 mode, $6 limit, $7 channel; after lockKind
	releaseKind string // $1 key, $2 token, $3 mode, $4 keep µs, $5 channel; after lockKind
	renewKinds  string // $1 keys[], $2 tokens[], $3 ttls[] µs, $4 modes[], none a mutex
	renewMixed  string // $1 keys[], $2 tokens[], $3 ttls[] µs, $4 modes[]

	// fair queues (fair.go)
	enqueue   string // $1 key, $2 token, $3 owner, $4 ttl µs
	serve     string // $1 key, $2 token, $3 owner, $4 ttl µs, $5 channel
	serveConn string // acquireConn's arguments, then $7 channel
	leave     string // $1 key, $2 token, $3 channel
}

// remainingMicros is the lease's remaining time at the database, in µs.
const remainingMicros = `(extract(epoch FROM %s.expires_at - now()) * 1000000)::bigint`

// listedMicros is the time left of row's lease, in µs, at the time c.t.
func listedMicros(row string) string {
	return fmt.Sprintf(`(extract(epoch FROM %s.expires_at - c.t) * 1000000)::bigint`, row)
}

// sessionHolds is true when backend pid (an expression) holds the advisory
// lock of key (an expression) in this database. seed is a parameter.
func sessionHolds(pid, key, seed string) string {
	return fmt.Sprintf(`EXISTS (
		SELECT 1 FROM pg_locks k
		WHERE k.locktype = 'advisory' AND k.granted AND k.pid = %[1]s
		  AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND k.classid::bigint = (hashtextextended(%[2]s, %[3]s) >> 32) & 4294967295
		  AND k.objid::bigint = hashtextextended(%[2]s, %[3]s) & 4294967295
		  AND k.objsubid = 1)`, pid, key, seed)
}

// leaseEnd is the expiry of a lease of ttl µs (an SQL expression) from the
// database's now().
func leaseEnd(ttl string) string { return "now() + " + ttl + " * interval '1 microsecond'" }

// acquireUpsert is the lease-mode grant shared by acquire and acquireBatch:
// it inserts rows (a VALUES or a SELECT of key, token, owner, fence,
// acquired_at, expires_at, pid, waiters) and, for a key that has a row,
// takes it when its lease has expired or the same token holds it (a
// retried request), and otherwise only sets waiters. The row is l.
func acquireUpsert(table, rows string) string {
	const takes = `(l.expires_at <= now() OR l.token IS NOT DISTINCT FROM EXCLUDED.token)`
	return fmt.Sprintf(`INSERT INTO %[1]s AS l (key, token, owner, fence, acquired_at, expires_at, pid, waiters)
%[2]s
ON CONFLICT (key) DO UPDATE SET
	token = CASE WHEN %[3]s THEN EXCLUDED.token ELSE l.token END,
	owner = CASE WHEN %[3]s THEN EXCLUDED.owner ELSE l.owner END,
	fence = CASE WHEN l.token = EXCLUDED.token THEN l.fence WHEN l.expires_at <= now() THEN l.fence + 1 ELSE l.fence END,
	acquired_at = CASE WHEN l.token = EXCLUDED.token THEN l.acquired_at WHEN l.expires_at <= now() THEN EXCLUDED.acquired_at ELSE l.acquired_at END,
	expires_at = CASE WHEN %[3]s THEN EXCLUDED.expires_at ELSE l.expires_at END,
	pid = CASE WHEN %[3]s THEN NULL ELSE l.pid END,
	waiters = NOT %[3]s`, table, rows, takes)
}

// acquireReply is what a lease-mode acquire answers, read from row (the
// key's row after the upsert) for the attempt of token: the fence when
// token holds the key now, else NULL and the holder's owner and remaining
// lease in µs. scanAcquire reads it.
func acquireReply(row, token string) string {
	return fmt.Sprintf(`CASE WHEN %[1]s.token = %[2]s THEN %[1]s.fence END,
	CASE WHEN %[1]s.token IS DISTINCT FROM %[2]s THEN %[1]s.owner END,
	CASE WHEN %[1]s.token IS DISTINCT FROM %[2]s THEN %[3]s END`, row, token, fmt.Sprintf(remainingMicros, row))
}

// releaseLease is the lease-mode release over the rows of from (a FROM
// item r): it ends the lease of key (an expression) where token holds it,
// keeping the key keep µs more (MinHold), and returns returning followed
// by the NOTIFY of a plain release of a key an acquire found held (the
// waiters flag) on channel. Release alone has a statement of its own (see
// buildStatements).
func releaseLease(table, from, key, token, keep, channel, returning string) string {
	return fmt.Sprintf(`UPDATE %[1]s AS l
SET token = NULL, pid = NULL, expires_at = %[2]s
FROM %[3]s
WHERE l.key = %[4]s AND l.token = %[5]s AND l.expires_at > now()
RETURNING %[6]sCASE WHEN l.waiters AND %[7]s = 0 THEN pg_notify(%[8]s, l.key) END`,
		table, leaseEnd(keep), from, key, token, returning, keep, channel)
}

// heldInKeyOrder is a FROM item r: the rows of src (an unnest(...) AS
// r(key, token, ...)) whose token holds its key, with the key's row locked,
// in key order (COLLATE "C", the column's). Every statement that locks
// several lease rows (acquireBatch, renew, releaseBatch) locks them in that
// order, so that concurrent batches never deadlock; the UPDATE that joins
// it then changes rows already locked, and rechecks them.
func heldInKeyOrder(table, src string) string {
	return fmt.Sprintf(`(
	SELECT r.* FROM %[2]s
	JOIN %[1]s k ON k.key = r.key AND k.token = r.token AND k.expires_at > now()
	ORDER BY k.key FOR UPDATE OF k
) AS r`, table, src)
}

// tables are the quoted, schema-qualified names of a Store's tables.
type tables struct {
	locks string // the lease table: one row per mutex key
	kinds string // <Table>_kinds: read-write locks' and semaphores' entries
	keys  string // <Table>_kind_keys: their keys' fence counters
	queue string // <Table>_queue: fair queues of mutex waiters
}

func tablesOf(o resolved) tables {
	q := func(suffix string) string { return pgx.Identifier{o.schema, o.tableName + suffix}.Sanitize() }
	return tables{locks: o.table, kinds: q("_kinds"), keys: q("_kind_keys"), queue: q("_queue")}
}

// renewMutexes is the lease-mode renewal of the mutexes of src (a FROM
// item r with columns key, token, ttl µs and i, the item's position):
// one UPDATE, rows locked in key order, returning the i of each lease
// renewed.
func renewMutexes(table, src string) string {
	return fmt.Sprintf(`UPDATE %[1]s AS l
SET expires_at = %[2]s
FROM %[3]s
WHERE l.key = r.key AND l.token = r.token AND l.expires_at > now()
RETURNING r.i`, table, leaseEnd("r.ttl"), heldInKeyOrder(table, src))
}

// acquireConnSQL is the connection-mode grant (see buildStatements), alone
// or, with q, of a fair queue's entry: q's CTEs come first, q's gate
// decides whether the session tries the advisory lock at all, and q's
// columns follow the four of the reply.
func acquireConnSQL(table string, q *queueSQL) string {
	var pre, post, cols string
	try := `pg_try_advisory_lock(hashtextextended($1, $5))`
	if q != nil {
		pre = q.pre
		try = `CASE WHEN ` + q.gate + ` THEN ` + try + ` ELSE false END`
		post = q.post(`EXISTS (SELECT 1 FROM up)`)
		cols = q.cols
	}
	return fmt.Sprintf(`WITH %[3]slk AS MATERIALIZED (
	SELECT %[4]s AS got
), up AS (
	INSERT INTO %[1]s AS l (key, token, owner, fence, acquired_at, expires_at, pid, waiters)
	SELECT $1, $2, $3, 1, now(), now() + $4::bigint * interval '1 microsecond', pg_backend_pid(), false
	FROM lk WHERE lk.got
	ON CONFLICT (key) DO UPDATE SET
		token = EXCLUDED.token,
		owner = EXCLUDED.owner,
		fence = l.fence + 1,
		acquired_at = EXCLUDED.acquired_at,
		expires_at = EXCLUDED.expires_at,
		pid = EXCLUDED.pid,
		waiters = false
	WHERE l.expires_at <= now()
	   OR (l.token IS NOT NULL AND l.pid IS NOT NULL AND l.acquired_at > pg_postmaster_start_time())
	RETURNING l.fence
), mark AS (
	UPDATE %[1]s SET waiters = true
	WHERE key = $1 AND NOT waiters AND NOT EXISTS (SELECT 1 FROM up)
), %[5]sfin AS MATERIALIZED (
	SELECT (SELECT fence FROM up) AS fence, (SELECT got FROM lk) AS got
)
SELECT fin.fence,
	CASE WHEN fin.fence IS NOT NULL THEN set_config('idle_session_timeout', $6, false)
	     WHEN fin.got THEN pg_advisory_unlock(hashtextextended($1, $5))::text END,
	cur.owner,
	%[2]s%[6]s
FROM fin LEFT JOIN %[1]s cur ON fin.fence IS NULL AND cur.key = $1`,
		table, fmt.Sprintf(remainingMicros, "cur"), pre, try, post, cols)
}

func buildStatements(tb tables) statements {
	var st statements
	table := tb.locks

	// Lease mode. One upsert, always a row out: it takes the key when its
	// lease has expired by the database's clock (or when this very token
	// holds it: a retried request); otherwise it leaves the lease as it is
	// and sets waiters, so that the holder's release will NOTIFY. The row
	// it returns is the latest version, locked: the fence when this token
	// now holds the key (and NULLs, which cost the client nothing to
	// decode), else NULL and the holder's owner and remaining lease. A
	// grant clears waiters: a waiter that loses the race for the key sets
	// it again with its next attempt. The flag is set and the release
	// reads it under the same row lock, so a waiter's failed attempt
	// either comes before the release (which then NOTIFYs) or after it
	// (and then finds the key free).
	st.acquire = acquireUpsert(table, `VALUES ($1, $2, $3, 1, now(), `+leaseEnd("$4::bigint")+`, NULL, false)`) + `
RETURNING ` + acquireReply("l", "$2")

	// The grant alone, for a key expected free: the row acquire's grant
	// writes, but only where the lease expired and another token held it
	// (a released row's token is NULL), and no row comes back otherwise
	// (DO UPDATE ... WHERE); Acquire then runs acquire, which sets
	// waiters and names the holder, or answers a retry by the token that
	// holds the key with its fence, kept. Cheaper on the server than
	// acquire on a grant: PostgreSQL compiles each statement's
	// expressions again at every execution (executor start-up), and
	// acquire's seven conditional assignments and its three-column reply
	// cost more to compile than to run. Measured with callgrind on
	// PostgreSQL 15, one backend, per grant + release: 248,000
	// instructions against 285,000 with acquire, and 201,000 against
	// 207,000 without the conditional assignments a retry needs (the raw
	// upsert floor: 164,000).
	st.grant = fmt.Sprintf(`INSERT INTO %[1]s AS l (key, token, owner, fence, acquired_at, expires_at, pid, waiters)
VALUES ($1, $2, $3, 1, now(), %[2]s, NULL, false)
ON CONFLICT (key) DO UPDATE SET
	token = EXCLUDED.token,
	owner = EXCLUDED.owner,
	fence = l.fence + 1,
	acquired_at = EXCLUDED.acquired_at,
	expires_at = EXCLUDED.expires_at,
	pid = NULL,
	waiters = false
WHERE l.expires_at <= now() AND l.token IS DISTINCT FROM EXCLUDED.token
RETURNING l.fence`, table, leaseEnd("$4::bigint"))

	// The same upsert over unnest()ed arrays, whose keys are distinct (an
	// upsert cannot change a row twice: AcquireBatch sends a key's later
	// items in later statements). Rows are taken in key order, as every
	// batch takes them (see heldInKeyOrder), and each item is answered
	// from its key's row as acquire answers.
	st.acquireBatch = fmt.Sprintf(`WITH r AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) WITH ORDINALITY AS r(key, token, owner, ttl, i)
), u AS (
%[1]s
RETURNING l.key, l.token, l.owner, l.fence, l.expires_at
)
SELECT r.i, %[2]s
FROM r JOIN u ON u.key = r.key`,
		acquireUpsert(table, `SELECT r.key, r.token, r.owner, 1, now(), `+leaseEnd("r.ttl")+`, NULL, false
FROM r ORDER BY r.key COLLATE "C"`),
		acquireReply("u", "r.token"))

	st.renew = renewMutexes(table, `unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS r(key, token, ttl, i)`)

	// The NOTIFY runs only when an acquire found the key held since it
	// was granted (and not for MinHold, which keeps the key): most
	// releases have no waiter, and a NOTIFY serialises commits.
	//
	// Release alone calls pg_notify in its SET list rather than in
	// RETURNING (waiters keeps its value: pg_notify returns void, which is
	// not NULL). A statement that returns rows costs the server a
	// tuplestore, a RowDescription and a DataRow at every execution, and
	// the client their decoding. An assignment is computed only for a row
	// that passed the WHERE clause, so the NOTIFY goes out only with a
	// release, as before; if a concurrent change makes the server
	// recheck the row (READ COMMITTED) and the recheck fails, the NOTIFY
	// computed for the older version still goes out: one spurious wake-up,
	// which waiters treat as any other (they try, and find the key held).
	//
	// A plain release (no MinHold, the common case) has a leaner statement
	// still, for the same reason: no keep to add to now() nor to test, and
	// no pid to clear (a lease-mode grant, the only one a lease-mode
	// Store's token can hold, leaves it NULL). Measured as grant is:
	// 201,000 instructions per pair with release, 193,000 with releaseNow.
	st.release = fmt.Sprintf(`UPDATE %[1]s AS l
SET token = NULL, pid = NULL, expires_at = %[2]s,
	waiters = CASE WHEN l.waiters AND $3::bigint = 0 THEN pg_notify($4, l.key) IS NOT NULL ELSE l.waiters END
WHERE l.key = $1 AND l.token = $2 AND l.expires_at > now()`, table, leaseEnd("$3::bigint"))
	st.releaseNow = fmt.Sprintf(`UPDATE %[1]s AS l
SET token = NULL, expires_at = now(),
	waiters = CASE WHEN l.waiters THEN pg_notify($3, l.key) IS NOT NULL ELSE false END
WHERE l.key = $1 AND l.token = $2 AND l.expires_at > now()`, table)
	st.releaseBatch = releaseLease(table,
		heldInKeyOrder(table, `unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS r(key, token, keep, i)`),
		"r.key", "r.token", "r.keep", "$4", "r.i, ")

	// Connection mode. The session takes the key's advisory lock; holding
	// it, it takes the row when the row's lease expired, or when the row's
	// holder was a session that has ended (the lock being free proves it)
	// since this server started: its client closed it or died. A session
	// that ended with a server restart does not count (its holder may live
	// on, unaware until its next renewal): that row waits for its expiry.
	// A lease-mode holder's live row, or a release's MinHold (token NULL,
	// expires_at ahead), keeps the key: the statement then gives the
	// advisory lock back at once. A granted session gets
	// idle_session_timeout = TTL: the server itself ends a holder that
	// stops renewing. A grant clears waiters; an attempt that finds the
	// key held sets it (mark), so that the holder's release NOTIFYs. The
	// advisory lock is not the row lock: a release that commits between
	// this statement's pg_try_advisory_lock and its mark is not told of
	// this waiter, which then polls (its next attempt comes within its
	// backoff, at most a second).
	st.acquireConn = acquireConnSQL(table, nil)

	st.renewConn = fmt.Sprintf(`WITH u AS (
	UPDATE %[1]s SET expires_at = now() + $3::bigint * interval '1 microsecond'
	WHERE key = $1 AND token = $2 AND expires_at > now() AND pid = pg_backend_pid()
	RETURNING 1
)
SELECT count(*), set_config('idle_session_timeout', $4, false) FROM u`, table)

	// The unlock runs inside the statement, the NOTIFY is delivered at its
	// commit: a woken waiter finds the advisory lock free. The session is
	// left clean, to be parked for a later grant.
	st.releaseConn = fmt.Sprintf(`WITH r AS (
	UPDATE %[1]s
	SET token = NULL, pid = NULL, expires_at = now() + $3::bigint * interval '1 microsecond'
	WHERE key = $1 AND token = $2 AND expires_at > now() AND pid = pg_backend_pid()
	RETURNING waiters
)
SELECT count(*), pg_advisory_unlock(hashtextextended($1, $4)),
	CASE WHEN bool_or(r.waiters) AND $3::bigint = 0 THEN pg_notify($5, $1) END,
	set_config('idle_session_timeout', $6, false)
FROM r`, table)

	// A connection-mode row counts as held while its session holds the
	// advisory lock, or until it expires when a restart ended the session.
	// Read-write locks' and semaphores' entries follow, a row per hold or
	// claim. The time left is measured from a clock read after the
	// statement's snapshot, not from now(): now() is read before it, so a
	// renewal that began after now() and committed before the snapshot
	// would be listed with more than its TTL left.
	st.leases = fmt.Sprintf(`WITH c AS MATERIALIZED (SELECT clock_timestamp() AS t)
SELECT l.key, l.owner, l.fence, %[3]s, 0::smallint AS mode, 0 AS permits, false AS waiting
FROM %[1]s l, c
WHERE starts_with(l.key, $1) AND l.expires_at > c.t
  AND (l.pid IS NULL OR l.token IS NULL OR l.acquired_at < pg_postmaster_start_time() OR %[4]s)
UNION ALL
SELECT k.key, k.owner, k.fence, %[5]s, k.mode, k.permits, k.waiting
FROM %[2]s k, c
WHERE starts_with(k.key, $1) AND k.expires_at > c.t
ORDER BY 1, 5, 7, 3, 2`, table, tb.kinds, listedMicros("l"),
		sessionHolds("l.pid", "l.key", "$2::bigint"), listedMicros("k"))

	// A forced release also terminates the session holding the key in
	// connection mode (pid recorded in the row and still holding the
	// advisory lock, so a reused pid is never hit), and deletes every
	// entry of the key's read-write lock or semaphore (it runs under the
	// key's lockKind).
	st.forceRelease = fmt.Sprintf(`WITH old AS (
	SELECT key, pid FROM %[1]s WHERE key = $1 AND expires_at > now() FOR UPDATE
), r AS (
	UPDATE %[1]s l SET token = NULL, pid = NULL, expires_at = now()
	FROM old WHERE l.key = old.key
	RETURNING old.pid
), kd AS (
	DELETE FROM %[3]s k WHERE k.key = $1
	RETURNING k.expires_at > now() AS live
), n AS MATERIALIZED (
	SELECT (SELECT count(*) FROM r) + (SELECT count(*) FROM kd WHERE live) AS n
)
SELECT n.n,
	CASE WHEN n.n > 0 THEN pg_notify($2, $1) END,
	(SELECT count(pg_terminate_backend(r.pid)) FROM r WHERE r.pid IS NOT NULL AND %[2]s)
FROM n`, table, sessionHolds("r.pid", "$1", "$3::bigint"), tb.kinds)

	buildKinds(&st, tb)
	buildFair(&st, tb)
	return st
}
