package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tasklock/tasklock/driver"
)

var _ driver.FairQueuer = (*Store)(nil)

// leaveRetry is how often a Leave the server did not confirm is tried
// again in the background.
const leaveRetry = 100 * time.Millisecond

// EnqueueFair implements driver.FairQueuer: one call of fair.lua puts
// p.Token at the back of p.Key's fair queue, as an entry with a lease of
// p.TTL by Redis's clock, and grants the key at once when the queue was
// empty and the key free. The Ticket's Wait renews the entry while it
// waits. When the call fails the entry is removed again (or, if that
// fails too, expires within p.TTL).
func (s *Store) EnqueueFair(ctx context.Context, p driver.AcquireParams) (driver.Ticket, error) {
	if p.Mode != driver.ModeMutex {
		return nil, fmt.Errorf("redisstore: enqueue %q: %w: a fair queue for a %v hold", p.Key, driver.ErrUnsupported, p.Mode)
	}
	if err := checkAcquire(p); err != nil {
		return nil, err
	}
	lk, fk := s.lockKeys(p.Key)
	t := &ticket{s: s, p: p, keys: []string{lk, fk, lk + fairSuffix, lk + fairExpSuffix}}
	sent := time.Now()
	r, err := t.call(ctx, "enqueue")
	if err != nil {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = t.Leave(lctx)
		cancel()
		return nil, fmt.Errorf("redisstore: enqueue %q: %w", p.Key, err)
	}
	t.entryEnds = sent.Add(p.TTL)
	t.holder = r.holder
	switch r.status {
	case fairGranted:
		t.granted = &driver.Grant{Fence: r.fence}
	case fairGone:
		return nil, fmt.Errorf("redisstore: enqueue %q: unexpected reply: the entry is gone", p.Key)
	}
	return t, nil
}

// ticket is one entry in a fair queue (driver.Ticket).
type ticket struct {
	s    *Store
	p    driver.AcquireParams
	keys []string // fair.lua's KEYS

	// Set by EnqueueFair, then only by Wait's goroutine.
	granted   *driver.Grant // granted by EnqueueFair, for the first Wait
	entryEnds time.Time     // the entry's lease ends by then at the latest

	mu     sync.Mutex
	holder *driver.HeldError // as seen last
}

// fairStatus is the outcome of a call of fair.lua.
type fairStatus int

const (
	fairWaiting fairStatus = iota
	fairGranted
	fairGone
)

// fairReply is a call of fair.lua's reply.
type fairReply struct {
	status fairStatus
	fence  uint64            // fairGranted
	holder *driver.HeldError // fairWaiting: the mutex's holder, nil when the key is free
	next   time.Duration     // fairWaiting: when the holder's lease or the head's entry could end
}

// run runs fair.lua's op for t: one round trip.
func (t *ticket) run(ctx context.Context, op string) (any, error) {
	args := []any{"evalsha", fairScript.sha, 4, t.keys[0], t.keys[1], t.keys[2], t.keys[3],
		op, t.p.Token, millis(t.p.TTL), t.p.Owner, t.s.channelArg, t.p.Key}
	return fairScript.run(ctx, t.s.client, args).Result()
}

// call runs fair.lua's op "enqueue" or "wait" for t and reads its reply.
func (t *ticket) call(ctx context.Context, op string) (fairReply, error) {
	res, err := t.run(ctx, op)
	if err != nil {
		return fairReply{}, err
	}
	r, _ := res.([]any)
	var status int64 = -1
	if len(r) > 0 {
		status, _ = r[0].(int64)
	}
	switch {
	case status == 1 && len(r) == 2:
		if f, ok := r[1].(int64); ok && f > 0 {
			return fairReply{status: fairGranted, fence: uint64(f)}, nil
		}
	case status == 2:
		return fairReply{status: fairGone}, nil
	case status == 0 && len(r) == 3:
		out := fairReply{status: fairWaiting}
		if ms, ok := r[2].(int64); ok && ms > 0 {
			out.next = time.Duration(ms) * time.Millisecond
		}
		if v, _ := r[1].(string); v != "" {
			out.holder = &driver.HeldError{TTL: out.next}
			_, out.holder.Owner, _ = parseValue(v)
		}
		return out, nil
	}
	return fairReply{}, fmt.Errorf("unexpected reply %v", res)
}

// Wait implements driver.Ticket. Each look at the queue is one call of
// fair.lua, which also renews the entry's lease; between looks Wait
// sleeps until the key's release is published (the Store's subscription
// to Prefix+"released", shared by every waiting Ticket), the holder's
// lease could end, or a third of the entry's TTL has passed, whichever
// comes first.
func (t *ticket) Wait(ctx context.Context) (driver.Grant, error) {
	if g := t.granted; g != nil {
		t.granted = nil
		return *g, nil
	}
	var w *hubWaiter
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		sent := time.Now()
		r, err := t.call(ctx, "wait")
		if err != nil {
			if ctx.Err() != nil {
				return driver.Grant{}, ctx.Err()
			}
			return driver.Grant{}, fmt.Errorf("redisstore: wait in the queue of %q: %w", t.p.Key, err)
		}
		switch r.status {
		case fairGranted:
			return driver.Grant{Fence: r.fence}, nil
		case fairGone:
			return driver.Grant{}, driver.ErrNotHeld
		}
		t.entryEnds = sent.Add(t.p.TTL)
		t.mu.Lock()
		if r.holder != nil {
			t.holder = r.holder
		}
		t.mu.Unlock()
		if w == nil {
			// Listen first, then look again: a release published
			// between the two looks is not missed. The subscription
			// gets at most a third of the TTL to start, so that the
			// entry is renewed in time; until it runs, Wait polls.
			jctx, cancel := context.WithTimeout(ctx, t.p.TTL/3)
			w = t.s.wake.join(jctx, t.p.Key)
			cancel()
			defer w.leave()
			continue
		}
		d := t.p.TTL / 3
		if r.next > 0 {
			d = min(d, r.next+time.Millisecond)
		}
		if !w.notified() {
			d = min(d, 250*time.Millisecond)
		}
		timer.Reset(d)
		select {
		case <-w.ch:
		case <-timer.C:
		case <-ctx.Done():
			return driver.Grant{}, ctx.Err()
		}
	}
}

// Holder implements driver.Ticket.
func (t *ticket) Holder() *driver.HeldError {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.holder
}

// Leave implements driver.Ticket: one call of fair.lua removes the entry
// (or releases the key, when it was granted) and wakes the next waiter.
// When Redis does not confirm it, it is tried again in the background
// until the entry's lease has ended at the latest.
func (t *ticket) Leave(ctx context.Context) error {
	t.granted = nil
	_, err := t.run(ctx, "leave")
	if err == nil {
		return nil
	}
	until := t.entryEnds
	if until.IsZero() {
		until = time.Now().Add(t.p.TTL)
	}
	go t.leaveLater(until)
	return fmt.Errorf("redisstore: leave the queue of %q: %w", t.p.Key, err)
}

// leaveLater retries Leave until it succeeds or until.
func (t *ticket) leaveLater(until time.Time) {
	for time.Now().Before(until) {
		time.Sleep(leaveRetry) // the pause between two tries
		ctx, cancel := context.WithDeadline(context.Background(), until)
		_, err := t.run(ctx, "leave")
		cancel()
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			return
		}
	}
}

// wakeHub passes the releases published on the Store's channel to the
// fair Tickets waiting on their keys, through one subscription shared by
// every waiting Ticket: started when the first joins, ended when the last
// leaves.
type wakeHub struct {
	s       *Store
	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{} // by key
	sub     *hubSub                               // the live subscription, nil when none
}

// hubSub is one subscription of a wakeHub.
type hubSub struct {
	ready chan struct{} // closed once Subscribe returned
	stop  func()        // set before ready closes; nil when Subscribe failed
	users int           // the Tickets that joined it and have not left
}

// subscribeTimeout bounds the start of a wakeHub's subscription.
const subscribeTimeout = 5 * time.Second

// hubWaiter is one Ticket's registration with a wakeHub.
type hubWaiter struct {
	h   *wakeHub
	key string
	ch  chan struct{} // signalled on each release of key
	sub *hubSub
}

// join registers a waiter for key's releases and makes sure the
// subscription runs, waiting (at most until ctx ends) for it to start.
func (h *wakeHub) join(ctx context.Context, key string) *hubWaiter {
	w := &hubWaiter{h: h, key: key, ch: make(chan struct{}, 1)}
	h.mu.Lock()
	if h.waiters == nil {
		h.waiters = make(map[string]map[chan struct{}]struct{})
	}
	if h.waiters[key] == nil {
		h.waiters[key] = make(map[chan struct{}]struct{})
	}
	h.waiters[key][w.ch] = struct{}{}
	if h.sub == nil {
		h.sub = &hubSub{ready: make(chan struct{})}
		// Not on the caller's goroutine, nor with its ctx: the
		// subscription is every joiner's, whoever gives up first.
		go h.start(h.sub)
	}
	w.sub = h.sub
	w.sub.users++
	h.mu.Unlock()
	select {
	case <-w.sub.ready:
	case <-ctx.Done():
	}
	return w
}

// notified reports whether releases reach w: its subscription runs (it
// may still be starting, or have failed: then the waiter polls).
func (w *hubWaiter) notified() bool {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	return w.sub.stop != nil
}

// leave unregisters w.
func (w *hubWaiter) leave() { w.h.leave(w.key, w.ch, w.sub) }

// start subscribes for sub. When that fails, or every user left
// meanwhile, sub is dropped (the next joiner starts another).
func (h *wakeHub) start(sub *hubSub) {
	ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
	stop, err := h.s.Subscribe(ctx, h.notify)
	cancel()
	h.mu.Lock()
	if err == nil && sub.users > 0 {
		sub.stop, stop = stop, nil
	} else if h.sub == sub {
		h.sub = nil
	}
	close(sub.ready)
	h.mu.Unlock()
	if stop != nil {
		stop() // nobody is left to use it
	}
}

// leave unregisters ch and ends the subscription when its last user left.
func (h *wakeHub) leave(key string, ch chan struct{}, sub *hubSub) {
	h.mu.Lock()
	delete(h.waiters[key], ch)
	if len(h.waiters[key]) == 0 {
		delete(h.waiters, key)
	}
	sub.users--
	var stop func()
	if sub.users == 0 {
		if h.sub == sub {
			h.sub = nil
		}
		stop, sub.stop = sub.stop, nil // nil while starting: start stops it
	}
	h.mu.Unlock()
	if stop != nil {
		stop() // waits for the subscription's goroutine, which may be in notify
	}
}

// notify signals the waiters of key.
func (h *wakeHub) notify(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.waiters[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
