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
// The Store implements driver.Store, driver.Notifier (waiters are woken by
// an etcd watch), driver.Lister and driver.ForceReleaser. It never closes
// the client and never logs.
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
//     long. The default TTL of tasklock (10 s) and DefaultSessionTTL match.
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
// A lock on key K held with token T is the etcd key Prefix + K + "/" + T
// ("%" and "/" in K and T escaped as %25 and %2F), holding T, the TTL asked
// for at the grant (ms) and the owner name, one per line, on the session
// lease. The holder of K is the entry with the lowest create revision under
// Prefix + K + "/"; the Store only ever creates one, so the layout is ready
// for a FIFO queue of waiting entries without a migration. Keys of another
// Store with a nested Prefix would be taken for entries: do not nest
// prefixes.
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
//   - Leases: one range read and one LeaseTimeToLive per holding Store.
//     ForceRelease: one Delete of the key's prefix.
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
// fence than it has seen (tasklock.FencedRegister is the model).
//
// # Errors
//
// Besides driver.ErrNotHeld and *driver.HeldError the store returns errors
// wrapping ErrTTL and ErrClosed, and clientv3 errors wrapped with %w and the
// operation, starting with "etcdstore: ".
package etcdstore
