package tasklock

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/internal/slogfilter"
)

// A Locker obtains locks from one store and keeps them alive. It owns one
// renewal goroutine (started by New, stopped by Close) and, when the store
// can notify, one subscription shared by all its waiters. Create one Locker
// per store and process, and share it.
type Locker struct {
	door    *door // the one way to the store
	clock   Clock
	log     *slog.Logger
	owner   string
	onEvent func(Event)
	eng     *engine
	waiters waitQueue
	// contended are the keys an Obtain here lately found held, on a store
	// with a queue: the next Obtain of one joins the queue at once (queue.go).
	contended contendedKeys

	closing   context.Context // done once Close began
	endAll    context.CancelFunc
	closeOnce sync.Once

	// obtainBounds and releaseBounds bound the store calls of a ctx with
	// no deadline (bound.go).
	obtainBounds, releaseBounds callBounds

	tokenSeed [8]byte       // random per Locker, from crypto/rand
	tokenSeq  atomic.Uint64 // makes every token of this Locker distinct
}

// New returns a Locker for store. A nil cfg means defaults. It returns an
// *OptionError naming the field when cfg is invalid.
func New(store driver.Store, cfg *Config) (*Locker, error) {
	if store == nil {
		return nil, badOption("store", "nil")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Owner == "" {
		c.Owner = DefaultOwner()
	}
	if err := validateOwner("Config.Owner", c.Owner); err != nil {
		return nil, err
	}
	if c.Clock == nil {
		c.Clock = SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slogfilter.AtLeast(slog.Default().Handler(), slog.LevelWarn))
	}
	lk := &Locker{
		door: newDoor(store, c.Clock, c.Logger), clock: c.Clock, log: c.Logger, owner: c.Owner, onEvent: c.OnEvent,
		waiters: waitQueue{m: make(map[string][]*waiter)},
	}
	lk.closing, lk.endAll = context.WithCancel(context.Background())
	if _, err := rand.Read(lk.tokenSeed[:]); err != nil {
		return nil, fmt.Errorf("tasklock: reading random bytes: %w", err)
	}
	lk.eng = newEngine(lk, lk.door, c.Clock)
	go lk.eng.run()
	return lk, nil
}

// Owner returns the Locker's default owner name.
func (lk *Locker) Owner() string { return lk.owner }

// Close ends every lock the Locker holds (their Done closes with ErrClosed),
// releases their leases at the store within a few seconds, stops the
// renewal goroutine and the subscription, and makes blocked Obtain calls
// return ErrClosed. It is safe to call more than once.
func (lk *Locker) Close() error {
	var errs []error
	lk.closeOnce.Do(func() {
		lk.endAll()
		held := lk.eng.close()
		errs = lk.releaseAll(held)
		lk.door.close()
	})
	return errors.Join(errs...)
}

// releaseAll deletes the leases of locks ended by Close, a few at a time,
// within a bounded time: a lease not deleted expires by its TTL anyway.
func (lk *Locker) releaseAll(held []*Lock) []error {
	if len(held) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		next = make(chan *Lock)
	)
	for range min(len(held), 16) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l := range next {
				err := lk.door.release(ctx, driver.ReleaseParams{Key: l.key, Token: l.token, Mode: l.mode})
				if err != nil && !errors.Is(err, driver.ErrNotHeld) {
					mu.Lock()
					errs = append(errs, fmt.Errorf("tasklock: release %q on close: %w", l.key, err))
					mu.Unlock()
				}
			}
		}()
	}
	for _, l := range held {
		next <- l
	}
	close(next)
	wg.Wait()
	return errs
}

// TryObtain makes one attempt to obtain key. When another owner holds it,
// the error is a *NotObtainedError (matching ErrNotObtained) naming the
// holder and its remaining TTL when the store can tell. An attempt that
// lost a race at the store (driver.ErrTryAgain: the holder changed while
// the store looked, a RedLock vote split) is made again, up to
// maxTryAgain times within a few hundred milliseconds; when every one loses,
// the key is reported as held: a *NotObtainedError whose Err is the store's
// last error, unless that says the store could not tell
// (driver.ErrUndecided). No attempt is started once tryAgainFor (1.5 s)
// has passed since the first, so races that are slow to lose — a RedLock
// vote that a silent node could decide either way waits up to a second for
// it — end TryObtain within 1.5 s and one attempt (about 2.5 s with
// RedLock). The error then (or when the last attempt was undecided) says
// the store could not decide: it wraps the store's last error (and
// driver.ErrTryAgain) and does not match ErrNotObtained, as the key may be
// free. ctx bounds the call, never the lock (with no deadline, an attempt
// is bounded by its lease's TTL, as Obtain's are): a held lock lives
// until Release or loss. Like Obtain, it is reentrant for a ctx that
// carries this Locker's live lock on key.
func (lk *Locker) TryObtain(ctx context.Context, key string, opts *ObtainOptions) (*Lock, error) {
	return lk.tryObtain(ctx, key, opts, kind{})
}

// tryObtain is TryObtain for a hold of kind k.
func (lk *Locker) tryObtain(ctx context.Context, key string, opts *ObtainOptions, k kind) (*Lock, error) {
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	o, err := lk.resolveKind(key, opts, k)
	if err != nil {
		return nil, err
	}
	if l, err := lk.reenter(ctx, key, &o); l != nil || err != nil {
		return l, err
	}
	start := lk.clock.Now()
	// A writer refused leaves a claim at the store (its waiting entry);
	// a TryLock takes it back, so that it never holds readers off.
	token := ""
	if o.mode == driver.ModeWrite {
		token = lk.newToken()
	}
	for race := 1; ; race++ {
		l, _, err := lk.try(ctx, key, &o, token)
		if err != nil && token != "" {
			lk.door.giveBack(key, token, o.mode)
		}
		took := lk.clock.Now().Sub(start)
		switch {
		case err == nil:
			lk.obtained(l, took)
			return l, nil
		case !errors.Is(err, driver.ErrTryAgain):
			return nil, err
		case took >= tryAgainFor, race == maxTryAgain && errors.Is(err, driver.ErrUndecided):
			// Not ErrNotObtained: nobody is known to hold the key.
			return nil, fmt.Errorf("%w (undecided after %d attempts in %v: the key may be free)",
				err, race, took.Round(time.Millisecond))
		case race == maxTryAgain:
			ne := &NotObtainedError{Key: key, Err: err}
			lk.emit(Event{Type: EventNotObtained, Key: key, Owner: o.owner, Mode: o.mode, Err: ne})
			return nil, ne
		}
		if !lk.sleep(ctx, raceDelay(race)) {
			return nil, fmt.Errorf("tasklock: obtain %q: %w (last error: %w)", key, ctx.Err(), err)
		}
	}
}

// maxTryAgain is how many attempts TryObtain makes while the store answers
// driver.ErrTryAgain. A race settles within an attempt or two (the key
// changed hands, or contenders that tied back off by different jittered
// delays); twelve in a row mean the key is busy changing hands, which for a
// caller that will not wait is as good as held.
const maxTryAgain = 12

// tryAgainFor is how long TryObtain keeps starting new attempts while the
// store answers driver.ErrTryAgain. Races settle within milliseconds, so it
// bounds only attempts that each take long to lose: a RedLock vote that a
// node silent past Acquire's 1 s wait could decide either way, whose next
// attempt waits as long again. It leaves room for one more attempt after
// such a one — by then the contenders have given their grants back, and a
// tie broken — and for no third: TryObtain is one attempt for its caller
// (a scheduler's tick waits on it), not a wait of maxTryAgain seconds.
const tryAgainFor = 1500 * time.Millisecond

// raceDelay is the pause before attempt n+1 after n attempts in a row lost
// a race at the store: 2 ms doubling to 20 ms, jittered over [d/2, 3d/2) so
// that contenders who tied do not tie again. Twelve attempts take about
// 170 ms.
func raceDelay(n int) time.Duration {
	d := min(2*time.Millisecond<<min(n-1, 4), 20*time.Millisecond)
	return d/2 + mrand.N(d)
}

// obtained reports a grant, after wait in Obtain.
func (lk *Locker) obtained(l *Lock, wait time.Duration) {
	lk.emit(Event{Type: EventObtained, Key: l.key, Owner: l.owner, Mode: l.mode, Fence: l.fence, Wait: wait, ValidUntil: lk.eng.validUntilOf(l)})
}

// resolveKind validates a call's options for a hold of kind k.
func (lk *Locker) resolveKind(key string, opts *ObtainOptions, k kind) (resolved, error) {
	o, err := lk.resolve(key, opts)
	if err != nil {
		return o, err
	}
	if err := lk.checkKind(k, &o); err != nil {
		return o, fmt.Errorf("tasklock: obtain %q: %w", key, err)
	}
	return o, nil
}

// Obtain obtains key, waiting while another owner holds it until ctx ends
// or ObtainOptions.Wait passes. Waiters are woken by the store when it can
// notify releases, and otherwise poll with jittered backoff, never later
// than the holder's lease could expire. When the wait ends first, the error
// is a *NotObtainedError matching both ErrNotObtained and the context error;
// when the store failed at the last attempt that ended before, it is the
// context error with the store's error instead, as when nobody was seen.
// An attempt that lost a race at the store (driver.ErrTryAgain) is always
// retried, after a few milliseconds or a wake-up: Obtain returns only with
// the lock, ctx's error, ErrClosed, or a store error it cannot retry. A
// store failure (a connection error, a missing quorum) ends the wait at once
// when ctx has no deadline; otherwise it is retried with backoff until the
// deadline. Each attempt of a ctx with no deadline is bounded by the
// lease's TTL (and up to an eighth more), since an answer after it could
// not be trusted: a store that stopped answering (a paused server, a
// silent network) ends the attempt with its error, which says so, instead
// of holding the call for as long as the store's client waits.
//
// Obtain is reentrant within a call chain: when ctx is, or derives from,
// the Context of a live Lock this Locker obtained on key — directly, or
// through Locks on other keys obtained with such a ctx — it returns at
// once, without a store call, a nested handle on that lock's lease. The
// handle has the outer hold's Key, Fence and Owner; its Done closes when it
// is released (ErrReleased) or, with the same cause, when the outer hold
// ends; Extend and Heartbeat act on the outer lease. opts are validated,
// then the outer hold's options govern the lease (TTL, MaxHold, MinHold,
// ProgressTimeout, Owner, Grace); a nested Obtain never waits. Nested
// handles emit no events: the lease was obtained once. Another Locker, or a
// ctx that does not carry the lock, contends as usual. See "Reentrant
// holds" in the package documentation.
func (lk *Locker) Obtain(ctx context.Context, key string, opts *ObtainOptions) (*Lock, error) {
	return lk.obtain(ctx, key, opts, kind{})
}

// obtain is Obtain for a hold of kind k.
func (lk *Locker) obtain(ctx context.Context, key string, opts *ObtainOptions, k kind) (*Lock, error) {
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	o, err := lk.resolveKind(key, opts, k)
	if err != nil {
		return nil, err
	}
	if l, err := lk.reenter(ctx, key, &o); l != nil || err != nil {
		return l, err
	}
	start := lk.clock.Now()
	var (
		l    *Lock
		held *NotObtainedError
	)
	fairQueue := false
	if o.fair {
		if fairQueue, err = lk.door.fairQueue(); err != nil {
			return nil, fmt.Errorf("tasklock: obtain %q: %w", key, err)
		}
	}
	// A writer keeps one token for its whole wait: its claim at the store,
	// which holds new readers off, is that token's, and is taken back when
	// the wait ends without the lock.
	token := ""
	if o.mode == driver.ModeWrite {
		token = lk.newToken()
		defer func() {
			if l == nil {
				lk.door.giveBack(key, token, o.mode)
			}
		}()
	}
	// No barging: while this Locker has waiters queued for the key, a new
	// caller queues behind them instead of racing the one a release wakes.
	// A fair wait goes to the store's queue at once.
	wkey := o.waitKey(key)
	queues := lk.door.queues() && o.mode == driver.ModeMutex
	if !lk.waiters.has(wkey) && !fairQueue && !(queues && lk.contended.has(key, start)) {
		l, held, err = lk.try(ctx, key, &o, token)
		if err == nil {
			lk.obtained(l, lk.clock.Now().Sub(start))
			return l, nil
		}
		if held == nil && !retryable(ctx, err) {
			return nil, err
		}
	}
	if o.wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.wait)
		defer cancel()
	}
	if fairQueue || queues {
		if held != nil {
			lk.contended.add(key, start)
		}
		l, err = lk.obtainQueued(ctx, key, &o, start, held, fairQueue)
		return l, err
	}
	notified := lk.door.subscribe(ctx, lk.waiters.notify)
	w := lk.waiters.add(wkey)
	obtained := false
	defer func() { lk.waiters.remove(wkey, w, obtained, o.shared()) }()
	t := lk.clock.NewTimer(time.Hour)
	defer t.Stop()
	lastHeld := held
	races := 0 // attempts in a row that lost a race at the store
	// failed is the store's failure at the last attempt that ended, nil
	// when the store answered it: a holder seen before says nothing of a
	// store that failed since.
	var failed error
	if held == nil && err != nil && !errors.Is(err, driver.ErrTryAgain) {
		failed = err // the first attempt's, above
	}
	for attempt := 1; ; attempt++ {
		l, held, err = lk.try(ctx, key, &o, token)
		switch {
		case err == nil:
			obtained = true
			lk.obtained(l, lk.clock.Now().Sub(start))
			return l, nil
		case held != nil:
			lastHeld, failed = held, nil
		case ctx.Err() != nil && lastHeld != nil && failed == nil:
			// The wait ended during an attempt: report the holder seen last.
			lastHeld.Err = ctx.Err()
			return nil, lastHeld
		case ctx.Err() != nil && failed != nil:
			return nil, fmt.Errorf("tasklock: obtain %q: %w (last error: %w)", key, ctx.Err(), failed)
		case !retryable(ctx, err):
			return nil, err
		case errors.Is(err, driver.ErrTryAgain):
			failed = nil
		default:
			failed = err
		}
		if errors.Is(err, driver.ErrTryAgain) {
			races++
			t.Reset(raceDelay(races))
		} else {
			races = 0
			var holderTTL time.Duration
			if held != nil {
				holderTTL = held.TTL
			}
			d := pollDelay(attempt, holderTTL, notified)
			if o.mode == driver.ModeWrite {
				// Ask again well within the claim's TTL, or readers come back.
				d = min(d, o.ttl/3)
			}
			t.Reset(d)
		}
		select {
		case <-w.ch:
		case <-t.C():
		case <-lk.closing.Done():
			return nil, ErrClosed
		case <-ctx.Done():
			if lastHeld == nil || failed != nil {
				return nil, fmt.Errorf("tasklock: obtain %q: %w (last error: %w)", key, ctx.Err(), err)
			}
			lastHeld.Err = ctx.Err()
			return nil, lastHeld
		}
	}
}

// retryable reports whether Obtain keeps trying after a store error while
// ctx is live: always after a lost race (driver.ErrTryAgain), and after a
// store failure only when the caller gave it a deadline to stop by.
func retryable(ctx context.Context, err error) bool {
	var oe *OptionError
	if errors.As(err, &oe) || errors.Is(err, ErrClosed) || errors.Is(err, ErrUnsupported) || errors.Is(err, ErrKindMismatch) || ctx.Err() != nil {
		return false
	}
	if errors.Is(err, driver.ErrTryAgain) {
		return true
	}
	_, ok := ctx.Deadline()
	return ok
}

// pollDelay is how long a waiter sleeps before its next attempt unless
// woken: jittered exponential backoff from 5 ms, capped at one second with
// store notifications and 250 ms without, and never past the moment the
// holder's lease could expire.
func pollDelay(attempt int, holderTTL time.Duration, notified bool) time.Duration {
	limit := 250 * time.Millisecond
	if notified {
		limit = time.Second
	}
	d := min(5*time.Millisecond<<min(attempt-1, 10), limit)
	if holderTTL > 0 && holderTTL+time.Millisecond < d {
		d = holderTTL + time.Millisecond
	}
	return d + mrand.N(d/8+time.Millisecond)
}

// try makes one attempt, with token, or a new token when it is "". When
// the key is held it returns the *NotObtainedError both as error and as
// held.
func (lk *Locker) try(ctx context.Context, key string, o *resolved, token string) (*Lock, *NotObtainedError, error) {
	select {
	case <-lk.closing.Done():
		return nil, nil, ErrClosed
	default:
	}
	ttl, _ := firstLease(o.ttl, o.maxHold)
	if token == "" {
		token = lk.newToken()
	}
	sentAt := lk.clock.Now()
	actx, cancel := lk.obtainBounds.bound(ctx, ttl) // bound.go
	g, err := lk.door.acquire(actx, driver.AcquireParams{Key: key, Token: token, Owner: o.owner, TTL: ttl, Mode: o.mode, Limit: o.limit})
	cancel()
	if err != nil {
		var he *driver.HeldError
		if errors.As(err, &he) {
			ne := &NotObtainedError{Key: key, Owner: he.Owner, TTL: he.TTL}
			lk.emit(Event{Type: EventNotObtained, Key: key, Owner: o.owner, Mode: o.mode, Err: ne})
			return nil, ne, ne
		}
		if unanswered(ctx, actx) {
			return nil, nil, fmt.Errorf("tasklock: obtain %q: the store did not answer within the lease's TTL (%v): %w", key, ttl, err)
		}
		return nil, nil, fmt.Errorf("tasklock: obtain %q: %w", key, err)
	}
	l, err := lk.grant(key, token, g.Fence, o, sentAt)
	return l, nil, err
}

// grant turns a lease the store granted, counted from sentAt, into a Lock
// kept by the engine, or gives the lease back when it is already too late
// to trust it.
func (lk *Locker) grant(key, token string, fence uint64, o *resolved, sentAt time.Time) (*Lock, error) {
	ttl, final := firstLease(o.ttl, o.maxHold)
	if !lk.clock.Now().Before(validUntil(sentAt, ttl, o.grace)) {
		lk.door.giveBack(key, token, o.mode)
		return nil, fmt.Errorf("tasklock: obtain %q: the store answered after the lease could have expired (%v)", key, ttl)
	}
	l := &Lock{
		lk: lk, key: key, token: token, owner: o.owner, fence: fence, acquiredAt: sentAt,
		renew: o.renew, mode: o.mode, maxHold: o.maxHold, minHold: o.minHold, progress: o.progress, grace: o.grace,
		inherited: o.holds,
	}
	if !lk.eng.add(l, ttl, sentAt, final) {
		lk.door.giveBack(key, token, o.mode)
		return nil, ErrClosed
	}
	return l, nil
}

// newToken returns a 128-bit owner token: this Locker's random seed and a
// sequence number, base32-encoded. Tokens only need to be unique — no store
// trusts them as secrets — and this costs no system call per grant.
func (lk *Locker) newToken() string {
	var b [16]byte
	copy(b[:8], lk.tokenSeed[:])
	binary.BigEndian.PutUint64(b[8:], lk.tokenSeq.Add(1))
	return tokenEncoding.EncodeToString(b[:])
}

var tokenEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// waitQueue holds, per key, this Locker's waiters in arrival order. A
// release wakes the first; a waiter that gives up after being woken passes
// the wake-up on, so one release costs one attempt here, not one per waiter.
type waitQueue struct {
	mu    sync.Mutex
	m     map[string][]*waiter
	kinds int // waiters on read-write locks and semaphores (kind.waitKey)
}

type waiter struct{ ch chan struct{} } // capacity 1: a wake-up is never lost

// has reports whether anyone waits for key.
func (q *waitQueue) has(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.m[key]) > 0
}

func (q *waitQueue) add(key string) *waiter {
	w := &waiter{ch: make(chan struct{}, 1)}
	q.mu.Lock()
	q.m[key] = append(q.m[key], w)
	if isKindWaitKey(key) {
		q.kinds++
	}
	q.mu.Unlock()
	return w
}

// remove takes w out of key's queue. A waiter that leaves with a wake-up
// it did not use passes it on to the next; so does one that obtained a
// shared hold (a reader, a permit), as there may be room for the next.
func (q *waitQueue) remove(key string, w *waiter, obtained, shared bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.m[key]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			if isKindWaitKey(key) {
				q.kinds--
			}
			break
		}
	}
	if len(ws) == 0 {
		delete(q.m, key)
		return
	}
	q.m[key] = ws
	if (!obtained && len(w.ch) > 0) || (obtained && shared) {
		signal(ws[0])
	}
}

// notify wakes the first waiter on key, as a mutex, a read-write lock and
// a semaphore: the store names a released key, not its kind. It never
// blocks.
func (q *waitQueue) notify(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if ws := q.m[key]; len(ws) > 0 {
		signal(ws[0])
	}
	if q.kinds == 0 {
		return // no strings to build
	}
	for _, k := range [...]string{rwWaitPrefix + key, semWaitPrefix + key} {
		if ws := q.m[k]; len(ws) > 0 {
			signal(ws[0])
		}
	}
	for _, w := range q.m[observeWaitPrefix+key] {
		signal(w) // every observer looks
	}
}

func signal(w *waiter) {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}
