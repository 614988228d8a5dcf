package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/tasklock/tasklock/driver"
)

var _ driver.Queuer = (*Store)(nil)

// ticket is one waiter in a key's queue (driver.Queuer).
type ticket struct {
	s    *Store
	p    driver.AcquireParams
	wake chan struct{} // capacity 1: the queue changed in front of it

	mu     sync.Mutex
	holder *driver.HeldError // the holder seen last
}

// Enqueue implements driver.Queuer: the entry joins p.Key's queue behind
// every waiter already in it, and Acquire refuses the key while anyone
// waits, so waiters are served first come, first served.
func (s *Store) Enqueue(ctx context.Context, p driver.AcquireParams) (driver.Ticket, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t := &ticket{s: s, p: p, wake: make(chan struct{}, 1)}
	s.mu.Lock()
	s.queues[p.Key] = append(s.queues[p.Key], t)
	s.mu.Unlock()
	return t, nil
}

// queued reports the head of key's queue (nil when nobody waits). Callers
// hold s.mu.
func (s *Store) queued(key string) *ticket {
	if q := s.queues[key]; len(q) > 0 {
		return q[0]
	}
	return nil
}

// wakeHead signals the first waiter on key. Callers hold s.mu.
func (s *Store) wakeHead(key string) {
	if t := s.queued(key); t != nil {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

// Wait implements driver.Ticket. A waiter whose holder may still be live
// sleeps until it is woken by a release or until the holder's lease could
// have ended (at most 100 ms, as the Store's clock may be a test's).
func (t *ticket) Wait(ctx context.Context) (driver.Grant, error) {
	s := t.s
	for {
		s.mu.Lock()
		now := s.clock.Now()
		if !t.inQueueLocked() {
			s.mu.Unlock()
			return driver.Grant{}, driver.ErrNotHeld
		}
		l := s.live(t.p.Key, now)
		if l == nil && s.queued(t.p.Key) == t {
			s.queues[t.p.Key] = s.queues[t.p.Key][1:]
			if len(s.queues[t.p.Key]) == 0 {
				delete(s.queues, t.p.Key)
			}
			f := s.fences[t.p.Key] + 1
			s.fences[t.p.Key] = f
			s.leases[t.p.Key] = &lease{token: t.p.Token, owner: t.p.Owner, fence: f, expires: now.Add(t.p.TTL)}
			s.mu.Unlock()
			return driver.Grant{Fence: f}, nil
		}
		sleep := 100 * time.Millisecond
		if l != nil {
			t.setHolder(&driver.HeldError{Owner: l.owner, TTL: l.expires.Sub(now)})
			sleep = min(sleep, l.expires.Sub(now)+time.Millisecond)
		}
		s.mu.Unlock()
		timer := time.NewTimer(sleep)
		select {
		case <-t.wake:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return driver.Grant{}, ctx.Err()
		}
		timer.Stop()
	}
}

func (t *ticket) inQueueLocked() bool {
	for _, x := range t.s.queues[t.p.Key] {
		if x == t {
			return true
		}
	}
	return false
}

func (t *ticket) setHolder(h *driver.HeldError) {
	t.mu.Lock()
	t.holder = h
	t.mu.Unlock()
}

// Holder implements driver.Ticket.
func (t *ticket) Holder() *driver.HeldError {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.holder
}

// Leave implements driver.Ticket: the entry leaves the queue and, when it
// was first, the next waiter is woken.
func (t *ticket) Leave(ctx context.Context) error {
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[t.p.Key]
	for i, x := range q {
		if x != t {
			continue
		}
		q = append(q[:i:i], q[i+1:]...)
		if len(q) == 0 {
			delete(s.queues, t.p.Key)
		} else {
			s.queues[t.p.Key] = q
			if i == 0 {
				s.wakeHead(t.p.Key)
			}
		}
		return nil
	}
	return nil
}
