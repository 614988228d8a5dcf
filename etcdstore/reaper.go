package etcdstore

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tasklock/tasklock/internal/alarm"
)

// Reaper backoff after a failed delete.
const (
	reapRetryMin = 50 * time.Millisecond
	reapRetryMax = 2 * time.Second
	reapTimeout  = 2 * time.Second // per attempt (at most the session TTL)
)

// reaper ends the leases that etcd cannot end by itself. Every lock's key
// lives on the shared session lease, which the Store keeps alive as long
// as any of its locks is renewed; a lock that is not renewed by its
// deadline (NoRenew, MaxHold, a stalled holder, a lost Locker) must still
// end after its own TTL. The reaper deletes such keys at their deadline,
// and keys a failed call may have left behind, retrying with backoff until
// etcd confirms or the session lease is gone. It is one timer (time.AfterFunc)
// set to the earliest deadline: no goroutine runs between firings.
//
// The deadline is the Store's own start of the grant or renewal plus its
// TTL, on the monotonic clock, always after the Locker's local validity
// (which starts earlier and subtracts a drift margin). If the holder's
// process dies or is cut off, the reaper cannot run, and the session lease
// ends the key by etcd's clock instead, within SessionTTL.
type reaper struct {
	s     *Store
	alarm alarm.Alarm    // fires at the earliest deadline
	wg    sync.WaitGroup // fire calls under way
}

// armLocked makes the reaper run no later than t. Callers hold s.mu.
func (r *reaper) armLocked(t time.Time) { r.alarm.ArmLocked(t) }

// stopLocked stops the reaper for good. Callers hold s.mu.
func (r *reaper) stopLocked() { r.alarm.StopLocked() }

// wait waits for a fire under way to finish.
func (r *reaper) wait() { r.wg.Wait() }

// doomLocked hands e to the reaper for deletion. Callers hold s.mu.
func (s *Store) doomLocked(e *entry, now time.Time) {
	e.state, e.deadline, e.attempts = stateDoomed, now, 0
	s.reap.armLocked(now)
}

// fire deletes the keys of expired and abandoned entries, then sets the
// timer for the next deadline.
func (r *reaper) fire() {
	s := r.s
	s.mu.Lock()
	if !r.alarm.BeginLocked() {
		s.mu.Unlock()
		return
	}
	r.wg.Add(1)
	defer r.wg.Done()
	now := time.Now()
	var batch []*entry
	for _, e := range s.held {
		if e.sess.dead.Load() && e.state != stateRenewing {
			s.dropLocked(e) // the lease took the key with it
			continue
		}
		if e.state == stateHeld && !now.Before(e.deadline) {
			e.state, e.attempts = stateDoomed, 0 // due now
		}
		if e.state == stateDoomed && !now.Before(e.deadline) {
			batch = append(batch, e)
		}
	}
	s.mu.Unlock()

	failed := r.delete(batch)

	s.mu.Lock()
	defer s.mu.Unlock()
	now = time.Now()
	for i, e := range batch {
		switch {
		case e.gone || e.state != stateDoomed:
		case failed[i]:
			e.attempts = min(e.attempts+1, 10)
			e.deadline = now.Add(min(reapRetryMin<<(e.attempts-1), reapRetryMax))
		default:
			s.dropLocked(e)
		}
	}
	r.alarm.EndLocked()
	var next time.Time
	for _, e := range s.held {
		if e.state == stateRenewing {
			continue // a renewal under way sets the timer when it ends
		}
		if next.IsZero() || e.deadline.Before(next) {
			next = e.deadline
		}
	}
	if !next.IsZero() {
		r.armLocked(next)
	}
}

// delete deletes the entries' keys, as many per Txn as etcd allows, and
// reports which deletes failed (deleting a key that is already gone
// succeeds: each key names its token, so it is nobody else's).
func (r *reaper) delete(batch []*entry) []bool {
	failed := make([]bool, len(batch))
	if len(batch) == 0 {
		return failed
	}
	s := r.s
	ctx, cancel := context.WithTimeout(s.ctx, min(s.ttl, reapTimeout))
	defer cancel()
	for lo := 0; lo < len(batch); {
		n := min(len(batch)-lo, int(s.txnOps.Load()))
		ops := make([]clientv3.Op, n)
		for i := range n {
			ops[i] = clientv3.OpDelete(batch[lo+i].key)
		}
		_, err := s.c.Txn(ctx).Then(ops...).Commit()
		if s.tooManyOps(err, n) {
			continue // again with smaller Txns
		}
		if err != nil {
			for i := range n {
				failed[lo+i] = true
			}
		}
		lo += n
	}
	return failed
}
