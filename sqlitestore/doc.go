// Package sqlitestore keeps tasklock leases in a SQLite database file
// through database/sql and modernc.org/sqlite (pure Go, no cgo). It is the
// embedded default store: processes on one host that share one file
// coordinate through it without a server.
//
//	db, err := sqlitestore.Open("./tasklock.db", nil)
//	store, err := sqlitestore.New(db, &sqlitestore.Options{Migrate: true})
//	locker, err := tasklock.New(store, nil)
//
// The Store implements driver.Store, driver.Lister, driver.ForceReleaser,
// driver.Batcher, driver.Kinder (read-write locks and semaphores, see
// "Read-write locks and semaphores") and driver.FairQueuer (see "Fair
// queues"). It does not implement driver.Notifier: SQLite has no way to
// tell another process that a row changed, so waiters in other processes
// poll (with the Locker's jittered backoff, never past the holder's
// remaining TTL, which Acquire reports). Waiters on the Locker that
// released are still woken at once by the Locker itself.
//
// # Safety level
//
// Exact on one host, for the processes that share the file:
//
//   - One host only. SQLite's locking (POSIX advisory locks plus the WAL
//     index in shared memory, the -shm file) works only between processes
//     of one machine. Never put the file on a network filesystem (NFS, SMB,
//     CIFS, sshfs, most cloud file shares): their locks are unreliable or
//     absent, and WAL's shared memory does not work across machines, so two
//     holders at once become possible and the file can be corrupted. For
//     replicas on several hosts use pgstore, mysqlstore, etcdstore or
//     zkstore.
//   - Exclusion. Every grant, renewal and release is made in one SQLite
//     write transaction (a statement's own, its batch's, or one of a few
//     statements whose first writes), and SQLite serialises writers, so
//     the check "expired?" (or "how many permits are live?", "is this
//     waiter the head of the queue?") and the write that follows it cannot
//     interleave with another process's.
//   - Durable fences. A key's row is never deleted: release and expiry only
//     mark it free, and the fence in the row is incremented by every grant.
//     Fences therefore strictly increase per key across releases, process
//     crashes and restarts of every process, for as long as the file lives
//     (see Durability for power loss). So do the fences of read-write locks
//     and semaphores, whose counters are rows of their own, never deleted.
//   - The store's clock is the host's clock. Expiry is decided inside each
//     statement by SQLite's now (unixepoch('subsec'): the host's wall
//     clock, read in whole milliseconds), never by a Locker's Clock. All
//     processes on the host read the same clock, so they agree on every
//     expiry; a wrong time zone or a skewed client Clock changes nothing.
//     Stepping the host's wall clock does: a step forward by d ends every
//     lease up to d early at the store, while holders, which count on their
//     monotonic clock, still believe they hold them — a step larger than the
//     Locker's drift margin (1% of the TTL, at least 2 ms) can let a second
//     holder in. A step backward makes leases (and released keys) last
//     longer. Run the host with slewing time sync (chrony, systemd-timesyncd
//     slew small offsets) and fence the protected resource.
//
// # Durability
//
// Open sets synchronous=NORMAL: in WAL mode a commit is durable against a
// crash of any process (SIGKILL included) but not against power loss or an
// OS crash, which can roll back the last commits. Because the file is on
// the same host as every holder, such a crash also ends every holder, so it
// cannot produce two live holders; but a fence handed out just before it
// can be handed out again afterwards, and a resource elsewhere that saw the
// old one would reject the new holder's writes as stale until the counter
// passes it. Options.SyncFull (synchronous=FULL) fsyncs every commit and
// closes that gap, at the price of one fsync per acquire, renewal and
// release.
//
// # Pragmas
//
// Pragmas are per connection, and database/sql keeps a pool of them, so
// Open puts them in the DSN as modernc.org/sqlite _pragma parameters, which
// the driver runs on every connection it opens:
//
//   - busy_timeout(5000) (Options.BusyTimeout): a statement that finds
//     another connection writing waits up to 5 s for the write lock instead
//     of failing at once with SQLITE_BUSY. Writes here take well under a
//     millisecond, so the wait is normally tiny; if it runs out the error
//     wraps ErrBusy and the Locker retries it as transient.
//   - journal_mode(WAL): readers never block the writer nor the writer
//     readers, and a commit appends to the -wal file instead of rewriting
//     pages. WAL mode is stored in the file, but setting it on every
//     connection costs nothing and covers a file created elsewhere.
//   - synchronous(NORMAL): see Durability.
//   - foreign_keys(1): SQLite's default is off; on, for the scheduler's
//     tables that will share the file.
//
// and _txlock=immediate, which makes database/sql transactions start with
// BEGIN IMMEDIATE: a transaction that reads and then writes takes the write
// lock at BEGIN, so it waits its turn (busy_timeout) instead of failing with
// SQLITE_BUSY when it upgrades, which no busy_timeout can fix. The store's
// calls on mutexes, batches included, are single statements outside
// transactions and need no BEGIN, except a batch of more than 1,000 items
// (and the rare one described under "Statements per operation"). Those,
// and the transactions of read-write locks, semaphores, fair queues, a
// Renew that mixes mutexes with them and ForceRelease, are database/sql
// transactions whose first statement writes, so that they take the write
// lock first thing even on a db opened without Open; Migrate uses BEGIN
// IMMEDIATE explicitly.
//
// New checks one connection for a positive busy_timeout, so a *sql.DB
// opened without Open fails early instead of returning SQLITE_BUSY under
// load. New with Options.Migrate (and Migrate) reads the version table
// first and takes the write lock only when a migration is pending, so
// opening a Store on a migrated file that others are busy writing never
// waits for them.
//
// # Waiting for the write lock
//
// SQLite has one writer at a time per file, and every call of this store
// writes (Acquire even when the key is held: the upsert takes the write lock
// before it finds the row live). Calls take tens to hundreds of
// microseconds, so waits are normally short. A writer that finds another
// writing waits in SQLite's busy handler, which sleeps between tries (1,
// 2, 5, 10 … ms), so a Store's own lease writes — Acquire, Renew, Release,
// ForceRelease and the batches — take turns in the Store first (a
// semaphore, given up if ctx ends while waiting), each woken the moment
// the one before it is done: with a Locker batching its calls only a few
// writes are under way at once, and the write lock would otherwise often
// be free while all of them slept. Writers in other processes still meet
// the busy handler. Two things are worth knowing:
//
//   - A context is honoured before each statement (and between the
//     statements of a batch or a migration), never during one: statements
//     run on ctx's values without its end. modernc.org/sqlite (v1.34, and
//     the store assumes no later version differs) interrupts a statement
//     whose context ends, and when that happens after an INSERT or UPDATE …
//     RETURNING has stepped to its first row, it returns ctx's error and
//     drops the statement without finalizing it: the connection keeps
//     SQLite's write lock for as long as the process lives (database/sql
//     closes it, but SQLite keeps a connection with a live statement open),
//     and every other writer on the file, in this process or another, waits
//     out busy_timeout and fails with ErrBusy — Stores wedged that way once
//     Lockers cancelled waits. A statement runs for microseconds, except
//     while it waits in the busy handler, so a call that meets a long-held
//     write lock returns up to busy_timeout later than ctx asked. The
//     Locker stays safe (it decides validity from its own monotonic clock
//     while the call is pending), but a BusyTimeout longer than a third of
//     the TTL means one such wait uses up a lease's renewal retries. The
//     tick ledger's statements run the same way.
//     This was the SQLITE_BUSY that New with Options.Migrate met in one
//     lockbench run in 5 to 12, right after P3-sql, whose waiters end by
//     their contexts' deadlines: a statement left stepped by one of them
//     kept the write lock, which a migration's BEGIN IMMEDIATE, however
//     often retried, never gets. Not handing the driver a context that can
//     end is the fix; retrying is none.
//     The package's conformance tests check that no statement, query or
//     transaction of a Store reaches the driver with one.
//   - A process stopped while it is inside one of its statements (SIGSTOP, a
//     debugger breakpoint, a frozen VM) keeps the write lock: until it
//     resumes or dies, every other call on the file waits and then fails with
//     ErrBusy, so nobody can obtain or renew, and holders elsewhere lose their
//     locks when their validity runs out. That is safe, not live. A process
//     that is killed releases the lock at once (the OS drops its file locks).
//     Long transactions by other programs on the same file have the same
//     effect.
//
// # Server restarts
//
// There is no server: the file is the store, and every process that uses
// it is a peer. Grants, renewals and releases are committed to the file
// before they answer, so a process that restarts finds every lease as it
// was (TestFenceSurvivesReopen); its own locks end with it, and their
// leases run out at their expiry, as a killed holder's do
// (TestHolderKilled). A host crash or power loss ends every holder with
// the host; see Durability for what synchronous=NORMAL can roll back.
// Exclusion holds through all of these.
//
// # Schema
//
// The lock table (Options.Table, default tasklock_locks) has one row per
// key: key TEXT PRIMARY KEY, token, owner, fence INTEGER, acquired_at and
// expires_at. Times are INTEGER unix microseconds rather than julianday
// REAL: integer arithmetic is exact (a TTL is added to the microsecond, and
// equal instants compare equal), the values read directly as Go's
// time.UnixMicro, and SQLite's clock (milliseconds) converts to them
// without rounding; a julianday REAL has about 40 µs of resolution today
// and needs float comparisons. A free row has
// expires_at <= now; a released row also has an empty token.
//
// Migration 0005_create_kinds adds, named after the lock table (for the
// default table):
//
//   - tasklock_locks_kinds: one row per read-write lock or semaphore key
//     ever granted, with its fence counter; never deleted.
//   - tasklock_locks_entries: one row per entry, primary key (key, token,
//     mode), with state (a hold, a writer's waiting claim, or a hold kept
//     by MinHold after its release), lim (the semaphore's permits, 0 for a
//     read-write lock), owner, fence and expires_at.
//   - tasklock_locks_queue: the fair queues, one row per waiter: seq
//     INTEGER PRIMARY KEY AUTOINCREMENT, key, token (unique per key) and
//     expires_at, with an index on (key, seq, expires_at) that reads a
//     key's live head without the table.
//
// Migrations are embedded, numbered files (migrations/NNNN_name.up.sql, text/template over the table name),
// recorded in Options.Table+"_migrations". Migrate applies pending ones (or
// New with Options.Migrate); MigrationStatus lists them.
//
// # Read-write locks and semaphores
//
// A read-write lock or a semaphore named "x" is not the mutex named "x":
// its entries live in a table of their own (see Schema), one row per
// reader, writer, writer's waiting claim or permit, each a lease with its
// own token, owner, fence and expiry by SQLite's clock, as a mutex's is.
// A dead holder's entry counts for nothing once it expires, and is
// deleted by the next Acquire of its key. Each key also has a fence
// counter, in a row that is never deleted, so a writer's or a permit's
// fence is greater than every earlier grant's on the key across releases,
// restarts and every process on the file; a reader's is the counter as it
// stands (the last writer's).
//
// Acquire of one of these is one write transaction (BEGIN IMMEDIATE with
// Open's DSN) whose first statement writes — it deletes the key's expired
// entries — so that it holds SQLite's write lock before it reads anything,
// whatever the DSN's _txlock. One SELECT then reads SQLite's now, the key's
// fence counter and its live entries (their kind, readers, writers, waiting
// writers, permits, and the token's own hold); the decision is made from
// that, at that instant, and written by one or two statements more: a
// writer's or a permit's fence bump and the entry, a repeat's renewal, or
// a refused writer's claim. A refusal reads the entry that refused it for
// the *driver.HeldError. A kind mismatch rolls the transaction back.
// Release is one DELETE (with MinHold, one UPDATE that keeps the entry
// until then, no longer the token's); Renew renews entries with one
// UPDATE … FROM json_each for the whole batch, as it does mutexes.
//
// # Fair queues
//
// ObtainOptions.Fair waits in a queue table (see Schema): EnqueueFair is
// one INSERT at the back of the key's queue (seq, AUTOINCREMENT, keeps the
// order of arrival across every process), and the entry is a lease of the
// Obtain's TTL by SQLite's clock. The Ticket's Wait looks at the queue's
// head and the mutex with one read, which takes no write lock; it renews
// its entry at least every third of the TTL, and when its entry is the
// head of the live queue and the mutex is free it grants in one write
// transaction: renew the entry, check again that it is the head, take the
// mutex with Acquire's statement (the next fence; the lease starts then)
// and delete the entry (and the key's expired ones). A waiter that dies
// stops renewing, and its entry stops counting when it expires, within its
// TTL; one that gives up deletes it (Leave). Wait polls with jittered
// backoff from 2 ms to 100 ms, never past the mutex holder's remaining
// lease or the entry's next renewal, and is woken at once by releases
// made through the same Store; waiters in other processes see a release
// at their next poll. Plain Obtains do not look at the queue and may take
// a free key ahead of it. Nothing here depends on state in a process:
// every decision is made inside SQLite's write lock from the file.
//
// # Statements per operation
//
// New prepares the statements of the single calls once, on the *sql.DB;
// they are closed when the Store is garbage collected, or with the
// *sql.DB. modernc.org/sqlite (v1.41 and later) keeps a prepared
// statement compiled on each connection and resets it after each run, so
// a single call runs its statement without compiling it (sqlite3_prepare):
// with v1.34, which compiled a statement on every run, that was 44% of
// the CPU time of an Acquire + Release. A batch's statement depends on its
// size and is compiled each time, once however many items it has, rather
// than the single calls' statements in one transaction: those would hold
// the write lock for a statement per item, which measured slower than not
// batching at all.
//
//   - Acquire: one INSERT … ON CONFLICT(key) DO UPDATE … WHERE
//     expires_at <= now RETURNING fence; only when the key is
//     held, one SELECT more for the holder's owner and remaining TTL.
//   - Renew: one UPDATE … FROM json_each(?) … RETURNING key, token for the
//     whole batch, whatever its size (each lease found by primary key); a
//     batch that mixes mutexes with read-write locks' and semaphores'
//     holds is one such UPDATE per table, in one transaction.
//   - Release: one token-checked UPDATE (for a read-write lock or
//     semaphore, one DELETE, or UPDATE with MinHold).
//   - ForceRelease: one transaction of an UPDATE of the mutex, not
//     token-checked, and a DELETE of the read-write lock's or semaphore's
//     entries of the same name.
//   - Leases: one SELECT of both tables.
//   - Acquire of a read-write lock or semaphore: one transaction of three
//     to five statements (see "Read-write locks and semaphores").
//   - EnqueueFair: one INSERT; a fair Ticket's Wait: one SELECT per poll,
//     one UPDATE per renewal, one transaction of four statements to grant;
//     Leave: one DELETE.
//   - AcquireBatch and ReleaseBatch (driver.Batcher: a Locker sends the
//     TryObtain, Obtain and Release calls that arrive while two of its
//     calls are under way together): the single call's statement in its
//     multi-row form, a row per item in order — one INSERT … VALUES (…),
//     (…), … ON CONFLICT DO UPDATE … RETURNING, one UPDATE … FROM (VALUES
//     (…), (…), …) … RETURNING — plus, for each key found held, the SELECT
//     of its holder. SQLite has one writer per file, so what a batch saves
//     is taking the write lock and committing (a WAL append; with SyncFull
//     an fsync) once per item. Every item gets the answer its single call
//     would: all rows read one instant of SQLite's clock, a key named twice
//     goes to its first row, and a statement that fails changes nothing. A
//     batch of more than 1,000 items takes a statement per 1,000 rows in
//     one BEGIN IMMEDIATE … COMMIT transaction; so does a release batch
//     that names one key with two tokens, as a Release statement per item
//     (the UPDATE answers with the keys released, which cannot tell which
//     token held it). A batch with one item is a single call.
//
// # Errors
//
// Besides driver.ErrNotHeld and *driver.HeldError, calls return errors
// wrapping ErrBusy when SQLite stayed busy past busy_timeout, and New
// errors wrapping ErrNotMigrated. Errors from the driver and ctx.Err() are
// wrapped with %w. The store never logs.
//
// # Ledger
//
// The Store also implements ledger.Ledger, the tick ledger of package
// schedule, and ledger.Catalog, the job definitions made at run time with
// their audit list, in tables that migrations 0002_create_ledger,
// 0003_job_specs, 0004_running_index and 0006_shards_catalog create beside
// the lock table and name after it (for the default table):
//
//   - tasklock_locks_claims: one row per claimed (job, tick, trigger,
//     shard), the primary key, with the claiming token and node, claimed_at
//     and expires_at (indexed, for Prune). Migration 0006 rebuilt the table
//     to add shard to its key (SQLite cannot alter a primary key); the
//     claims made before it are shard 0's.
//   - tasklock_locks_runs: one row per run record, with shard (part of the
//     key; 0 for the records written before migration 0006) and shards
//     (the job's shard count when it ran, data). A unique index on (job,
//     tick DESC, trigger, shard, attempt DESC) is the record's key and a
//     job's history in listing order; an index on (tick DESC, job, trigger,
//     shard, attempt DESC) is every job's history in listing order, and a
//     partial one of the same columns holds only the running records, for
//     the sweep every scheduler makes; an index on recorded_at serves
//     pruning by age.
//   - tasklock_locks_runs_rollup (migration 0007_runs_rollup): for
//     ledger.Stats, the number of run records per minute of tick, status
//     and lateness bucket, kept exact by triggers on the runs table (an
//     insert adds one, an update moves one, a delete takes one away) in
//     the transaction that writes the records, so that RunStats reads one
//     row per minute, status and bucket of its window, not the records.
//   - tasklock_locks_jobs: one row per job ever paused or registered, with
//     paused 0 or 1 and, from migration 0003_job_specs, the registered spec
//     and since (unix microseconds); a partial index on the paused rows
//     keeps JobStates from reading the registered ones.
//   - tasklock_locks_triggers: the pending trigger requests, in the order
//     they came (seq), with the past tick a backfill or a re-run asks for
//     (NULL for a trigger-now) and rerun 0 or 1; from migration
//     0008_cancel_requests, cancel: NULL for a request to run, the run to
//     stop for a cancel request (ledger.TriggerRequest.CancelField).
//   - tasklock_locks_jobdefs: one row per job ever defined at run time:
//     its definition (NULL once deleted), version and updated_at. A delete
//     keeps the row, so that the job's version keeps rising when it is
//     created again.
//   - tasklock_locks_audit: the audit list, seq INTEGER PRIMARY KEY
//     AUTOINCREMENT (rising, never reused), at, who, job (empty for none),
//     action and detail, with an index on (job, seq) for one job's entries.
//
// Ticks and times are integer unix microseconds, and every time that
// decides something — claim time and expiry, a record's time, a trigger
// request's time, the ages Prune compares — is SQLite's clock, as for
// leases. Statements per call:
//
//   - Claim: one INSERT … SELECT FROM json_each(?) ON CONFLICT DO UPDATE …
//     RETURNING for the whole batch. It claims every key with no live claim
//     and returns the holder of every key, so the losers learn who won in
//     the same statement. The JSON carries job, trigger, token and node, so
//     these must be valid UTF-8 without NUL bytes (ErrUnsupported
//     otherwise).
//   - RecordRuns: one INSERT … ON CONFLICT DO UPDATE per 100 records, every
//     value a bound parameter (any bytes are kept).
//   - Runs: one SELECT, which reads an index in the listing order and stops
//     at Limit.
//   - SetJobState: one transaction of one write and one SELECT;
//     JobStates: one SELECT.
//   - Prune: one DELETE each for the expired claims, runs by age, runs by
//     count and old trigger requests, each its own transaction, so that the
//     write lock is never held for all of them at once.
//   - PutJobDef: one transaction of one INSERT … ON CONFLICT DO UPDATE …
//     RETURNING, whose WHERE makes the change only at IfVersion, and one
//     INSERT of the audit entry, so that the change and its entry commit
//     together or not at all; a delete is a DELETE … RETURNING and an
//     INSERT of the row without its definition, then the entry. A change
//     refused by IfVersion is one statement, rolled back.
//   - JobDefs, AppendAudit and Audit: one statement each. Audit reads the
//     list backwards, through the job index when it asks for one job, and
//     stops at Limit.
package sqlitestore
