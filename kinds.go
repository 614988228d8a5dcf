package tasklock

import (
	"context"

	"github.com/tasklock/tasklock/driver"
)

// Mode is the kind of hold a Lock is: a mutex (Locker.Obtain), a reader or
// writer of a RWMutex, or a Semaphore's permit.
type Mode = driver.Mode

// The modes a Lock can hold.
const (
	ModeMutex  = driver.ModeMutex  // Locker.Obtain and TryObtain
	ModeRead   = driver.ModeRead   // RWMutex.RLock and TryRLock
	ModeWrite  = driver.ModeWrite  // RWMutex.Lock and TryLock
	ModePermit = driver.ModePermit // Semaphore.Acquire and TryAcquire
)

// MaxPermits bounds a Semaphore's number of permits: every grant looks at
// the key's live permits at the store.
const MaxPermits = 10000

// kind is the kind of hold an obtain asks for: the mode, and a
// semaphore's permits.
type kind struct {
	mode  driver.Mode
	limit int // ModePermit: the number of permits
}

// shared reports whether holds of this kind coexist, so that a grant
// passes a wake-up on to this Locker's next waiter.
func (k kind) shared() bool { return k.mode == driver.ModeRead || k.mode == driver.ModePermit }

// waitKey is the key under which this Locker's waiters of kind k on key
// queue (waitQueue): mutexes, read-write locks and semaphores are
// different locks even when they share a name. Keys hold no control
// characters, so the prefixes cannot collide with a key.
func (k kind) waitKey(key string) string {
	switch k.mode {
	case driver.ModeRead, driver.ModeWrite:
		return rwWaitPrefix + key
	case driver.ModePermit:
		return semWaitPrefix + key
	}
	return key
}

const (
	rwWaitPrefix      = "\x00rw\x00"
	semWaitPrefix     = "\x00sem\x00"
	observeWaitPrefix = "\x00obs\x00" // Election.Observe
)

// isKindWaitKey reports whether a waitQueue key is a read-write lock's or
// a semaphore's.
func isKindWaitKey(key string) bool { return key != "" && key[0] == 0 }

// checkKind validates k and the options for it, and that the store keeps
// holds of its mode.
func (lk *Locker) checkKind(k kind, o *resolved) error {
	if k.mode == driver.ModePermit && (k.limit < 1 || k.limit > MaxPermits) {
		return badOption("permits", "%d is not between 1 and %d", k.limit, MaxPermits)
	}
	if k.mode != driver.ModeMutex && o.fair {
		return badOption("ObtainOptions.Fair", "only a mutex waits in a fair queue, not a %v hold", k.mode)
	}
	o.kind = k
	return lk.door.kinds(k.mode)
}

// RWMutex is a read-write lock on one key, kept in the Locker's store:
// many readers or one writer hold it at a time, across every Locker of
// the store. Every hold is a Lock of its own, with its own lease renewed
// by the engine, its own Done and Context: a reader that dies frees only
// itself, at its TTL.
//
// Writers are not starved: a writer that finds readers holding the key
// leaves a claim at the store, renewed while it waits, that refuses new
// readers until it is granted or gives up. A writer's Lock carries a fence
// greater than every earlier writer's on the key; a reader's carries the
// fence of the last writer (0 before any), so a reader can tell which
// writes it sees.
//
// A RWMutex's key is not a mutex's: Locker.Obtain("x") and
// RWMutex("x").Lock do not exclude each other. Nor can the key be a
// Semaphore's while either holds it (ErrKindMismatch). Reentrant holds are
// a mutex's only: RLock and Lock always ask the store. On a store that
// keeps only mutexes (RedLock) every call returns an error matching
// ErrUnsupported.
type RWMutex struct {
	lk  *Locker
	key string
}

// RWMutex returns the read-write lock named key. The key is checked by
// each call, which returns a *OptionError when it is invalid.
func (lk *Locker) RWMutex(key string) *RWMutex { return &RWMutex{lk: lk, key: key} }

// Lock obtains the write side, waiting as Locker.Obtain does while readers
// or another writer hold it. ObtainOptions.Fair is refused.
func (rw *RWMutex) Lock(ctx context.Context, opts *ObtainOptions) (*Lock, error) {
	return rw.lk.obtain(ctx, rw.key, opts, kind{mode: driver.ModeWrite})
}

// TryLock makes one attempt at the write side, as Locker.TryObtain does.
// It leaves no claim behind.
func (rw *RWMutex) TryLock(ctx context.Context, opts *ObtainOptions) (*Lock, error) {
	return rw.lk.tryObtain(ctx, rw.key, opts, kind{mode: driver.ModeWrite})
}

// RLock obtains a read side, waiting as Locker.Obtain does while a writer
// holds the key or waits for it.
func (rw *RWMutex) RLock(ctx context.Context, opts *ObtainOptions) (*Lock, error) {
	return rw.lk.obtain(ctx, rw.key, opts, kind{mode: driver.ModeRead})
}

// TryRLock makes one attempt at a read side, as Locker.TryObtain does.
func (rw *RWMutex) TryRLock(ctx context.Context, opts *ObtainOptions) (*Lock, error) {
	return rw.lk.tryObtain(ctx, rw.key, opts, kind{mode: driver.ModeRead})
}

// Semaphore is a counting semaphore on one key, kept in the Locker's
// store: at most its number of permits are held at a time across every
// Locker of the store. Each permit is a Lock with its own lease, renewed
// by the engine in the same batches as every other lease, so the permit
// of a holder that dies returns when its lease ends, and a holder that
// cannot renew is told on Done before the store could give its permit to
// anyone else. Each grant carries a fence greater than every earlier
// grant's on the key.
//
// The number of permits is kept at the store with the key while any
// permit is held: a Semaphore of the same key with another number is
// refused with ErrKindMismatch, never silently resized. A Semaphore's key
// is not a mutex's (Locker.Obtain of the same name does not count against
// it). On a store that keeps only mutexes (RedLock) every call returns an
// error matching ErrUnsupported.
//
// Fleet-wide "at most three reports at once" is one line:
//
//	permit, err := lk.Semaphore("reports", 3).Acquire(ctx, nil)
type Semaphore struct {
	lk      *Locker
	key     string
	permits int
}

// Semaphore returns the semaphore named key with the given number of
// permits, between 1 and MaxPermits. The key and the number are checked
// by each call, which returns a *OptionError when either is invalid.
func (lk *Locker) Semaphore(key string, permits int) *Semaphore {
	return &Semaphore{lk: lk, key: key, permits: permits}
}

// Acquire obtains a permit, waiting as Locker.Obtain does while every
// permit is held. ObtainOptions.Fair is refused.
func (s *Semaphore) Acquire(ctx context.Context, opts *ObtainOptions) (*Lock, error) {
	return s.lk.obtain(ctx, s.key, opts, kind{mode: driver.ModePermit, limit: s.permits})
}

// TryAcquire makes one attempt to obtain a permit, as Locker.TryObtain
// does.
func (s *Semaphore) TryAcquire(ctx context.Context, opts *ObtainOptions) (*Lock, error) {
	return s.lk.tryObtain(ctx, s.key, opts, kind{mode: driver.ModePermit, limit: s.permits})
}

// Mode returns the kind of hold l is.
func (l *Lock) Mode() Mode { return l.mode }
