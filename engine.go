package tasklock

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
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
type engine struct {
	store  driver.Store
	clock  Clock
	base   time.Time // origin of Lock.validNs
	lk     *Locker
	ctx    context.Context // cancelled by Close: ends renewal calls
	cancel context.CancelFunc

	mu     sync.Mutex
	heap   lockHeap
	closed bool

	wake    chan struct{} // capacity 1: "the heap changed"
	quit    chan struct{}
	stopped chan struct{}
	calls   sync.WaitGroup // renewal calls under way
}

// renewItem is one lease in a renewal call.
type renewItem struct {
	l     *Lock
	ttl   time.Duration
	final bool // this renewal takes the lease to MaxHold; none follows
}

// pending holds what must happen outside e.mu after a state change.
type pending struct {
	events []Event
	lost   []*Lock
}

func newEngine(lk *Locker, store driver.Store, clock Clock) *engine {
	ctx, cancel := context.WithCancel(context.Background())
	return &engine{
		store: store, clock: clock, base: clock.Now(), lk: lk, ctx: ctx, cancel: cancel,
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
	l.ttl = ttl
	e.setValid(l, sentAt.Add(validity(ttl, l.grace)))
	l.idx = -1
	switch {
	case final:
		l.endCause = ErrMaxHold
	case l.renew:
		l.renewAt = sentAt.Add(ttl / 3)
	}
	e.schedule(l)
	first := l.idx == 0
	e.mu.Unlock()
	if first {
		e.poke()
	}
	return true
}

// due returns when the engine must next look at l.
func (l *Lock) due() time.Time {
	t := l.validUntil()
	if !l.renewAt.IsZero() && !l.inFlight && l.renewAt.Before(t) {
		t = l.renewAt
	}
	if s, ok := l.stallAt(); ok && s.Before(t) {
		t = s
	}
	return t
}

// stallAt is when l stalls unless Heartbeat is called.
func (l *Lock) stallAt() (time.Time, bool) {
	if l.progress <= 0 || (l.renewAt.IsZero() && !l.inFlight) {
		return time.Time{}, false
	}
	return l.acquiredAt.Add(time.Duration(l.beat.Load()) + l.progress), true
}

// schedule (re)places l in the heap after its times changed, caching its
// due time: Heartbeat moves a stall deadline without the engine's lock, so
// the heap orders by the cached value. Callers hold e.mu, and poke the
// engine when the change may make it wake earlier.
func (e *engine) schedule(l *Lock) {
	l.dueAt = l.due()
	if l.idx >= 0 {
		heap.Fix(&e.heap, l.idx)
	} else {
		heap.Push(&e.heap, l)
	}
}

// end finishes l with cause: it leaves the heap, Done closes and the context
// is cancelled. Callers hold e.mu.
func (e *engine) end(l *Lock, cause error) {
	if l.ended {
		return
	}
	l.ended, l.cause = true, cause
	if l.idx >= 0 {
		heap.Remove(&e.heap, l.idx)
	}
	l.closeDone()
	if x := l.x; x != nil {
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
	}
}

// lose ends l with a loss cause and records the event. Callers hold e.mu.
func (e *engine) lose(l *Lock, cause error, p *pending) {
	e.end(l, cause)
	p.lost = append(p.lost, l)
	p.events = append(p.events, Event{Type: EventLost, Key: l.key, Owner: l.owner, Fence: l.fence, Err: cause})
}

func (e *engine) flush(p *pending) {
	for _, l := range p.lost {
		level := slog.LevelWarn
		if l.cause == ErrClosed {
			level = slog.LevelDebug // the caller ended it
		}
		e.lk.log.Log(context.Background(), level, "tasklock: lock lost", "key", l.key, "owner", l.owner, "fence", l.fence, "cause", l.cause)
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
		window := l.ttl / 6
		if l.dueAt.After(now.Add(window)) {
			break
		}
		heap.Pop(&e.heap)
		stall, stalls := l.stallAt()
		switch {
		case !now.Before(l.validUntil()):
			e.lose(l, l.expiryCause(), &p)
			continue
		case stalls && !now.Before(stall):
			e.lose(l, ErrStalled, &p)
			continue
		case l.renewDue(now, window):
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
		sleep = max(e.heap[0].dueAt.Sub(now), 0)
	}
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

// expiryCause is why l ends when its local validity passes unrenewed.
// Callers hold e.mu.
func (l *Lock) expiryCause() error {
	switch {
	case l.endCause != nil:
		return l.endCause
	case l.x != nil && l.x.lastErr != nil:
		return fmt.Errorf("%w: not renewed within its validity: %w", ErrLockLost, l.x.lastErr)
	case !l.renew:
		return fmt.Errorf("%w: lease expired (renewal off)", ErrLockLost)
	}
	return fmt.Errorf("%w: not renewed within its validity", ErrLockLost)
}

// expireIfDue ends l at once when its local validity has passed, without
// waiting for the engine goroutine: a process resumed after a long pause
// (SIGSTOP, a GC or VM stall) must see Done closed before it acts again.
func (e *engine) expireIfDue(l *Lock) {
	if e.clock.Now().Sub(e.base) < time.Duration(l.validNs.Load()) {
		return
	}
	var p pending
	e.mu.Lock()
	if !l.ended && !e.clock.Now().Before(l.validUntil()) {
		e.lose(l, l.expiryCause(), &p)
	}
	e.mu.Unlock()
	e.flush(&p)
}

// setValid records l's local validity. Callers hold e.mu.
func (e *engine) setValid(l *Lock, until time.Time) {
	l.validNs.Store(int64(until.Sub(e.base)))
}

// validUntil is the end of l's local validity.
func (l *Lock) validUntil() time.Time {
	return l.lk.eng.base.Add(time.Duration(l.validNs.Load()))
}

// renewDue reports whether l should be renewed in a call starting now. A
// renewal due within window joins the call (that is how leases come to be
// renewed together); a retry after a failure waits out its backoff.
func (l *Lock) renewDue(now time.Time, window time.Duration) bool {
	if l.renewAt.IsZero() || l.inFlight {
		return false
	}
	if l.attempts > 0 {
		window = 0
	}
	return !l.renewAt.After(now.Add(window))
}

// startRenewal marks l as being renewed and decides the lease length,
// capped by MaxHold. When MaxHold leaves nothing to renew it plans no more
// renewals, answers pending Extend calls, and reports false. Callers hold
// e.mu.
func (e *engine) startRenewal(l *Lock, now time.Time) (renewItem, bool) {
	it := renewItem{l: l, ttl: l.ttl}
	if l.maxHold > 0 {
		rest := l.acquiredAt.Add(l.maxHold).Sub(now)
		if validity(rest, l.grace) <= 0 {
			l.renewAt, l.endCause = time.Time{}, ErrMaxHold
			if x := l.x; x != nil {
				for _, ch := range x.extends {
					ch <- fmt.Errorf("tasklock: extend %q: %w", l.key, ErrMaxHold)
				}
				x.extends = nil
			}
			return it, false
		}
		if rest <= it.ttl {
			it.ttl, it.final = rest, true
		}
	}
	l.inFlight = true
	if x := l.x; x != nil {
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
		ps[i] = driver.RenewParams{Key: it.l.key, Token: it.l.token, TTL: it.ttl}
		longest = max(longest, it.ttl)
	}
	ctx, cancel := context.WithTimeout(e.ctx, longest)
	res, err := e.store.Renew(ctx, ps)
	cancel()
	if err == nil && len(res) != len(batch) {
		err = fmt.Errorf("tasklock: store returned %d renewal results for %d leases", len(res), len(batch))
	}

	var p pending
	e.mu.Lock()
	now := e.clock.Now()
	for i, it := range batch {
		l := it.l
		if l.ended {
			continue
		}
		l.inFlight = false
		r := err
		if r == nil {
			r = res[i]
		}
		switch {
		case r == nil:
			e.setValid(l, sentAt.Add(validity(it.ttl, l.grace)))
			l.attempts = 0
			l.renewAt = time.Time{}
			switch {
			case it.final:
				l.endCause = ErrMaxHold
			case l.renew:
				l.renewAt = sentAt.Add(it.ttl / 3)
			}
			if x := l.x; x != nil {
				x.lastErr = nil
				for _, ch := range x.sentExtends {
					ch <- nil
				}
				x.sentExtends = nil
			}
			p.events = append(p.events, Event{Type: EventRenewed, Key: l.key, Owner: l.owner, Fence: l.fence})
		case errors.Is(r, driver.ErrNotHeld):
			e.lose(l, fmt.Errorf("%w: the store no longer has this lease", ErrLockLost), &p)
			continue
		case errors.Is(r, driver.ErrUnsupported):
			// Retrying cannot help (e.g. Extend past what the store keeps).
			e.lose(l, fmt.Errorf("%w: the store refused the renewal: %w", ErrLockLost, r), &p)
			continue
		default:
			l.attempts++
			x := l.extra()
			x.lastErr = r
			l.renewAt = now.Add(retryDelay(l.attempts, it.ttl))
			x.extends = append(x.sentExtends, x.extends...)
			x.sentExtends = nil
			p.events = append(p.events, Event{Type: EventRenewFailed, Key: l.key, Owner: l.owner, Fence: l.fence, Err: r})
		}
		if l.x != nil && len(l.x.extends) > 0 && (l.renewAt.IsZero() || l.renewAt.After(now)) && l.attempts == 0 {
			l.renewAt = now // an Extend arrived while this renewal was under way
		}
		e.schedule(l)
	}
	e.mu.Unlock()
	e.poke()
	if err != nil {
		e.lk.log.Debug("tasklock: renewal failed, will retry", "leases", len(batch), "err", err)
	}
	e.flush(&p)
}

// retryDelay is the jittered backoff before renewal attempt n+1 after n
// failures: 25 ms doubling, at most a tenth of the TTL.
func retryDelay(n int, ttl time.Duration) time.Duration {
	d := min(25*time.Millisecond<<min(n-1, 10), max(ttl/10, time.Millisecond))
	return d/2 + rand.N(d/2+1)
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

// lockHeap orders locks by due time.
type lockHeap []*Lock

func (h lockHeap) Len() int           { return len(h) }
func (h lockHeap) Less(i, j int) bool { return h[i].dueAt.Before(h[j].dueAt) }
func (h lockHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *lockHeap) Push(x any) {
	l := x.(*Lock)
	l.idx = len(*h)
	*h = append(*h, l)
}
func (h *lockHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.idx = -1
	return l
}
