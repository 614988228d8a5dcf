// Package pgstore keeps tasklock leases in a PostgreSQL table through the
// caller's pgx v5 pool.
//
//	pool, err := pgxpool.New(ctx, "postgres://app@db.internal/app")
//	store, err := pgstore.New(pool, &pgstore.Options{Migrate: true})
//	locker, err := tasklock.New(store, nil)
//
// The Store implements driver.Store, driver.Notifier (waiters are woken by
// LISTEN/NOTIFY), driver.Lister and driver.ForceReleaser. It never closes
// the pool and never logs.
//
// # Safety level
//
// Durable and linearizable, decided by the database:
//
//   - Every grant, renewal and release is one statement that has committed
//     before it answers, on a row locked while it changes. At most one
//     token holds a key at a time.
//   - The fence is a counter in the key's row, incremented by the statement
//     that grants the key. The row is never deleted, so fences strictly
//     increase per key for the life of the table: across releases,
//     expiries, forced releases and server restarts (fsync=off and
//     asynchronous commits aside). A failover to a standby keeps them only
//     if the standby had every committed grant: with asynchronous
//     replication a failover can lose the last grants, and then a key can be
//     held twice and a fence repeated. Use synchronous replication where
//     that matters.
//   - Every expiry is the database's now() + TTL, compared with its now().
//     No client clock enters the table: clients whose clocks are minutes
//     apart still see leases end on time. Stepping the database server's
//     clock moves every expiry with it.
//   - The Locker on top keeps its own, shorter, local validity (TTL minus
//     drift, counted from when it sent the request, on the monotonic clock)
//     and closes a lock's Done by then. So a holder that is paused,
//     partitioned or slow stops before its lease can end at the database,
//     and the next holder's fence is higher than any it used.
//
// # Table
//
// One row per key: key (text, C collation, primary key), token (the
// holder's, NULL once released), owner, fence, acquired_at, expires_at
// (timestamptz, the database's clock) and pid (the holding session's
// backend in connection mode). A key is held while expires_at is after
// now(). Migrate creates it, and <Table>_migrations, which records the
// applied migrations (embedded files migrations/NNNN_name.up.sql).
// MigrationStatus reports them; both back the CLI's `tasklock migrate up`
// and `tasklock migrate status`.
//
// # Lease mode
//
// The default (Options.Mode "lease"). Each call is one statement, on any
// pooled connection:
//
//   - Acquire is an INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE
//     expires_at <= now() RETURNING fence, in a statement that also returns
//     the holder's owner and remaining lease when the upsert took nothing,
//     so a held key costs no second query.
//   - Renew updates a whole batch in one UPDATE ... FROM unnest($keys,
//     $tokens, $ttls): one round trip per renewal cycle of a Locker, however
//     many leases it keeps.
//   - Release sets token NULL and expires_at now() (or now() + KeepFor for
//     MinHold) where the token still holds the key, and calls pg_notify in
//     the same statement, so waiters are woken when, and only when, the key
//     became free.
//
// A holder that dies is replaced when its lease expires: at most TTL after
// its last renewal.
//
// # Connection mode
//
// Options.Mode "connection" also binds each held lock to a connection of
// its own: the statement that grants the key runs on a connection that
// takes pg_try_advisory_lock(hashtextextended(key, seed)) (seed derived
// from the table's name) and keeps that session lock, and the connection is
// then taken out of the pool (pgxpool.Conn.Hijack). The server frees the
// lock the moment the holder's connection ends, so a crashed or killed
// holder is replaced at once (the next poll of a waiter) rather than after
// its TTL. The fence still comes from the key's row, incremented in the same
// round trip, and the row's expires_at is still the lease:
//
//   - A grant requires the advisory lock, and a row whose lease expired or
//     whose holding session has ended since the server started. A session
//     ended by a server restart does not count: its holder may live on,
//     unaware until its next renewal, so that row keeps the key until it
//     expires.
//   - The holder's session gets idle_session_timeout = TTL: if its renewals
//     stop (paused, partitioned, MaxHold, ProgressTimeout) the server itself
//     ends the session TTL after the last one, by its own clock. (The
//     setting stops at about 24.8 days; a longer TTL turns it off.)
//   - Renew sends each lease's renewal on that lease's connection (at most
//     16 at a time): the renewal is the ping. A connection that fails, or a
//     row that is no longer the lease's, is ErrNotHeld, and the connection
//     is closed. A server restart is noticed at the next renewal (TTL/3).
//   - Release unlocks in the same statement that ends the lease (so a
//     waiter woken by the NOTIFY finds the key free) and parks the clean
//     connection, at most 4 for at most 30 s, for the next grant.
//
// Why an advisory lock and not SELECT ... FOR UPDATE NOWAIT in a
// transaction kept open: the grant's fence must be committed when the grant
// is made, or a crash would roll it back and the next grant would repeat it;
// and a transaction open for the length of a lock holds back VACUUM for the
// whole database and trips idle_in_transaction_session_timeout. A session
// advisory lock lives outside transactions.
//
// Connection mode costs one server connection per held lock (outside the
// pool's MaxConns, inside the server's max_connections), needs PostgreSQL
// 14 or later (idle_session_timeout), and ForceRelease needs the right to
// pg_terminate_backend the holder's session (the same role, or
// pg_signal_backend). Lease mode needs PostgreSQL 11 or later.
//
// What the server ends without the holder's knowledge (an operator's
// pg_terminate_backend or ForceRelease, a crash-restart of all backends
// after one backend crashed, a middlebox resetting the connection) frees
// the key at once while the holder learns at its next renewal: up to TTL/3
// later. The fence is what protects the resource then.
//
// # Keepalive and partitions
//
// On each holder's connection (and the LISTEN connection) the client sets
// TCP keepalive (idle 1 s, interval 1 s, 3 probes) and TCP_USER_TIMEOUT
// 5 s (Linux), so that a silently partitioned path turns the next renewal
// into an error within seconds instead of minutes: the holder's Done closes
// then, or at its local validity, whichever comes first. These are set on
// the connection after the grant (the same socket options a net.Dialer
// with KeepAliveConfig and a Control function would set), whatever DialFunc
// the pool uses. The server side needs no keepalive: idle_session_timeout
// ends a silent holder's session TTL after its last renewal, partitioned or
// not. A server-side tcp_user_timeout or keepalive shorter than the TTL
// would let the server free the key before the holder's own deadline, which
// is why pgstore sets none.
//
// # PgBouncer
//
// Session advisory locks, idle_session_timeout and LISTEN belong to a
// server session, and transaction pooling hands each transaction to any
// session: connection mode and notifications do not work through PgBouncer
// in transaction (or statement) pooling mode. Use session pooling or a
// direct connection for them. Lease mode works through transaction pooling
// (each call is one autocommit statement) with PgBouncer 1.21 or later
// and max_prepared_statements set, or with the pool's
// DefaultQueryExecMode set to pgx.QueryExecModeExec; waiters then poll.
//
// # Errors
//
// Besides driver.ErrNotHeld and *driver.HeldError the store returns pgx
// errors wrapped with %w and the operation, starting with "pgstore: ". A
// missing table is reported with what to do (run Migrate).
package pgstore
