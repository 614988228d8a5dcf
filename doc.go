// Package tasklock makes work that many replicas could do happen once: a
// lock only one process holds at a time, kept alive while the work runs and
// given up the moment it cannot be kept.
//
// # Start here
//
// Most programs need only these names:
//
//   - [New] makes a [Locker] on a store (memstore, redisstore, pgstore, ...;
//     each store package has an example with a real client), configured by
//     a [Config] (nil for the defaults). Make one per store and process,
//     share it, and [Locker.Close] it at the end.
//   - [Locker.Obtain] waits for a key; [Locker.TryObtain] tries once. Both
//     take [ObtainOptions] (nil: a [DefaultTTL] lease, renewed until
//     released) and return a [Lock].
//   - A [Lock] is kept alive by the Locker. [Lock.Context] (and [Lock.Done])
//     end when it does, with the reason as the context's cause; hand
//     [Lock.Fence] to what you write; [Lock.Release] gives it up.
//   - [Once] and [WithLock] run a function under a lock: once across the
//     replicas, or each caller in turn.
//   - [ErrNotObtained] (held elsewhere, or the wait ended) and [ErrLockLost]
//     (matched by every cause of loss) are what errors.Is is asked most.
//
// The rest is for particular needs: [NotObtainedError] names the holder;
// [ErrReleased], [ErrMaxHold], [ErrStalled] and [ErrClosed] tell the causes
// apart; [Lock.Extend] and [Lock.Heartbeat] go with MaxHold and
// ProgressTimeout; [Event] (Config.OnEvent) is for metrics and logs;
// [Clock] is for tests; [Locker.RWMutex] and [Locker.Semaphore] are locks
// of other kinds, and [Locker.Election] elects a leader. Outside this
// package: the check the protected resource makes is package
// [github.com/tasklock/tasklock/fence], periodic jobs are package
// [github.com/tasklock/tasklock/schedule], and the contract a store
// implements is package [github.com/tasklock/tasklock/driver].
//
// # Locks are leases
//
// A Locker obtains leases from one store (memstore, redisstore, ...) and
// renews them with one goroutine for all its locks, batching the leases due
// together into one store call. The holder measures validity from the moment
// it sent each request, on the monotonic clock, minus a drift margin
// (max(2 ms, 1% of the TTL)): it never believes it holds a lock past the
// moment the store could give it to someone else.
//
// Obtains and releases are batched too when the store can carry many in
// one call (driver.Batcher: memstore, redisstore, ...): while two calls of
// a kind are under way, the ones that arrive wait and go together in the
// next (group commit). A burst — a scheduler starting a tick's runs, many
// goroutines locking at once — then costs a few round trips instead of one
// per lock, and a lone call goes straight to the store as before.
//
// # Being told
//
// Every Lock has Done and Context. They end when the lock ends — released,
// taken away at the store, not renewed in time, MaxHold reached, no progress
// Heartbeat within ProgressTimeout, or Locker closed — and context.Cause
// says which: ErrReleased, or an error matching ErrLockLost (ErrMaxHold,
// ErrStalled, ErrClosed).
//
// # Once, or one after another
//
// Once runs a function at most once across the replicas that call it at
// about the same time: one attempt, and a replica that finds the key held
// skips, with a typed OnceResult, instead of waiting (ShedLock's
// semantics; MinHold keeps the key held after a fast run so that a late
// replica skips too). WithLock is the mutex form: every caller waits its
// turn and runs. Both run the function with a context that ends with the
// lock.
//
// # Reentrant holds
//
// Holds are reentrant within a call chain, and the chain is named by a
// context. A Lock's Context carries the lock, and so does every context
// derived from it and the context WithLock and Once give their function;
// a Lock obtained with such a context carries the chain on in its own
// Context. When Obtain or TryObtain is asked for a key with a context that
// carries a live lock of the same Locker on that key, it returns at once,
// without a store call, a nested handle on the same lease: same Key, Fence
// and Owner; Extend and Heartbeat act on the shared lease, whose options
// (TTL, MaxHold, MinHold, ...) stay those of the outermost Obtain (a nested
// call's options are validated, then have no effect). Releasing a nested
// handle ends only it, with ErrReleased; the lease is released at the store
// when the outermost hold is, and that ends the nested handles still open,
// with ErrReleased too. When the lease is lost, every nested handle ends
// with the same cause. Nested handles emit no events. WithLock nested on the
// same key runs its function at once; so does Once, with Ran true and the
// outer hold's fence (the chain's own hold is what keeps others out). A
// different Locker, or a context that does not carry the lock, contends as
// usual.
//
// Why a context and not the goroutine, as Java's locks use the thread:
// goroutines have no identity in Go; work under one lock routinely fans out
// to goroutines that share the context, and those are the same piece of
// work; and a context makes the scope explicit — a function is reentrant
// exactly when it is handed the holder's context, never by accident
// because it happens to run on some goroutine.
//
// # Fencing
//
// A paused or partitioned holder can still act after its lease is gone.
// Every grant carries a fence strictly greater than every earlier fence for
// the key from the same store; pass it to the protected resource and have it
// refuse lower fences, as fence.Register (package
// [github.com/tasklock/tasklock/fence]) does. A refused write matches
// [ErrStaleFence].
//
// # Waiting
//
// Obtain waits for a held lock. Stores that keep a queue per key
// (driver.Queuer: etcd, ZooKeeper, memstore) are asked to queue the
// waiter once its first attempt found the key held: the waiter keeps one
// entry and one token for the whole wait, waiters are served in the order
// they queued across every process, each is woken only when the entry
// ahead of it goes, and a wait that ends without the lock removes its
// entry (EventQueued tells when a waiter joined a queue). For a second
// after an Obtain found a key held (or waited in its queue behind a
// holder), this Locker's Obtains of that key skip the first attempt and
// queue at once: on a key changing hands between waiters that attempt
// fails nearly every time, and costs the store as much as the entry.
// Other stores that implement driver.Notifier wake waiters when a lease is
// released; otherwise, and as a fallback, waiters poll with jittered
// backoff, never sleeping past the holder's expiry. Within one Locker, waiters on a key
// are served in arrival order either way.
//
// An attempt that lost a race at the store — a ZooKeeper holder that
// changed while the attempt looked, a RedLock vote split between
// contenders — is no error of the caller's: the store says so with
// driver.ErrTryAgain, Obtain tries again (queueing, or after a few
// milliseconds) until it has the lock or ctx ends, and TryObtain tries
// again up to a dozen times before it reports the key as held. It starts
// no attempt once 1.5 s have passed: when attempts are slow to lose (a
// RedLock vote that a silent node could decide either way waits up to a
// second for it), it returns after about two, with an error that wraps the
// store's and does not match ErrNotObtained, as the store could not tell
// whether the key is held.
//
// ObtainOptions.Fair asks for a first-come, first-served wait on stores
// that keep a queue only on request (driver.FairQueuer): the waiter's
// entry is a lease of its own, so a waiter that dies leaves the queue
// within its TTL and never blocks the line. On stores that queue every
// wait it changes nothing; on a store that keeps no queue it is
// ErrUnsupported.
//
// # Read-write locks and semaphores
//
// [Locker.RWMutex] returns a read-write lock: many readers (RLock,
// TryRLock) or one writer (Lock, TryLock) hold its key at a time, across
// every Locker of the store. [Locker.Semaphore] returns a semaphore of n
// permits: at most n holders at a time (Acquire, TryAcquire). Every hold
// is a Lock of its own, with its own lease, renewed by the engine in the
// same batches as the mutexes, ended with a cause on Done and Context,
// bounded by MaxHold, fenced. ObtainOptions apply as they do to Obtain,
// except Fair (an *OptionError): these waits are not queues at the store.
// The store must keep these kinds (driver.Kinder; memstore is the
// reference); on one that keeps only mutexes every call returns an error
// matching ErrUnsupported.
//
// Mutexes have a namespace of their own: a mutex named "x" and a RWMutex
// or Semaphore named "x" are different locks, and Obtain("x") does not
// keep out a writer of RWMutex("x"). The store keeps different state for
// them — a mutex is one lease per key, a read-write lock or a semaphore a
// set of leases, one per holder — and no meaning of one for the other
// would be one a caller could rely on. A RWMutex and a Semaphore of one
// name do share the key: while either holds it, the other is refused with
// ErrKindMismatch, and so is a Semaphore asked with another number of
// permits than its holders (the number is kept with the key while any
// permit is held, never silently changed). ErrKindMismatch is a caller's
// mistake and is never retried. Reentrant holds are a mutex's only: an
// RLock whose context carries a reader asks the store for a hold of its
// own.
//
// Writers are not starved. A writer refused because others hold the key
// leaves a claim at the store, an entry of its own token that refuses new
// readers while it lasts. Its Lock asks again within a third of its TTL,
// which renews the claim, so readers already in finish, new readers wait,
// and the writer gets in. A Lock whose wait ends without the lock
// (its context, ObtainOptions.Wait, Close) takes its claim back before it
// returns, and a TryLock at once; the claim of a writer that dies ends at
// its TTL.
//
// Fences. A writer's Lock carries a fence greater than every earlier
// writer's on the key. A reader's carries the fence of the last writer (0
// before any): readers share it, and a resource that keeps the fence of
// the data it holds can tell which writer's version a reader read, and
// refuse a reader's act once a later writer has been in. Every permit of
// a Semaphore carries a fence greater than every earlier permit's. The
// counters outlive the holds, as a mutex's does.
//
// Dead holders. Each reader, writer and permit being a lease of its own,
// a holder that dies frees only its own hold, when its lease ends: the
// other readers and permits stay held, and nobody waits longer than the
// dead holder's TTL. A holder that cannot renew is told on Done before
// the store could give its place to anyone else, as with a mutex.
package tasklock
