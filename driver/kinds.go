package driver

import (
	"context"
	"errors"
	"strconv"
)

// Mode is the kind of hold an Acquire asks for.
//
// A mutex (ModeMutex, the zero value) is what every Store keeps. A store
// that also implements Kinder keeps read-write locks (ModeRead, ModeWrite)
// and semaphores (ModePermit) as well. Mutex keys are a namespace of their
// own: a mutex named "x" and a read-write lock or semaphore named "x" are
// different locks. Read-write locks and semaphores share the second
// namespace, in which every key is a set of entries, one per token, each
// with its own lease (owner, mode, expiry by the store's clock, fence),
// and a fence counter of its own that outlives the entries, as the mutex's
// does. The rules a Kinder keeps, with E the key's live entries at the
// store's now (expired entries count for nothing and may be pruned at any
// access):
//
//   - Kind. A key with live entries is either a read-write lock (every
//     entry asked with Limit 0) or a semaphore of Limit permits. An Acquire
//     whose Limit differs from the key's returns an error wrapping
//     ErrKindMismatch and changes nothing. A key with no live entries takes
//     the Limit of the Acquire that finds it so.
//   - Repeat. An Acquire whose token already holds an entry of the same
//     mode (an earlier attempt whose answer was lost) renews it for p.TTL
//     and returns its fence again.
//   - ModeRead is granted unless E holds a writer or a waiting writer
//     (writers are not starved): the grant's fence is the key's counter as
//     it stands, the fence of the last writer (0 before any). Refused, the
//     *HeldError names a writer (or the waiting writer, with TTL 0).
//   - ModeWrite is granted when E holds no reader and no writer (waiting
//     writers do not count): the counter is incremented and the grant
//     carries it, and the token's waiting entry, if any, becomes the hold.
//     Refused, the token's waiting entry is created or renewed for p.TTL,
//     so new readers are refused while the writer keeps asking; the
//     *HeldError names a holder and its remaining TTL.
//   - ModePermit is granted while E holds fewer than Limit permits: the
//     counter is incremented and the grant carries it. Refused, the
//     *HeldError names the holder whose permit ends first, with its TTL.
//   - Renew extends the token's hold of the named mode; a token that holds
//     no live entry of that mode (a waiting writer holds none) is
//     ErrNotHeld. One Renew call may mix modes and mutexes.
//   - Release deletes the token's entry of the named mode, waking waiters
//     (KeepFor shortens a hold instead, as for a mutex). For ModeWrite it
//     also deletes a waiting entry, and then returns ErrNotHeld: this is
//     how a writer that stops waiting leaves nothing behind.
//   - Every release or removed entry is announced to a Notifier's
//     subscribers under the key's name, as a mutex release is.
//
// The Locker never sends a mode other than ModeMutex through
// Batcher.AcquireBatch or ReleaseBatch, nor to a Queuer: it sends them one
// at a time through Acquire and Release.
type Mode uint8

// The modes.
const (
	ModeMutex  Mode = iota // one holder: a plain lock
	ModeRead               // a reader of a read-write lock: many at once
	ModeWrite              // the writer of a read-write lock: alone
	ModePermit             // one of a semaphore's Limit permits
)

// String returns "mutex", "read", "write" or "permit".
func (m Mode) String() string {
	switch m {
	case ModeMutex:
		return "mutex"
	case ModeRead:
		return "read"
	case ModeWrite:
		return "write"
	case ModePermit:
		return "permit"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// ErrKindMismatch is wrapped by the error an Acquire returns when the key
// is live as another kind: a semaphore asked with a different number of
// permits than its holders were, or a read-write lock asked as a semaphore
// or the other way round. It is the caller's mistake: never retried.
var ErrKindMismatch = errors.New("tasklock: key in use as another kind of lock")

// Kinder is implemented by stores that keep read-write locks and
// semaphores as well as mutexes: their Acquire, Renew, Release and Leases
// honour Mode and Limit as Mode's documentation describes. The Locker
// refuses the other modes, with an error wrapping ErrUnsupported, on a
// store that does not implement it.
type Kinder interface {
	// Kinds returns nil when the store keeps holds of mode m, and
	// otherwise an error wrapping ErrUnsupported that says why not.
	Kinds(m Mode) error
}

// FairQueuer is implemented by stores that keep a fair queue of waiters
// on request (tasklock.ObtainOptions.Fair), where a Queuer keeps one for
// every wait. The queue and its Tickets follow the Queuer contract, with
// two differences: EnqueueFair is the fair Obtain's first call (it does not
// try Acquire first), so the Ticket's Wait grants at once when the queue
// is empty and the key free; and every entry is a lease of p.TTL at the
// store, which Wait keeps renewed while it runs, so a waiter that dies or
// stops waiting leaves the queue within its TTL and never blocks the line.
// Wait's grant starts the lease itself (the Locker's Renew that follows
// only extends it). Plain Acquires of the key need not look at the queue:
// a caller that does not ask for fairness may take a free key ahead of the
// queue.
type FairQueuer interface {
	EnqueueFair(ctx context.Context, p AcquireParams) (Ticket, error)
}
