package tasklock

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// A store call made with a ctx that has no deadline (context.Background(),
// a signal's context) would wait as long as the store's client lets it for
// an answer: forever, with most clients, from a server that was paused or
// whose network went silent without closing the connection. So Locker
// bounds such calls itself: an attempt to obtain by its lease's TTL (an
// answer after that is refused anyway: see grant), a release by
// releaseTimeout. A ctx with a deadline is the caller's bound and is used
// as it is.

// callBound is a context shared by the unbounded calls that start before
// until: it ends between d and d+d/8 after each of them starts.
type callBound struct {
	d     time.Duration
	ctx   context.Context
	stop  context.CancelFunc // ctx's; never called: calls may still use ctx, which ends at its deadline
	until time.Time
}

// callBounds hands out the bounds of one kind of call. Calls with a plain
// context.Background() share one context (and its timer) for a while, so
// that bounding them costs no allocation; any other ctx without a deadline
// gets a context of its own, which keeps its values and cancellation.
type callBounds struct{ last atomic.Pointer[callBound] }

// bound returns ctx bounded by d (up to d/8 more for a shared one) unless
// it has a deadline, with the function that frees the bound.
func (b *callBounds) bound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || d <= 0 {
		return ctx, noCancel
	}
	if ctx != context.Background() {
		return context.WithTimeout(ctx, d)
	}
	now := time.Now()
	if c := b.last.Load(); c != nil && c.d == d && now.Before(c.until) {
		return c.ctx, noCancel
	}
	c := &callBound{d: d, until: now.Add(d / 8)}
	c.ctx, c.stop = context.WithTimeout(context.Background(), d+d/8)
	b.last.Store(c)
	return c.ctx, noCancel
}

func noCancel() {}

// unanswered reports whether the call made with bounded, the bound of ctx,
// ended because of the bound alone: its deadline passed while ctx lives.
// It may be asked after the bound was freed, which cancels a bound of its
// own: that is not its deadline. (When bound returned ctx itself, the
// two errors are one, and it is false.)
func unanswered(ctx, bounded context.Context) bool {
	return errors.Is(bounded.Err(), context.DeadlineExceeded) && ctx.Err() == nil
}
