// Package driver is the small contract a store implements so that a
// tasklock.Locker can keep leases in it.
//
// Most code should use package tasklock, not this package: a Locker owns
// tokens, local validity, renewal, waiting and loss signals, and calls a Store
// only to read or change the state of a lease at the store. Like
// database/sql/driver, optional capabilities are small interfaces a store may
// also implement; the Locker finds them by type assertion.
// The scheduler's tick ledger is a contract of its own, package ledger.
//
// # What a store promises
//
//   - Acquire grants a key to at most one token at a time, and every grant
//     carries a fence strictly greater than every earlier fence for that key
//     from that store (how durable that is is the store's documented safety
//     level).
//   - Every expiry is decided by the store's clock (Redis PX, SQL now(),
//     etcd/ZooKeeper sessions), never by the client's wall clock.
//   - Renew, Release and every other call that names a token change nothing
//     unless that token holds the key at the store.
//   - Stores return errors and never log. A store returns ErrNotHeld only when
//     it knows the token does not hold the key; any other error is taken as
//     transient and retried by the Locker while the lease may still be valid.
//   - Acquire settles every attempt as a grant, a *HeldError, or an error.
//     An attempt that lost a race it cannot settle (the holder kept
//     changing while it looked, a vote split with nobody winning) returns an
//     error wrapping ErrTryAgain, which the Locker retries, instead of an
//     error that would end a caller's Obtain.
package driver

import (
	"context"
	"errors"
	"time"
)

// ErrNotHeld is returned (alone or per lease in RenewResult) when the token
// does not hold the key at the store: it expired, was released, or another
// owner holds it now. The Locker takes it as final.
var ErrNotHeld = errors.New("tasklock: lock not held")

// ErrUnsupported is wrapped by the errors a store returns for a request it
// can never satisfy as made — a TTL longer than it can keep, a key it cannot
// store — so that the Locker reports it at once instead of retrying it.
var ErrUnsupported = errors.New("tasklock: unsupported by this store")

// ErrTryAgain is wrapped by the error a store returns when an attempt lost
// a race it cannot resolve itself and nothing is known to be wrong with the
// store or the request: the holder changed while Acquire looked at it
// (ZooKeeper), or the nodes' votes split between contenders so that nobody
// won a majority (RedLock). The key may be free a moment later. The Locker
// retries it: Obtain until its context ends, whether or not that has a
// deadline, and TryObtain a few times, within milliseconds, before it
// reports the key as held (attempts that take long to lose only for 1.5 s,
// and then it reports that the store could not decide). A store returns it
// only for a race, never for a failure that retrying cannot mend.
var ErrTryAgain = errors.New("tasklock: attempt lost a race, try again")

// ErrUndecided is wrapped, beside ErrTryAgain, by the error a store
// returns when it cannot tell whether another owner holds the key: the
// nodes that did not answer could decide it either way (RedLock). The
// Locker's TryObtain never reports such a key as held.
var ErrUndecided = errors.New("tasklock: the store cannot tell whether the key is held")

// ErrHeld is wrapped by the *HeldError that Acquire returns when another
// token holds the key.
var ErrHeld = errors.New("tasklock: lock held by another owner")

// HeldError is returned by Acquire when the key is held by another owner.
// Owner and TTL describe the current holder when the store can tell; a zero
// TTL means unknown.
type HeldError struct {
	Owner string        // the holder's owner name, "" when unknown
	TTL   time.Duration // the holder's remaining lease at the store, 0 when unknown
	// Token is the holder's token when the store reports it ("" when
	// not): one owner name can hold several grants over time, and only
	// the token tells them apart (the redlock store counts a majority by
	// it).
	Token string
}

// Error implements error.
func (e *HeldError) Error() string {
	if e.Owner == "" {
		return ErrHeld.Error()
	}
	return ErrHeld.Error() + " " + e.Owner
}

// Unwrap returns ErrHeld.
func (e *HeldError) Unwrap() error { return ErrHeld }

// AcquireParams are the inputs of Store.Acquire.
type AcquireParams struct {
	Key   string        // the lock's key, already validated by the Locker
	Token string        // the owner token: random, unique per grant
	Owner string        // the owner name others see (host:pid by default)
	TTL   time.Duration // the lease length, counted by the store's clock
	// Mode is the kind of hold asked for; the zero value is a mutex. Only
	// a Kinder is ever asked for another mode (see Mode).
	Mode Mode
	// Limit is the semaphore's number of permits for ModePermit (at least
	// 1), and 0 for every other mode.
	Limit int
}

// Grant is what a successful Acquire returns.
type Grant struct {
	Fence uint64 // strictly greater than every earlier fence for the key
}

// RenewParams names one lease to extend in Store.Renew.
type RenewParams struct {
	Key   string
	Token string
	TTL   time.Duration // the new lease length from the store's now
	Mode  Mode          // the mode the lease was granted in
}

// ReleaseParams are the inputs of Store.Release.
type ReleaseParams struct {
	Key   string
	Token string
	// KeepFor, when positive, shortens the lease to end KeepFor from the
	// store's now instead of deleting it (MinHold). Waiters are not woken.
	KeepFor time.Duration
	Mode    Mode // the mode the lease was granted (or, ModeWrite, asked) in
}

// Store is the contract every store implements. All methods must be safe for
// concurrent use.
type Store interface {
	// Acquire makes one attempt to grant p.Key to p.Token for p.TTL. When
	// another token holds the key it returns a *HeldError; when the
	// attempt lost a race it cannot settle, an error wrapping ErrTryAgain.
	Acquire(ctx context.Context, p AcquireParams) (Grant, error)

	// Renew extends every lease in ps, in as few round trips as the store
	// allows (Redis: one script per hash slot, SQL: one statement). It
	// returns one error per lease, in order: nil when renewed, ErrNotHeld
	// when the token no longer holds the key, an error wrapping
	// ErrUnsupported when the lease can never be renewed as asked, and any
	// other error when that lease's outcome is unknown (the Locker retries
	// it). A non-nil error result means the call as a whole failed and no
	// per-lease result is known.
	Renew(ctx context.Context, ps []RenewParams) ([]error, error)

	// Release deletes the lease if p.Token holds p.Key (or shortens it, see
	// ReleaseParams.KeepFor), waking waiters on other Lockers. It returns
	// ErrNotHeld when the token does not hold the key.
	Release(ctx context.Context, p ReleaseParams) error
}

// Batcher is implemented by stores that can carry many acquires or
// releases in one round trip (Redis: one pipeline). A Locker then
// group-commits: while its calls to the store are under way, the TryObtain,
// Obtain attempts and Release calls that arrive wait and go together in the
// next call, so a burst of N locks costs a few round trips, not N. A call
// that finds the store idle goes alone, through Acquire or Release.
type Batcher interface {
	// MaxBatch is the most items a batch may carry. A store that cannot
	// batch in its configuration (a lock that holds a connection of its
	// own, a write that must be confirmed per connection) returns 1, and
	// the Locker then sends every call alone.
	MaxBatch() int

	// AcquireBatch makes one attempt per item, exactly as Acquire would,
	// in order (a key named twice goes to its first item). It returns one
	// result per item. A non-nil error means the call as a whole failed and
	// no per-item result is known.
	AcquireBatch(ctx context.Context, ps []AcquireParams) ([]AcquireResult, error)

	// ReleaseBatch releases every lease in ps, exactly as Release would,
	// and returns one error per item (nil, ErrNotHeld or the item's own
	// failure). A non-nil error means the call as a whole failed.
	ReleaseBatch(ctx context.Context, ps []ReleaseParams) ([]error, error)
}

// KindBatcher is implemented by a Batcher whose AcquireBatch and
// ReleaseBatch carry holds of every Mode (read, write, permit), not only
// mutexes, in the same round trip. The Locker then group-commits the
// acquires and releases of read-write locks and semaphores as it does a
// mutex's; with a Batcher alone it sends those calls one by one, since a
// batch would wait for them in turn.
type KindBatcher interface {
	Batcher
	// BatchesKinds reports whether the batches carry every Mode in the
	// store's present configuration.
	BatchesKinds() bool
}

// AcquireResult is the outcome of one item of Batcher.AcquireBatch: a
// Grant, or the error Acquire would have returned.
type AcquireResult struct {
	Grant Grant
	Err   error
}

// Notifier is implemented by stores that can tell a Locker when a key is
// released, so that waiters are woken by the store instead of polling.
type Notifier interface {
	// Subscribe starts one subscription for the calling Locker. The store
	// calls onRelease with the key of every lease released anywhere (it may
	// call it for keys nobody here waits on, and may miss some: waiters also
	// poll). onRelease must not block. Subscribe returns once the
	// subscription is active; the returned stop function ends it and waits
	// for the store's goroutines to exit.
	Subscribe(ctx context.Context, onRelease func(key string)) (stop func(), err error)
}

// Lease describes one held lock, as listed by a Lister. A read-write lock
// or a semaphore is listed as one Lease per holder, and a writer waiting
// on a read-write lock as a Lease with Waiting set.
type Lease struct {
	Key     string
	Owner   string
	Fence   uint64
	TTL     time.Duration // remaining at the store
	Mode    Mode          // the kind of hold
	Limit   int           // the semaphore's permits (ModePermit), else 0
	Waiting bool          // a writer's claim to be next (ModeWrite), not a hold
}

// Lister is implemented by stores that can list the leases they hold, for
// the CLI and the dashboard.
type Lister interface {
	// Leases returns the live leases whose key starts with prefix.
	Leases(ctx context.Context, prefix string) ([]Lease, error)
}

// ForceReleaser is implemented by stores that can delete a lease whoever
// holds it: the operator's escape hatch (`tasklock locks release --force`).
// The holder learns of it at its next renewal. It returns ErrNotHeld when
// the key is not held.
type ForceReleaser interface {
	ForceRelease(ctx context.Context, key string) error
}

// Queuer is implemented by stores that keep a fair queue of waiters per key
// at the store (etcd, ZooKeeper): each waiter is an entry ordered by the
// store, and only the entry at the head holds the key. Obtain uses it once
// its first Acquire found the key held, so that waiters are served in the
// order they arrived across every client of the store, each woken only
// when its own predecessor goes (no thundering herd), keeping one token
// for the whole wait.
type Queuer interface {
	// Enqueue adds an entry for p.Token behind every entry already queued
	// for p.Key and returns its Ticket. The entry must outlive a wait of
	// any length while the Ticket is neither granted nor left; its lease
	// (p.TTL) starts only when the Locker confirms the grant with Renew, or
	// when the Wait that grants it starts it (StartedTicket).
	// An error means no entry is left behind (the store cleans up an entry
	// whose creation it cannot confirm).
	Enqueue(ctx context.Context, p AcquireParams) (Ticket, error)
}

// Ticket is one entry in a Queuer's queue.
type Ticket interface {
	// Wait returns once the entry is at the head of the queue and the key
	// is free for it, with the grant's fence. The Locker then calls Renew
	// for the entry's key and token to start its lease (unless the Ticket
	// is a StartedTicket that started it), and from then on treats it like
	// a lease from Acquire. Wait returns ctx's error when
	// ctx ends first (the entry stays queued: call Wait again or Leave),
	// ErrNotHeld when the entry is gone from the store (its session ended,
	// or it was force-released), and any other error for a failure whose
	// outcome is unknown.
	Wait(ctx context.Context) (Grant, error)

	// Holder describes the holder of the key as the Ticket saw it last,
	// for the Locker's *NotObtainedError (nil when unknown).
	Holder() *HeldError

	// Leave removes the entry from the queue, waking its successor. It is
	// called when the wait is given up, and must not leave the entry
	// behind: when the store cannot confirm the removal, it keeps retrying
	// in the background for as long as the entry could live. Leave after a
	// granted Wait is the Locker's mistake; stores may treat it as Release.
	Leave(ctx context.Context) error
}

// StartedTicket is a Ticket that can start its entry's lease in the
// requests of the Wait that grants it, saving the Locker's Renew.
type StartedTicket interface {
	Ticket
	// Started reports, after a Wait that returned a grant, whether that
	// Wait started the lease, and when: the time (by time.Now) at which it
	// sent the request whose answer proves what Renew's would — the lease
	// lives, with the Enqueue's TTL, from then. When it reports false the
	// Locker starts the lease with Renew.
	Started() (time.Time, bool)
}
