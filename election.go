package tasklock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tasklock/tasklock/driver"
)

// Election elects one leader among the processes that campaign on one key:
// the leader is the holder of the key's lock, and its term is the lock's
// fence. Leadership is a lease like every Lock: renewed by the Locker's
// engine in the same batches, bounded by MaxHold when set, and lost with a
// cause on Done and Context no later than the lease's local validity ends
// — so a leader that cannot renew steps down before the store could elect
// anyone else, and a new leader's term is greater than every earlier one.
// Check the term at the resources the leader writes (package fence) to
// refuse a deposed leader that was paused past its lease.
//
// It is built on the Locker's mutex, so it works on every store, with the
// store's waiting: a follower's Campaign is woken by the store when the
// leader resigns or dies (at its TTL), and on etcd and ZooKeeper it waits
// in the store's fair queue, as their own election recipes do.
//
// The election's key is a mutex key: a plain Obtain of the same key by
// anyone takes part in the election (and, granted, leads). Give an
// election a key of its own.
//
// An Election is safe for concurrent use. One process campaigns through
// one Election per key; campaigning again after losing the leadership is
// the caller's choice (a loop around Campaign).
type Election struct {
	lk   *Locker
	key  string
	opts ObtainOptions

	mu     sync.Mutex
	leader *Lock // the leadership this Election won last; nil before
}

// Election returns the election named key, whose leadership is obtained
// with opts (nil: defaults; Wait is ignored, NoRenew is refused). The key
// and options are checked by Campaign.
func (lk *Locker) Election(key string, opts *ObtainOptions) *Election {
	e := &Election{lk: lk, key: key}
	if opts != nil {
		e.opts = *opts
		e.opts.Wait = 0
	}
	return e
}

// Campaign waits until this process is the leader, or ctx ends, and
// returns the leadership: a Lock whose Fence is the term, whose Done closes
// and whose Context is cancelled with the cause when the leadership is
// lost. When this Election already leads, it returns that leadership at
// once. It waits as Obtain does, and so ends early on what ends Obtain: a
// store failure (unreachable, or answering too late to trust a grant)
// ends it with that error when ctx has no deadline, and is retried until
// the deadline when it has one. A follower that should stand for as long
// as it runs campaigns again after an error, as after losing the
// leadership.
func (e *Election) Campaign(ctx context.Context) (*Lock, error) {
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	if l := e.Leader(); l != nil {
		return l, nil
	}
	if e.opts.NoRenew {
		return nil, badOption("ObtainOptions.NoRenew", "a leader's lease must be renewed")
	}
	// A fresh context: a leadership is never a nested hold of a lock the
	// caller's chain holds on the same key.
	l, err := e.lk.Obtain(withoutHolds(ctx), e.key, &e.opts)
	if err != nil {
		return nil, fmt.Errorf("tasklock: campaign %q: %w", e.key, err)
	}
	e.mu.Lock()
	e.leader = l
	e.mu.Unlock()
	return l, nil
}

// Leader returns this process's leadership while it lasts, and nil when it
// does not lead (never elected, resigned, or lost).
func (e *Election) Leader() *Lock {
	e.mu.Lock()
	l := e.leader
	e.mu.Unlock()
	if l == nil || l.Err() != nil {
		return nil
	}
	return l
}

// Resign ends this process's leadership, releasing the lease so that a
// follower is elected at once. It returns nil when this process does not
// lead.
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	l := e.leader
	e.leader = nil
	e.mu.Unlock()
	if l == nil {
		return nil
	}
	if err := l.Release(ctx); err != nil && !errors.Is(err, ErrNotHeld) {
		return fmt.Errorf("tasklock: resign %q: %w", e.key, err)
	}
	return nil
}

// LeaderInfo describes the leader of an election as an observer sees it.
type LeaderInfo struct {
	Owner string        // the leader's owner name; "" when there is none
	Term  uint64        // the leadership's fence; 0 when there is no leader
	Since time.Time     // when this observer first saw this term (the leader itself: when it was elected)
	TTL   time.Duration // the leadership's remaining lease at the store, 0 when unknown
}

// Observe sends the election's leader on the returned channel each time it
// changes (a new term, or no leader), starting with the current one, until
// ctx ends; then it closes the channel. It looks at the store every
// quarter of the election's TTL (at most every second, at least every 50
// ms) and at once when the store announces a release, and needs a store
// that lists its leases (driver.Lister): on one that does not, the channel
// closes at once. A slow reader misses intermediate changes, never the
// latest.
func (e *Election) Observe(ctx context.Context) <-chan LeaderInfo {
	out := make(chan LeaderInfo, 1)
	lister, ok := e.lk.door.store.(driver.Lister)
	if !ok {
		close(out)
		return out
	}
	ttl := e.opts.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	every := min(max(ttl/4, 50*time.Millisecond), time.Second)
	go e.observe(ctx, lister, every, out)
	return out
}

func (e *Election) observe(ctx context.Context, lister driver.Lister, every time.Duration, out chan LeaderInfo) {
	defer close(out)
	var (
		last LeaderInfo
		sent bool
	)
	e.lk.door.subscribe(ctx, e.lk.waiters.notify)
	w := e.lk.waiters.add(observeWaitPrefix + e.key)
	defer e.lk.waiters.remove(observeWaitPrefix+e.key, w, false, true)
	t := e.lk.clock.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.lk.closing.Done():
			return
		case <-w.ch:
		case <-t.C():
		}
		info, err := e.current(ctx, lister)
		if err == nil && (!sent || info.Term != last.Term || info.Owner != last.Owner) {
			if info.Term != 0 {
				info.Since = e.lk.clock.Now()
				if l := e.Leader(); l != nil && l.fence == info.Term {
					info.Since = l.acquiredAt
				}
			}
			last, sent = info, true
			select { // keep only the latest for a slow reader
			case <-out:
			default:
			}
			out <- info
		}
		t.Reset(every)
	}
}

// current reads the election's leader from the store.
func (e *Election) current(ctx context.Context, lister driver.Lister) (LeaderInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ls, err := lister.Leases(ctx, e.key)
	if err != nil {
		return LeaderInfo{}, err
	}
	for _, l := range ls {
		if l.Key == e.key && l.Mode == driver.ModeMutex && !l.Waiting {
			return LeaderInfo{Owner: l.Owner, Term: l.Fence, TTL: l.TTL}, nil
		}
	}
	return LeaderInfo{}, nil
}

// withoutHolds returns ctx without the holds it carries (reentrant.go).
func withoutHolds(ctx context.Context) context.Context {
	if holdsOf(ctx) == nil {
		return ctx
	}
	return context.WithValue(ctx, holdsKey{}, (*holdNode)(nil))
}
