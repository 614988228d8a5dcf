package tasklock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/redact"
)

// ErrNotObtained is matched (errors.Is) by the error TryObtain returns when
// the key is held elsewhere, and by the error Obtain returns when its wait
// ends first. The error is a *NotObtainedError naming the holder when the
// store can tell.
var ErrNotObtained = errors.New("tasklock: not obtained")

// ErrNotHeld is returned by Release and Extend when the lease is no longer
// this lock's at the store: it expired, was lost, or another owner holds it.
var ErrNotHeld = driver.ErrNotHeld

// ErrUnsupported is matched by errors for requests the store can never
// satisfy as made (a TTL longer than an etcd or ZooKeeper session, a key
// Redis Cluster cannot hash). Obtain does not retry them.
var ErrUnsupported = driver.ErrUnsupported

// ErrKindMismatch is matched by the error of an attempt on a key that is
// live as another kind of lock: a Semaphore asked with a different number
// of permits than its holders were, or a read-write lock's key used as a
// semaphore's. It is never retried.
var ErrKindMismatch = driver.ErrKindMismatch

// ErrLockLost is the cause of a Lock's Context when its lease is gone or can
// no longer be trusted: the store said it belongs to someone else, or it
// could not be renewed before its local validity ended. ErrMaxHold,
// ErrStalled and ErrClosed also match ErrLockLost with errors.Is.
var ErrLockLost = errors.New("tasklock: lock lost")

// ErrMaxHold is the cause when a lock reached ObtainOptions.MaxHold: renewal
// stopped and the lease ends at the store at acquisition + MaxHold.
var ErrMaxHold error = &lossError{"tasklock: max hold reached"}

// ErrStalled is the cause when Heartbeat was not called within
// ObtainOptions.ProgressTimeout: renewal stopped so that the lease expires at
// the store, and the holder should abandon its work.
var ErrStalled error = &lossError{"tasklock: no progress heartbeat within ProgressTimeout"}

// ErrClosed is returned by calls on a closed Locker, and is the cause of
// every Lock the Locker still held when Close was called.
var ErrClosed error = &lossError{"tasklock: locker closed"}

// ErrReleased is the cause of a Lock's Context after Release. It does not
// match ErrLockLost.
var ErrReleased = errors.New("tasklock: lock released")

// ErrStaleFence is returned by fence.Register.Write for a fence lower than
// one already accepted.
var ErrStaleFence = errors.New("tasklock: stale fence")

// lossError is a loss cause that is also an ErrLockLost.
type lossError struct{ msg string }

func (e *lossError) Error() string        { return e.msg }
func (e *lossError) Is(target error) bool { return target == ErrLockLost }

// NotObtainedError is returned when a lock could not be obtained because
// another owner holds it. It matches ErrNotObtained, and the context error
// when Obtain's wait ended.
type NotObtainedError struct {
	Key   string
	Owner string        // the current holder's owner name, "" when unknown
	TTL   time.Duration // the holder's remaining lease, 0 when unknown
	Err   error         // why waiting stopped (ctx.Err()), nil for TryObtain
}

// Error implements error.
func (e *NotObtainedError) Error() string {
	s := "tasklock: not obtained: " + redact.Quote(e.Key)
	if e.Owner != "" {
		// The owner comes from the store, perhaps written before owner
		// names were checked: escape what could reach a terminal raw.
		s += " is held by " + redact.Printable(e.Owner)
		if e.TTL > 0 {
			s += fmt.Sprintf(" for another %v", e.TTL.Round(time.Millisecond))
		}
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrNotObtained and, when waiting ended, its cause.
func (e *NotObtainedError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrNotObtained}
	}
	return []error{ErrNotObtained, e.Err}
}

// OptionError is returned by New, Obtain, TryObtain, Extend, Once and
// WithLock for an invalid option, argument or key; Field names it, e.g.
// "ObtainOptions.TTL", "key" or "ctx" (nil). It is driver.OptionError, the one type
// every package of this module (schedule, the stores) returns for a bad
// option, so errors.As with a *tasklock.OptionError matches all of them.
type OptionError = driver.OptionError

// checkContext refuses a nil ctx, which would otherwise panic deep in the
// call, far from the caller's mistake.
func checkContext(ctx context.Context) error {
	if ctx == nil {
		return badOption("ctx", "is nil: pass context.Background() when there is no other")
	}
	return nil
}

// badOption returns the *OptionError of this package for field.
func badOption(field, format string, args ...any) *OptionError {
	return &OptionError{Pkg: "tasklock", Field: field, Reason: fmt.Sprintf(format, args...)}
}
