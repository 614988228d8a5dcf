package tasklock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tasklock/tasklock/driver"
)

// obtainQueued waits for key in the store's own queue (driver.Queuer, or
// when fair the queue kept on request, driver.FairQueuer): one entry, and
// so one token, for the whole wait, woken by the store when the entry's
// predecessor goes. held is what the first attempt found, if one was made.
func (lk *Locker) obtainQueued(ctx context.Context, key string, o *resolved, start time.Time, held *NotObtainedError, fair bool) (*Lock, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(lk.closing, cancel)() // Close ends every wait
	ttl, _ := firstLease(o.ttl, o.maxHold)
	var lastErr error
	for attempt := 1; ; attempt++ {
		token := lk.newToken()
		t, err := lk.door.enqueue(ctx, driver.AcquireParams{Key: key, Token: token, Owner: o.owner, TTL: ttl}, fair)
		// failing: the store failed at the last call, not cut by ctx.
		failing := err != nil && ctx.Err() == nil
		if err == nil {
			lk.emit(Event{Type: EventQueued, Key: key, Owner: o.owner})
			var l *Lock
			l, held, err = lk.waitTicket(ctx, t, key, token, o, held)
			if err == nil {
				if held != nil && !fair {
					lk.contended.add(key, lk.clock.Now()) // still changing hands
				}
				lk.obtained(l, lk.clock.Now().Sub(start))
				return l, nil
			}
			var fw *failedWait
			if failing = errors.As(err, &fw); failing {
				err = fw.err
			}
			if held == nil && !failing && ctx.Err() != nil {
				// Queued, and the wait ended before the store said who
				// holds the key: not obtained all the same.
				held = &NotObtainedError{Key: key}
			}
		}
		if lk.closing.Err() != nil {
			return nil, ErrClosed
		}
		if failing {
			lastErr = err
		}
		if ctx.Err() != nil {
			return nil, lk.waitEnded(ctx, key, held, lastErr, failing)
		}
		// The entry is gone (its session ended, or it was removed), or the
		// store failed: queue again, at the back, while the wait allows.
		if !errors.Is(err, driver.ErrNotHeld) {
			if !retryable(ctx, err) {
				return nil, fmt.Errorf("tasklock: obtain %q: %w", key, err)
			}
			lastErr = err
		}
		if !lk.sleep(ctx, pollDelay(attempt, 0, false)) {
			return nil, lk.waitEnded(ctx, key, held, lastErr, failing)
		}
	}
}

// waitTicket waits until t is granted and starts its lease with one Renew,
// counted from when that Renew was sent, unless the grant's Wait started
// it (driver.StartedTicket). It leaves the queue on every path
// that does not return a Lock, except when the entry is already gone
// (driver.ErrNotHeld).
func (lk *Locker) waitTicket(ctx context.Context, t driver.Ticket, key, token string, o *resolved, held *NotObtainedError) (*Lock, *NotObtainedError, error) {
	ttl, _ := firstLease(o.ttl, o.maxHold)
	for attempt := 1; ; attempt++ {
		g, h, err := lk.door.wait(ctx, t)
		// An owner not read (Owner "") does not hide one that was.
		if h != nil && (held == nil || h.Owner != "" && (h.Owner != held.Owner || h.TTL > 0)) {
			held = &NotObtainedError{Key: key, Owner: h.Owner, TTL: h.TTL}
		}
		if err == nil {
			if st, ok := t.(driver.StartedTicket); ok {
				if at, ok := st.Started(); ok {
					// The store's clock measured the time since; count it
					// back from the Locker's.
					l, err := lk.grant(key, token, g.Fence, o, lk.clock.Now().Add(-time.Since(at)))
					return l, held, err
				}
			}
			sentAt := lk.clock.Now()
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(ttl/3, time.Second))
			err := lk.door.renewOne(rctx, driver.RenewParams{Key: key, Token: token, TTL: ttl})
			cancel()
			if err != nil {
				if !errors.Is(err, driver.ErrNotHeld) {
					lk.door.giveBack(key, token, driver.ModeMutex)
				}
				return nil, held, err
			}
			l, err := lk.grant(key, token, g.Fence, o, sentAt)
			return l, held, err
		}
		if errors.Is(err, driver.ErrNotHeld) {
			return nil, held, err
		}
		if ctx.Err() != nil || !retryable(ctx, err) {
			lk.door.leave(t)
			return nil, held, err
		}
		// Unknown outcome, entry presumably still queued: wait on it again.
		if !lk.sleep(ctx, pollDelay(attempt, 0, false)) {
			lk.door.leave(t)
			return nil, held, &failedWait{err}
		}
	}
}

// failedWait is waitTicket's error when ctx ended the wait while it waited
// to retry after the store failed (err).
type failedWait struct{ err error }

func (f *failedWait) Error() string { return f.err.Error() }

// waitEnded is Obtain's error when ctx ended the wait: the holder seen last
// with ctx's error, or, when nobody was seen or the store failed at the
// last call (failing), ctx's error with the store's last error.
func (lk *Locker) waitEnded(ctx context.Context, key string, held *NotObtainedError, lastErr error, failing bool) error {
	if lk.closing.Err() != nil {
		return ErrClosed
	}
	cerr := ctx.Err()
	if held != nil && !failing {
		held.Err = cerr
		return held
	}
	if lastErr != nil {
		return fmt.Errorf("tasklock: obtain %q: %w (last error: %w)", key, cerr, lastErr)
	}
	return fmt.Errorf("tasklock: obtain %q: %w", key, cerr)
}

// sleep waits d on the Locker's clock and reports whether ctx is still live.
func (lk *Locker) sleep(ctx context.Context, d time.Duration) bool {
	t := lk.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// contendedKeys are the keys an Obtain found held lately, on a store that
// keeps a queue of waiters (driver.Queuer). A failed Acquire there costs
// as much as the queue's entry (ZooKeeper: a lock node created, the
// children read, the holder read, the node deleted), and on a key that
// changes hands between waiters it fails nearly every time: so for
// contendedFor after one did, an Obtain of the key skips it and joins the
// queue, which grants a free key at once. A key not found held again in
// that time goes back to an Acquire first.
type contendedKeys struct {
	mu sync.Mutex
	m  map[string]time.Time // when an Obtain last found the key held
}

// contendedFor is how long a key found held makes Obtain queue at once.
const contendedFor = time.Second

// maxContended bounds the keys remembered; past it they are forgotten.
const maxContended = 4096

// has reports whether key was found held within contendedFor before now.
func (c *contendedKeys) has(key string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.m[key]
	return ok && now.Sub(at) < contendedFor && now.Sub(at) >= 0
}

// add notes that an Obtain of key found it held at now.
func (c *contendedKeys) add(key string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxContended {
		c.m = make(map[string]time.Time)
	}
	c.m[key] = now
}
