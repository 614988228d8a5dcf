// Package etcdstore keeps tasklock leases in etcd (v3 API) through the
// caller's clientv3 client.
//
//	client, err := clientv3.New(clientv3.Config{Endpoints: []string{"etcd-1:2379", "etcd-2:2379", "etcd-3:2379"}})
//	store, err := etcdstore.New(client, &etcdstore.Options{SessionTTL: 10 * time.Second})
//	locker, err := tasklock.New(store, nil)
//	...
//	locker.Close()
//	store.Close(ctx)
//
// The Store implements driver.Store, driver.Queuer (waiters queue at etcd,
// first come first served), driver.Kinder (read-write locks and semaphores,
// see below), driver.Notifier, driver.Lister, driver.ForceReleaser and
// ledger.Ledger and ledger.Catalog (the scheduler's tick ledger and its
// job definitions made at run time, see Ledger below). It never
// closes the client and never logs.
//
// # One lease for all locks
//
// A Store grants one etcd lease, its session, and puts the key of every
// lock it grants on it: Options.SessionTTL long (whole seconds). Renewing
// a thousand locks therefore costs what renewing one does, and the session
// is kept alive only by the renewals and grants that need it (one
// LeaseKeepAlive message each, skipped when a recent one still covers the
// TTL asked for); there is no background keepalive stream, so a Store that
// holds nothing sends nothing and its session lapses. When the session
// lease is lost (expired while the process was paused or cut off, or
// revoked), every lock on it is gone at once: each reports ErrNotHeld at
// its next renewal, and the next Acquire grants a new session.
//
// What one shared lease means for TTLs:
//
//   - SessionTTL is the takeover bound. A holder that dies, is paused or is
//     cut off from etcd is replaced when etcd expires its session: within
//     SessionTTL of its last renewal, plus up to 0.5 s (etcd checks for
//     expired leases twice a second), whatever its locks' TTLs. etcd may
//     grant more than asked: at least 1.5 election timeouts, rounded up (2 s
//     with the default 1 s election timeout).
//   - A lock's own TTL may not exceed SessionTTL (Acquire and Renew return
//     an error wrapping ErrTTL): a holder cut off from etcd trusts its lock
//     for its TTL, so the lease that keeps its key must live at least as
//     long. DefaultSessionTTL (11 s) is tasklock's default TTL (10 s) plus
//     a second of slack: a keepalive covers the grants and renewals that
//     come within that second after it, so under a steady stream of grants
//     the Store sends a keepalive ahead of need about twice a second and no
//     grant waits for one. With a SessionTTL equal to the lock TTL every
//     grant needs a keepalive sent after it began, and waits for it.
//   - A lock that is not renewed (NoRenew, MaxHold, ProgressTimeout, a
//     failed renewal) must end after its own TTL although the session lives
//     on. etcd cannot expire one key of a lease early, so the Store that
//     granted it deletes its key at its deadline (the Store's start of the
//     grant or renewal plus its TTL, on the monotonic clock, always after
//     the holder's local validity), with one timer for all locks, retrying
//     until etcd confirms. If that process is gone, the session's expiry
//     deletes the key instead.
//   - Release with MinHold (ReleaseParams.KeepFor) moves the key, in one
//     Txn that checks it is still ours, onto a lease of its own of KeepFor
//     rounded up to whole seconds (at least etcd's minimum lease TTL), so
//     the key outlives an early release, and the holder's process, by that
//     long, and no longer: two round trips.
//
// # Keys
//
// A lock on key K held with token T is an etcd key under Prefix + K + "/"
// ("%" and "/" in K and T escaped as %25 and %2F), holding T, the TTL asked
// for at the grant (ms) and the owner name, one per line, on the session
// lease. A waiter's entry (Enqueue) is named by its token: Prefix + K + "/"
// + T. An Acquire's is named by the Store: Prefix + K + "/%" and 32 hex
// digits drawn when the Store was made (no escaped token starts with a
// lone "%"), unless the Store has that key already (then by the token), so
// that a key granted again and again reuses one etcd key: etcd keeps every
// deleted key in its index until the cluster is compacted, and the compare
// over the key's prefix that every Acquire makes visits them all. Every
// Acquire's name is unique to its Store and every delete of it comes from
// that Store, which names it only while it holds it (or deletes it). The
// holder of K is the entry with the lowest create revision under
// Prefix + K + "/"; the entries after it are the waiters, in the order
// they queued. Keys of another Store with a nested Prefix would be taken
// for entries: do not nest prefixes.
//
// # The queue
//
// Acquire puts an entry only when none exists under the key's prefix, so
// it never passes a waiter. Obtain, once its first attempt found the key
// held, queues (driver.Queuer): Enqueue puts its entry unconditionally;
// the entry's create revision is its place in the queue and, once it
// reaches the head, its fence. Each waiter watches only the entry just
// ahead of its own (the newest older entry), from the revision it read it
// at, so a release wakes one waiter, not all of them; when that entry goes
// the waiter reads the queue again and either holds the key or watches the
// new entry ahead (a waiter ahead of it gave up). A wait that is given up
// deletes its entry, which wakes the waiter behind it. Waiting entries
// live on the session lease: while any wait, the Store keeps the session
// alive itself (one LeaseKeepAlive per third of SessionTTL), so a wait may
// last any time; if the session is lost anyway, the waiters queue again
// at the back. A waiting process that dies leaves the queue when etcd
// expires its session.
//
// # Round trips
//
//   - Acquire: one Txn that puts the entry if no key exists under the
//     lock's prefix (a prefix compare) and otherwise reads the holder's; a
//     LeaseKeepAlive alongside when the session needs one. A held key costs
//     a LeaseTimeToLive of the holder's lease as well, for HeldError.TTL
//     (how long the key can live at most if its holder stops: the lease's
//     remaining TTL capped by the holder's lock TTL). The first Acquire of a
//     session grants it first (LeaseGrant).
//   - Renew: two requests at once, whatever the number of leases: a check
//     that the keys exist (up to 128: one Txn of count-only Gets; more: one
//     LeaseTimeToLive with the session's attached keys, whose missing keys
//     are confirmed with a linearizable read) and a LeaseKeepAlive of the
//     session (skipped when a recent one covers the batch's TTL).
//   - Release: one Delete (the key names the token, so it can only be
//     ours); with KeepFor, LeaseGrant + Txn.
//   - Enqueue: one Txn (the put, the head and the entry ahead). Wait: one
//     watch of the entry ahead, and one Txn each time it goes; a granted
//     wait is confirmed by the Locker's Renew. Leave: one Delete.
//   - Leases: one Txn of two range reads (mutexes, kinds) and one
//     LeaseTimeToLive per holding Store. ForceRelease: a read of the
//     mutex's head and a Txn deleting it, whoever holds it, and every entry
//     of the read-write lock or semaphore of the same name; the mutex's
//     waiters stay queued.
//
// # Read-write locks and semaphores
//
// Their keys are a namespace of their own (driver.Mode): a kinds key K
// lives under Prefix + "\xfekinds/" + escaped K + "/" (0xfe never occurs
// in a lock key, so no mutex's prefix covers it), as
//
//   - f: the fence counter, on no lease and never deleted (a key per name
//     ever used, holding nothing): its mod revision is the fence of the
//     last writer or permit granted, which outlives every entry;
//   - p/T, q/T, r/T, w/T: token T's permit, waiting writer's entry, reader
//     and writer, each on the session lease of the Store that put it,
//     holding the semaphore's Limit (0 for a read-write lock), then T, the
//     TTL asked for and the owner, one per line.
//
// An entry is a lock's key in every other way: it lives on the session
// lease, is renewed by Renew in the same batch as mutexes (the key's
// existence, one Txn per 128, and one LeaseKeepAlive: a mixed batch costs
// what the mutexes alone would), is deleted by the reaper at its deadline
// (a waiting writer's entry too, TTL after its writer last asked), and goes
// with the session when its holder dies or is cut off. Every deletion is
// announced by Subscribe under K's name.
//
// Acquire is one Txn whose compares decide the grant, so two grants can
// never both see a state that allows them:
//
//   - ModeRead: if no q/, w/ or p/ key exists, put r/T and read f (the
//     reader's fence, the last writer's); else read the prefix.
//   - ModeWrite: if no p/, r/ or w/ key exists, put w/T, delete q/T and put
//     f (the grant's revision is the fence); else read the prefix and, in
//     a nested Txn, put q/T unless it, w/T or a p/ key exists. A waiting
//     writer's entry refuses new readers until it is granted, its writer
//     gives up (Release of ModeWrite deletes it and answers ErrNotHeld) or
//     its deadline passes.
//   - ModePermit: if the key has no entry, put p/T and f; else read the
//     prefix. "Fewer than Limit permits" is no compare etcd has, so while
//     the read shows a free permit the next Txn puts p/T and f if no key
//     under the prefix has a mod revision above the read's (deletions
//     only free permits), reading the prefix again otherwise: up to
//     8 Txns, then an error wrapping driver.ErrTryAgain, which the Locker
//     retries.
//
// A failed Txn's read settles the rest: an entry of another Limit (a
// semaphore asked with another number of permits, or as a read-write
// lock) is driver.ErrKindMismatch; T's own entry of the mode asked for on
// the session (an earlier attempt's grant whose answer was lost) is
// granted again with its fence; otherwise a *HeldError naming the writer,
// the waiting writer (TTL 0), or the reader or permit with the shortest
// lock TTL, with its remaining TTL (one LeaseTimeToLive, as for a mutex).
// A reader or writer costs one Txn, granted or refused (plus the
// LeaseTimeToLive of a refusal that names a holder's TTL); a permit one Txn
// on a key without entries and two beside other permits. Fences are
// revisions, as a mutex's: strictly increasing per key across releases,
// expiries, forced releases and restarts.
//
// # Safety level
//
// Linearizable and durable, decided by etcd's raft log:
//
//   - Every grant is one Txn, serialized by raft: at most one entry exists
//     under a lock's prefix, so at most one token holds a key at a time.
//   - The fence is the entry's create revision: etcd's revision counter is
//     global, strictly increasing and persisted, so fences strictly increase
//     per key (and across keys) for the life of the cluster, across
//     releases, expiries, forced releases, compactions and restarts. It
//     survives the loss of a minority of members; a restore from a backup
//     (etcdutl snapshot restore) keeps revisions too.
//   - Every expiry is decided by etcd's clock (lease TTLs), except the early
//     end of a lock that was not renewed, which the holding Store decides
//     after the holder's own validity (above): no client clock can end a
//     lease before its holder stopped trusting it.
//   - The Locker on top keeps its own, shorter, local validity (TTL minus
//     drift, counted from when it sent the request, on the monotonic clock)
//     and closes a lock's Done by then, while the session lease lives at
//     etcd at least until the Store's keepalive was sent plus SessionTTL. A
//     holder that is paused or partitioned stops before etcd can expire its
//     session and grant its key to anyone else.
//
// A lease alone does not make a lock safe. Jepsen's analysis of etcd 3.4.3
// (2020) found etcd's key-value operations strict serializable but its
// locks unable to guarantee mutual exclusion on their own: a holder paused
// (GC, SIGSTOP, a VM stall) or partitioned past its lease goes on acting
// on a lock etcd has meanwhile expired and granted to another, and nothing
// in etcd can stop it; the report recommends fencing tokens. The Locker's
// local validity narrows that window to a pause that strikes between its
// check and the protected write, and cannot close it. (etcd also gives
// every lease a full TTL again when a new leader takes over, which only
// delays takeover.) So the fence is what protects the resource the lock
// guards: pass it along and have the resource refuse writes with a lower
// fence than it has seen (fence.Register is the model).
//
// # Server restarts
//
// etcd persists its raft log and the session lease with it: after a
// restart (of the only member, or of a minority, or a majority that comes
// back) the lease is still there, with a full TTL again once a leader
// takes over (see Safety level), so it lasts at least as long as before. The
// holder's keepalives resume, its renewals go on, and nobody else is
// granted its keys meanwhile; a cluster down past the TTL ends the
// holder's locks locally first. Exclusive through restarts
// (TestFaults/ServerRestarted: the lock survives a restart, another
// TryObtain is refused, fences keep increasing).
//
// # Errors
//
// Besides driver.ErrNotHeld and *driver.HeldError the store returns errors
// wrapping ErrTTL and ErrClosed, and clientv3 errors wrapped with %w and the
// operation, starting with "etcdstore: ".
//
// A call whose context ends while its Txn is in flight returns at once,
// with the context's error, but the Txn is not cancelled: etcd may apply a
// cancelled request after a Delete sent once the caller left, and so put a
// key nobody knows of on the session lease. The Txn runs on in the
// background (bounded by the session TTL and Close), and once etcd has
// answered, the keys it may have put are deleted by the reaper.
//
// # Ledger
//
// The Store is a ledger.Ledger for package schedule. Its keys start with
// Prefix + "\xff" + "ledger/". Lock keys are valid UTF-8 (the Locker
// validates them), which never holds the byte 0xff, so no lock entry sorts
// at or after Prefix + "\xff" and no lock's prefix covers a ledger key:
// Leases reads and Subscribe watches [Prefix, Prefix + "\xff") only, and
// Acquire, Enqueue and ForceRelease work under Prefix + escaped key + "/"
// (or Prefix + "\xfekinds/" + escaped key + "/").
// Names are kept as they are, with 0x00 and 0x01 escaped (0x01 0x01, 0x01
// 0x02) and 0x00 as separator, so that keys sort as names do:
//
//   - c/<job>\x00<tick><trigger>[\x00<shard>]: a claim, holding
//     "token\nnode"; shard 0 (every claim of a job that is not sharded)
//     has no suffix, other shards their number in decimal;
//   - r/<job>\x00<tick, reversed><trigger>\x00[~<shard>]<attempt,
//     reversed>: a run record (JSON, with Shards), one key per record, in
//     the order Runs lists one job's records (ledger.RunKey.Compare):
//     shard 0 has no mark, other shards "~" and 4 hex digits, which sort
//     after shard 0's attempt digits. Claims and records written before
//     shards existed are thus shard 0's, as they are;
//   - u/<same as the record's r/ key>: a running marker, empty, while
//     that record is running (ledger.RunRunning), so that the schedulers'
//     sweep for running records of dead nodes reads those, not every
//     job's history. RecordRuns puts or deletes it in the Txn that writes
//     the record, and Prune deletes it with its record; Runs deletes a
//     marker whose record it finds gone or final (only while the record is
//     as read). Running records came with the markers: none exists
//     without one;
//   - j/<job>\x00p while the job is paused, j/<job>\x00t<ID> for each
//     pending trigger request, holding its At (RFC 3339), and for a
//     backfill or a re-run a space and its Tick (RFC 3339), and for a
//     re-run " rerun"; a cancel request (ledger.JobCancel) ends with
//     " cancel " and its TriggerRequest.CancelField;
//   - s/<job>: the job's registration (its spec and since, nanoseconds),
//     apart from j/ so that JobStates does not read it;
//   - m/<revision>: an age mark (below);
//   - d/<job>: a job definition of the Catalog (JSON: the definition, its
//     version, when it was updated), and v/<job> the job's last version,
//     which stays when the definition is deleted, so that versions keep
//     rising across a delete and a new create;
//   - a/<seq>: an audit entry (JSON), Seq as 16 hex digits, so that a
//     range read in reverse key order lists the newest first; b/<job>\x00<seq>
//     a copy of each entry that names a job, so that one job's entries are
//     a range too; n/audit the last Seq given.
//
// Catalog changes are guarded Txns: PutJobDef reads the definition, the
// version and the audit sequence in one Txn, and writes the definition (or
// deletes it), the version, the entry, its copy and the new Seq in a Txn
// guarded by those three keys' mod revisions (a Txn that loses the race
// reads them again and decides again, so IfVersion holds and Seqs are
// unique and gapless); AppendAudit does the same with the sequence alone.
// Updated and AuditEntry.At are the writing Store's wall clock.
//
// Round trips: Claim, one Txn per 126 claims (etcd's default
// --max-txn-ops less two), plus a LeaseGrant when its retention bucket
// needs a new lease; RecordRuns, one Txn per 64 records (a record and its
// marker), plus a LeaseGrant and a Put at most once a second (an age
// mark); Runs of one job, one range read (a page at a time when Status
// filters); Runs of every job's running records, a keys-only range read of
// the markers and one Txn of Gets per 128 of them (plus one Txn of guarded
// deletes per 127 stale markers); Runs of every job otherwise, one range
// read of every record, sorted by the Store;
// SetJobState, one Txn, plus a LeaseGrant and a Put after a new trigger
// request; JobStates, one range read; Prune, see Store.Prune; PutJobDef and
// AppendAudit, two Txns (more when other writers came between); JobDefs
// and Audit, one range read.
//
// A claim is a nested Txn per key in one Txn: put the key if it does not
// exist, else put it again if it holds this token and node (a repeated
// call, which moves it to a current lease), else read the holder.
// ClaimedError.At is always zero: see below.
//
// etcd has no clock a client can read. Its only clock is the leader's,
// behind lease TTLs, and it tells durations, not instants. So:
//
//   - Claim retention is etcd's clock: a claim's key is put on a lease that
//     lives at least Retain from the claim (etcd deletes it then). Claims
//     share leases, one per retention bucket (Retain in whole seconds) per
//     Store at a time: a lease lives Retain + Retain/8 (1 s to 1 min) +
//     Retain/50 + 0.2 s and takes new claims while more than Retain + 0.2
//     s of it is left, counted from when its grant was sent, on the local
//     monotonic clock less 1% for rate errors. A claim whose call took too
//     long for that is put again on a new lease before Claim returns. A
//     claim is therefore forgotten between Retain and about 1.15 Retain + 1
//     min after it was made (plus up to 0.5 s: etcd checks leases twice a
//     second); Prune has nothing to do for claims and reports 0.
//   - Ages for Prune are etcd's clock, through age marks: after writing run
//     records (at most once a second per Store) and after each new trigger
//     request, the Store grants a lease (10 years) and puts a key naming the
//     revision the grant was applied at on it. Every key written at or
//     before that revision is at least as old as the lease, which etcd tells
//     (granted TTL less remaining TTL, less 1 s as etcd truncates it). Prune
//     finds the newest mark at least RunsOlderThan (TriggersOlderThan) old
//     by a binary search of LeaseTimeToLive calls, deletes the records
//     (requests) written at or before its revision, and thins the marks so
//     that they stay about a sixteenth of their age apart (revoking the
//     rest, and those older than every age it was asked for). Records are
//     thus deleted by age no earlier than asked, and up to about a second
//     later (or until the next mark, for a Store that stopped writing).
//   - Recorded and TriggerRequest.At are the writing Store's wall clock
//     (UTC): shown to people, used as the trigger's claim key, and never to
//     decide anything at the store. Triggers are listed in the order etcd
//     received them (their keys' create revisions), not by At.
//
// Leader changes. A new etcd leader gives every lease its full TTL again,
// unless lease checkpointing is on (etcd 3.4/3.5:
// --experimental-enable-lease-checkpoint, and
// --experimental-enable-lease-checkpoint-persist to survive restarts).
// Claims then live longer than asked, which is safe. Age marks then look
// younger: everything written before a leader change looks at most as old
// as the time since that change, so a cluster whose leader changes more
// often than RunsOlderThan never prunes run records by age (KeepPerJob
// still bounds them). Turn checkpointing on where RunsOlderThan matters.
//
// Several Stores may prune at once. A Prune revokes the marks older than
// those it needed for the ages it was given: Stores that prune one prefix
// with different ages end up with the shortest.
package etcdstore
