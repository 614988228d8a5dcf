package schedule

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/tasklock/tasklock/ledger"
)

// history lets the runs of a node share their history writes: while one
// RecordRuns call is under way, the records of the runs that end meanwhile
// wait, and the next call writes them all (group commit). A burst of runs
// that end together then costs one round trip, not one each.
//
// A run's "running" record is queued without waiting while a write is under
// way (recordStart), and a record with the same RunKey queued before the
// next write replaces it: a run that ends within one write of its start
// costs the ledger one record, not two. Either record is written before
// any later one with its key, so the ledger never goes back from an
// outcome to "running".
type history struct {
	mu      sync.Mutex
	pending []*histItem
	busy    bool // a writer is under way
	// queued finds the running records in pending that a later record
	// with the same key replaces.
	queued map[ledger.RunKey]*histItem
	// unwritten holds the final records whose write failed (the store
	// was down or did not answer), by key, until a later write of the key
	// succeeds: the sweep writes them again once the store answers
	// (rewrite). Without it a run that ended during an outage stayed
	// "running" in history for as long as its node lived, since no node
	// settles the records of a live node.
	unwritten map[ledger.RunKey]ledger.RunRecord
}

// maxUnwritten bounds history.unwritten; records past it are dropped, as
// every failed record was before (logged by recordFailed).
const maxUnwritten = 10000

type histItem struct {
	rs   []ledger.RunRecord
	one  [1]ledger.RunRecord // rs's array when the item has one record (oneItem)
	wait bool                // a goroutine waits on wake; false: queued by recordStart
	gone bool                // replaced by a later record with the same key before it was written
	// wake, capacity 1, made when the item queues behind a write under
	// way: the result of another goroutine's call that wrote it, or
	// errLead when this goroutine writes the next batch.
	wake chan error
}

// errLead, sent on a histItem's wake, tells its goroutine to write the next
// batch; it is never returned.
var errLead = errors.New("schedule: history: write the next batch")

// record writes history records, with those of other runs ending at the
// same time, and returns once they are written (or writing failed twice,
// which it logs and returns).
func (s *Scheduler) record(rs ...ledger.RunRecord) error {
	return s.enqueue(&histItem{rs: rs, wait: true})
}

// recordOne is record of one record, in one allocation.
func (s *Scheduler) recordOne(r ledger.RunRecord) error {
	it := oneItem(r)
	it.wait = true
	return s.enqueue(it)
}

// oneItem is an item of the one record r, with its own array.
func oneItem(r ledger.RunRecord) *histItem {
	it := &histItem{one: [1]ledger.RunRecord{r}}
	it.rs = it.one[:]
	return it
}

// recordStart writes a run's running record r: at once when no write is
// under way, like record, and otherwise by queueing it for the next write
// without waiting for it.
func (s *Scheduler) recordStart(r ledger.RunRecord) {
	h := &s.hist
	h.mu.Lock()
	if !h.busy {
		h.mu.Unlock()
		s.recordOne(r)
		return
	}
	it := oneItem(r)
	h.pending = append(h.pending, it)
	if h.queued == nil {
		h.queued = make(map[ledger.RunKey]*histItem)
	}
	k := r.Key()
	if q := h.queued[k]; q != nil {
		q.gone = true // a pending record the attempt's own replaces (runTick)
	}
	h.queued[k] = it
	h.mu.Unlock()
}

func (s *Scheduler) enqueue(it *histItem) error {
	h := &s.hist
	h.mu.Lock()
	for i := range it.rs {
		k := it.rs[i].Key()
		if q := h.queued[k]; q != nil {
			q.gone = true
			delete(h.queued, k)
		}
	}
	h.pending = append(h.pending, it)
	if h.busy {
		it.wake = make(chan error, 1)
		h.mu.Unlock()
		if err := <-it.wake; err != errLead {
			s.recordFailed(it.rs, err)
			s.deps.ended(it.rs, err)
			return err
		}
		h.mu.Lock()
	}
	h.busy = true
	var err error
	for first := true; ; first = false {
		batch := h.pending
		h.pending = nil
		clear(h.queued)
		h.mu.Unlock()
		if e := s.writeBatch(batch, it); first {
			err = e
		}
		h.mu.Lock()
		// The next batch is written by a goroutine that waits for it;
		// when only queued running records are left, by this one.
		var next *histItem
		for _, p := range h.pending {
			if p.wait {
				next = p
				break
			}
		}
		if next != nil {
			next.wake <- errLead
			break
		}
		if len(h.pending) == 0 {
			h.busy = false
			break
		}
	}
	h.mu.Unlock()
	s.recordFailed(it.rs, err)
	s.deps.ended(it.rs, err)
	return err
}

// writeBatch writes the records of batch in one RecordRuns call (tried
// twice) and tells every waiting item but self how it went; it returns
// self's result.
func (s *Scheduler) writeBatch(batch []*histItem, self *histItem) error {
	var all []ledger.RunRecord
	for _, b := range batch {
		if !b.gone {
			all = append(all, b.rs...)
		}
	}
	var err error
	for range 2 {
		if len(all) == 0 {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		err = s.ledger.RecordRuns(ctx, all)
		cancel()
		if err == nil {
			break
		}
	}
	s.hist.track(all, err)
	for _, b := range batch {
		switch {
		case b == self:
		case b.wait:
			b.wake <- err
		case !b.gone:
			s.recordFailed(b.rs, err)
		}
	}
	return err
}

// track notes the outcome of a write of rs: the final records of a failed
// write are kept to be written again (rewrite), and a successful write of
// a key ends the wait of a record kept under it.
func (h *history) track(rs []ledger.RunRecord, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		if len(h.unwritten) > 0 {
			for i := range rs {
				delete(h.unwritten, rs[i].Key())
			}
		}
		return
	}
	for i := range rs {
		if !rs[i].Status.Final() {
			continue // a run's outcome replaces its running record
		}
		if h.unwritten == nil {
			h.unwritten = make(map[ledger.RunKey]ledger.RunRecord)
		}
		if _, ok := h.unwritten[rs[i].Key()]; ok || len(h.unwritten) < maxUnwritten {
			h.unwritten[rs[i].Key()] = rs[i]
		}
	}
}

// rewrite writes again the final records whose write failed, oldest run
// first. The sweep calls it once the store has answered it.
func (s *Scheduler) rewrite() {
	h := &s.hist
	h.mu.Lock()
	if len(h.unwritten) == 0 {
		h.mu.Unlock()
		return
	}
	rs := make([]ledger.RunRecord, 0, len(h.unwritten))
	for _, r := range h.unwritten {
		rs = append(rs, r)
	}
	h.mu.Unlock()
	slices.SortFunc(rs, func(a, b ledger.RunRecord) int { return a.End.Compare(b.End) })
	if err := s.record(rs...); err == nil {
		s.log.Warn("schedule: wrote the history records a store error had held back", "node", s.node, "records", len(rs))
	}
}

func (s *Scheduler) recordFailed(rs []ledger.RunRecord, err error) {
	if err != nil {
		s.log.Error("schedule: recording history", "node", s.node, "job", rs[0].Job, "records", len(rs), "err", err)
	}
}
