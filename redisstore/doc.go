// Package redisstore keeps tasklock leases in Redis through a go-redis v9
// client: a single node (*redis.Client), a Sentinel-managed master
// (redis.NewFailoverClient), or a Cluster (*redis.ClusterClient).
//
//	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
//	store, err := redisstore.New(client, nil)
//	locker, err := tasklock.New(store, nil)
//
// Set ContextTimeoutEnabled on the client (redis.ClusterOptions and
// redis.FailoverOptions have it too). Without it go-redis ignores a
// context's deadline once a command is sent, so a call to a server that
// stopped answering (paused, partitioned) takes the client's ReadTimeout
// (3 s by default) whatever the ctx given to TryObtain, Obtain or Release
// says. A held lock is safe either way: its loss is decided on the
// holder's monotonic clock, not by the renewal call returning.
//
// The Store implements driver.Store, driver.Notifier (waiters are woken by
// pub/sub), driver.Lister (the CLI and the dashboard list leases),
// driver.ForceReleaser (the operator's escape hatch), driver.Kinder
// (read-write locks and semaphores), driver.FairQueuer (fair locks, on
// request), ledger.Ledger, the tick ledger of package schedule, and
// ledger.Catalog, the job definitions made at run time and their audit
// list (see Ledger), ledger.Registrar, which registers a Scheduler's
// jobs 500 to a round trip when it starts, ledger.Marker, the nodes'
// claim marks (one hash, Prefix+"ledger:marks", each entry with its expiry
// by Redis's clock), and ledger.Stats, the dashboard's aggregates from
// per-minute rollups.
//
// # Keys
//
// A lock on key K is the string key Prefix+"{"+K+"}" holding
// token:fence:owner with a PX expiry set by Redis's clock; its fence counter
// is Prefix+"{"+K+"}:fence", an INCR counter without expiry (one small key
// per lock key ever used). The braces make K the Cluster hash tag, so both
// keys sit in one slot and one Lua script updates them together. Releases
// are published on channel Prefix+"released" with K as the payload. Keys
// starting with '}' are rejected with ErrKey (their hash tag would be
// empty).
//
// # Read-write locks and semaphores
//
// The read-write lock or semaphore named K (a namespace apart from the
// mutex K) is kept beside the mutex, in K's hash slot:
//
//   - Prefix+"{"+K+"}:kinds": a hash from each holder's token to its mode,
//     fence and owner, plus the key's number of permits (0: a read-write
//     lock) and the writer's token. A writer that found readers holding
//     leaves a waiting claim here, which refuses new readers until it is
//     granted, given up, or expires.
//   - Prefix+"{"+K+"}:kinds:held" and ":kinds:wait": sorted sets of the
//     holds and of the writers' claims, by expiry (unix ms by Redis's
//     clock, TIME inside the script).
//   - Prefix+"{"+K+"}:kinds:fence": the fence counter, without expiry.
//     Writers and permits take the next value; a reader's fence is the
//     counter as it stands, the last writer's.
//
// Every operation is one Lua script, run atomically: it first deletes the
// entries whose expiry has passed (announcing them on the release
// channel, as a release is), then acts by driver.Mode's rules, and then
// sets the three containers to expire (PEXPIREAT) with their last entry,
// so that a key whose holders all died vanishes by itself; a release
// deletes them with the last entry. So a dead holder's permit or lock
// returns at its TTL, however few calls the key gets. Renew carries
// these holds in the same script calls as the mutexes (one per hash slot),
// so renewing 10,000 permits costs what renewing 10,000 mutexes does.
// Leases lists every hold and claim, and ForceRelease deletes them with
// the mutex (the fence counters stay).
//
// # Fair locks
//
// With tasklock.ObtainOptions.Fair a mutex's waiters queue at the store
// (driver.FairQueuer): Prefix+"{"+K+"}:fair", a sorted set of tokens by
// arrival, and Prefix+"{"+K+"}:fair:exp", the same tokens by expiry. Each
// entry is a lease of the waiter's TTL, renewed by the waiting Ticket at
// least every third of it, and every call of the queue's script (fair.lua)
// first drops the entries whose lease ended: a waiter that dies leaves the
// queue within its TTL and never blocks the line (the failure of
// Redisson's fair lock, redisson#3004 and #6150, whose queue entries
// outlive dead waiters). A waiter is granted, by the same script and
// exactly as Acquire grants (SET PX, the next fence), only when its entry
// is the head of the live queue and the key is free. Waiting Tickets share
// one subscription to the release channel, woken when the key is released
// or the head leaves; they look again no later than the holder's lease
// could end. An empty queue and a free key grant at once, in the
// EnqueueFair call. Plain Obtains do not look at the queue: a caller that
// does not ask for fairness may take a free key ahead of it.
//
// # Round trips
//
// Acquire, Release and Renew each run one Lua script (EVALSHA, falling back
// to EVAL once after SCRIPT FLUSH or a restart) in one round trip. Renew
// batches: one script call per Cluster hash slot, or per 500 leases on a
// single node, all sent in one pipeline, so a renewal cycle costs one round
// trip per node; the renewal of a single mutex lease (an Extend that no
// other goes with) is one command of a script of its own (extend.lua),
// which sends only the key, the token and the TTL. Leases scans the
// keyspace (SCAN on every master) and is meant for the CLI and the
// dashboard.
//
// A release reaches subscribers on the same node within a millisecond. On a
// Cluster it may have to cross the cluster bus, which Redis opens without
// TCP_NODELAY, so it can arrive up to about 40 ms later.
//
// # Ledger
//
// The tick ledger (ledger.Ledger) keeps its keys under Prefix+"ledger:",
// where no lock key is (lock keys start with Prefix+"{"), so Leases never
// lists them. A job J's keys share the hash tag "job:"+J, which is never
// empty whatever J is, so one script may touch all of them on a Cluster:
//
//   - Prefix+"ledger:{job:J}:claim:"+tick+":"+trigger for shard 0 (every
//     claim of a job that is not sharded) and
//     Prefix+"ledger:{job:J}:claim:"+tick+"/"+shard+":"+trigger for the
//     other shards: one string per claim, with a PX expiry of the claim's
//     Retain, holding the claiming token, the node and the claim time.
//     Redis expires claims by itself; Prune has none to delete and reports
//     zero claims.
//   - Prefix+"ledger:{job:J}:runs": a sorted set of J's runs, member
//     tick+":"+attempt+":"+trigger for shard 0 and
//     tick+"/"+shard+":"+attempt+":"+trigger for the others, scored by the
//     tick. The tick's digits end at ':' or '/', so no trigger can make
//     two keys the same. Shard 0 is written exactly as claims and records
//     were before shards existed, so those read back as shard 0 and
//     nothing migrates. RunRecord.Shards is a field of the record, written
//     only when it is not 0.
//   - Prefix+"ledger:{job:J}:recs": a hash from run member to the record.
//   - Prefix+"ledger:{job:J}:recorded": the run members scored by the time
//     they were recorded, for pruning by age.
//   - Prefix+"ledger:jobs": the set of every job that recorded a run (a
//     name stays after its runs are pruned: it costs a few bytes).
//   - Prefix+"ledger:state": a hash from job to its state (paused, pending
//     trigger and cancel requests with their Tick, Rerun and cancel target), holding only jobs not in
//     the default state.
//   - Prefix+"ledger:running": a set of the running records (job, NUL,
//     run member), so that the schedulers' sweep for running records of
//     dead nodes reads those, not every job's history. RecordRuns adds a
//     member before the record and removes it with the final record; Runs
//     drops members whose record ended or was pruned.
//   - Prefix+"ledger:specs": a hash from job to its registration, "since
//     (unix µs):spec", apart from the state hash so that JobStates does not
//     grow with the number of registered jobs.
//   - Prefix+"ledger:{stats}:"+hour (unix seconds): the run rollups of
//     that UTC hour for ledger.Stats, a hash from minute+":"+status and
//     minute+":L"+lateness bucket to a count, updated with the records and
//     expiring RollupRetention after the last write.
//     A record counts once, with the status it has now: the record script
//     reads the status it replaces and changes the counts only when the
//     status changes (ledger_rollup.lua), so a repeated RecordRuns counts
//     nothing twice. On a Cluster the rollups are in another hash slot:
//     the record script returns the changes and ledger_stats.lua applies
//     them in a second round trip, so records stored by a RecordRuns that
//     failed before it may go uncounted. Prune does not uncount.
//
// The catalog (ledger.Catalog) keeps its keys under the hash tag "catalog",
// which no job's key has, so that every catalog call stays in one Cluster
// slot (and on one node):
//
//   - Prefix+"ledger:{catalog}:defs": a hash from job to its definition,
//     "version:updated (unix µs):def"; JobDefs reads it whole.
//   - Prefix+"ledger:{catalog}:versions": a hash from job to the last
//     version it was given, kept after a delete, so that a new create
//     continues from it.
//   - Prefix+"ledger:{catalog}:seq": the audit sequence counter (INCR).
//   - Prefix+"ledger:{catalog}:audit": a hash from seq to the audit entry.
//   - Prefix+"ledger:{catalog}:audit:all" and
//     Prefix+"ledger:{catalog}:audit:job:"+J: sorted sets of the seqs of
//     every entry and of J's, each scored by the seq, which Audit reads
//     from Before down.
//
// PutJobDef checks IfVersion, changes the definition and appends the audit
// entry in one script, so the audit list holds every change made and no
// other. The audit list is not pruned.
//
// Ticks and times are unix microseconds; names, triggers, tokens,
// output, definitions and audit entries are kept byte for byte. Every time
// that decides something — claim time and expiry, a record's time, a
// trigger request's time, the ages Prune compares, a definition's Updated
// and an audit entry's At — is Redis's clock (TIME and PX inside the
// scripts).
// Round trips, each an embedded Lua script unless said otherwise:
//
//   - Claim: one script call per Cluster hash slot (per 500 claims on one
//     node), all in one pipeline: one round trip per node.
//   - RecordRuns: likewise, with the SADD to the jobs set in the same
//     pipeline.
//   - Runs: one script call for one job; for every job, SMEMBERS and then
//     one pipeline of a call per job. The script filters at the server and
//     stops after Limit records.
//   - SetJobState: one script call; JobStates: one HGETALL.
//   - PutJobDef, AppendAudit and Audit: one script call; JobDefs: one
//     HGETALL.
//   - Prune: one pipeline for the jobs set and the trigger requests, and
//     one of a script call per job for the run records.
//
// Like the leases, the ledger is as durable as the deployment: a restart
// without persistence, or a failover that loses writes, forgets claims,
// so a tick may then run a second time.
//
// # Waiting for replicas
//
// With Options.WaitReplicas, WAIT rides in the same pipeline as the grant,
// so a grant still costs one round trip; it takes as long as the slowest of
// the replicas waited for to acknowledge. When too few replicas answer, the
// grant is undone and Acquire fails with ErrReplicas, so with WaitReplicas
// equal to the number of replicas, losing one replica, or a failover (until
// the old master rejoins as a replica, about 10 s with Sentinel), stops all
// grants: that is the price of the check. A WAIT that times out returns on
// the server's next cron tick, up to 1000/hz ms (100 ms at the default hz
// 10) after Options.WaitTimeout.
//
// # Safety level
//
// Redis is not a durable, linearizable store, and this store is only as
// safe as the deployment under it. Plainly:
//
//   - A single node without persistence loses every lease and every fence
//     counter when it restarts. After a restart a key can be granted at once
//     to a second holder while the first still works, and fences start again
//     from 1, so a fence can repeat: a resource that checks fences cannot
//     tell the new holder's writes from the old one's.
//   - With AOF and appendfsync always, leases and fence counters survive a
//     restart (a lease's expiry keeps running while Redis is down). With
//     appendfsync everysec up to a second of grants can be lost, and with
//     RDB snapshots everything since the last snapshot.
//   - Replication (Sentinel, Cluster replicas) is asynchronous. When the
//     master fails just after a grant, a replica that had not yet received
//     it can be promoted: the new master does not know the lease, grants the
//     key to someone else (two holders at once) and may hand out a fence
//     that was already issued. A renewal lost the same way leaves the lease
//     with its older, earlier expiry on the new master.
//   - Options.WaitReplicas narrows that window for grants: Acquire waits
//     (WAIT) until that many replicas acknowledged the write, and gives the
//     lease back otherwise. It does not close the window. WAIT does not make
//     Redis strongly consistent: an acknowledged write can still be lost when
//     the failover promotes a replica that did not get it, and promotion
//     does not wait for anything. Renewals and releases are not waited for.
//   - Expiries are kept in the Redis server's wall-clock time: stepping that
//     server's clock forward ends leases early.
//   - A maxmemory policy that can evict keys without an expiry (allkeys-*)
//     can evict a fence counter; use noeviction or a volatile-* policy.
//   - Read-write locks and semaphores share all of the above: a restart
//     without persistence, or a failover that loses writes, forgets their
//     holders, so a writer can be granted beside a reader or writer that
//     still works, and a semaphore can hand out its N permits again while
//     the old holders work on until their next renewal tells them (at most
//     a third of the TTL later): more than N at once, for that long. Their
//     fence counters restart like the mutex's.
//
// The defence against all of these is the fencing token: pass each grant's
// fence to the resource the lock protects and have it reject writes with a
// lower fence than it has seen (fence.Register is the model).
// Where a repeated fence after a restart matters, run Redis with
// appendfsync always, or use a durable store (pgstore, etcdstore).
//
// # Server restarts
//
// What a restart of Redis does to held locks depends on its persistence
// (see Safety level): without persistence every lease and fence counter is
// gone, so a key can be granted at once to a second holder while the first
// works on until its next renewal fails (up to TTL/3 later), with a fence
// that repeats — not exclusive, a documented limit
// (TestFaultRestartWithoutPersistence shows the repeated fence). With AOF
// and appendfsync always, leases survive and their expiry keeps running
// while Redis is down: a held lock outlives a restart shorter than its TTL
// and nobody else obtains it meanwhile — exclusive
// (TestFaultRestartWithAOF). With appendfsync everysec or RDB snapshots
// the grants of the last second (or since the last snapshot) can be lost,
// which is the first case for those keys. A replica promoted by Sentinel
// is the replication case of Safety level.
//
// # Errors
//
// Besides driver.ErrNotHeld and *driver.HeldError, Acquire may return
// errors wrapping ErrReplicas and ErrKey, and for a read-write lock or a
// semaphore driver.ErrKindMismatch (the key is live as the other kind, or
// with another number of permits). Every error from go-redis is wrapped
// with %w. The store never logs.
package redisstore
