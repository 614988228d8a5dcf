package tasklock

import (
	"context"
	"sync"
	"time"
)

// maxInFlight is how many calls of one kind a Locker has under way at a
// store that batches before later ones wait to go together.
const maxInFlight = 2

// maxBatch bounds the items of one batched call, below the store's own
// bound (driver.Batcher.MaxBatch).
const maxBatch = 512

// groupCommit coalesces concurrent calls of one kind (acquire or release)
// to a driver.Batcher. Up to maxInFlight calls go to the store at once, each
// alone; calls arriving while that many are under way queue, and each call
// that ends sends the queue (up to max) as one batch from a new
// goroutine. A lone caller thus pays nothing, and a burst of N callers
// costs about N/max + maxInFlight round trips.
type groupCommit[P, R any] struct {
	one  func(context.Context, P) R              // a call alone
	many func(context.Context, []P) ([]R, error) // a batch
	max  int                                     // the most items of a batch
	fail func(error) R                           // an item's result when the batch or its wait failed
	undo func(P, R)                              // cleans up the result of an item whose caller gave up

	mu      sync.Mutex
	running int             // calls under way at the store
	queue   []*queued[P, R] // waiting for the next batch
}

// queued is one caller waiting in a groupCommit. Its fields after p are
// guarded by the groupCommit's mu.
type queued[P, R any] struct {
	ctx       context.Context
	p         P
	r         R
	done      chan struct{} // closed once r is set
	finished  bool          // r is set
	abandoned bool          // the caller gave up; r goes to undo
}

// do makes the call for p, alone or in a batch, and returns its result. When
// ctx ends while the call waits for its batch, do returns fail(ctx.Err()) at
// once, and a result that arrives later is undone.
func (g *groupCommit[P, R]) do(ctx context.Context, p P) R {
	g.mu.Lock()
	if g.running < maxInFlight {
		g.running++
		g.mu.Unlock()
		r := g.one(ctx, p)
		g.next()
		return r
	}
	q := &queued[P, R]{ctx: ctx, p: p, done: make(chan struct{})}
	g.queue = append(g.queue, q)
	g.mu.Unlock()
	select {
	case <-q.done:
		return q.r
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if q.finished {
		return q.r
	}
	q.abandoned = true
	return g.fail(ctx.Err())
}

// next is called as a call ends: it hands the call's slot to a batch of the
// queued callers, or frees it.
func (g *groupCommit[P, R]) next() {
	g.mu.Lock()
	var batch []*queued[P, R]
	n := 0
	for _, q := range g.queue {
		if !q.abandoned {
			batch = append(batch, q)
		}
		n++
		if len(batch) == g.max {
			break
		}
	}
	g.queue = g.queue[n:]
	if len(g.queue) == 0 {
		g.queue = nil // let the backing array go
	}
	if len(batch) == 0 {
		g.running--
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	go g.send(batch)
}

// send makes one batched call for batch and delivers the results.
func (g *groupCommit[P, R]) send(batch []*queued[P, R]) {
	ps := make([]P, len(batch))
	for i, q := range batch {
		ps[i] = q.p
	}
	ctx, cancel := batchContext(batch)
	rs, err := g.many(ctx, ps)
	cancel()
	if err == nil && len(rs) != len(batch) {
		err = errBatchLength
	}
	var undo []int
	g.mu.Lock()
	for i, q := range batch {
		r := g.fail(err)
		if err == nil {
			r = rs[i]
		}
		if q.abandoned {
			if err == nil {
				undo = append(undo, i)
			}
			continue
		}
		q.r, q.finished = r, true
		close(q.done)
	}
	g.mu.Unlock()
	for _, i := range undo {
		g.undo(ps[i], rs[i])
	}
	g.next()
}

// batchContext bounds a batched call by the latest deadline of its callers,
// or not at all when one of them has none: a caller that gives up earlier
// stops waiting on its own (do), and the call serves the others.
func batchContext[P, R any](batch []*queued[P, R]) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, q := range batch {
		d, ok := q.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.Background())
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.Background(), latest)
}

type batchError string

func (e batchError) Error() string { return string(e) }

// errBatchLength is every item's error when a store's batch call returned
// the wrong number of results (a store bug).
const errBatchLength = batchError("tasklock: the store returned a wrong number of batch results")
