package schedule

import (
	"slices"
	"sync"
)

// The runs of past ticks a node takes for backfills and re-runs start in
// tick order, oldest first, on that node. A backfill's requests reach a
// node over several passes (they are written one at a time, and a node
// polls twice a second), and each pass runs its claimed work in a
// goroutine of its own (execute): left to themselves, the goroutines of
// several passes would wait for the job's lock side by side, and it goes
// to whichever asks first, or, without the lock, run at once, so that a
// later pass's oldest tick started before an earlier pass's other ticks.
// Instead each pass puts its past work in the job's pastQueue, and its
// goroutine runs work from that queue, oldest tick first, until the queue
// is empty. One work starts at a time: a run takes the queue's turn as it
// leaves the queue and gives it back as its first attempt starts (after
// the job's lock, a MaxConcurrent or pool permit), or as it ends without
// one, so that the next oldest tick cannot overtake it while it waits. The
// runs themselves may overlap where the job allows it (overlap allow):
// as many at once as before, one per pass that brought work; a job with
// MaxConcurrent runs at most that many of them at once on this node, so
// that its own backfill's ticks do not take each other's permits and skip.

// pastQueue is a job's backfills and re-runs that this node claimed and has
// not started yet.
type pastQueue struct {
	mu      sync.Mutex
	works   []work // by tick, oldest first; of one tick, in the order claimed
	runners int    // goroutines running works from the queue (runPast)
	// turn is held from when a work leaves the queue until its run's first
	// attempt starts, or the run ends without one.
	turn sync.Mutex
}

// isPast reports whether w is the run of a backfill or re-run of a past
// tick, which runs through the job's pastQueue.
func isPast(w work) bool { return w.past }

// runPast adds ws, past works of j, to j's queue, and runs works from it,
// oldest tick first, until it is empty; it returns at once when
// j.MaxConcurrent goroutines run them already, which then run ws too.
func (s *Scheduler) runPast(j *job, ws []work) {
	q := &j.past
	q.mu.Lock()
	q.add(ws)
	if j.MaxConcurrent > 0 && q.runners >= j.MaxConcurrent {
		q.mu.Unlock()
		return
	}
	q.runners++
	q.mu.Unlock()
	for {
		q.turn.Lock()
		q.mu.Lock()
		if len(q.works) == 0 {
			q.runners--
			q.mu.Unlock()
			q.turn.Unlock()
			return
		}
		w := q.works[0]
		q.works[0] = work{}
		q.works = q.works[1:]
		q.mu.Unlock()
		w.turn = &pastTurn{q: q, held: true}
		s.runTick(j, w) // on this goroutine: the turn is given back on it only
		w.turn.release()
	}
}

// pastTurn is a pastQueue's turn, held by one work from when it leaves the
// queue.
type pastTurn struct {
	q    *pastQueue
	held bool
}

// release gives the turn back, once; nil does nothing.
func (t *pastTurn) release() {
	if t != nil && t.held {
		t.held = false
		t.q.turn.Unlock()
	}
}

// add inserts ws into the queue by tick, after the works of the same tick
// already queued. Callers hold q.mu.
func (q *pastQueue) add(ws []work) {
	for _, w := range ws {
		i := len(q.works)
		for i > 0 && q.works[i-1].tick.After(w.tick) {
			i--
		}
		q.works = slices.Insert(q.works, i, w)
	}
}
