// Package mysqlstore keeps tasklock locks in MySQL 8 or MariaDB 10.6+
// through the caller's *sql.DB (github.com/go-sql-driver/mysql):
//
//	db, err := sql.Open("mysql", "app:secret@tcp(db:3306)/app")
//	store, err := mysqlstore.New(db, &mysqlstore.Options{Migrate: true})
//	locker, err := tasklock.New(store, nil)
//
// The Store implements driver.Store, driver.Lister, driver.ForceReleaser,
// driver.Batcher, driver.Kinder (read-write locks and semaphores, in lease
// mode) and driver.FairQueuer (fair waits for a mutex). It
// has no notifications: waiters poll with the Locker's jittered backoff
// (5 ms doubling to 250 ms, never later than the holder's lease could end).
//
// # Schema and migrations
//
// One table (Options.Table, default "tasklock_locks") holds a row per lock
// key ever used: lock_key VARBINARY(512) primary key, token, owner, fence
// BIGINT UNSIGNED, acquired_at and expires_at DATETIME(6) in UTC. Keys are
// compared byte for byte, whatever the server's collations. Rows are never
// deleted: the fence counter lives in them, so it keeps increasing across
// releases, expiries and server restarts. The migrations are embedded,
// numbered SQL files applied by Migrate (or New with Options.Migrate, or
// `tasklock migrate up`) and recorded in Table+"_migrations";
// MigrationStatus reports them. Migration 005_kinds adds the tables of
// read-write locks and semaphores, <Table>_kinds and <Table>_holds, and of
// the fair queue, <Table>_queue (see below).
//
// # Lease mode
//
// The default (Options.Mode "lease"): a lock is a row whose expires_at is
// later than the database's UTC_TIMESTAMP(6). Every expiry is computed and
// compared by the database server's clock; no client time is ever sent, so
// clients' clocks may be wrong by any amount. Round trips:
//
//   - Acquire: one INSERT ... ON DUPLICATE KEY UPDATE that grants the key
//     when its lease has expired and returns the new fence through
//     LAST_INSERT_ID(expr). When the key is held, a second statement reads
//     the holder's owner and remaining TTL for the *driver.HeldError. On
//     MariaDB, once an Acquire has found its key held, the next one ends
//     in RETURNING instead, whose row answers both ways: a waiter's every
//     poll is one statement.
//   - Renew: one UPDATE for the whole batch (up to 5,000 leases or 4 MiB of
//     SQL per statement). When the affected-row count shows that a lease was
//     lost, one SELECT tells which.
//   - Release: one token-checked UPDATE that clears the token and sets
//     expires_at to now, or to now plus KeepFor for MinHold.
//   - ForceRelease: one UPDATE. Leases: one SELECT.
//   - AcquireBatch (driver.Batcher: a Locker sends the TryObtain, Obtain
//     and Release calls that arrive while two of its calls are under way
//     together): Acquire's statement with a row per item, sorted by key so
//     that concurrent batches lock rows in one order. On MariaDB it ends in
//     INSERT … RETURNING, which answers every item from its row as the
//     statement left it (granted when its token holds the row, else who
//     holds it and for how long): one round trip for the batch. MySQL has
//     no RETURNING; there the upsert and a SELECT of the batch's keys run
//     in one transaction, four round trips (START TRANSACTION, INSERT,
//     SELECT, COMMIT). The first batch asks the server's VERSION() to tell
//     which. A batch over 1,000 rows or 4 MiB of SQL takes one statement
//     per 1,000 rows, in one transaction.
//   - ReleaseBatch: on MariaDB one statement whatever the number of items
//     (up to 1,000) and whether every lease was live: an INSERT … ON
//     DUPLICATE KEY UPDATE … RETURNING whose update releases the rows
//     that the items' tokens hold live and whose RETURNING tells which
//     (each row sets LAST_INSERT_ID to 1 when released, 0 otherwise).
//     On MySQL, one UPDATE of the items' (key, token) pairs in a
//     transaction, committed when the count of rows it changed says every
//     lease was live: three round trips (START TRANSACTION, UPDATE,
//     COMMIT). Otherwise, since the count does not say which lease was not
//     live, the transaction is rolled back and a second one finds the live
//     leases with a SELECT … FOR UPDATE and releases those: four round
//     trips more.
//
// Each batch item gets the answer its single call would, in order: a key
// named twice goes to its first item. A batch call that fails (a statement
// fails, the context ends) before its commit changes nothing, so no item
// is left half granted or half released. A batch with one item is a single
// call.
//
// # Read-write locks and semaphores
//
// In lease mode the Store keeps every driver.Mode, in two tables apart
// from the mutexes' (a mutex and a read-write lock or semaphore of the
// same name are different locks):
//
//   - <Table>_kinds: a row per key ever used, never deleted, holding the
//     key's fence counter, so that it outlives the key's entries.
//   - <Table>_holds: a row per entry, primary key (lock_key, token): its
//     mode, the semaphore's number of permits (0 for a read-write lock), a
//     state (a hold; a writer waiting, which refuses new readers; or a hold
//     released with a MinHold still to run, which counts until it ends but
//     can be renewed and released no more), owner, fence, acquired_at and
//     expires_at by the server's clock.
//
// Acquire runs one transaction that first locks the key's row in
// <Table>_kinds with SELECT … FOR UPDATE, joined to the key's entries, so
// that the acquires of one key take turns and each decides from the entries
// as the last one left them. It then writes the token's entry, increments
// the counter for a writer or a permit, deletes expired entries when it
// saw some, and commits: five round trips for a writer's or a permit's
// grant, four for a reader's, three for a refusal (four for a writer, which
// writes its waiting entry). A key's first acquire ever inserts its row
// first. A deadlock or lock wait timeout is tried again twice, then
// returned as driver.ErrTryAgain. Renew, Release and Leases do not take
// the key's row: Renew renews mutexes and entries together, in the one
// statement per chunk described above (a multi-table UPDATE when a chunk
// has both); Release deletes the entry in one statement (a writer that
// held nothing also has its waiting entry deleted, by a second); Leases
// lists mutexes and entries in one SELECT; ForceRelease ends the mutex's
// lease and deletes every live entry of the key, in two. Connection mode
// keeps mutexes only: there a lock is a GET_LOCK, one session per name;
// Kinds says so with an error wrapping driver.ErrUnsupported.
//
// # Fair queue
//
// A fair Obtain (tasklock.ObtainOptions.Fair) waits in
// <Table>_queue: a row per waiter, seq AUTO_INCREMENT giving the order,
// whose expires_at (by the server's clock) its Ticket's Wait renews at
// least every TTL/3. The head of a key's queue is its live entry with the
// lowest seq. Wait takes the key with Acquire's statement made an INSERT …
// SELECT whose row exists only while the entry is the head: the key's row
// is taken exactly as Acquire takes it (only when free or expired, with the
// next fence), and the entry is deleted after, with the key's expired
// entries. Between tries Wait reads, in one SELECT, whether its entry is
// still there, the head, and the key's holder, and sleeps 5 ms doubling to
// 250 ms (jittered), no longer than the holder's lease when it is the
// head. A waiter that dies leaves the line when its entry's lease ends,
// within its TTL; Leave deletes the entry at once. An uncontended fair
// Obtain costs four round trips in lease mode (INSERT, the grant, DELETE,
// and the Locker's Renew). In connection mode the queue is the same, and
// the head's grant is connection mode's Acquire asking for the GET_LOCK
// only while the entry is the head (WHERE IF(<head>, GET_LOCK(name, 0), 0)
// = 1: IF evaluates only the branch it takes); the holder Wait looks at is
// the session holding the GET_LOCK, its remaining lease unknown. Plain
// Acquires do not look at the queue: a caller that does not ask for
// fairness may take a free key ahead of it.
//
// Statements carry keys, tokens and owners as hexadecimal literals, without
// placeholders, so each is one COM_QUERY round trip whatever the DSN says
// about interpolateParams or multiStatements.
//
// # Connection mode
//
// With Options.Mode "connection" a lock is a user-level lock, GET_LOCK(name,
// 0), held by a connection the Store takes from db for as long as the lock
// is held. The server frees the lock the moment that session ends: a holder
// that crashes or is killed loses its locks within milliseconds, whatever
// their TTL. The fence still comes from the durable per-key row, incremented
// in the same statement that takes the lock. Lock names are "tasklock:"
// followed by 55 hex digits of SHA-256(database, table, key): GET_LOCK names
// are limited to 64 characters and are global to the server, so every key
// is hashed (not only long ones), which also keeps names of different
// tables and databases apart.
//
// A lock's session has its wait_timeout set to the lease's TTL in whole
// seconds, rounded up, before the lock is asked for. Renew pings each
// lock's connection (or re-sets wait_timeout after Extend), up to 16
// connections at a time, one round trip each; a connection that fails is closed and its lease reported
// lost. Three things end a connection-mode lock besides Release:
//
//   - the holder's session ends (process killed, connection closed or
//     killed): the server frees the lock at once; a server restart frees
//     it too, but the key stays unavailable until the old holder's
//     validity has ended (see "Server restarts");
//   - the holder falls silent (paused, partitioned): it stops pinging, and
//     the server ends its session after wait_timeout, never earlier than
//     the holder's own validity ends;
//   - the holder's Locker gives the lock up without releasing it (lost,
//     MaxHold, NoRenew run out): the Store closes the connection when the
//     lease's TTL has passed since its last grant or renewal was sent, on
//     the monotonic clock, by which time the Locker has stopped using it.
//
// A grant records the lease's TTL in the key's row (expires_at =
// acquired_at + TTL; an Extend to a longer TTL updates it), because a
// server restart needs it: see "Server restarts". The row is not renewed
// otherwise: the connection is the lease.
//
// No client's wall clock takes part. Round trips: Acquire one on a grant
// (one more when held, a read of the owner), Release one (the
// token-checked UPDATE that also calls RELEASE_LOCK, so the key is free
// when Release returns), ForceRelease up to three (it kills the holder's
// connection). A released lock's connection is kept, its wait_timeout as
// it is, for the next hold, up to 16 connections and at most half of db's
// MaxOpenConns, each for 0.5 s at most (then its wait_timeout is set back
// to the server's default, one statement, and it goes back to db's pool
// open, where the next hold finds it; a kept session that ended meanwhile,
// by a restart or KILL, is
// found by go-sql-driver's check of the socket and not used). A connection
// new to the Store costs two statements once: setting its wait_timeout,
// and reading the server's start (see "Server restarts"), which holds for
// the session's life, so that no hold's statement reads status variables.
// Another TTL in whole seconds costs one statement to set wait_timeout.
// Items of a batch cannot share a connection, as each lock is held by its
// own, so MaxBatch is 1 and a Locker sends every call alone; AcquireBatch
// and ReleaseBatch, called directly, run the single calls concurrently, up
// to 16 at a time, the items of one key one after the other. Close ends the
// locks a Store still holds by closing their connections, and closes the
// connections it keeps.
//
// Each held lock keeps one connection checked out of db, and so does each
// kept one: size db.SetMaxOpenConns for the locks held at once plus
// everything else. Use one mode per table; the two modes do not see each
// other's locks.
//
// # Which mode to pick
//
// Lease mode, the default, in every case we have measured. It batches: a
// Locker's concurrent obtains go together in one statement, and so do its
// releases and every renewal, so that 16 goroutines obtaining and releasing
// distinct keys cost the server about 0.65 statements per pair on MariaDB,
// against 2 in connection mode, which cannot batch (each lock holds a
// connection of its own): measured side by side on MariaDB 10.11
// (2026-11-28), 100–150 µs of server CPU per pair in lease mode, 450–560 in
// connection mode. A held lock costs a connection in connection mode and
// about 300 bytes in lease mode. Connection mode's one advantage is
// takeover when a holder's process dies: the server frees its lock at once,
// where lease mode frees it when its lease ends, at most a TTL later.
//
// Neither matches a library that takes GET_LOCK alone (go-mysql-lock) on a
// hot key or on raw pairs/s. Such a library writes nothing: its lock is
// gone with a restart or a failover, and it gives no fence. Every grant
// here writes the key's durable fence to an InnoDB row, which costs the
// server several times what GET_LOCK and RELEASE_LOCK cost. (A fence drawn
// from a MariaDB SEQUENCE in the GET_LOCK statement would cost about what
// GET_LOCK does, but the row also keeps a MinHold past its holder's exit,
// the keys held when the server restarted, and the holder's owner; the
// grant would at least have to read it, which alone costs the server 1.6–2
// times as much per pair.) And MySQL has no notifications, so a waiter polls
// (jittered backoff from 5 ms), while GET_LOCK's waiters are queued and
// woken by the server. The benchmark in bench/ measures both side by side
// (P1-sql, P3-sql); its README gives the numbers. Where many processes take
// turns on one key and each must get its turn, use ObtainOptions.Fair
// (first come, first served); where the time from a release to the next
// grant matters, a store with notifications (PostgreSQL, Redis).
//
// # Server restarts
//
// Lease mode: leases are rows, durable like every commit, and their expiry
// follows the server's clock, which a restart does not stop: a lease
// outlives a restart shorter than its TTL, its holder's renewals resume,
// and nobody else is granted the key meanwhile (TestServerRestart). A
// server down past the TTL ends the holder's lock locally first.
// Exclusive through restarts (with innodb_flush_log_at_trx_commit=1 also
// through machine crashes).
//
// Connection mode: a restart ends every session, and with them every
// GET_LOCK, at once, while each old holder goes on until its next
// renewal fails (up to TTL/3 later) or its validity runs out. So that the
// key is not granted to another meanwhile, a row whose grant came before
// the server started and that was never released keeps its key, although
// its GET_LOCK is free, until the row's TTL has passed since the server
// started: by then the old holder's validity, counted from a renewal the
// old server answered, has ended. The start is the server's now minus its
// Uptime status variable (information_schema.GLOBAL_STATUS on MariaDB,
// performance_schema.global_status on MySQL, read once on each
// connection the Store holds locks on, a session never outliving its
// server; the first connection-mode call checks that it can be read and
// fails if not), rounded up so that it is never earlier than the real
// start. A session that ended while the server ran (its client closed,
// died or was killed, or fell silent past wait_timeout) still frees its
// key at once, except in the server's first two seconds: as the start is
// rounded up, a grant then counts as made before it, and its key is kept
// for its TTL after the start. Exclusive through restarts: TestRestartExclusive restarts
// MariaDB ten times while a holder holds the key and another waits, and
// checks that the waiter is granted only after the holder's Done closed
// (before this guard, every one of ten restarts had two holders for 9 to
// 543 ms). ForceRelease ends such a wait. Read inside every acquire
// statement, as it was before 2026-11-28, Uptime cost the server about
// half of a pair's CPU on MariaDB 10.11 (425–590 µs per Acquire +
// Release with one goroutine, against 200–320 µs with the start read
// once per connection).
//
// # Keepalive
//
// A partitioned network can leave a TCP connection looking healthy for
// hours. The holder side is bounded by the Locker (a renewal that does not
// answer within the lease ends the lock locally) and, in connection mode, by
// the server's wait_timeout. To make the client notice a dead server within
// seconds too, dial with TCP keepalive and, on Linux, TCP_USER_TIMEOUT:
//
//	mysql.RegisterDialContext("tcpka", mysqlstore.KeepAliveDialer(5*time.Second, 10*time.Second))
//	db, err := sql.Open("mysql", "app:secret@tcpka(db:3306)/app")
//
// On MariaDB the server's own probes are tcp_keepalive_time,
// tcp_keepalive_interval and tcp_keepalive_probes; MySQL uses the operating
// system's settings.
//
// # Safety level
//
// Durable and linearizable on one server. Plainly:
//
//   - Fences are durable: InnoDB commits every grant before it answers, and
//     rows are never deleted, so a fence is never issued twice by the same
//     database, across restarts included. With
//     innodb_flush_log_at_trx_commit other than 1 (or sync_binlog other
//     than 1) a crash of the machine, not of mysqld, can lose the last
//     second of commits and so repeat a fence.
//   - Expiry follows the database server's clock (UTC_TIMESTAMP(6), and in
//     connection mode wait_timeout). Stepping that clock forward ends leases
//     early; clients' clocks do not matter.
//   - Replication is not consensus. With asynchronous or semi-synchronous
//     replicas, a failover can promote a replica that had not received the
//     latest grants: a key can then be granted twice and a fence repeated.
//     Galera (MariaDB Galera Cluster, Percona XtraDB Cluster) certifies
//     writes on commit, so two nodes cannot both win a row, but a grant can
//     fail with a deadlock error to be retried; write to one node to keep
//     things simple.
//   - GET_LOCK is local to one server and not replicated: connection-mode
//     locks exist only on the server that granted them. After a failover,
//     or behind a proxy that sends connections to different servers, every
//     key is free again (the fence rows, replicated, keep increasing only as
//     far as the replica received them). Use lease mode with replication.
//
// The defence against all of these is the fencing token: pass each grant's
// fence to the resource the lock protects and have it refuse writes with a
// lower fence than it has seen (UPDATE ... WHERE fence <= ?;
// fence.Register is the model).
//
// # Errors
//
// Besides driver.ErrNotHeld and *driver.HeldError, every error from the
// database is wrapped with %w (a *mysql.MySQLError can be unwrapped). When
// the lock table does not exist, the error says to run Migrate. The store
// never logs.
//
// # Ledger
//
// The Store also implements ledger.Ledger, the tick ledger of package
// schedule, in four tables named after the lock table that Migrate creates
// (migration 002_ledger): <Table>_claims, <Table>_runs, <Table>_jobs and
// <Table>_triggers, and <Table>_specs (migration 003_job_specs: each
// registered job's spec and since, apart from the state JobStates reads).
// Migration 006_shards_catalog puts the shard in the keys — (job, tick,
// trigger_id, shard) for <Table>_claims, (job, rev_tick, trigger_id, shard,
// rev_attempt) for <Table>_runs and its by_tick and by_status keys, the
// runs keeping the job's shard count as data in shards — adds the past
// tick and rerun flag of a backfill or re-run to <Table>_triggers, and
// creates the tables of ledger.Catalog, <Table>_defs and <Table>_audit.
// Rows written before 006 become shard 0's, and their trigger requests
// trigger-now ones. Each of its ALTER TABLEs is applied whole or not at
// all, so a run cut short is run again from the start. Migration
// 007_runs_stats adds the key by_stats (rev_tick, status, attempt, tick,
// started_at) to <Table>_runs for ledger.Stats: RunStats is one GROUP BY
// over a range of that key alone, so it costs what the window holds, not
// the history.
//
// Job and trigger names and tokens are bytes compared byte for byte
// (VARBINARY): jobs at most 512 bytes, trigger IDs and tokens at most 128;
// node names at most MaxOwnerLength characters of UTF-8; times within the
// years 1000 to 9999 (DATETIME(6), UTC, to the microsecond). Other requests
// fail with driver.ErrUnsupported. Every time the ledger decides by (claim
// expiry, Recorded, a trigger's At, record and trigger ages in Prune, a
// definition's Updated, an audit entry's At) is the server's
// UTC_TIMESTAMP(6). Round trips:
//
//   - Claim: a multi-row INSERT ... ON DUPLICATE KEY UPDATE per 1,000 keys,
//     sorted by key so that concurrent batches lock rows in one order. It
//     takes a key that is new, whose claim has expired, or that the same
//     token holds; for any other key it calls LAST_INSERT_ID(1), so an
//     insert id of 0 says the node won the whole batch: one round trip.
//     Otherwise a SELECT of the batch's keys reads who holds each: two.
//   - RecordRuns: one multi-row upsert per 1,000 records (or 4 MiB of SQL).
//     Error and Output are utf8mb4 text: invalid UTF-8 becomes U+FFFD.
//   - Runs: one SELECT. The runs table keeps rev_tick (minus the tick in
//     microseconds) and rev_attempt (minus the attempt) so that its primary
//     key (per job), its by_tick index (across jobs) and its by_status
//     index (one status: the sweep's running records) are ascending in
//     listing order on every server, MariaDB before 10.8 included, which
//     ignores DESC in indexes. A continued listing (RunQuery.Before) is a
//     UNION ALL of five limited index ranges, so that the thousandth page of
//     a million records costs what the first does.
//   - SetJobState: the change, then a SELECT of the job's state (two).
//     JobStates: one SELECT of every paused job and pending trigger.
//   - Prune: a DELETE per table (by time in batches of 10,000 rows), and for
//     KeepPerJob one multi-table DELETE joined with a ROW_NUMBER() ranking.
//
// It implements ledger.Catalog too. <Table>_defs holds one row per job
// ever defined at run time, its definition kept byte for byte: a delete
// marks the row deleted and keeps its version, so a later create goes on
// counting from it. <Table>_audit numbers its entries with an
// AUTO_INCREMENT (Seq), every field kept byte for byte (Who at most 512
// bytes, Action at most 128).
//
//   - PutJobDef: one transaction of six round trips — BEGIN, an upsert that
//     makes sure the job's row exists (a placeholder for a job never
//     defined) and locks it, a SELECT of it and of the server's clock, the
//     UPDATE, the audit INSERT, COMMIT — or four when the change is refused
//     (ErrVersion, ErrNoJobDef), rolled back. Concurrent changes of a job
//     queue on its row lock; a deadlock is tried again, up to 8 tries
//     in all, after a jittered pause.
//   - JobDefs, AppendAudit, Audit: one statement each.
package mysqlstore
