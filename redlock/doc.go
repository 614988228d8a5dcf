// Package redlock keeps tasklock leases on N independent Redis servers (N
// odd, at least 3) and grants a lock when a majority of them grant it: the
// RedLock algorithm from the Redis documentation ("Distributed Locks with
// Redis"), with each node run by a redisstore.Store and its scripts.
//
//	clients := []redis.UniversalClient{
//		redis.NewClient(&redis.Options{Addr: "redis-a:6379", ContextTimeoutEnabled: true}),
//		redis.NewClient(&redis.Options{Addr: "redis-b:6379", ContextTimeoutEnabled: true}),
//		redis.NewClient(&redis.Options{Addr: "redis-c:6379", ContextTimeoutEnabled: true}),
//	}
//	store, err := redlock.New(clients, nil)
//	locker, err := tasklock.New(store, nil)
//
// The Store implements driver.Store, driver.Batcher (a Locker's burst of
// acquires or releases goes to each node as one pipelined call),
// driver.Notifier (waiters are woken by pub/sub on every node),
// driver.Lister and driver.ForceReleaser, and driver.Kinder only to refuse
// every kind of lock but the mutex (see Read-write locks, semaphores and
// fair locks). It tolerates the failure of any
// minority of the nodes: with 3 nodes, locks are obtained, kept and
// released while one node is down or cut off.
//
// # How a lock is kept
//
// Every call goes to all nodes at once. It waits for every node up to the
// node timeout (Options.NodeTimeout; by default TTL/20, at most 50 ms), and
// after that only until a majority has answered: a minority of nodes that
// are down, cut off or paused costs each call at most the node timeout, and
// a majority that is slow (a loaded machine) is waited for, up to the
// lease's validity and at most 1 s. Acquire also waits on, as long, while
// the answers still missing could decide its vote (a majority for it or
// for one holder): deciding without them would count a slow node as
// another's, and contenders that all did so would each report the key
// held and give it back, leaving a free key to nobody.
//
//   - Acquire runs redisstore's acquire script (SET PX with a fence from the
//     node's counter) on every node. The lock is granted when a majority
//     granted it and the lease is still valid after the time that took:
//     TTL − elapsed − drift > 0, with drift = 1% of the TTL + 2 ms. The
//     Locker counts the holder's local validity from the moment it sent the
//     request in any case, so the holder never trusts the lease longer than
//     the slowest granting node allows. When the quorum fails, Acquire
//     gives back what it got on every node (token-checked, taking back the
//     fence: see Fences) before returning, and a grant that arrives after
//     the decision when it arrives. A give-back wakes nobody unless a
//     majority had granted (see Contention). It returns a
//     *driver.HeldError when the key is held (enough nodes answered for a
//     majority, and some are held by another owner that has a majority, or
//     could have one with the nodes that failed while the request could
//     not); an error wrapping ErrSplitVote when contenders split the vote
//     so that no owner can hold a majority, or wrapping ErrUndecided (which
//     wraps ErrSplitVote) when the failed nodes could give one to the
//     request as well as to another owner (both wrap driver.ErrTryAgain:
//     the Locker tries again after a short jittered pause; contenders that
//     each guessed another held the key, when a node stayed silent past
//     the 1 s bound while the others split, would all give it back and
//     leave it to nobody); a *QuorumError naming each failed node when
//     fewer than a majority answered; an error wrapping ErrTooSlow when
//     the majority came too late. An undecided vote has waited for its
//     silent node up to the 1 s bound, and the next one may wait as long:
//     TryObtain starts no attempt 1.5 s after its first, and so returns
//     within about 2.5 s with an error wrapping ErrUndecided that does not
//     match tasklock.ErrNotObtained (the key may be free). With a lease
//     short enough that each attempt waits less, TryObtain may make all
//     its attempts sooner; when the last was undecided, the error does not
//     match ErrNotObtained either. Obtain tries again until its context
//     ends.
//   - Renew sends each node one batched redisstore Renew call. A lease is
//     renewed only when a majority of the nodes renewed it. When so many
//     nodes say "not held" that no majority can have renewed it, its result
//     is driver.ErrNotHeld and the holder's Done closes at once; when too
//     many nodes failed to tell, it is a *QuorumError, which the Locker
//     retries until the lease's local validity ends (and Done closes then).
//   - Release deletes the lease on every node (token-checked). It succeeds
//     when any node held it, unless a majority did not: then the lease was
//     no longer held as a lock, and it returns driver.ErrNotHeld. Each node
//     that deletes the lease publishes the deletion with the lease's
//     token, and a Subscribe wakes waiters once per lock, when a majority
//     of the nodes have published it (the key is then free on a majority).
//   - AcquireBatch and ReleaseBatch (driver.Batcher) send each node all
//     the requests of a batch in one redisstore AcquireBatch or
//     ReleaseBatch call, and decide every request by the rules above: the
//     node timeout is that of the shortest TTL in the batch, elapsed is the
//     whole batch's, and a node whose call failed fails every request.
//
// A lease is not re-created on a node that lost it (one that was down at the
// grant, or restarted): until its next grant such a lock is kept by fewer
// nodes and survives fewer further failures.
//
// Set ContextTimeoutEnabled on the clients. Without it go-redis ignores the
// context's deadline once a command is sent: the store still stops waiting
// for a silent node at the node timeout, but the abandoned call holds its
// connection until the client's ReadTimeout (3 s by default).
//
// # Fences
//
// Each node keeps its own fence counter per key (redisstore's
// Prefix{K}:fence). A grant's fence is the highest of the granting nodes'
// counters after their INCR, and before Acquire returns, every granting node
// whose counter is lower is raised to that fence (one more round trip, only
// when the counters differ, as they do after a node missed grants). So after
// a grant with fence f, a majority of the nodes have counters of at least f.
// Any later majority shares a node with it, whose INCR gives more than f:
// while every node remembers its counters, fences strictly increase.
//
// How far fences rise: a failed vote's grants are given back, and each
// give-back takes its INCR back (the counter goes down by one when it is
// still that grant's fence, so nothing was counted from it since; a
// released lock's counters are never taken back). So without faults every
// grant's fence is exactly one more than the grant before it: after a
// grant with fence f its majority's counters are f and every other counter
// is at most f, so the next grant's INCRs give f+1 on the node it shares
// with that majority and at most f+1 elsewhere. Each grant that did not
// become a lock and whose INCR could not be taken back adds at most one to
// the next grant's step: a give-back that did not reach its node, a
// minority grant that expired there first, a majority refused after its
// counters were raised (ErrTooSlow). Contenders that split votes therefore
// do not push fences up, however long they contend.
//
// That is weaker than the fences of pgstore or etcdstore, which come from one
// durable, linearizable sequence or revision that every grant passes
// through. Here the counters are N separate in-memory values, and the
// argument above needs every node to remember:
//
//   - A node restarted without persistence comes back with no leases and
//     every counter at zero. If a lock was held on nodes 1 and 2 and node 2
//     restarts empty at once, nodes 2 and 3 form a new majority and grant the
//     key to a second holder while the first one's lease is still valid:
//     two holders. The new grant's fence is the maximum of two forgotten or
//     lagging counters, so it can be lower than the first holder's: a fenced
//     resource then rejects the new holder and keeps accepting the old one.
//     This is the failure Martin Kleppmann describes in "How to do
//     distributed locking" (2016); the package's tests reproduce it.
//   - With appendfsync everysec a crash loses up to a second of grants and
//     counter increments, and with RDB snapshots everything since the last
//     one: the same failure, over a shorter window.
//   - RedLock assumes bounded network delay, process pauses and clock
//     rates. The Locker closes Done at the end of local validity, but a
//     holder paused between checking Done and writing acts on a lost lock;
//     only the fence stops its write, and only as reliably as above.
//   - Expiries are kept in each node's wall-clock time: a node whose clock
//     jumps forward ends its copies early, which counts like a restart
//     without persistence.
//
// # Contention
//
// Contenders on one key cost each node a few script calls per handoff, as
// one Redis would: a release wakes the waiters once (not once per node),
// when a majority of the nodes have published it, and each waiter makes
// one attempt. When their attempts split the vote, the contender that got
// the first node keeps its grants and asks again after about one round
// trip (at most twice); the others give back what they got, without
// waking anybody, and try again after a short jittered pause (the
// Locker's, for driver.ErrTryAgain), by when the keeper holds the lock and
// they wait for its release. So a split costs one more round, not a storm
// of retries. With five processes on one key each node carries about 1.3
// times the script calls one Redis does for the same work
// (contention_test.go); bench/README.md has P3-redlock's numbers.
//
// A release's message is '}' + token + ':' + key on redisstore's channel
// (Prefix+"released"). A Store of an older version subscribed to the same
// nodes does not recognise it, and its waiters find released keys by
// polling until it is upgraded; ForceRelease still publishes the plain
// key.
//
// # Read-write locks, semaphores and fair locks
//
// The Store keeps mutexes only, and says so rather than keep the others
// unsafely: Kinds returns an error wrapping driver.ErrUnsupported for
// ModeRead, ModeWrite and ModePermit, so tasklock's RWMutex and Semaphore
// calls fail at once with an error matching tasklock.ErrUnsupported, and
// the Store does not implement driver.FairQueuer, so ObtainOptions.Fair is
// refused the same way.
//
// Why: RedLock is safe for a mutex because any two majorities share a
// node, and that node refuses the second owner. A semaphore or a
// read-write lock has many holders at once, and each node counts only the
// holders it saw, so sharing a node proves nothing: with 3 nodes and 2
// permits, A can win nodes {1,2}, B {2,3} and C {1,3}. Every node holds two
// permits, within its limit; every holder has a majority; three permits
// are out. A writer's claim (which holds new readers off), a reader's fence
// (the last writer's) and a fair queue's order are likewise one value the
// nodes would have to agree on. Keeping a count, a claim or an order
// consistent across independent nodes takes consensus, which RedLock does
// not have: use redisstore (one Redis, Sentinel or Cluster) or a store
// with consensus (etcdstore, zkstore, pgstore) for these kinds.
//
// # What it requires of operators
//
// The Redis documentation gives two ways to keep a restarted node from
// granting twice, and one of them must hold for every node:
//
//   - Persistence: run every node with appendonly yes and appendfsync
//     always, so each grant, renewal and counter increment is on disk before
//     the reply (every write then waits for an fsync). Leases and counters
//     survive a restart, and so do strictly increasing fences.
//   - Delayed restart: a node that crashed or was restarted without
//     persistence must stay down for at least the longest TTL any client
//     uses (tasklock.DefaultTTL is 10 s; count MaxHold-bounded and extended
//     leases too) before it rejoins, so that every lease it knew has
//     expired before it can grant again. Supervisors must not restart Redis
//     at once (systemd RestartSec, Kubernetes restart backoff at least the
//     maximum TTL), and operators must not restart nodes one after another
//     faster than that. This prevents two holders, but not lower fences: the
//     restarted node's counters start again from zero, and a later majority
//     made of it and nodes that missed grants can hand out a fence below an
//     earlier one. Where fences must never go down, use persistence.
//
// Also keep the nodes' clocks from stepping (slew them), use a maxmemory
// policy that cannot evict keys without an expiry (noeviction or
// volatile-*), and never give New two clients for one server, or nodes that
// replicate each other. New refuses one address given twice; only the
// servers can tell that two addresses reach one of them (localhost and
// 127.0.0.1, a DNS alias): CheckIndependent asks them, and refuses two
// clients whose servers report the same run_id. A node may be a
// Sentinel-managed master (redis.NewFailoverClient), but replication is
// asynchronous: a failover that loses the last writes counts like a restart
// without persistence, and the delayed-restart rule cannot be kept for it.
//
// # Server restarts
//
// A node restarted with its leases (AOF with appendfsync always) changes
// nothing. A node restarted without them at once can form, with the nodes
// that never held the lock, a new majority that grants the key to a second
// holder while the first, which still holds a majority's worth of
// validity, works on — not exclusive, the documented violation
// (TestFaultNodeRestart shows it, and that a delayed restart, down for the
// longest TTL, avoids it). Keep the rules under "What it requires of
// operators": persistence with fsync always, or delayed restarts.
//
// # Errors
//
// Besides driver.ErrNotHeld and *driver.HeldError, calls may return a
// *QuorumError (errors.As), whose NodeErrors name each failed node and wrap
// its error; Acquire may return errors wrapping ErrTooSlow, ErrSplitVote,
// ErrUndecided and redisstore.ErrKey. The store never logs.
package redlock
