// Package zkstore keeps tasklock leases in ZooKeeper through the caller's
// go-zookeeper connection (github.com/go-zookeeper/zk).
//
//	conn, _, err := zk.Connect([]string{"zk1:2181", "zk2:2181", "zk3:2181"}, 10*time.Second,
//		zk.WithDialer(zkstore.Dialer(10*time.Second)))
//	store, err := zkstore.New(conn, &zkstore.Options{SessionTimeout: 10 * time.Second})
//	locker, err := tasklock.New(store, nil)
//
// Dialer is not required, but without it a client that reconnects to a
// ZooKeeper just restarted can wait 66.7 s for its handshake (see Dialer),
// and lose its session and locks meanwhile.
//
// The Store implements driver.Store, driver.Queuer (waiting Obtain calls
// queue in ZooKeeper, first come first served, each woken by a watch on
// its predecessor), driver.Kinder and driver.Notifier (read-write locks
// and semaphores, see below), driver.Lister, driver.ForceReleaser,
// ledger.Ledger and ledger.Catalog (the tick ledger of package schedule
// and its job definitions made at run time, see Ledger). All its locks
// live on the Conn's session. It never closes the Conn and never logs:
// close the Lockers, then the Store (Store.Close stops its timer), then the
// Conn. It needs ZooKeeper 3.5.3 or later (container nodes); TTL nodes
// (extendedTypesEnabled=true) are used for MinHold when the server has
// them.
//
// # Nodes
//
// Each key K has a container node Root/<K escaped> (the server deletes it
// once its last child is gone). A lock, or a waiter queued for it, is an
// ephemeral sequential node Root/<K>/<token>-lock-NNNNNNNNNN owned by the
// Conn's session, holding JSON {"owner": ..., "ttl_ms": ...} (the TTL it
// was granted or queued with; it is not rewritten by renewals). The token
// holds K while its node is the lock node with the lowest sequence number
// (first come, first served) and no MinHold node <token>-keep is live. In
// names, '/', '%', and the characters ZooKeeper refuses in node names
// become %XX, and "." and ".." have their dots escaped; everything else is
// kept, so the tree reads like the keys (zkCli: ls /tasklock). Root also
// holds the force-release marker Root/%force-released (persistent; no key
// node can have that name), see Renew.
//
// A lock node lives until it is deleted — by its holder's Release, by its
// holder's Store at the lease's deadline, by ForceRelease — or until its
// session ends. Nobody else judges a lock node expired. The lease's
// deadline is kept by the Store that granted it, on the monotonic clock:
// the send time of the grant or of the last renewal plus the TTL. One timer
// (time.AfterFunc, no goroutine between firings) deletes the nodes of
// leases that reach their deadline unrenewed (NoRenew, MaxHold,
// ProgressTimeout, a lost lock nobody releases), retrying failed deletes
// with backoff.
//
// All Stores on one Root must run this layout: an older zkstore (which
// deleted lock nodes TTL after their mtime) would take unrenewed lock nodes
// for expired ones.
//
// # Round trips
//
//   - Acquire on a free key: one. A multi creates the lock node and
//     touches the key node, whose returned stat carries the new node's zxid
//     (the fence), the server's time and the key node's number of children
//     right after the create, in the same transaction: when that is one,
//     the new node is alone under the key, and so holds it. When the key
//     node has other children, they are listed (two round trips when none
//     of them stands before the new node). On a held key: three (the lowest
//     lock node is read while the new node is deleted again), so a failed
//     attempt leaves nothing behind. Behind a live MinHold node only: four
//     (the MinHold nodes are read, pipelined, before the delete).
//   - Enqueue: one (the same multi). Wait: none when the multi found the
//     entry alone under the key and Wait comes within a third of the TTL
//     from the create (then the grant counts from the create); else one at
//     the head (the children);
//     otherwise two per wake-up (the children, then the predecessor's data
//     with a watch, and the holder's data alongside when the holder is
//     another node that changed since the last look and no waiter of the
//     Store read that key's holder in the last 250 ms); at the head behind
//     a MinHold node, four per look (the children, the server's time, the
//     MinHold nodes, a watch on the live one). Leave: one delete. A grant
//     starts its lease itself (driver.StartedTicket), so the Locker sends
//     no Renew: within a third of the TTL from the Enqueue, counted from
//     its create, as an Acquire's is; later, by Renew's marker check, which
//     a wake-up (every look after the first) then sends alongside the
//     children (pipelined: the same round trip).
//   - The first Acquire or Enqueue of a Store also reads the marker (and
//     creates it, and Root, when missing).
//   - Renew: one request for the whole batch, whatever its size: a multi
//     holding one check of the marker's version (about 60 bytes). After a
//     ForceRelease anywhere under Root, the next Renew costs two more
//     requests (the failed check, the marker read) plus one read per lease
//     of the batch the force releases may have hit: the leases the marker
//     names, when it names all the force releases since the last look (it
//     names the last 16), else every lease created before the last one.
//   - Release: one (two with MinHold on a server with TTL nodes).
//   - Leases: two, plus two per key (pipelined, 16 keys at a time), plus
//     one per MinHold node; it writes Root's data to learn the server's
//     time. ForceRelease: five. Both cost more for read-write locks and
//     semaphores (see below).
//
// The Store keeps about 170 bytes per held lock or kinds entry in memory
// (the token, the node's number, its session, the fence and the lease's
// deadline; TestLeaseMemory measures it) and nothing per queued waiter but its Ticket; it sets no watch
// on held nodes.
//
// go-zookeeper's calls take no context. Each call runs on a goroutine of its
// own that the Store leaves when ctx ends; the request then completes, or
// fails when the client gives it up, in the background, and an Acquire or
// Enqueue that succeeds after its caller left is undone again. A Ticket's
// Wait runs all of its requests and sleeps on that one goroutine, which
// stops after the request under way once ctx ended and grants nothing
// then.
//
// # Safety level
//
// Durable and linearizable, decided by ZooKeeper:
//
//   - Every grant, queue entry, release and force release is a write
//     ordered by the leader and acknowledged by a quorum after it reached
//     their transaction logs. A client's reads see at least its own earlier
//     writes, so the children list read after creating a node holds every
//     node created before it that still stands, and so does the key node's
//     number of children that the creating multi answers with (counted in
//     the same transaction, after the create): two tokens cannot both find
//     their node the lowest, a waiter is never overtaken by a later Acquire
//     or Enqueue, and a live MinHold node is never missed.
//   - A lock node ends by the server's clock (its session's timeout) or by
//     an explicit delete; the only expiry decided on a client's clock is
//     the early end of an unrenewed lease by the Store that granted it,
//     after its holder's own validity ended (the Store's deadline starts
//     later than the Locker's and has no drift margin taken off). MinHold
//     nodes end KeepFor after their creation by the server's clock.
//   - Renewal proves the session alive: the multi that checks the marker
//     is a write, which the leader refuses for a session that has expired
//     or is closing, and it was sent after the Locker's send time. The
//     server heard from the session then, so the session — and every lock
//     node on it — cannot expire before that send plus the session timeout,
//     and the TTL may not exceed Options.SessionTimeout (ErrTTL). (In an
//     ensemble, a follower reports a session's activity to the leader with
//     its next ping, within half a tick; the leader rounds session expiry up
//     to the next tick, which covers that delay.) The same check proves
//     that no lock node was force-released since the Store last read the
//     marker: ForceRelease raises its version in the multi that deletes the
//     node.
//   - The Locker on top keeps its own, shorter, local validity (TTL minus
//     drift, counted from when it sent the request, on the monotonic clock)
//     and closes a lock's Done by then. So a holder that is paused,
//     partitioned or slow stops before its session can expire at the server
//     and before its own Store deletes its node, and the next holder's
//     fence is higher than any it used.
//   - A lock node deleted by hand (zkCli delete) rather than by
//     ForceRelease does not move the marker: its holder does not learn of
//     it, and keeps renewing. Delete lock nodes only with ForceRelease
//     (tasklock locks release --force).
//
// # Fence
//
// The fence is the lock node's czxid: the zxid of the transaction that
// created it. Zxids are assigned by the leader in one global order (the
// epoch in the high 32 bits grows with every new leader, so they keep
// growing across restarts, leader changes and counter roll-overs) and are
// never reused. So fences strictly increase per key, and across keys, for
// the life of the ensemble; they are not dense (every write in the ensemble
// consumes one). A queued waiter's fence is the czxid of the node it
// created at Enqueue: grants follow the sequence numbers, which follow
// creation, so a later grant always has a higher czxid.
//
// Not the sequence number: that is the key node's child version, which
// lives in the key node. The server deletes the key node whenever it is
// empty (a container), and an operator may delete it, and with it the
// counter would start again from 0 and repeat fences. It also counts the
// attempts of waiters, and would overflow an int32 after 2^31 changes; the
// Store sidesteps that by deleting the empty key node on Release once the
// number passes 2^30 (the czxid is unaffected either way). A key whose
// queue never empties for 2^30 changes would see its numbers overflow: the
// order of nodes is then unknown, each stands before the other, and they
// wait until one leaves or its session ends.
//
// # Session timeout and takeover
//
// A holder whose process dies or is cut off is replaced when its session
// expires at the server (the session timeout after the server last heard
// from it, which go-zookeeper's pings keep fresh while the process lives):
// that deletes its lock nodes and wakes the waiter behind each at once. So
// takeover after a crash is bounded by the session timeout, whatever the
// locks' TTLs, as etcdstore's is by its SessionTTL; the TTL (at most the
// session timeout) bounds how long a live Store keeps an unrenewed lease.
// A holder that closes its Conn ends its session at once, and is replaced
// at once.
//
// # Partitions and outages
//
// A holder cut off from the ensemble (or the ensemble losing its quorum, or
// the only server being down) gets no answers: go-zookeeper notices within
// two thirds of the session timeout and reconnects, renewals fail, and the
// lock's Done closes at its local validity, before the session could expire
// at the server. The Store itself answers ErrNotHeld, without asking the
// server, for a lease past its deadline (its node is deleted by the Store's
// timer, or went with the session), and for every lease of a session the
// client was told has expired; the latter also catches an overstated
// Options.SessionTimeout.
//
// When the connection comes back within the session timeout (another server
// of the ensemble, or a restarted one: a server restores sessions from its
// log, each with a fresh timeout), the session and its nodes are still
// there and renewals go on if the locks' deadlines have not passed. A lock
// whose deadline passed meanwhile is lost for good: the Store deletes its
// node as soon as it can, and neither renews nor releases it (ErrNotHeld).
// It retries that delete (every 2 s at most) for as long as the session may
// be resumed, however long the outage: a server down for minutes still
// restores the session, and with it the node, when it comes back
// (TestFaults/ServerDownPastReaper). Queued waiters keep their place. When
// the session expired, go-zookeeper opens a new one, every lease of the old
// one is ErrNotHeld at once, and every Ticket of the old one answers
// ErrNotHeld (the Locker queues again, at the back).
//
// # Server restarts
//
// ZooKeeper persists sessions and their ephemeral nodes in its
// transaction log: a restarted server restores every session with a fresh
// timeout, and a holder that reconnects within it keeps its locks (see
// above). Nobody else can be granted a lock node while its session lives,
// and a session that is not resumed expires no earlier than the timeout
// after the restart, after the holder's own validity. Exclusive through
// restarts: TestFaults/ServerRestarted restarts the server three times
// while a holds a lock and b waits, and a keeps it (b obtains only after
// a's Release); TestFaults/ServerKilled covers a server down past the
// session timeout.
//
// # MinHold
//
// Ephemeral nodes cannot outlive their session: Release with KeepFor
// replaces the lock node by a MinHold node <token>-keep holding {"owner",
// "ttl_ms": KeepFor, "fence"}, which blocks every grant until it is
// KeepFor old by the server's clock (its mtime), even if the holder's
// process dies meanwhile. Where the server has TTL nodes
// (extendedTypesEnabled=true) it is one: created first, then the lock node
// deleted, and the server removes it up to znode.container.checkIntervalMs
// (default one minute) after it expired, if no contender deleted it first.
// Elsewhere it is a persistent node created in a multi with the lock node's
// deletion (atomically). Whoever finds an expired MinHold node in its way
// (Acquire, the waiter at the head of the queue, Leases, ForceRelease)
// deletes it, version-checked; the waiter at the head reads the server's
// time by touching the key node, and sleeps until the MinHold node expires
// or is deleted (a watch).
//
// # Read-write locks and semaphores
//
// The Store also implements driver.Kinder (ModeRead, ModeWrite,
// ModePermit) and, for them, driver.Notifier. Their keys live apart from
// the mutexes', under Root/%kinds (a name no key node can have):
//
//	Root/%kinds/<K>                        persistent, one per key ever used
//	Root/%kinds/<K>/%guard                 persistent: {"fence", "writer"}, and the guard
//	Root/%kinds/<K>/<token>-read-<n>       ephemeral: a reader
//	Root/%kinds/<K>/<token>-write-<n>      ephemeral: the writer
//	Root/%kinds/<K>/<token>-wait-<n>       ephemeral: a waiting writer's claim
//	Root/%kinds/<K>/<token>-permit.<L>-<n> ephemeral: a permit of a semaphore of L
//
// Each entry holds {"owner", "ttl_ms", "fence"}; n numbers the entries a
// Store creates, so that an entry whose creation's outcome was unknown
// (handed to the reaper) never has the name of a later one of the same
// token. A permit's name carries its limit, so that a key's kind (and
// ErrKindMismatch) is told from the list of its entries alone.
//
// Decisions. An Acquire looks at the key — the guard's data and the key's
// children, pipelined: one round trip — and decides by driver.Mode's
// rules. Every decision that creates an entry (a grant, a writer's claim)
// is one multi that sets the guard's data at the version it read (a
// compare-and-set) and creates the entry; a writer's grant also deletes
// its claim. Since every creation changes the guard, two decisions made
// from the same look cannot both succeed: the loser's multi fails as a
// whole, so a semaphore never holds more than its limit and a reader is
// never admitted beside a writer (or a writer beside anyone). The loser
// looks again, four times at most, then returns an error wrapping
// driver.ErrTryAgain (the Locker retries). Deletions (releases,
// deadlines, force releases, sessions' ends) leave the guard alone: an
// entry that goes only frees what a decision counted. The two reads of a
// look may reach the server in either order: the guard changes only in
// multis that also create a child, so a guard whose mzxid is above the
// key node's pzxid changed after the children were read, and the look is
// taken again. A refusal is no multi: it names an entry the look listed
// (read alongside; a refused writer's claim is created, in its multi,
// alongside too). The Acquires of one key through one Store take turns:
// they would race for the same version of the guard.
//
// Fences. The guard's "fence" is the key's counter. A writer's or a
// permit's grant sets it, in its multi, to one more than the greater of
// it and the guard's czxid, and carries it; a writer also sets "writer",
// the fence every reader is granted (0 before any writer). The guard is
// persistent, so the counter outlives the entries; and since every grant
// consumes a zxid, the counter never passes the zxid of the last grant,
// so starting above the guard's czxid keeps fences rising even when
// Root/%kinds/<K> is deleted by hand (which loses the last writer's fence
// for readers until the next writer). The guard's version is an int32,
// and a version check of -1 matches any version: from 2^30 a decision
// replaces the guard instead (deleting it at the version read and creating
// it again, in the same multi), so its version starts over. A look that
// old would have to outlive 2^30 decisions on the key within one request,
// which the session timeout bounds.
//
// Deadlines are kept as a lock node's: the Store that created an entry
// deletes it at the send time of its grant or last renewal plus its TTL
// (the reaper), Renew renews entries in the same single request as
// mutexes, and the session's end deletes them all. A refused writer's
// claim ends TTL after the Acquire that created or last renewed it: the
// Locker asks again well within it. Release deletes the entry. With
// KeepFor the entry stays instead and its deadline moves to KeepFor from
// now; unlike a mutex's MinHold node it goes with its session.
// HeldError.TTL and Lease.TTL are the TTL an entry was granted with; a
// refused permit names one of the holders (the store cannot tell whose
// permit ends first), a reader refused for a waiting writer names it with
// TTL 0.
//
// Round trips: Acquire, two (the look, then the multi, or the read of the
// entry named); the first Acquire of a key three more (Root/%kinds, the
// key node and the guard are created). An Acquire by a token that holds
// the entry asked for already: the look and a renewal. Release: one.
// Renew: none more than for mutexes. Leases: one list of Root/%kinds, and
// per key its children and a read per entry (pipelined). ForceRelease: one
// list of the key's entries, then per 64 entries a marker read and a multi
// that deletes them and raises the marker's version once per entry,
// naming them, so that their holders' Stores learn of it at their next
// renewal, as for a lock node (see Renew).
//
// # Waiting
//
// Waiters queue: Obtain, once its first Acquire found the key held, calls
// Enqueue, which leaves its lock node in place, and Wait, which sets a
// one-time data watch (getData) on the lock node just before its own — its
// predecessor, never the holder or the key's children — and looks again
// only when that watch fires. A release wakes exactly one waiter, and a
// waiter that leaves (Leave deletes its node) wakes only the one behind it,
// which then watches the node before the one that left: ZooKeeper's lock
// recipe, with no herd. A queued node has no deadline: it waits as long as
// its session lives. A Leave whose delete cannot be confirmed hands the
// node to the Store's timer, which retries it while the session may live;
// the session's end removes it at the latest. A left waiter whose Wait
// still sleeps keeps its watch at the server until its predecessor goes; it
// then returns ErrNotHeld without a request. go-zookeeper v1.0.4 has no
// persistent or recursive watches (AddWatch).
//
// # Errors
//
// Besides driver.ErrNotHeld and *driver.HeldError, Acquire and Enqueue
// return errors wrapping ErrTTL for a TTL above Options.SessionTimeout
// (Renew reports the same per lease), and Acquire, Enqueue, Wait and Renew
// errors wrapping ErrClosed after Close. HeldError.TTL and Lease.TTL of a
// lock node are the TTL it was granted with: its holder's Store ends it at
// most that long after its last renewal (the store cannot tell when that
// was); of a MinHold node, what is left of it by the server's clock.
// go-zookeeper's errors are wrapped with %w and the operation, starting
// with "zkstore: ".
//
// # Ledger
//
// The Store is a ledger.Ledger and a ledger.Catalog. Its nodes are under
// Root/%ledger, a name
// no key node can have (escapeName writes every '%' of a key as %25) and
// that Leases skips; Acquire, Enqueue, ForceRelease and Renew never touch
// it. Job and trigger names, and tokens, are escaped as keys are (at most
// 4096 bytes escaped, else driver.ErrUnsupported); ticks are 24 hex digits
// (Unix seconds + 2^63, nanoseconds), so they keep nanoseconds and compare
// as instants whatever their location:
//
//   - claims/<job>/<tick>[-<trigger>][%%<shard>]: one persistent node per
//     claim (the shard in decimal, none for shard 0),
//     holding JSON {"token", "node", "retain_ms"}; its ctime is the claim's
//     time (ClaimedError.At). The job's node claims/<job> is persistent and
//     its data version is a guard: every delete of a claim raises it in the
//     same multi.
//   - runs/<job>/<tick, inverted>-<trigger>-<attempt, inverted>[%%<shard>]:
//     one persistent node per run record, holding JSON (shards, node,
//     fence, start, end, status, error, output), under a container node per
//     job that the server removes once its last record is pruned. Names
//     sort about as Runs lists records; Runs sorts by the keys it parses
//     from them (ledger.RunKey.Compare). Recorded is the node's mtime.
//     Shard 0 (every run of a job that is not sharded) has no suffix, so
//     claims and records made before shards existed are shard 0's as they
//     are; "%%" is in no escaped name, so the suffix is never ambiguous.
//   - running/<job>%%<record's name under runs/<job>>: an empty persistent
//     node (a marker) per running record (ledger.RunRunning), so that the
//     schedulers' sweep for running records of dead nodes reads those
//     records and not every job's history ("%%" is in no escaped name).
//     There is a marker for every running record: RecordRuns writes a
//     running record in one multi with its marker's create (or a check that
//     it exists), and a final one in one multi with its marker's delete.
//     Markers of records no longer running are dropped by Runs: Prune and
//     JobForget leave them, and the next sweep deletes those of deleted
//     records.
//   - jobs: one node holding every job not in the default state, as JSON
//     {<job>: {"paused", "triggers": [{"id", "at_ms", "tick", "rerun", "cancel"}]}}
//     (tick, RFC 3339, and rerun only for a backfill or a re-run; cancel,
//     TriggerRequest.CancelField, only for a cancel request), written
//     version-checked.
//   - specs/<job>: one node per registered job, holding its spec and since
//     (nanoseconds), written version-checked; JobStates never reads them.
//   - defs/<job>: one node per job definition of the Catalog, holding JSON
//     {"def", "version"}; Updated is its mtime. versions/<job>: the job's
//     last version, which stays when the definition is deleted, so that
//     versions keep rising across a delete and a new create.
//   - audit/a-<job>%%<seq>: one persistent sequential node per audit
//     entry, holding JSON {"who", "job", "action", "detail"}; Seq is the
//     number ZooKeeper appended (rising and unique, not gapless), At the
//     node's ctime. <job> is the escaped job ("" for none), or "#" and a
//     hash when that is longer than 64 bytes; Audit selects a job's
//     entries by name and checks the job in their data.
//
// Every time the ledger decides by is the ZooKeeper leader's clock, which
// stamps every write: a claim's time is its node's ctime, a record's age
// its node's mtime, and "now" for retention, ages and a trigger request's
// At is the mtime of a write of Root's (empty) data, as in Leases. A
// claim is expired once its ctime plus its Retain (rounded up to a
// millisecond) is before that now. TTL nodes (extendedTypesEnabled) are
// not used for claims: the server removes an expired TTL node only at its
// next container check (one minute by default), most servers lack them,
// and a claim must be deletable in the same multi as its guard.
//
// Round trips (requests of one call travel pipelined on the Conn, 16 at a
// time):
//
//   - Claim: one create per claim. A claim that exists costs one read
//     more, alongside which one write of Root's data per call fetches the
//     server's time; an expired one is taken over in three more (the
//     guard, the node again, then a multi that checks the guard's version,
//     deletes the old node, creates the new one and raises the guard): a
//     node found expired after the guard was read can only have been
//     replaced by a delete, which the check catches. So two claimers, or a
//     claimer and Prune, never both win.
//   - RecordRuns: one multi per record, creating it and, when running,
//     its marker; a final record that replaces a running one is one multi
//     too (set the record, delete the marker). A guess that misses costs
//     one more each: a final record written with no running one before
//     costs three, one written again with no marker two.
//   - Runs: for one job, one list of its records, then the data of as many
//     as Limit needs in listing order (all of them without a Limit; twice
//     as many when Status filters). For every job: a list of the jobs and
//     one of each job's records, then the same reads. A job's list must fit
//     one response: keep a job's records bounded (KeepPerJob). For every
//     job's running records (Status running, no Job: the schedulers' sweep)
//     instead: a list of the markers and a read per marker that q's keys
//     select, whatever the number of records, plus one multi per marker
//     found stale (two when its job has no records left) that deletes it
//     unless its record changed since the read: checking the record's
//     version, or creating and deleting the missing record in the multi.
//   - PutJobDef: a read of the definition and of the version node, then
//     one multi that creates, sets or deletes the definition
//     (version-checked), sets the version node (version-checked) and
//     creates the audit entry, so that the entry is appended exactly when
//     the change is made; a multi that loses a race reads and decides
//     again. AppendAudit: one create. JobDefs: a list of defs, then a read
//     per definition. Audit: a list of audit (every entry's name: with
//     jute.maxbuffer at 1 MiB that is tens of thousands of entries, and
//     nothing prunes them), then a read per entry returned.
//   - SetJobState: a read and a version-checked write of the jobs node
//     (plus the time write for JobTrigger, alongside the read; no write
//     when nothing changes). JobStates: one read.
//   - Prune: the time write; a list of the claims' jobs and, per job, the
//     guard, the list, a read per claim and one guarded multi per 500
//     expired claims; with RunsOlderThan or KeepPerJob, the lists of the
//     runs, a stat per record (RunsOlderThan only) and a delete per
//     record pruned (version-checked against the stat, so a record written
//     again meanwhile stays); with TriggersOlderThan, a read and a write
//     of the jobs node.
//
// The jobs node holds every paused job and pending trigger request in
// one value: with jute.maxbuffer at its 1 MiB default, about ten thousand
// of them. A claims/<job> node stays, empty, after its claims are pruned.
// Error, Output and Node of a run record, and a claim's node, are JSON
// strings: invalid UTF-8 in them becomes U+FFFD.
package zkstore
