package schedule

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tasklock/tasklock/ledger"
)

// ErrCancelled is the cause of a run's context when someone asked for the
// run to stop (RequestCancel): the attempt is recorded ledger.RunCancelled
// and no further attempt is made. A handler stops as it does when
// Job.Timeout passes.
var ErrCancelled = errors.New("schedule: run cancelled")

// ErrNoRun is returned by RequestCancel when the ledger holds no record of
// the run named.
var ErrNoRun = errors.New("schedule: no such run")

// ErrRunEnded is returned by RequestCancel when the run named has ended:
// its newest attempt's record is final.
var ErrRunEnded = errors.New("schedule: the run has ended")

// RequestCancel asks the fleet to stop a run in progress: the run of
// r.Job at r.Tick with r.Trigger and r.Shard (r.Attempt is ignored: every
// attempt of that run is meant). The node running it takes the request
// within a poll interval and cancels the run's context with ErrCancelled;
// the attempt is recorded ledger.RunCancelled and no retry follows. It
// reads the run's records first and changes nothing when there are none
// (an error wrapping ErrNoRun) or when the newest attempt's record is final
// (ErrRunEnded, with the status). It returns the cancel request's ID and
// the newest attempt's record.
func RequestCancel(ctx context.Context, l ledger.Ledger, r ledger.RunKey) (string, ledger.RunRecord, error) {
	if r.Job == "" || r.Tick.IsZero() {
		return "", ledger.RunRecord{}, badRequest("cancel: the run needs a job and a tick")
	}
	last, err := NewestAttempt(ctx, l, r)
	if err != nil {
		return "", last, err
	}
	if last.Status.Final() {
		return "", last, fmt.Errorf("%w: attempt %d of %q at %s ended %s", ErrRunEnded, last.Attempt, r.Job, r.Tick.UTC().Format(time.RFC3339Nano), last.Status)
	}
	id, err := newRequestID(cancelPrefix)
	if err != nil {
		return "", last, err
	}
	p := ledger.JobStateParams{Job: r.Job, Op: ledger.JobCancel, Trigger: id, RunTrigger: r.Trigger, Shard: r.Shard}
	if r.Trigger == "" {
		p.Tick = r.Tick.UTC()
	}
	if _, err := l.SetJobState(ctx, p); err != nil {
		return "", last, fmt.Errorf("schedule: cancel %q: %w", r.Job, err)
	}
	return id, last, nil
}

// cancelPrefix starts the IDs of cancel requests.
const cancelPrefix = "cancel-"

// NewestAttempt returns the record of the newest attempt of the run r
// names (r.Attempt is ignored), or an error wrapping ErrNoRun when the
// ledger holds none.
func NewestAttempt(ctx context.Context, l ledger.Ledger, r ledger.RunKey) (ledger.RunRecord, error) {
	// A whole second: stores may keep ticks to the second or the
	// microsecond; the records are matched exactly below.
	rs, err := l.Runs(ctx, ledger.RunQuery{Job: r.Job, From: r.Tick, To: r.Tick.Add(time.Second)})
	if err != nil {
		return ledger.RunRecord{}, fmt.Errorf("schedule: reading the run's records: %w", err)
	}
	var last ledger.RunRecord
	found := false
	for _, rec := range rs {
		if rec.Tick.Equal(r.Tick) && rec.Trigger == r.Trigger && rec.Shard == r.Shard && (!found || rec.Attempt > last.Attempt) {
			last, found = rec, true
		}
	}
	if !found {
		return last, fmt.Errorf("%w: %q at %s (trigger %q, shard %d)", ErrNoRun, r.Job, r.Tick.UTC().Format(time.RFC3339Nano), r.Trigger, r.Shard)
	}
	return last, nil
}

// runRef names a run on this node as a cancel request does: by its
// trigger, or by its tick (unix nanoseconds) when it has none, and shard.
type runRef struct {
	tick    int64
	trigger string
	shard   int
}

func refOf(w work) runRef {
	if w.trigger != "" {
		return runRef{trigger: w.trigger, shard: w.shard}
	}
	return runRef{tick: w.tick.UnixNano(), shard: w.shard}
}

func requestRef(tr ledger.TriggerRequest) runRef {
	if tr.RunTrigger != "" {
		return runRef{trigger: tr.RunTrigger, shard: tr.Shard}
	}
	return runRef{tick: tr.Tick.UnixNano(), shard: tr.Shard}
}

// running is a run in progress on this node, found by a cancel request.
type running struct {
	cancel  context.CancelCauseFunc
	ref     runRef // the run's key in jobRemoval.byRun
	request string // the cancel request that stopped it, removed when the run ends
}

// takeCancels removes the cancel requests from st.Triggers, so that no
// pass takes them for runs, and cancels with ErrCancelled the runs of
// this node they name; the run removes its request when it ends. It marks
// the requests pending in pending (when not nil), so that setStates keeps
// them seen. Callers hold s.mu.
func (s *Scheduler) takeCancels(st *ledger.JobState, pending map[triggerKey]bool) {
	n := 0
	for _, tr := range st.Triggers {
		if tr.Cancel {
			n++
		}
	}
	if n == 0 {
		return
	}
	keep := make([]ledger.TriggerRequest, 0, len(st.Triggers)-n)
	for _, tr := range st.Triggers {
		if !tr.Cancel {
			keep = append(keep, tr)
			continue
		}
		k := triggerKey{st.Job, tr.ID}
		if pending != nil {
			pending[k] = true
		}
		j := s.jobs[st.Job]
		if s.seen[k] || j == nil {
			continue
		}
		r := j.rm.byRun[requestRef(tr)]
		if r == nil || r.request != "" {
			continue // not running here (another node's, or ended): the request waits for its node, or to be pruned
		}
		s.seen[k] = true
		r.request = tr.ID
		r.cancel(ErrCancelled)
		s.log.Info("schedule: cancelling a run on request", "node", s.node, "job", st.Job, "tick", tr.Tick, "trigger", tr.RunTrigger, "shard", tr.Shard, "request", tr.ID)
	}
	st.Triggers = keep
}
