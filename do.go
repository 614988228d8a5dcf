package tasklock

import (
	"context"
	"errors"
	"time"
)

// releaseTimeout bounds the Release that Do makes after the work returns.
const releaseTimeout = 5 * time.Second

// Do obtains key (waiting as Obtain does), runs fn with a context that is
// cancelled when the lock ends or ctx does, and releases the lock when fn
// returns. Its error joins fn's error with the loss cause when the lock
// was lost while fn ran (errors.Is(err, ErrLockLost) then holds), so work
// that finished without exclusivity is never reported as plain success.
func Do(ctx context.Context, lk *Locker, key string, opts *ObtainOptions, fn func(ctx context.Context) error) error {
	l, err := lk.Obtain(ctx, key, opts)
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	lockCtx := l.Context()
	stop := context.AfterFunc(lockCtx, func() { cancel(context.Cause(lockCtx)) })
	fnErr := fn(runCtx)
	stop()
	cancel(nil)
	lost := l.Err()

	relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer relCancel()
	relErr := l.Release(relCtx)
	if lost != nil {
		return errors.Join(fnErr, lost)
	}
	return errors.Join(fnErr, relErr)
}
