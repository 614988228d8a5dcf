package etcdstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// session is one etcd lease that keeps the keys of every lock a Store
// grants while it lives. It is kept alive only on demand: by the renewals
// and grants that need it to last (LeaseKeepAlive, one message), never by a
// background stream, so a Store that holds nothing sends nothing and its
// session lapses.
type session struct {
	id   clientv3.LeaseID
	ttl  time.Duration // as granted (etcd may grant more than asked)
	dead atomic.Bool   // etcd said the lease does not exist

	mu       sync.Mutex
	lastOK   time.Time  // when the latest successful keepalive (or the grant) was sent
	inflight *keepalive // the keepalive under way, if any
	next     *keepalive // callers that came during inflight: sent when it ends
}

// keepalive is one LeaseKeepAlive under way, which any call that began
// before it was sent may wait for.
type keepalive struct {
	sent time.Time
	done chan struct{}
	err  error // set before done is closed
}

// coverMargin is the part of the session TTL not counted on when a renewal
// relies on an earlier keepalive: 2%, twice the clock-rate error the Locker
// allows for (1% of a TTL).
const coverMargin = 50 // TTL/coverMargin

// refresh returns the keepalive the caller must wait for (nil: none) so that
// the session lease is known to live at etcd until start+ttl, where start is
// when the caller's request began (the Locker measures local validity from
// an earlier instant). A keepalive sent at or after start makes the lease
// last until at least start + session TTL, enough for any lock TTL the Store
// accepts; an earlier successful one counts up to its send time plus the
// session TTL less a margin. Callers share keepalives: one that arrives
// while a keepalive it cannot use is under way (sent before it began) waits
// for the next, which starts when that one ends, so that at most one is
// under way per session and a burst of grants costs one per round trip.
//
// When the session TTL exceeds ttl (DefaultSessionTTL is tasklock's default
// TTL plus a second), the last keepalive covers the caller for that slack
// after it was sent. Once less than half of the slack is left, the caller
// starts the next keepalive without waiting for it, so that a steady stream
// of grants and renewals sends one keepalive per half slack and none of
// them waits for one.
func (ss *session) refresh(s *Store, start time.Time, ttl time.Duration) *keepalive {
	s.mu.Lock() // Close waits for s.bg after setting closed under s.mu
	defer s.mu.Unlock()
	return ss.refreshLocked(s, start, ttl)
}

// refreshLocked is refresh for a caller that holds s.mu.
func (ss *session) refreshLocked(s *Store, start time.Time, ttl time.Duration) *keepalive {
	if s.closed {
		k := &keepalive{done: make(chan struct{}), err: ErrClosed}
		close(k.done)
		return k
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if !ss.lastOK.Before(start) {
		return nil
	}
	cover := ss.ttl - ss.ttl/coverMargin
	if left := ss.lastOK.Add(cover).Sub(start.Add(ttl)); left >= 0 {
		if left < (cover-ttl)/2 && ss.inflight == nil {
			s.bg.Add(1)
			ss.startLocked(s, &keepalive{done: make(chan struct{})}) // ahead of need: nobody waits
		}
		return nil
	}
	k := ss.inflight
	switch {
	case k != nil && !k.sent.Before(start):
		return k
	case k != nil:
		if ss.next == nil {
			ss.next = &keepalive{done: make(chan struct{})}
		}
		return ss.next
	}
	k = &keepalive{done: make(chan struct{})}
	s.bg.Add(1)
	ss.startLocked(s, k)
	return k
}

// startLocked sends k. Callers hold ss.mu and have added k to s.bg.
func (ss *session) startLocked(s *Store, k *keepalive) {
	k.sent = time.Now()
	ss.inflight = k
	go ss.keepAlive(s, k)
}

// keepAlive sends one LeaseKeepAlive, bounded by the session TTL (after
// that its answer is worth nothing) and by the Store's Close.
func (ss *session) keepAlive(s *Store, k *keepalive) {
	defer s.bg.Done()
	ctx, cancel := context.WithTimeout(s.ctx, ss.ttl)
	_, err := s.c.KeepAliveOnce(ctx, ss.id)
	cancel()
	if isLeaseGone(err) {
		ss.dead.Store(true)
	}
	ss.mu.Lock()
	if err == nil && k.sent.After(ss.lastOK) {
		ss.lastOK = k.sent
	}
	ss.inflight = nil
	if n := ss.next; n != nil {
		ss.next = nil
		if s.ctx.Err() != nil {
			n.err = ErrClosed
			close(n.done)
		} else {
			s.bg.Add(1) // k's Done is still to come: the count is not zero
			ss.startLocked(s, n)
		}
	}
	ss.mu.Unlock()
	k.err = err
	close(k.done)
}

// wait waits for k (nil: nothing to wait for) or ctx.
func (k *keepalive) wait(ctx context.Context) error {
	if k == nil {
		return nil
	}
	select {
	case <-k.done:
		return k.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// liveSession returns the Store's live session and the keepalive the caller
// must wait for (see refresh), as session and refresh would, in one hold of
// s.mu when the session lives (every call but the first and those after
// the session lease was lost).
func (s *Store) liveSession(ctx context.Context, start time.Time, ttl time.Duration) (*session, *keepalive, error) {
	s.mu.Lock()
	if ss := s.sess; !s.closed && ss != nil && !ss.dead.Load() {
		ka := ss.refreshLocked(s, start, ttl)
		s.mu.Unlock()
		return ss, ka, nil
	}
	s.mu.Unlock()
	ss, err := s.session(ctx)
	if err != nil {
		return nil, nil, err
	}
	return ss, ss.refresh(s, start, ttl), nil
}

// session returns the Store's live session, granting a new lease when there
// is none or etcd said the last one is gone. One grant runs at a time.
func (s *Store) session(ctx context.Context) (*session, error) {
	for {
		s.mu.Lock()
		closed, ss := s.closed, s.sess
		s.mu.Unlock()
		switch {
		case closed:
			return nil, ErrClosed
		case ss != nil && !ss.dead.Load():
			return ss, nil
		}
		select {
		case s.grantSem <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		s.mu.Lock()
		granted := s.sess != ss
		s.mu.Unlock()
		if granted { // by another caller meanwhile
			<-s.grantSem
			continue
		}
		ns, err := s.grant(ctx)
		<-s.grantSem
		return ns, err
	}
}

// grant grants a new session lease and makes it the Store's session.
func (s *Store) grant(ctx context.Context) (*session, error) {
	sent := time.Now()
	resp, err := s.c.Grant(ctx, s.ttlSec)
	if err != nil {
		return nil, fmt.Errorf("grant the session lease: %w", err)
	}
	if resp.TTL < s.ttlSec {
		return nil, fmt.Errorf("grant the session lease: etcd granted %ds, asked for %ds", resp.TTL, s.ttlSec)
	}
	ns := &session{id: resp.ID, ttl: time.Duration(resp.TTL) * time.Second, lastOK: sent}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed // the lease holds nothing and expires by itself
	}
	s.sess = ns
	return ns, nil
}
