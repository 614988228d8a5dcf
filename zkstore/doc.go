// Package zkstore keeps tasklock leases in ZooKeeper through the caller's
// go-zookeeper connection (github.com/go-zookeeper/zk).
//
//	conn, _, err := zk.Connect([]string{"zk1:2181", "zk2:2181", "zk3:2181"}, 10*time.Second)
//	store, err := zkstore.New(conn, &zkstore.Options{SessionTimeout: 10 * time.Second})
//	locker, err := tasklock.New(store, nil)
//
// The Store implements driver.Store, driver.Notifier (waiters are woken by
// ZooKeeper watches), driver.Lister and driver.ForceReleaser. All its locks
// live on the Conn's session. It never closes the Conn and never logs. It
// needs ZooKeeper 3.5.3 or later (container nodes); TTL nodes
// (extendedTypesEnabled=true) are used for MinHold when the server has
// them.
//
// # Nodes
//
// Each key K has a container node Root/<K escaped> (the server deletes it
// once its last child is gone). A lock is an ephemeral sequential node
// Root/<K>/<token>-lock-NNNNNNNNNN owned by the Conn's session, holding JSON
// {"owner": ..., "ttl_ms": ...}. The token holds K while its node is the
// live lock node with the lowest sequence number (first come, first
// served) and no MinHold node <token>-keep is live. In names, '/', '%',
// and the characters ZooKeeper refuses in node names become %XX, and "."
// and ".." have their dots escaped; everything else is kept, so the tree
// reads like the keys (zkCli: ls /tasklock).
//
// A lock node is live while its session lives and its lease lasts: until
// TTL after its last modification (mtime), by the server's clock. Renew
// rewrites the node's data, which moves its mtime to the server's now.
// Whoever finds an expired lock or MinHold node in its way deletes it,
// version-checked (a renewal that got there first wins).
//
// # Round trips
//
//   - Acquire on a free key: two. A multi creates the lock node and
//     touches the key node, whose returned stat carries the new node's zxid
//     (the fence) and the server's time; then the key's children are listed.
//     On a held key: four (the blocker is read, and the new node deleted
//     again), so a failed attempt leaves nothing behind.
//   - Renew: one multi of setData operations per 512 KiB of requests (about
//     4,000 leases) for the whole batch, whatever its size; a lease found
//     gone costs one more multi (a multi fails as a whole and names the
//     first operation that failed).
//   - Release: one (two with MinHold on a server with TTL nodes).
//   - Leases: two, plus two per key (pipelined, 16 keys at a time); it
//     writes Root's data to learn the server's time. ForceRelease: four.
//
// The Store keeps about 150 bytes per held lock in memory (the token, the
// lock node's sequence number, the fence and the lease's local deadline).
//
// go-zookeeper's calls take no context. Each call runs on a goroutine of its
// own that the Store leaves when ctx ends; the request then completes, or
// fails when the client gives it up, in the background, and an Acquire that
// succeeds after its caller left is released again.
//
// # Safety level
//
// Durable and linearizable, decided by ZooKeeper:
//
//   - Every grant, renewal and release is a write ordered by the leader
//     and acknowledged by a quorum after it reached their transaction logs.
//     A client's reads see at least its own earlier writes, so the children
//     list an Acquire reads after creating its node holds every node created
//     before it: two tokens cannot both find their node the lowest, and a
//     live MinHold node is never missed.
//   - Every expiry is decided by ZooKeeper: a session ends when the server
//     has not heard from its client for the session timeout, by the server's
//     clock; a lease ends TTL after its node's mtime, which the leader
//     stamps with its wall clock, compared with the server's time of the
//     acquiring client's own write. No client clock enters a decision.
//     Stepping the leader's clock forward, or a new leader whose clock runs
//     ahead, ends leases early, as with pgstore's now(): keep the servers'
//     clocks synchronized.
//   - The Locker on top keeps its own, shorter, local validity (TTL minus
//     drift, counted from when it sent the request, on the monotonic clock)
//     and closes a lock's Done by then. The server stamped the node, and
//     heard from the session, after that send; and the TTL may not exceed
//     Options.SessionTimeout (ErrTTL). So a holder that is paused,
//     partitioned or slow stops before its lease can end at the server and
//     before its session can expire there, and the next holder's fence is
//     higher than any it used.
//
// # Fence
//
// The fence is the lock node's czxid: the zxid of the transaction that
// created it. Zxids are assigned by the leader in one global order (the
// epoch in the high 32 bits grows with every new leader, so they keep
// growing across restarts, leader changes and counter roll-overs) and are
// never reused. So fences strictly increase per key, and across keys, for
// the life of the ensemble; they are not dense (every write in the ensemble
// consumes one).
//
// Not the sequence number: that is the key node's child version, which
// lives in the key node. The server deletes the key node whenever it is
// empty (a container), and an operator may delete it, and with it the
// counter would start again from 0 and repeat fences. It also counts the
// attempts of waiters, and would overflow an int32 after 2^31 changes; the
// Store sidesteps that by deleting the empty key node on Release once the
// number passes 2^30 (the czxid is unaffected either way).
//
// # Session timeout and takeover
//
// A holder whose process dies or is cut off is replaced when the first of
// two things happens at the server: its session expires (the session
// timeout after the server last heard from it), which deletes its lock
// nodes and fires the watches of waiters at once; or its lease expires (TTL
// after its last renewal), which the next attempt of a waiter notices (a
// waiter sleeps no longer than the holder's remaining lease). As TTL ≤
// SessionTimeout, takeover comes at most TTL after the holder's last
// renewal: within the session timeout of its death when the TTL equals it.
// A holder that closes its Conn ends its session at once, and is replaced
// at once.
//
// A lock whose Locker stops renewing it (NoRenew, MaxHold, ProgressTimeout,
// a lost lock nobody releases) keeps its node until the session ends, but
// the node stops counting TTL after its last renewal, and the next
// contender deletes it. The Store forgets such locks a second after their
// deadline.
//
// # Partitions and outages
//
// A holder cut off from the ensemble (or the ensemble losing its quorum, or
// the only server being down) gets no answers: go-zookeeper notices within
// two thirds of the session timeout and reconnects, renewals fail, and the
// lock's Done closes at its local validity, before the session could expire
// at the server. The Store itself answers ErrNotHeld, without asking the
// server, for a lease past its deadline (the send time of its last
// successful grant or renewal plus its TTL: the server heard from the
// session then, so the session cannot have expired before), and for every
// lease of a session the client was told has expired; the latter also
// catches an overstated Options.SessionTimeout.
//
// When the connection comes back within the session timeout (another
// server of the ensemble, or a restarted one: a server restores sessions
// from its log, each with a fresh timeout), the session and its nodes are
// still there and renewals go on if the locks' validity has not passed. A
// lock whose validity passed meanwhile is lost for good: its node's lease
// has expired, so other clients may delete it, and the Store neither renews
// nor releases it (ErrNotHeld). When the session expired, go-zookeeper opens
// a new one, and every lease of the old one is ErrNotHeld at once.
//
// # MinHold
//
// Ephemeral nodes cannot outlive their session, and a lock node's lease is
// not shortened: Release with KeepFor replaces the lock node by a MinHold
// node <token>-keep holding {"owner", "ttl_ms": KeepFor, "fence"}, which
// blocks every grant until it is KeepFor old by the server's clock, even if
// the holder's process dies meanwhile. Where the server has TTL nodes
// (extendedTypesEnabled=true) it is one: created first, then the lock node
// deleted, and the server removes it up to znode.container.checkIntervalMs
// (default one minute) after it expired, if no contender deleted it first.
// Elsewhere it is a persistent node created in a multi with the lock node's
// deletion (atomically), deleted by the next Acquire of the key or
// Leases that finds it expired.
//
// # Notifications
//
// ZooKeeper watches, not polling: while a Locker waits (has subscribed),
// every Acquire that finds its key held sets a one-time data watch on the
// blocking lock node, one per node, with one goroutine waiting for it. A
// renewal of the node only re-arms the watch; its deletion (release,
// expiry, its session ending) wakes the waiters of the key. go-zookeeper
// v1.0.4 has no persistent or recursive watches (AddWatch). Waiters also
// poll, with backoff capped by the holder's remaining lease, which covers
// leases that end by time and MinHold nodes, which are not watched. All
// waiting Lockers are woken by a release and one of them wins: waiters hold
// no place in the queue between attempts (the attempt's node is deleted
// again), so the order among them is not first come, first served.
//
// # Errors
//
// Besides driver.ErrNotHeld and *driver.HeldError, Acquire returns errors
// wrapping ErrTTL for a TTL above Options.SessionTimeout (Renew reports
// the same per lease). go-zookeeper's errors are wrapped with %w and the
// operation, starting with "zkstore: ".
package zkstore
