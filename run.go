package tasklock

import (
	"context"
	"errors"
	"time"
)

// releaseTimeout bounds the Release that Once and WithLock make after the
// work returns.
const releaseTimeout = 5 * time.Second

// OnceResult says what Once did.
type OnceResult struct {
	// Ran is true when this call obtained the lock and ran fn; false when
	// another replica held key (running the work, or keeping it for
	// MinHold after running it), and fn was not called.
	Ran bool
	// Fence is the fencing token of this call's grant when Ran.
	Fence uint64
	// Holder names the owner that held key when fn was skipped, "" when
	// the store cannot tell.
	Holder string
}

// Once runs fn at most once across every replica that calls it for key at
// about the same time: it makes one attempt to obtain key and, when
// another owner holds it, returns at once with Ran false and a nil error
// (the work is being done, or was done within MinHold, elsewhere). When it
// obtains key it runs fn as WithLock does and releases the lock; the lease
// is then kept until the grant plus ObtainOptions.MinHold, so a replica
// that arrives a little later — a slower start, a skewed clock — skips too.
// This is ShedLock's lockAtLeastFor: set MinHold to more than the spread
// between the replicas' start times (for a cron job, a few seconds plus
// the clock skew), and below the job's period so that the next run is not
// skipped. With MinHold zero, a replica that tries after the first one
// finished runs fn again.
//
// The error is fn's, joined with the loss cause when the lock was lost
// while fn ran (errors.Is(err, ErrLockLost)), or the store's when the
// attempt itself failed (Ran false).
//
// Within a call chain that already holds key through this Locker (ctx
// carries the hold, as fn's context does in Once and WithLock), Once is
// reentrant: the chain's own hold is what keeps others out, so fn runs
// (Ran true, with the outer hold's Fence) under a nested handle, and the
// nested call's MinHold has no effect: the outer lease's applies.
func Once(ctx context.Context, lk *Locker, key string, opts *ObtainOptions, fn func(ctx context.Context) error) (OnceResult, error) {
	if err := checkRunArgs(ctx, lk, fn); err != nil {
		return OnceResult{}, err
	}
	l, err := lk.TryObtain(ctx, key, opts)
	if err != nil {
		var held *NotObtainedError
		if errors.As(err, &held) {
			return OnceResult{Holder: held.Owner}, nil
		}
		return OnceResult{}, err
	}
	return OnceResult{Ran: true, Fence: l.Fence()}, runHolding(ctx, l, fn)
}

// WithLock is a mutex around fn: it obtains key, waiting as Obtain does
// while another owner holds it, runs fn with a context that is cancelled
// when the lock ends or ctx does, and releases the lock when fn returns
// (or panics: the panic goes on once the lock is released).
// Every caller runs fn, one after another; use Once for work that must
// run once across replicas. Its error joins fn's error with the loss cause
// when the lock was lost while fn ran (errors.Is(err, ErrLockLost) then
// holds), so work that finished without exclusivity is never reported as
// plain success. fn's context carries the hold: WithLock (or Obtain) on
// key with it, or with a context derived from it, is reentrant and runs at
// once under a nested handle.
func WithLock(ctx context.Context, lk *Locker, key string, opts *ObtainOptions, fn func(ctx context.Context) error) error {
	if err := checkRunArgs(ctx, lk, fn); err != nil {
		return err
	}
	l, err := lk.Obtain(ctx, key, opts)
	if err != nil {
		return err
	}
	return runHolding(ctx, l, fn)
}

// checkRunArgs refuses a nil ctx, Locker or fn before anything is
// obtained.
func checkRunArgs(ctx context.Context, lk *Locker, fn func(ctx context.Context) error) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	switch {
	case lk == nil:
		return badOption("lk", "nil")
	case fn == nil:
		return badOption("fn", "nil")
	}
	return nil
}

// runHolding runs fn under l and releases l, also when fn panics: a
// caller that recovers (net/http does for every handler) would otherwise
// keep the lease renewed until the Locker closes.
func runHolding(ctx context.Context, l *Lock, fn func(ctx context.Context) error) (err error) {
	// fn's context carries the hold, so that Obtain, WithLock or Once on
	// the same key within fn are reentrant.
	inner, cancel := context.WithCancelCause(withHold(ctx, l))
	// fn's context checks the lease's deadline itself, as l.Context does:
	// the AfterFunc below runs on a goroutine of its own, which a process
	// resumed after a pause may not have run yet when fn looks.
	runCtx := &leaseContext{Context: inner, l: l, cancel: cancel}
	lockCtx := l.Context()
	stop := context.AfterFunc(lockCtx, func() { cancel(context.Cause(lockCtx)) })
	var fnErr error
	defer func() {
		stop()
		cancel(nil)
		lost := l.Err()

		relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer relCancel()
		relErr := l.Release(relCtx)
		switch {
		case lost != nil && errors.Is(fnErr, lost):
			err = fnErr // fn returned its context's cause: the loss, once
		case lost != nil:
			err = errors.Join(fnErr, lost)
		default:
			err = errors.Join(fnErr, relErr)
		}
	}()
	fnErr = fn(runCtx)
	return nil
}
