// Package pgstore keeps tasklock leases in a PostgreSQL table through the
// caller's pgx v5 pool.
//
//	pool, err := pgxpool.New(ctx, "postgres://app@db.internal/app")
//	store, err := pgstore.New(pool, &pgstore.Options{Migrate: true})
//	locker, err := tasklock.New(store, nil)
//
// The Store implements driver.Store, driver.Batcher (a Locker's concurrent
// obtains and releases go to the database together), driver.Notifier
// (waiters are woken by LISTEN/NOTIFY), driver.Lister,
// driver.ForceReleaser, driver.Kinder (read-write locks and semaphores:
// Locker.RWMutex, Locker.Semaphore) and driver.FairQueuer (first-come,
// first-served waits: ObtainOptions.Fair). It never closes the pool and
// never logs.
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
// (timestamptz, the database's clock), pid (the holding session's
// backend in connection mode) and waiters (an acquire found the key held
// since it was last granted; see Notifications). A key is held while
// expires_at is after now(). Migrate creates it, and <Table>_migrations, which records the
// applied migrations (embedded files migrations/NNNN_name.up.sql);
// migration 0006_kinds adds <Table>_kinds, <Table>_kind_keys and
// <Table>_queue (see Read-write locks and semaphores, and Fair queues).
// MigrationStatus reports them; both back the CLI's `tasklock migrate up`
// and `tasklock migrate status`.
//
// # Lease mode
//
// The default (Options.Mode "lease"). Each call is one statement, on any
// pooled connection:
//
//   - Acquire is one INSERT ... ON CONFLICT (key) DO UPDATE ... RETURNING
//     that takes the key when its lease has expired (expires_at <= now())
//     and otherwise only sets the row's waiters flag; either way it returns
//     the row, so the fence of a grant, or the holder's owner and remaining
//     lease, come back in the same round trip. A Store whose last Acquire
//     was granted (the common case) first runs a leaner upsert that only
//     grants (DO UPDATE ... WHERE the lease expired, RETURNING the fence):
//     cheaper for the server to start up, and when it finds the key held
//     it changes nothing and the full upsert follows, two round trips for
//     that refusal; the next Acquire after a refusal runs the full one.
//   - Renew updates a whole batch in one UPDATE ... FROM unnest($keys,
//     $tokens, $ttls): one round trip per renewal cycle of a Locker, however
//     many leases it keeps.
//   - Release sets token NULL and expires_at now() (or now() + KeepFor for
//     MinHold) where the token still holds the key, and calls pg_notify in
//     the same statement (in its SET list: it returns no rows) when the
//     row's waiters flag is set (see Notifications).
//   - AcquireBatch and ReleaseBatch (driver.Batcher: the Locker sends the
//     obtains and releases that arrive while its earlier calls are under
//     way together) are the statements of Acquire and Release over
//     unnest()ed arrays: one statement, one round trip, one commit for the
//     batch, each item answered as the call alone would answer it. An
//     upsert cannot change a row twice, so when a key is named more than
//     once, its second items go in a second statement, and so on, sent in
//     the same round trip (a pgx.Batch: one transaction, its statements run
//     in turn); a key's first item gets it, and the others find it held
//     and set its waiters flag, as calls made in turn would.
//
// Every statement that locks several rows (AcquireBatch, Renew,
// ReleaseBatch) locks them in key order, so that concurrent batches never
// wait for each other in a cycle (a deadlock the server would break after
// deadlock_timeout by failing one of them).
//
// Acquire, Renew, AcquireBatch and ReleaseBatch run on a connection
// acquired from the pool for the call (pool.Acquire) rather than through
// Pool.QueryRow and Pool.Query, which keep each connection's last 128 rows,
// with their arguments, for reuse: that kept every held lock's key and
// token reachable, about 260 B per held lock. Renew sends its batch in the
// simple protocol (one Query message, still one round trip): the extended
// protocol's parameter buffers keep a connection's last encoded batch until
// its next query. AcquireBatch and ReleaseBatch stay in the extended
// protocol (prepared once per connection: they are on the path of every
// obtain under load); what they leave in those buffers is bounded by the
// Locker's batch size (512 items), per connection, not per held lock.
//
// # Notifications
//
// Waiters LISTEN on Options.Channel (see Subscribe), and a release NOTIFYs
// the released key, but only when someone may be waiting: a NOTIFY makes
// its transaction take a database-wide lock at commit, which serialises
// the commits of every notifying transaction in the database, so a NOTIFY
// on every release would cap the release rate of all keys together.
//
// So every acquire that finds the key held sets the row's waiters flag (in
// the upsert that answers it, see Lease mode), every grant clears it, and a
// release NOTIFYs only when it is set. In lease mode the flag is written
// and read under the key's row lock: a waiter's failed attempt either
// commits before the holder's release, which then sees the flag and
// NOTIFYs, or after it, and then finds the key free and takes it. No
// wake-up is lost. A waiter woken by a NOTIFY that loses the key to
// another sets the flag again with that attempt, for the next release.
// What the flag costs: a failed acquire writes the row (a HOT update) where
// it used to only lock it, and a waiter that gave up, or a TryObtain that
// did not wait, makes the next release send one NOTIFY nobody needs.
//
// In connection mode the held check is the advisory lock, not the row
// lock: a release that commits between a waiter's pg_try_advisory_lock
// and its setting of the flag (microseconds apart, in one statement) is
// not told of that waiter. That waiter is not stuck: a Locker's waiters
// also poll, with backoff capped at one second (and at the holder's
// remaining lease) while notifications work, so it retries within a
// second at worst.
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
//     waiter woken by the NOTIFY, sent when the waiters flag is set, finds
//     the key free) and parks the clean connection, at most 4 for at most
//     30 s, for the next grant.
//   - AcquireBatch and ReleaseBatch cannot share a statement between
//     items that each need their own connection: they run Acquire and
//     Release for every item concurrently (a key's later items after its
//     earlier ones).
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
// # Read-write locks and semaphores
//
// Their keys are a namespace apart from the mutexes': a mutex "x" and a
// semaphore "x" are different locks. Each hold is a row of <Table>_kinds
// (key, token, owner, mode 1 read, 2 write or 3 permit, permits, waiting,
// fence, acquired_at, expires_at by the database's clock), a lease of its
// own: a reader or a permit holder that dies frees only itself, at its
// TTL. A writer refused because of readers leaves a row with waiting set
// (its claim, renewed by each attempt it makes) that refuses new readers,
// so writers are not starved. Each key's fence counter is a row of
// <Table>_kind_keys that is never deleted, incremented by every writer's
// and every permit's grant, so fences strictly increase per key as the
// mutexes' do; a reader's fence is the counter as it stands (the last
// writer's). In connection mode too these holds are lease rows: only
// mutexes are bound to connections.
//
//   - Acquire and Release are one round trip each: a pipeline of two
//     statements in one implicit transaction, the first taking the key's
//     transaction-level advisory lock, pg_advisory_xact_lock(
//     hashtextextended(key, seed)) (another seed than connection mode's),
//     the second doing the work with a snapshot taken once the lock is
//     held. Every acquire and release of a key is thus serialized, and
//     each sees every change committed before it: the count of live
//     permits, a writer or a waiting writer, the key's limit (an acquire
//     with another number of permits, or as another kind, is
//     driver.ErrKindMismatch and changes nothing). Expiries are decided by
//     statement_timestamp(), the database's clock when the second
//     statement starts, after any wait for the lock. The wait is bounded
//     at the server by lock_timeout (the caller's deadline, at most 5 s;
//     a longer pile-up is driver.ErrTryAgain), so a caller that has gone
//     is not granted a hold later; a cancelled wait ends with the cancel
//     request pgx sends.
//   - Renew takes no key lock, so that renewing 10,000 permits costs what
//     renewing 10,000 mutexes does: one statement per call, which for a
//     batch mixing mutexes and other holds is one statement of two
//     UPDATEs (in connection mode the mutexes are pinged on their
//     connections, the other holds are one UPDATE). An acquire deletes the
//     key's expired entries with rows locked in token order and rechecked
//     on their latest version, and renewals lock theirs in the same order:
//     an entry a renewal extends concurrently is either deleted first (the
//     renewal then finds it gone: ErrNotHeld) or seen extended (and
//     counted).
//   - Notifications: every release, every writer's withdrawn claim, and
//     every acquire that deleted expired entries NOTIFYs the key's name (a
//     NOTIFY serialises the commits of notifying transactions, a cost the
//     mutexes avoid with their waiters flag; here every release may let
//     several waiters in, and the subscribers are told of each).
//   - Leases lists one Lease per hold or claim; ForceRelease deletes the
//     mutex's lease and every hold and claim of the name.
//
// # Fair queues
//
// ObtainOptions.Fair waits in <Table>_queue: one row per waiter (key,
// token, owner, seq from an identity column for the order, expires_at by
// the database's clock). EnqueueFair inserts it; each attempt of the
// Ticket's Wait is one statement that deletes the key's expired entries,
// renews its own, and only when its entry heads the live queue takes the
// mutex exactly as Acquire does (the next fence; in connection mode with
// the advisory lock and the connection kept), deleting the entry in the
// same statement. Wait makes an attempt at least every TTL/3, so its
// entry stays alive, and sooner when a release of the key is announced:
// Tickets share one LISTEN, started while any waits. A waiter that dies or
// stops waiting leaves the line when its entry expires, at most TTL after
// its last attempt; Leave deletes the entry at once and NOTIFYs, so that
// the next one looks again. Plain (unfair) obtains do not look at the
// queue.
//
// # Server restarts
//
// Lease mode: leases are rows, durable like every commit, and expire by
// the server's clock, which a restart does not stop: a lease outlives a
// restart shorter than its TTL and nobody else is granted the key
// meanwhile; a server down past the TTL ends the holder's lock locally
// first. Exclusive through restarts (fsync=off and asynchronous commits
// aside).
//
// Connection mode: a restart ends every session and so frees every
// advisory lock at once, while each old holder goes on until its next
// renewal fails (up to TTL/3 later). The grant takes a row whose session
// ended only when that happened since the server started
// (pg_postmaster_start_time()); a row granted before the start keeps its
// key until its lease (renewed in the row by every renewal) expires, by
// which time the old holder's validity has ended. Exclusive through
// restarts: TestFaults/ServerRestarted checks, in connection mode, that
// another obtains only after the old holder's Done closed, and in lease
// mode that the lease outlives a short restart.
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
//
// # Ledger
//
// The Store also implements ledger.Ledger, the tick ledger of package
// schedule, in four tables named after the lease table, in its schema, that
// Migrate creates (migration 0003_ledger): <Table>_claims, <Table>_runs,
// <Table>_jobs and <Table>_triggers; migration 0004_job_specs adds the
// registered spec and since to <Table>_jobs, with a partial index on the
// paused rows for JobStates. Migration 0007_shards_catalog puts the shard
// in the keys — (job, tick, trigger_id, shard) for <Table>_claims, (job,
// tick, trigger_id, shard, attempt) for <Table>_runs, which also keeps the
// job's shard count as data — adds the past tick and rerun flag of a
// backfill or re-run to <Table>_triggers, and creates the tables of
// ledger.Catalog, <Table>_defs and <Table>_audit. Rows written before 0007
// become shard 0's, and their trigger requests trigger-now ones.
// Migration 0008_runs_stats_index adds an index on (tick, status, attempt,
// started_at) of <Table>_runs for ledger.Stats: RunStats is one GROUP BY
// over an index-only scan of the window, so it costs what the window
// holds, not the history.
//
// Names compare byte for byte (COLLATE "C"), as Go compares strings. Job
// and trigger names, node names and tokens are UTF-8 without NUL, at most
// 1024 bytes each; others fail with driver.ErrUnsupported. Every time the
// ledger decides by (claim expiry, Recorded, a trigger's At, record and
// trigger ages in Prune, a definition's Updated, an audit entry's At) is the
// database's now(). Each call is one statement, on any pooled connection:
//
//   - Claim is an INSERT ... ON CONFLICT DO UPDATE over unnest()ed arrays,
//     sorted by key so that concurrent batches lock rows in one order. It
//     takes a key that is new, whose claim has expired, or that the same
//     token holds, and returns one row per claim: a key it did not take is
//     held by another token, named (node, claim time) from the statement's
//     snapshot; a claim committed while the statement ran is reported with
//     its node unknown.
//   - RecordRuns is one upsert on (job, tick, trigger_id, shard, attempt).
//     Error and Output are stored as text: invalid UTF-8 and NUL become
//     U+FFFD.
//   - Runs reads one of three indexes kept in listing order (one per job,
//     one across jobs, and a partial one of the running records for the
//     sweep of dead nodes' runs). A continued listing (RunQuery.Before) is
//     a UNION ALL of five limited index ranges, so that the thousandth page
//     of a million records costs what the first does.
//   - SetJobState makes its change and returns the job's state; JobStates
//     reads every paused job and pending trigger.
//   - Prune deletes expired claims, records by age and then beyond each
//     job's newest KeepPerJob (ranked along the job index), and old trigger
//     requests, each DELETE counted, in one statement.
//
// It implements ledger.Catalog too. <Table>_defs holds one row per job
// ever defined at run time: a delete marks the row deleted and keeps its
// version, so a later create goes on counting from it. Each change is one
// statement whose data-modifying WITH inserts the audit row only when the
// change was made (a delete guarded by IfVersion -1 only reads). Audit
// entries are numbered by an identity column (Seq) and read along it.
package pgstore
