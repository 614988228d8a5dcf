package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tasklock/tasklock/driver"
)

var _ driver.Queuer = (*Store)(nil)

// ticket is one waiting entry in a key's queue: the entry's etcd key on
// the session lease, ordered by its create revision.
type ticket struct {
	s    *Store
	p    driver.AcquireParams
	ek   string // the entry's etcd key
	kp   string // the lock's prefix
	sess *session
	rev  int64         // the entry's create revision: its place in the queue and its fence
	wake chan struct{} // capacity 1: the session died, or the Store closed

	mu     sync.Mutex
	holder *driver.HeldError
	pred   string // the etcd key of the entry just ahead, "" at the head
	seen   int64  // the revision at which pred was read
}

// Enqueue implements driver.Queuer. In one Txn it puts token's entry under
// the key's prefix on the session lease, behind every entry already there,
// and reads the queue's head (the holder) and the entry just ahead of it.
// While the Store has waiting entries it keeps the session alive by itself,
// a LeaseKeepAlive every third of SessionTTL, so a wait may last any time.
func (s *Store) Enqueue(ctx context.Context, p driver.AcquireParams) (driver.Ticket, error) {
	if p.TTL > s.ttl {
		return nil, fmt.Errorf("etcdstore: enqueue %q: %w (%v > %v)", p.Key, ErrTTL, p.TTL, s.ttl)
	}
	t := &ticket{s: s, p: p, ek: s.entryKey(p.Key, p.Token), kp: s.keyPrefix(p.Key), wake: make(chan struct{}, 1)}
	for attempt := 0; ; attempt++ {
		ss, err := s.session(ctx)
		if err != nil {
			return nil, fmt.Errorf("etcdstore: enqueue %q: %w", p.Key, err)
		}
		resp, err := s.commit(ctx, ss, []string{t.ek}, func(ctx context.Context, ss *session) clientv3.Txn {
			return s.c.Txn(ctx).Then(
				clientv3.OpPut(t.ek, value(p.Token, p.Owner, p.TTL), clientv3.WithLease(ss.id)),
				clientv3.OpGet(t.kp, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1)),
				clientv3.OpGet(t.kp, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(2)),
			)
		})
		if errors.Is(err, errLeft) {
			return nil, fmt.Errorf("etcdstore: enqueue %q: %w", p.Key, ctx.Err()) // the entry goes once etcd answers
		}
		if isLeaseGone(err) {
			ss.dead.Store(true)
			if attempt == 0 {
				continue
			}
		}
		if err != nil {
			s.abandon(t.ek, ss) // the put may have been applied
			return nil, fmt.Errorf("etcdstore: enqueue %q: %w", p.Key, err)
		}
		t.sess, t.rev = ss, resp.Header.Revision
		t.observe(resp.Responses[1].GetResponseRange().GetKvs(), resp.Responses[2].GetResponseRange().GetKvs(), resp.Header.Revision)
		if !s.addWaiter(t) {
			s.abandon(t.ek, ss)
			return nil, ErrClosed
		}
		return t, nil
	}
}

// observe records what a read of the queue found: the head (for Holder)
// and the entry just ahead of t (of the keys read newest first, the first
// one older than t).
func (t *ticket) observe(head, newest []*mvccpb.KeyValue, rev int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(head) > 0 && string(head[0].Key) != t.ek {
		_, owner, _ := parseValue(head[0].Value)
		t.holder = &driver.HeldError{Owner: owner}
	}
	t.pred, t.seen = "", rev
	for _, kv := range newest {
		if kv.CreateRevision < t.rev {
			t.pred = string(kv.Key)
			break
		}
	}
}

// Holder implements driver.Ticket: the owner of the queue's head when it
// was last read (its remaining lease is not read: TTL is 0).
func (t *ticket) Holder() *driver.HeldError {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.holder
}

// Wait implements driver.Ticket. It watches only the entry just ahead of
// its own, from the revision at which it was read, so a release wakes one
// waiter, not every waiter of the key; when that entry is deleted it reads
// the queue again (one Txn) and either holds the key — no older entry is
// left — or watches the new entry ahead.
func (t *ticket) Wait(ctx context.Context) (driver.Grant, error) {
	s := t.s
	for {
		if t.sess.dead.Load() {
			return driver.Grant{}, driver.ErrNotHeld
		}
		t.mu.Lock()
		pred, seen := t.pred, t.seen
		t.mu.Unlock()
		if pred == "" {
			return t.granted()
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := s.c.Watch(wctx, pred, clientv3.WithRev(seen+1), clientv3.WithFilterPut())
		select {
		case <-wch: // a delete, or the watch failed (compacted, cancelled): read again
		case <-t.wake:
		case <-ctx.Done():
		}
		cancel()
		switch {
		case ctx.Err() != nil:
			return driver.Grant{}, ctx.Err()
		case s.ctx.Err() != nil:
			return driver.Grant{}, ErrClosed
		case t.sess.dead.Load():
			return driver.Grant{}, driver.ErrNotHeld
		}
		if err := t.read(ctx); err != nil {
			return driver.Grant{}, err
		}
	}
}

// read reads the queue again: whether t's entry still exists, the head,
// and the entry just ahead of t.
func (t *ticket) read(ctx context.Context) error {
	resp, err := t.s.c.Txn(ctx).Then(
		clientv3.OpGet(t.ek, clientv3.WithCountOnly()),
		clientv3.OpGet(t.kp, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1)),
		clientv3.OpGet(t.kp, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(t.rev-1), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1)),
	).Commit()
	if err != nil {
		return fmt.Errorf("etcdstore: wait for %q: %w", t.p.Key, err)
	}
	if resp.Responses[0].GetResponseRange().Count == 0 {
		return driver.ErrNotHeld // session expired, or force-released
	}
	t.observe(resp.Responses[1].GetResponseRange().GetKvs(), resp.Responses[2].GetResponseRange().GetKvs(), resp.Header.Revision)
	return nil
}

// granted makes t's entry a held lock of the Store, with a deadline TTL
// from now until the Locker's Renew starts its lease.
func (t *ticket) granted() (driver.Grant, error) {
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.waiting, t)
	if s.closed {
		return driver.Grant{}, ErrClosed
	}
	s.holdLocked(t.ek, t.sess, time.Now().Add(t.p.TTL))
	return driver.Grant{Fence: uint64(t.rev)}, nil
}

// Leave implements driver.Ticket: one Delete of the entry, which wakes the
// entry behind it through its watch. A Delete that fails is retried by the
// reaper until etcd confirms it (or the session lease takes the entry).
func (t *ticket) Leave(ctx context.Context) error {
	s := t.s
	s.mu.Lock()
	delete(s.waiting, t)
	if e := s.held[t.ek]; e != nil {
		s.dropLocked(e) // granted after all: Leave releases
	}
	s.mu.Unlock()
	if _, err := s.c.Delete(ctx, t.ek); err != nil {
		s.abandon(t.ek, t.sess)
		return fmt.Errorf("etcdstore: leave the queue of %q: %w", t.p.Key, err)
	}
	return nil
}

// addWaiter records t as waiting and makes sure the session is kept alive
// while anything waits. It reports false when the Store is closed.
func (s *Store) addWaiter(t *ticket) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.waiting[t] = struct{}{}
	if !s.keeping {
		s.keeping = true
		s.bg.Add(1)
		go s.keepWaiting()
	}
	return true
}

// keepWaiting keeps the current session alive while entries wait on it,
// and wakes them when etcd says it is gone (their entries went with it).
func (s *Store) keepWaiting() {
	defer s.bg.Done()
	tick := time.NewTicker(s.ttl / 3)
	defer tick.Stop()
	for {
		s.mu.Lock()
		ss := s.sess
		if len(s.waiting) == 0 || s.closed {
			s.keeping = false
			s.mu.Unlock()
			return
		}
		for t := range s.waiting {
			if t.sess.dead.Load() {
				delete(s.waiting, t)
				signalTicket(t)
			}
		}
		s.mu.Unlock()
		if ss != nil && !ss.dead.Load() {
			_ = ss.refresh(s, time.Now(), s.ttl).wait(s.ctx)
			if ss.dead.Load() {
				continue // wake its waiters now
			}
		}
		select {
		case <-tick.C:
		case <-s.ctx.Done():
			s.mu.Lock()
			for t := range s.waiting {
				signalTicket(t)
			}
			s.keeping = false
			s.mu.Unlock()
			return
		}
	}
}

func signalTicket(t *ticket) {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}
