package schedule

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrRemoved is the cause of a run's context when its job was removed
// with RemoveOptions.Cancel (the attempt is recorded ledger.RunCancelled,
// as on ErrCancelled), and the reason recorded for a tick of a removed job
// that was claimed but had not started.
var ErrRemoved = errors.New("schedule: job removed")

// RemoveOptions are the options of Scheduler.Remove.
type RemoveOptions struct {
	// Cancel cancels the job's runs in progress on this Scheduler: their
	// contexts end with the cause ErrRemoved (a command of tasklock serve
	// gets SIGTERM, then SIGKILL after its kill_grace) and, as with a
	// cancel request (ErrCancelled), the attempt is recorded
	// ledger.RunCancelled with that error and not retried. False: they
	// finish their attempt in progress, recorded as it ends, and make no
	// retry.
	Cancel bool
}

// jobRemoval is what Remove needs of a job: whether it was removed, and
// the cancel functions of its runs in progress. Guarded by Scheduler.mu.
type jobRemoval struct {
	removed bool
	runs    map[*running]struct{}
	byRun   map[runRef]*running // the same runs by name, for cancel requests (cancel.go)
}

// Remove removes the job named name from this Scheduler: it claims no more
// of its ticks or trigger requests, a tick it claimed that has not started
// is recorded skipped with ErrRemoved, and a run in progress makes no
// further retries; it finishes its attempt or, with opts.Cancel, is
// cancelled. Remove does not wait for the runs; Shutdown does. The job's
// state and history in the ledger stay. A job of the same name may be
// added at once (tasklock serve replaces a changed job so): it goes on
// from the last tick the removed one handled, and its runs take the same
// lock, so with Overlap skip they do not overlap the old job's. Added
// more than a PollInterval later, it starts at its next tick, as a new
// job does: the ticks while it was removed are not owed.
// It returns an error wrapping ErrUnknownJob when no job of that name was
// added.
func (s *Scheduler) Remove(name string, opts RemoveOptions) error {
	s.mu.Lock()
	j := s.jobs[name]
	if j == nil {
		s.mu.Unlock()
		return fmt.Errorf("%w %q", ErrUnknownJob, name)
	}
	delete(s.jobs, name)
	if j.Shards > 1 {
		s.shards.jobs--
	}
	s.jobsChanged()
	if s.handled == nil {
		s.handled = make(map[string]removal)
	}
	s.handled[name] = removal{after: j.after, at: s.clock.Now()}
	if j.idx >= 0 {
		heap.Remove(&s.heap, j.idx)
	}
	j.rm.removed = true
	var cancels []context.CancelCauseFunc
	if opts.Cancel {
		for r := range j.rm.runs {
			cancels = append(cancels, r.cancel)
		}
	}
	s.mu.Unlock()
	for _, c := range cancels {
		c(ErrRemoved)
	}
	s.poke()
	return nil
}

// startRun notes a run of j in progress (the work w), cancelled by cancel
// if j is removed with RemoveOptions.Cancel or a cancel request names it.
// It returns nil, noting nothing, when j was removed already; otherwise
// the caller calls endRun with what it returns when the run ends.
func (s *Scheduler) startRun(j *job, w work, cancel context.CancelCauseFunc) *running {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j.rm.removed {
		return nil
	}
	if j.rm.runs == nil {
		j.rm.runs = make(map[*running]struct{})
		j.rm.byRun = make(map[runRef]*running)
	}
	r := &running{cancel: cancel, ref: refOf(w)}
	j.rm.runs[r] = struct{}{}
	j.rm.byRun[r.ref] = r
	return r
}

// endRun notes the end of j's run r (startRun), and removes the cancel
// request that stopped it, if one did.
func (s *Scheduler) endRun(j *job, r *running) {
	s.mu.Lock()
	delete(j.rm.runs, r)
	if j.rm.byRun[r.ref] == r {
		delete(j.rm.byRun, r.ref)
	}
	request := r.request
	s.mu.Unlock()
	if request != "" {
		s.triggerDone(j.Name, request)
	}
}

// removal is when a job was removed and up to which instant it had
// handled its ticks.
type removal struct{ after, at time.Time }

// skipHandled sets where a job added again after Remove starts. Within a
// poll interval of the removal — tasklock serve replacing a changed job —
// it goes on from the last tick the removed job handled, so that no tick
// is lost to the change and none it handled is handled again (it claimed
// them with this Scheduler's token, so the ledger would let it claim
// them again). Later — the job was deleted, then created again — it
// starts at its next tick, as a new job does: the ticks while it did not
// exist are not owed. Callers hold s.mu.
func (s *Scheduler) skipHandled(j *job, now time.Time) {
	r, ok := s.handled[j.Name]
	if !ok {
		return
	}
	delete(s.handled, j.Name)
	from := r.after
	if now.Sub(r.at) > s.poll {
		from = now.Add(-time.Nanosecond)
	}
	if from.After(j.after) {
		j.after = from
	}
}

// removed reports whether j was removed.
func (s *Scheduler) removed(j *job) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return j.rm.removed
}
