package tasklock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tasklock/tasklock/driver"
)

// A Lock is a held lease on one key. It is kept alive by its Locker's
// renewal engine until Release, loss, MaxHold or a missed progress
// heartbeat; Done and Context say when it ends and Err why.
//
// A Lock is safe for concurrent use.
//
// Each field has one owner, which decides how it is synchronised: the
// grant (set before the Lock is shared, never written again), the atomics
// (each with its one writer named), and the engine (state).
// The layout keeps a held lock within 288 bytes.
type Lock struct {
	// Set once by Locker.grant (Locker.reenter for a nested handle) before
	// the Lock is shared; read by anyone without synchronisation.
	lk         *Locker
	key        string
	token      string
	owner      string
	fence      uint64
	acquiredAt time.Time // when the acquire request was sent (monotonic)
	maxHold    time.Duration
	minHold    time.Duration
	progress   time.Duration
	grace      time.Duration
	renew      bool        // renewed automatically (not ObtainOptions.NoRenew)
	mode       driver.Mode // the kind of hold (kinds.go)
	// outer is the Lock whose lease a nested handle shares (reentrant.go);
	// nil for a Lock with its own lease.
	outer *Lock
	// inherited is the chain of holds the obtaining ctx carried; Context
	// carries it behind this Lock's own hold.
	inherited *holdNode

	// Atomics, read by anyone without a lock.
	done    atomic.Pointer[chan struct{}] // made by the first Done, or set closed by the engine's end: whichever comes first
	beat    atomic.Int64                  // written by Heartbeat: the last one as ns since acquiredAt
	validNs atomic.Int64                  // written by the engine with engine.mu held: the end of local validity as ns since the engine's base

	// Owned by the engine: read and written only by its methods
	// (engine.go), with engine.mu held.
	state lockState
}

// lockState is the part of a Lock its engine owns: read and written only by
// the engine's methods, with engine.mu held.
type lockState struct {
	ended      bool
	releasedOK bool          // a Release removed the lease at the store
	inFlight   bool          // a renewal for this lock is under way
	cause      error         // why it ended
	ttl        time.Duration // the lease length renewals ask for
	renewAt    time.Time     // next renewal; zero when none is planned
	dueAt      time.Time     // the heap's key: when the engine must look next, as last scheduled
	endCause   error         // the cause if validity passes unrenewed (nil: ErrLockLost)
	idx        int           // index in the engine's heap, -1 when not in it
	attempts   int           // failed renewal calls in a row
	x          *lockExtra    // state few locks need, made on first use
}

// lockExtra holds a Lock's rarely needed state; like lockState, owned by
// the engine.
type lockExtra struct {
	ctx         context.Context
	cancel      context.CancelCauseFunc
	lastErr     error         // the error of the last failed renewal call
	extends     []chan error  // Extend calls waiting for a renewal not yet sent
	sentExtends []chan error  // Extend calls answered by the renewal under way
	nested      []*Lock       // open nested handles on this lease (reentrant.go)
	keptTTL     time.Duration // once Extend changed the lease length: the one the store last accepted
}

// closedChan is what Done returns for a lock that ended before anyone asked.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// closeDone closes the Done channel, or marks it closed if it was never
// made. Called once, by the engine's end.
func (l *Lock) closeDone() {
	for {
		if p := l.done.Load(); p != nil {
			close(*p)
			return
		}
		if l.done.CompareAndSwap(nil, &closedChan) {
			return
		}
	}
}

// Key returns the lock's key. A nested handle (see Locker.Obtain) has the
// Key, Fence and Owner of the outer hold.
func (l *Lock) Key() string { return l.key }

// Fence returns the lock's fencing token: strictly greater than the fence
// of every earlier grant of this key by the same store. Pass it to the
// resource the lock protects so that it can refuse stale writers (see
// package fence).
func (l *Lock) Fence() uint64 { return l.fence }

// Owner returns the owner name the lock was obtained under.
func (l *Lock) Owner() string { return l.owner }

// Done returns a channel that is closed when the lock ends: released, lost,
// MaxHold reached, stalled, or its Locker closed. It closes no later than the
// lease's local validity, before the store could grant the key to anyone
// else. Done checks that deadline itself too, so a process resumed after a
// long pause sees the channel closed before its engine goroutine has run.
func (l *Lock) Done() <-chan struct{} {
	l.lk.eng.expireIfDue(l)
	if p := l.done.Load(); p != nil {
		return *p
	}
	ch := make(chan struct{})
	if l.done.CompareAndSwap(nil, &ch) {
		return ch
	}
	return *l.done.Load()
}

// Deadline returns the end of the lock's local validity as its grant or
// latest renewal set it, a reading of the Locker's Clock: Done closes by
// then unless a renewal moves it later (it includes ObtainOptions.Grace).
// It is for work that runs where Done cannot reach it, such as another
// process: handed this time, again whenever it moves, that work can stop
// by itself in time even while this process is paused and cannot tell it.
func (l *Lock) Deadline() time.Time { return l.lk.eng.validUntilOf(l.lease()) }

// Context returns a context that is cancelled when Done closes, with the
// reason as its cause: context.Cause returns ErrReleased, or an error
// matching ErrLockLost (ErrMaxHold, ErrStalled, ErrClosed, ...). Like Done,
// its Done, Err and Value (which context.Cause reads) check the lease's
// deadline themselves, so work resumed after a long pause that asks this
// context finds it ended before its engine goroutine has run. A context
// derived from it (context.WithTimeout, ...) learns of such an end only
// when that goroutine runs, at once after the resume.
func (l *Lock) Context() context.Context { return l.lk.eng.context(l) }

// leaseContext is a context that ends no later than l's local validity,
// also in a process resumed after a pause before the engine goroutine has
// run: Done, Err and Value look at the deadline first, as Lock.Done does,
// and end the context at once when it has passed. cancel (nil for the
// lock's own context, which the engine's end cancels) ends a context made
// apart from the lock's, as the one Once and WithLock give fn.
type leaseContext struct {
	context.Context
	l      *Lock
	cancel context.CancelCauseFunc
}

// check ends c when the lease's local validity has passed. A lease still
// valid costs one clock read and one atomic load.
func (c *leaseContext) check() {
	e, lease := c.l.lk.eng, c.l.lease()
	if e.clock.Now().Sub(e.base) < time.Duration(lease.validNs.Load()) {
		return
	}
	e.expireIfDue(c.l)
	if c.cancel != nil {
		if cause := e.cause(c.l); cause != nil {
			c.cancel(cause)
		}
	}
}

// Done checks the lease's deadline, then returns the context's channel.
func (c *leaseContext) Done() <-chan struct{} {
	c.check()
	return c.Context.Done()
}

// Err checks the lease's deadline, then returns the context's error.
func (c *leaseContext) Err() error {
	c.check()
	return c.Context.Err()
}

// Value checks the lease's deadline, so that context.Cause, which reads
// the cause through Value, sees an end that Err would, then looks key up.
func (c *leaseContext) Value(key any) any {
	c.check()
	return c.Context.Value(key)
}

// Err returns nil while the lock is held, and the reason it ended after
// Done is closed.
func (l *Lock) Err() error { return l.lk.eng.cause(l) }

// Heartbeat reports progress. With ObtainOptions.ProgressTimeout set, the
// lock is renewed only while Heartbeat is called at least that often. It is
// cheap and safe to call from any goroutine.
//
// On a nested handle, Heartbeat reports progress for the outer hold's
// lease, which the handle shares.
func (l *Lock) Heartbeat() {
	r := l.lease()
	r.beat.Store(int64(l.lk.clock.Now().Sub(r.acquiredAt)))
}

// Extend asks the store to make the lease last d from now, and makes d the
// lease length of later automatic renewals. It never extends past MaxHold.
// It returns ErrNotHeld (with the cause) when the lock has ended or the
// store no longer has the lease. A length the store does not keep (longer
// than an etcd or ZooKeeper session) is refused with an error matching
// ErrUnsupported: the lock stays held, renewed with the length it had. ctx bounds the call: when it ends first,
// Extend returns its error, and the Locker's engine renews the lease with
// the new length itself.
//
// On a nested handle, Extend extends the outer hold's lease, which the
// handle shares, and returns ErrNotHeld once the handle has ended.
func (l *Lock) Extend(ctx context.Context, d time.Duration) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	if d < MinTTL {
		return badOption("Extend duration", "%v is below the minimum %v", d, MinTTL)
	}
	if d > MaxTTL {
		return badOption("Extend duration", "%v is above the maximum %v", d, MaxTTL)
	}
	return l.lk.eng.extend(ctx, l, d)
}

// answer waits for the outcome of a renewal an Extend of l asked for, or
// for ctx to end.
func (l *Lock) answer(ctx context.Context, answer <-chan error) error {
	select {
	case err := <-answer:
		return err
	case <-ctx.Done():
		return fmt.Errorf("tasklock: extend %q: %w", l.key, ctx.Err())
	}
}

// Release gives the lock up: renewal stops, Done closes with ErrReleased,
// and the lease is deleted at the store — or, with MinHold, shortened to end
// at acquisition + MinHold. It returns an error matching ErrNotHeld when the
// store no longer had the lease (it expired or was lost before; the error
// then also matches why the lock ended, as Err does), and nil when called
// again after a successful Release. It never touches another owner's
// lease. ctx bounds the store call, except when it ended only because this
// lock did (it is the lock's Context, or derived from it, as in
// `ctx := lock.Context(); defer lock.Release(ctx)`): then the release still
// goes to the store, bounded by 5 s, so the key is not left held until its
// TTL. A ctx with no deadline is bounded by 5 s (and up to an eighth more)
// too: a store that stopped answering ends the release with its error.
//
// Releasing a nested handle (see Locker.Obtain) makes no store call: its
// own Done closes with ErrReleased and the lease stays with the outer hold;
// it returns an error matching ErrNotHeld, with the cause, when the outer
// hold was lost first. Releasing the outermost hold releases the lease even
// while nested handles are open, and ends them with ErrReleased. A nil ctx
// counts as context.Background().
func (l *Lock) Release(ctx context.Context) error {
	if ctx == nil {
		// Released all the same, as with no deadline: an error here,
		// often dropped by a deferred call, would leave the lease
		// renewed until the Locker closes.
		ctx = context.Background()
	}
	if l.outer != nil {
		return l.releaseNested()
	}
	lk := l.lk
	// endsHere: this call ends the lock, and reports the release.
	endsHere, releasedBefore := lk.eng.release(l)
	if releasedBefore {
		return nil
	}
	var keep time.Duration
	if l.minHold > 0 {
		keep = keepFor(l.minHold, lk.clock.Now().Sub(l.acquiredAt))
	}
	rctx, cancel := l.releaseContext(ctx)
	defer cancel()
	err := lk.door.release(rctx, driver.ReleaseParams{Key: l.key, Token: l.token, KeepFor: keep, Mode: l.mode})
	if err != nil {
		if unanswered(ctx, rctx) {
			err = fmt.Errorf("the store did not answer within %v: %w", releaseTimeout, err)
		}
		if cause := lk.eng.cause(l); !endsHere && cause != nil && !errors.Is(cause, ErrReleased) {
			// It had ended (lost, MaxHold, ...): say why, as Extend does.
			err = fmt.Errorf("%w; the lock had ended: %w", err, cause)
		}
		err = fmt.Errorf("tasklock: release %q: %w", l.key, err)
		if endsHere {
			lk.emit(Event{Type: EventReleased, Key: l.key, Owner: l.owner, Mode: l.mode, Fence: l.fence, Err: err})
		}
		return err
	}
	lk.eng.released(l)
	if keep <= 0 && !lk.door.notified() {
		// Without a subscription nothing else tells this Locker's waiters;
		// with one, the store's message does, and a second wake-up here
		// would only cost a losing attempt.
		lk.waiters.notify(l.key)
	}
	if endsHere {
		lk.emit(Event{Type: EventReleased, Key: l.key, Owner: l.owner, Mode: l.mode, Fence: l.fence})
	}
	return nil
}

// releaseContext returns the context Release calls the store with: ctx,
// bounded by releaseTimeout when it has no deadline (bound.go), unless ctx
// ended only because l did (ctx carries l's hold and its cause is l's), in
// which case the call goes on without ctx's cancellation, bounded by
// releaseTimeout too.
func (l *Lock) releaseContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return l.lk.releaseBounds.bound(ctx, releaseTimeout)
	}
	carried := false
	for n := holdsOf(ctx); n != nil && !carried; n = n.next {
		carried = n.lock == l
	}
	if cause := l.lk.eng.cause(l); !carried || cause == nil || !errors.Is(context.Cause(ctx), cause) {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
}

// notHeld wraps cause as the error Extend returns after a lock ended.
func notHeld(cause error) error {
	if errors.Is(cause, ErrNotHeld) {
		return cause
	}
	return fmt.Errorf("%w: %w", ErrNotHeld, cause)
}
