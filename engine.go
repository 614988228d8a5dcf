package tasklock

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tasklock/tasklock/driver"
)

// engine is a Locker's renewal engine: one goroutine and a heap of locks
// ordered by their next event (a renewal, the end of local validity, or a
// progress deadline). Locks whose renewals fall due within a window are
// renewed together in one store call, which the store splits per shard.
// Store calls run on short-lived goroutines, so a slow store never delays
// the loss signal of any lock.
//
// The engine owns each Lock's state (Lock.state): only its methods, in this
// file, read or write it, with mu held. The arithmetic they apply to it
// lives in lease.go.
type engine struct {
	door   *door
	clock  Clock
	base   time.Time // origin of Lock.validNs
	lk     *Locker
	ctx    context.Context // cancelled by Close: ends renewal calls
	cancel context.CancelFunc

	mu     sync.Mutex
	heap   lockHeap
	closed bool
	wakeAt time.Time // when the goroutine wakes unless poked; zero before it first looks at the heap

	wake    chan struct{} // capacity 1: "the heap changed"
	quit    chan struct{}
	stopped chan struct{}
	calls   sync.WaitGroup // renewal calls under way
}

// renewItem is one lease in a renewal call.
type renewItem struct {
	l     *Lock
	ttl   time.Duration
	asked time.Duration // l's lease length when it was sent, before MaxHold's cap
	final bool          // this renewal takes the lease to MaxHold; none follows
}

// pending holds what must happen outside e.mu after a state change.
type pending struct {
	events []Event
	lost   []*Lock
}

func newEngine(lk *Locker, door *door, clock Clock) *engine {
	ctx, cancel := context.WithCancel(context.Background())
	return &engine{
		door: door, clock: clock, base: clock.Now(), lk: lk, ctx: ctx, cancel: cancel,
		wake: make(chan struct{}, 1), quit: make(chan struct{}), stopped: make(chan struct{}),
	}
}

// poke wakes the engine goroutine to look at the heap again.
func (e *engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// add starts tracking a freshly granted lock. It reports false when the
// engine is closed.
func (e *engine) add(l *Lock, ttl time.Duration, sentAt time.Time, final bool) bool {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return false
	}
	l.state.ttl = ttl
	l.state.idx = -1
	e.leaseStarted(l, sentAt, ttl, final)
	e.schedule(l)
	// The goroutine wakes by wakeAt anyway, and then sleeps until the
	// heap's first event: waking it now is needed (and costs a thread's
	// wake-up) only when l is due earlier.
	wake := l.state.dueAt.Before(e.wakeAt)
	e.mu.Unlock()
	if wake {
		e.poke()
	}
	return true
}

// leaseStarted records a lease of ttl granted or renewed for a request sent
// at sentAt: its local validity, and its next renewal, or, when the lease
// is final, that it ends the lock with ErrMaxHold. Callers hold e.mu.
func (e *engine) leaseStarted(l *Lock, sentAt time.Time, ttl time.Duration, final bool) {
	e.setValid(l, validUntil(sentAt, ttl, l.grace))
	l.state.renewAt = time.Time{}
	switch {
	case final:
		l.state.endCause = ErrMaxHold
	case l.renew:
		l.state.renewAt = renewalAt(sentAt, ttl)
	}
}

// plannedRenewal is l's next renewal, zero when none is planned or one is
// under way. Callers hold e.mu.
func (e *engine) plannedRenewal(l *Lock) time.Time {
	if l.state.inFlight {
		return time.Time{}
	}
	return l.state.renewAt
}

// stallAt is when l stalls unless Heartbeat is called; false when it
// cannot. Callers hold e.mu.
func (e *engine) stallAt(l *Lock) (time.Time, bool) {
	renewing := !l.state.renewAt.IsZero() || l.state.inFlight
	return stallAt(l.acquiredAt, time.Duration(l.beat.Load()), l.progress, renewing)
}

// schedule (re)places l in the heap after its times changed, caching its
// due time: Heartbeat moves a stall deadline without the engine's lock, so
// the heap orders by the cached value. Callers hold e.mu, and poke the
// engine when the change may make it wake earlier.
func (e *engine) schedule(l *Lock) {
	stall, _ := e.stallAt(l)
	l.state.dueAt = due(e.validUntilOf(l), e.plannedRenewal(l), stall)
	if l.state.idx >= 0 {
		heap.Fix(&e.heap, l.state.idx)
	} else {
		heap.Push(&e.heap, l)
	}
}

// end finishes l with cause: it leaves the heap, Done closes and the context
// is cancelled. Callers hold e.mu.
func (e *engine) end(l *Lock, cause error) {
	if l.state.ended {
		return
	}
	l.state.ended, l.state.cause = true, cause
	if l.state.idx >= 0 {
		heap.Remove(&e.heap, l.state.idx)
	}
	l.closeDone()
	if x := l.state.x; x != nil {
		if x.cancel != nil {
			x.cancel(cause)
		}
		for _, ch := range x.extends {
			ch <- notHeld(cause)
		}
		for _, ch := range x.sentExtends {
			ch <- notHeld(cause)
		}
		x.extends, x.sentExtends = nil, nil
		for _, n := range x.nested {
			e.end(n, cause) // a nested handle never outlives its lease
		}
		x.nested = nil
	}
}

// lose ends l with a loss cause and records the event. Callers hold e.mu.
func (e *engine) lose(l *Lock, cause error, p *pending) {
	e.end(l, cause)
	p.lost = append(p.lost, l)
	e.note(p, Event{Type: EventLost, Key: l.key, Owner: l.owner, Mode: l.mode, Fence: l.fence, Err: cause})
}

// note records ev for flush to emit, unless nobody listens. Callers hold
// e.mu.
func (e *engine) note(p *pending, ev Event) {
	if e.lk.onEvent != nil {
		p.events = append(p.events, ev)
	}
}

func (e *engine) flush(p *pending) {
	for _, l := range p.lost {
		level := slog.LevelWarn
		if l.state.cause == ErrClosed {
			level = slog.LevelDebug // the caller ended it
		}
		e.lk.log.Log(context.Background(), level, "tasklock: lock lost", "key", l.key, "owner", l.owner, "fence", l.fence, "cause", l.state.cause)
	}
	for _, ev := range p.events {
		e.lk.emit(ev)
	}
}

func (e *engine) run() {
	defer close(e.stopped)
	t := e.clock.NewTimer(time.Hour)
	defer t.Stop()
	for {
		t.Reset(e.step())
		select {
		case <-t.C():
		case <-e.wake:
		case <-e.quit:
			return
		}
	}
}

// step handles every lock whose event is due, starts one renewal call for
// the leases due within the batching window, and returns how long to sleep.
func (e *engine) step() time.Duration {
	var p pending
	var batch []renewItem
	e.mu.Lock()
	now := e.clock.Now()
	var later []*Lock
	for len(e.heap) > 0 {
		l := e.heap[0]
		window := renewWindow(l.state.ttl)
		if l.state.dueAt.After(now.Add(window)) {
			break
		}
		heap.Pop(&e.heap)
		stall, stalls := e.stallAt(l)
		switch {
		case !now.Before(e.validUntilOf(l)):
			e.lose(l, e.expiryCause(l, now), &p)
			continue
		case stalls && !now.Before(stall):
			e.lose(l, ErrStalled, &p)
			continue
		case renewDue(now, e.plannedRenewal(l), l.state.attempts > 0, window):
			if it, ok := e.startRenewal(l, now); ok {
				batch = append(batch, it)
			}
		}
		later = append(later, l)
	}
	for _, l := range later {
		e.schedule(l)
	}
	var sleep time.Duration = time.Hour
	if len(e.heap) > 0 {
		sleep = max(e.heap[0].state.dueAt.Sub(now), 0)
	}
	e.wakeAt = now.Add(sleep)
	if len(batch) > 0 {
		e.calls.Add(1)
	}
	e.mu.Unlock()
	e.flush(&p)
	if len(batch) > 0 {
		go e.renewCall(batch, now)
	}
	return sleep
}

// expiryCause is why l ends when its local validity passes unrenewed, as
// seen at now. Callers hold e.mu.
func (e *engine) expiryCause(l *Lock, now time.Time) error {
	var lastErr error
	if l.state.x != nil {
		lastErr = l.state.x.lastErr
	}
	var overdue time.Duration
	if r := e.plannedRenewal(l); !r.IsZero() && r.Before(now) {
		overdue = now.Sub(r)
	}
	return expiryCause(l.state.endCause, lastErr, l.renew, l.state.inFlight, overdue)
}

// expireIfDue ends l at once when its local validity has passed, without
// waiting for the engine goroutine: a process resumed after a long pause
// (SIGSTOP, a GC or VM stall) must see Done closed before it acts again.
// For a nested handle it looks at the outer hold's lease.
func (e *engine) expireIfDue(l *Lock) {
	l = l.lease()
	if e.clock.Now().Sub(e.base) < time.Duration(l.validNs.Load()) {
		return
	}
	var p pending
	e.mu.Lock()
	if now := e.clock.Now(); !l.state.ended && !now.Before(e.validUntilOf(l)) {
		e.lose(l, e.expiryCause(l, now), &p)
	}
	e.mu.Unlock()
	e.flush(&p)
}

// setValid records l's local validity. Callers hold e.mu.
func (e *engine) setValid(l *Lock, until time.Time) {
	l.validNs.Store(int64(until.Sub(e.base)))
}

// validUntilOf is the end of l's local validity, as last set by setValid.
// It reads an atomic: no lock needed.
func (e *engine) validUntilOf(l *Lock) time.Time {
	return e.base.Add(time.Duration(l.validNs.Load()))
}

// startRenewal marks l as being renewed and decides the lease length,
// capped by MaxHold. When MaxHold leaves nothing to renew it plans no more
// renewals, answers pending Extend calls, and reports false. Callers hold
// e.mu.
func (e *engine) startRenewal(l *Lock, now time.Time) (renewItem, bool) {
	held := now.Sub(l.acquiredAt)
	if maxHoldReached(l.maxHold, held, l.grace) {
		l.state.renewAt, l.state.endCause = time.Time{}, ErrMaxHold
		if x := l.state.x; x != nil {
			for _, ch := range x.extends {
				ch <- fmt.Errorf("tasklock: extend %q: %w", l.key, ErrMaxHold)
			}
			x.extends = nil
		}
		return renewItem{}, false
	}
	it := renewItem{l: l, asked: l.state.ttl}
	it.ttl, it.final = leaseLength(l.state.ttl, l.maxHold, held)
	l.state.inFlight = true
	if x := l.state.x; x != nil {
		x.sentExtends, x.extends = x.extends, nil
	}
	return it, true
}

// renewCall renews a batch in one store call and applies the results.
// sentAt is read before the call, so local validity errs on the safe side.
func (e *engine) renewCall(batch []renewItem, sentAt time.Time) {
	defer e.calls.Done()
	ps := make([]driver.RenewParams, len(batch))
	longest := time.Duration(0)
	for i, it := range batch {
		ps[i] = it.params()
		longest = max(longest, it.ttl)
	}
	ctx, cancel := context.WithTimeout(e.ctx, longest)
	res, err := e.door.renew(ctx, ps)
	cancel()

	var p pending
	e.mu.Lock()
	now := e.clock.Now()
	for i, it := range batch {
		r := err
		if r == nil {
			r = res[i]
		}
		e.renewed(it, sentAt, now, r, &p)
	}
	e.mu.Unlock()
	e.poke()
	if err != nil {
		e.lk.log.Debug("tasklock: renewal failed, will retry", "leases", len(batch), "err", err)
	}
	e.flush(&p)
}

// params is the store's renewal request for it.
func (it renewItem) params() driver.RenewParams {
	return driver.RenewParams{Key: it.l.key, Token: it.l.token, TTL: it.ttl, Mode: it.l.mode}
}

// renewed applies r, the store's answer at now to the renewal it of a
// request sent at sentAt: a new lease, the loss of the lock, or a retry
// planned. Pending Extend calls learn the outcome, and l is rescheduled.
// Callers hold e.mu.
func (e *engine) renewed(it renewItem, sentAt, now time.Time, r error, p *pending) {
	l := it.l
	if l.state.ended {
		if r != nil && !errors.Is(r, driver.ErrNotHeld) && errors.Is(l.state.cause, ErrLockLost) {
			// The lease ran out while this call hung (a store paused or
			// partitioned): it failed all the same, and counts as such.
			e.note(p, Event{Type: EventRenewFailed, Key: l.key, Owner: l.owner, Mode: l.mode, Fence: l.fence, Err: r})
		}
		return
	}
	l.state.inFlight = false
	switch {
	case r == nil:
		e.leaseStarted(l, sentAt, it.ttl, it.final)
		l.state.attempts = 0
		if x := l.state.x; x != nil {
			if x.keptTTL != 0 {
				x.keptTTL = it.asked
			}
			x.lastErr = nil
			for _, ch := range x.sentExtends {
				ch <- nil
			}
			x.sentExtends = nil
		}
		e.note(p, Event{Type: EventRenewed, Key: l.key, Owner: l.owner, Mode: l.mode, Fence: l.fence, ValidUntil: e.validUntilOf(l)})
	case errors.Is(r, driver.ErrNotHeld):
		e.lose(l, fmt.Errorf("%w: the store no longer has this lease", ErrLockLost), p)
		return
	case errors.Is(r, driver.ErrUnsupported) && l.state.x != nil && l.state.x.keptTTL != 0 && it.asked != l.state.x.keptTTL:
		// An Extend asked for a lease length the store does not keep (past
		// an etcd or ZooKeeper session): the caller's mistake, refused with
		// the lease untouched. The Extend calls it answers get the refusal;
		// the lock keeps the length the store last accepted (unless a later
		// Extend asked for another) and is renewed with it at once.
		x := l.state.x
		if l.state.ttl == it.asked {
			l.state.ttl = x.keptTTL
		}
		for _, ch := range x.sentExtends {
			ch <- fmt.Errorf("tasklock: extend %q: %w", l.key, r)
		}
		x.sentExtends = nil
		l.state.renewAt = now
	case errors.Is(r, driver.ErrUnsupported):
		// Retrying cannot help: the store refuses the length it kept so far.
		e.lose(l, fmt.Errorf("%w: the store refused the renewal: %w", ErrLockLost, r), p)
		return
	default:
		l.state.attempts++
		x := e.extra(l)
		x.lastErr = r
		l.state.renewAt = now.Add(retryDelay(l.state.attempts, it.ttl))
		x.extends = append(x.sentExtends, x.extends...)
		x.sentExtends = nil
		e.note(p, Event{Type: EventRenewFailed, Key: l.key, Owner: l.owner, Mode: l.mode, Fence: l.fence, Err: r})
	}
	if x := l.state.x; x != nil && len(x.extends) > 0 && (l.state.renewAt.IsZero() || l.state.renewAt.After(now)) && l.state.attempts == 0 {
		l.state.renewAt = now // an Extend arrived while this renewal was under way
	}
	e.schedule(l)
}

// close ends every lock with ErrClosed, stops the goroutine and waits for
// renewal calls, and returns the locks that still need releasing.
func (e *engine) close() []*Lock {
	var p pending
	e.mu.Lock()
	e.closed = true
	held := make([]*Lock, len(e.heap))
	copy(held, e.heap)
	for _, l := range held {
		e.lose(l, ErrClosed, &p)
	}
	e.mu.Unlock()
	close(e.quit)
	<-e.stopped
	e.cancel()
	e.calls.Wait()
	e.flush(&p)
	return held
}

// extra returns l's rarely needed state, making it on first use. Callers
// hold e.mu.
func (e *engine) extra(l *Lock) *lockExtra {
	if l.state.x == nil {
		l.state.x = new(lockExtra)
	}
	return l.state.x
}

// context returns l's context, made on first use; cancelled with the cause
// at once when l has ended.
func (e *engine) context(l *Lock) context.Context {
	e.expireIfDue(l)
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.extra(l)
	if x.ctx == nil {
		var inner context.Context
		inner, x.cancel = context.WithCancelCause(withHold(context.Background(), l))
		x.ctx = &leaseContext{Context: inner, l: l}
		if l.state.ended {
			x.cancel(l.state.cause)
		}
	}
	return x.ctx
}

// cause returns why l ended, nil while it is held.
func (e *engine) cause(l *Lock) error {
	e.expireIfDue(l)
	e.mu.Lock()
	defer e.mu.Unlock()
	return l.state.cause
}

// extend makes d the lease length of l's renewals and renews l now, or
// right after the renewal under way, and returns the outcome: nil when
// renewed, Extend's error otherwise. A nested handle extends its outer
// hold's lease.
//
// The renewal is made on the caller's goroutine, through the door's group
// commit: alone when the store is idle, with the other Extend calls under
// way otherwise. When ctx ends first, the engine makes the renewal itself,
// as a renewal that failed.
func (e *engine) extend(ctx context.Context, l *Lock, d time.Duration) error {
	e.mu.Lock()
	if l.state.ended {
		cause := l.state.cause
		e.mu.Unlock()
		return notHeld(cause)
	}
	l = l.lease() // not ended: a nested handle ends with its outer hold
	if x := e.extra(l); x.keptTTL == 0 {
		x.keptTTL = l.state.ttl // what the store keeps until it accepts d
	}
	l.state.ttl = d
	if l.state.inFlight {
		answer := e.awaitRenewal(l, true)
		e.mu.Unlock()
		e.poke()
		return l.answer(ctx, answer)
	}
	l.state.attempts = 0
	sentAt := e.clock.Now()
	it, ok := e.startRenewal(l, sentAt)
	e.mu.Unlock()
	if !ok {
		return fmt.Errorf("tasklock: extend %q: %w", l.key, ErrMaxHold)
	}
	r := e.door.extend(ctx, it.params())
	// Before e.mu: ctx may be a Lock's Context, whose Err takes e.mu when
	// that lease's deadline has passed.
	ctxErr := ctx.Err()

	var p pending
	var answer <-chan error
	var err error
	e.mu.Lock()
	e.renewed(it, sentAt, e.clock.Now(), r, &p)
	switch {
	case l.state.ended:
		err = notHeld(l.state.cause)
	case r != nil && ctxErr != nil:
		err = fmt.Errorf("tasklock: extend %q: %w", l.key, ctxErr)
	case errors.Is(r, driver.ErrUnsupported):
		err = fmt.Errorf("tasklock: extend %q: %w", l.key, r) // refused; still held (renewed)
	case r != nil:
		// Unknown outcome: wait for the engine's retry, as the Extend calls
		// that arrive during a renewal do.
		answer = e.awaitRenewal(l, false)
	}
	wake := r != nil || l.state.dueAt.Before(e.wakeAt)
	e.mu.Unlock()
	if wake {
		e.poke()
	}
	e.flush(&p)
	if answer != nil {
		return l.answer(ctx, answer)
	}
	return err
}

// awaitRenewal returns the channel that will carry the outcome of l's next
// renewal, which the engine makes once the one under way, if any, has
// ended: at once when now is set, else when planned. Callers hold e.mu,
// and poke the engine.
func (e *engine) awaitRenewal(l *Lock, now bool) <-chan error {
	answer := make(chan error, 1)
	x := e.extra(l)
	x.extends = append(x.extends, answer)
	if now && !l.state.inFlight {
		l.state.renewAt = e.clock.Now()
		l.state.attempts = 0
		e.schedule(l)
	}
	return answer
}

// release ends l with ErrReleased unless it has ended already. It reports
// whether this call ended it, and whether an earlier Release already
// removed the lease at the store (see released).
func (e *engine) release(l *Lock) (endsHere, releasedBefore bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	endsHere = !l.state.ended
	if endsHere {
		e.end(l, ErrReleased)
	}
	return endsHere, l.state.releasedOK
}

// released records that the store deleted (or, with MinHold, shortened)
// l's lease at a Release: a later Release returns nil at once.
func (e *engine) released(l *Lock) {
	e.mu.Lock()
	l.state.releasedOK = true
	e.mu.Unlock()
}

// nest opens nested, a handle on the lease of its outer hold, unless via
// (the hold the obtaining ctx carried: the outer hold or another nested
// handle on it) has ended. It reports whether it did.
func (e *engine) nest(via, nested *Lock) bool {
	outer := nested.outer
	e.mu.Lock()
	defer e.mu.Unlock()
	if via.state.ended || outer.state.ended || e.closed {
		return false
	}
	nested.state.idx = -1 // never in the heap: the outer hold is
	x := e.extra(outer)
	x.nested = append(x.nested, nested)
	return true
}

// unnest ends a nested handle with ErrReleased, unless it has ended
// already, and returns why it ended.
func (e *engine) unnest(nested *Lock) error {
	e.expireIfDue(nested)
	e.mu.Lock()
	defer e.mu.Unlock()
	if !nested.state.ended {
		e.end(nested, ErrReleased)
		if x := nested.outer.state.x; x != nil {
			for i, n := range x.nested {
				if n == nested {
					x.nested = append(x.nested[:i], x.nested[i+1:]...)
					break
				}
			}
		}
	}
	return nested.state.cause
}

// lockHeap orders locks by due time.
type lockHeap []*Lock

func (h lockHeap) Len() int           { return len(h) }
func (h lockHeap) Less(i, j int) bool { return h[i].state.dueAt.Before(h[j].state.dueAt) }
func (h lockHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].state.idx, h[j].state.idx = i, j
}
func (h *lockHeap) Push(x any) {
	l := x.(*Lock)
	l.state.idx = len(*h)
	*h = append(*h, l)
}
func (h *lockHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.state.idx = -1
	return l
}
