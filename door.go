package tasklock

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tasklock/tasklock/driver"
)

// door is a Locker's one way to its store. It finds the store's optional
// capabilities once, when New makes it; group-commits acquires and releases
// when the store batches (groupCommit); and makes every call to the store:
// acquires, renewals (the engine's, and the one that starts a queued
// grant), releases and give-backs, queue entries, and the subscription to
// releases. Nothing else in the package holds the driver.Store.
type door struct {
	store    driver.Store
	queuer   driver.Queuer     // nil: the store keeps no queue of waiters
	fair     driver.FairQueuer // nil: the store keeps no queue on request
	kinder   driver.Kinder     // nil: the store keeps only mutexes
	notifier driver.Notifier   // nil: the store cannot tell of releases
	clock    Clock
	log      *slog.Logger

	// acquires and releases group-commit calls to a driver.Batcher; nil
	// for other stores, and for a Batcher that cannot batch.
	acquires *groupCommit[driver.AcquireParams, driver.AcquireResult]
	releases *groupCommit[driver.ReleaseParams, error]
	// extends group-commits the renewals Extend asks for, for every
	// store: a Renew carries many leases by contract.
	extends *groupCommit[driver.RenewParams, error]
	// batchKinds: the batches also carry read-write locks and semaphores
	// (driver.KindBatcher); otherwise those calls go alone.
	batchKinds bool

	subMu      sync.Mutex
	subStop    func()      // ends the subscription; nil while none runs
	subClosed  bool        // close was called: no subscription starts again
	subFail    time.Time   // when Subscribe last failed; retried a second later
	subscribed atomic.Bool // subStop is set: releases come back through the store
}

// newDoor returns the door to store, having looked once at what it can do.
func newDoor(store driver.Store, clock Clock, log *slog.Logger) *door {
	dr := &door{store: store, clock: clock, log: log}
	dr.queuer, _ = store.(driver.Queuer)
	dr.notifier, _ = store.(driver.Notifier)
	dr.fair, _ = store.(driver.FairQueuer)
	dr.kinder, _ = store.(driver.Kinder)
	dr.extends = &groupCommit[driver.RenewParams, error]{
		one:  dr.renewOne,
		many: dr.renew,
		max:  maxBatch,
		fail: func(err error) error { return err },
		undo: func(driver.RenewParams, error) {},
	}
	b, ok := store.(driver.Batcher)
	if !ok {
		return dr
	}
	n := min(b.MaxBatch(), maxBatch)
	if n <= 1 {
		return dr
	}
	if kb, ok := store.(driver.KindBatcher); ok {
		dr.batchKinds = kb.BatchesKinds()
	}
	dr.acquires = &groupCommit[driver.AcquireParams, driver.AcquireResult]{
		one: func(ctx context.Context, p driver.AcquireParams) driver.AcquireResult {
			g, err := store.Acquire(ctx, p)
			return driver.AcquireResult{Grant: g, Err: err}
		},
		many: b.AcquireBatch,
		max:  n,
		fail: func(err error) driver.AcquireResult { return driver.AcquireResult{Err: err} },
		undo: func(p driver.AcquireParams, r driver.AcquireResult) {
			if r.Err == nil {
				dr.giveBack(p.Key, p.Token, p.Mode)
			}
		},
	}
	dr.releases = &groupCommit[driver.ReleaseParams, error]{
		one:  store.Release,
		many: b.ReleaseBatch,
		max:  n,
		fail: func(err error) error { return err },
		undo: func(driver.ReleaseParams, error) {},
	}
	return dr
}

// acquire is the store's Acquire, group-committed when the store batches
// p's kind of hold.
func (dr *door) acquire(ctx context.Context, p driver.AcquireParams) (driver.Grant, error) {
	if dr.acquires == nil || (p.Mode != driver.ModeMutex && !dr.batchKinds) {
		return dr.store.Acquire(ctx, p)
	}
	r := dr.acquires.do(ctx, p)
	return r.Grant, r.Err
}

// release is the store's Release, group-committed when the store batches
// p's kind of hold.
func (dr *door) release(ctx context.Context, p driver.ReleaseParams) error {
	if dr.releases == nil || (p.Mode != driver.ModeMutex && !dr.batchKinds) {
		return dr.store.Release(ctx, p)
	}
	return dr.releases.do(ctx, p)
}

// giveBack deletes a lease that was granted for token but never handed to
// a caller (or, ModeWrite, a writer's waiting entry), waiting at most a
// second: otherwise it expires by its TTL.
func (dr *door) giveBack(key, token string, mode driver.Mode) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = dr.release(ctx, driver.ReleaseParams{Key: key, Token: token, Mode: mode})
}

// kinds returns nil when the store keeps holds of mode m, and otherwise an
// error matching ErrUnsupported.
func (dr *door) kinds(m driver.Mode) error {
	if m == driver.ModeMutex {
		return nil
	}
	if dr.kinder == nil {
		return fmt.Errorf("%w: %T keeps only mutexes, not read-write locks or semaphores", driver.ErrUnsupported, dr.store)
	}
	return dr.kinder.Kinds(m)
}

// renew is the store's Renew: one result per lease of ps, in order. A store
// that answers with another number of results has failed the whole call.
func (dr *door) renew(ctx context.Context, ps []driver.RenewParams) ([]error, error) {
	res, err := dr.store.Renew(ctx, ps)
	if err == nil && len(res) != len(ps) {
		return nil, fmt.Errorf("tasklock: store returned %d renewal results for %d leases", len(res), len(ps))
	}
	return res, err
}

// extend renews the single lease p for Extend, group-committed with the
// other Extend calls under way.
func (dr *door) extend(ctx context.Context, p driver.RenewParams) error {
	return dr.extends.do(ctx, p)
}

// renewOne renews the single lease p alone: the call that starts the lease
// of a granted queue entry, and an Extend's when the store is idle.
func (dr *door) renewOne(ctx context.Context, p driver.RenewParams) error {
	res, err := dr.renew(ctx, []driver.RenewParams{p})
	if err != nil {
		return err
	}
	return res[0]
}

// queues reports whether the store keeps a queue of waiters per key
// (driver.Queuer), which Obtain then joins instead of polling.
func (dr *door) queues() bool { return dr.queuer != nil }

// fairQueue reports whether Obtain's fair wait goes straight to the
// store's queue kept on request (driver.FairQueuer); and when the store
// keeps no queue at all, returns the error matching ErrUnsupported.
func (dr *door) fairQueue() (bool, error) {
	switch {
	case dr.queuer != nil:
		return false, nil // every wait queues anyway
	case dr.fair != nil:
		return true, nil
	}
	return false, fmt.Errorf("%w: %T keeps no queue of waiters (ObtainOptions.Fair)", driver.ErrUnsupported, dr.store)
}

// enqueue adds an entry for p.Token to the store's queue for p.Key: the
// queue kept on request when fair, else the Queuer's. Call it only when
// queues (or fairQueue) reports true.
func (dr *door) enqueue(ctx context.Context, p driver.AcquireParams, fair bool) (driver.Ticket, error) {
	if fair {
		return dr.fair.EnqueueFair(ctx, p)
	}
	return dr.queuer.Enqueue(ctx, p)
}

// wait waits until t is at the head of its queue and granted, and returns
// the grant, or the error, with the holder t saw last (nil when unknown).
func (dr *door) wait(ctx context.Context, t driver.Ticket) (driver.Grant, *driver.HeldError, error) {
	g, err := t.Wait(ctx)
	return g, t.Holder(), err
}

// leave takes an entry out of the store's queue, within a bounded time; a
// store that cannot confirm it retries on its own.
func (dr *door) leave(t driver.Ticket) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = t.Leave(ctx)
}

// subscribe makes sure the subscription to the store's releases is running,
// calling onRelease for every released key, and reports whether waiters will
// be notified. A failed subscription is retried by a later waiter after a
// second; meanwhile waiters poll.
func (dr *door) subscribe(ctx context.Context, onRelease func(key string)) bool {
	if dr.notifier == nil {
		return false
	}
	dr.subMu.Lock()
	defer dr.subMu.Unlock()
	if dr.subStop != nil {
		return true
	}
	if dr.subClosed {
		return false
	}
	if !dr.subFail.IsZero() && dr.clock.Now().Sub(dr.subFail) < time.Second {
		return false
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	stop, err := dr.notifier.Subscribe(sctx, onRelease)
	if err != nil {
		dr.subFail = dr.clock.Now()
		dr.log.Info("tasklock: store notifications unavailable, waiters poll", "err", err)
		return false
	}
	dr.subStop = stop
	dr.subscribed.Store(true)
	return true
}

// notified reports whether the store's subscription is running: a release
// then wakes this Locker's waiters through the store.
func (dr *door) notified() bool { return dr.subscribed.Load() }

// close ends the subscription, and any chance of a new one.
func (dr *door) close() {
	dr.subMu.Lock()
	defer dr.subMu.Unlock()
	dr.subClosed = true
	if dr.subStop != nil {
		dr.subStop()
		dr.subStop = nil
		dr.subscribed.Store(false)
	}
}
