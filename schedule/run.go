package schedule

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/ledger"
)

// maxErrorLen bounds the error text recorded with a run, in bytes.
const maxErrorLen = 4096

// execute handles one job's claimed work, in tick order, on its own
// goroutine: missed ticks are recorded in one call, the others run one
// after another — but with OverlapAllow an on-time tick runs at once, on
// a goroutine of its own, not after the catch-up runs before it. The
// backfills and re-runs of past ticks among the work come last: they join
// the job's queue of them, which the goroutine then helps run, oldest tick
// first (runPast).
//
// A scheduled tick that is not a catch-up run starts only within
// Job.MisfireAfter of its tick: one whose turn comes later, because a run
// of an earlier tick of the batch lasted, was due while that run was in
// progress and is recorded as skipped, as OverlapSkip skips a tick that
// finds the job's lock held; one whose turn comes late with no run before
// it (the missed records took that long to write) goes to the misfire
// policy again, with the ticks after it.
func (s *Scheduler) execute(j *job, items []work) {
	defer s.runDone()
	if j.Shards > 1 {
		s.executeShards(j, items)
		return
	}
	var past []work // backfills and re-runs, run last (runPast)
	if slices.ContainsFunc(items, isPast) {
		rest := make([]work, 0, len(items))
		for _, w := range items {
			if isPast(w) {
				past = append(past, w)
			} else {
				rest = append(rest, w)
			}
		}
		items = rest
	}
	if j.Overlap == OverlapAllow {
		for _, w := range items {
			if !w.missed && !w.catchUp && w.scheduled() {
				s.mu.Lock()
				s.active++
				s.mu.Unlock()
				go func() {
					defer s.runDone()
					s.runTick(j, w)
				}()
			}
		}
		items = slices.DeleteFunc(slices.Clone(items), func(w work) bool { return !w.missed && !w.catchUp && w.scheduled() })
	}
	s.recordMissed(j, items)
	var prev *work // the last tick run here from items
	for i := range items {
		w := &items[i]
		if w.missed {
			continue
		}
		if w.scheduled() && !w.catchUp {
			if late := s.clock.Now().Sub(w.tick); late > j.MisfireAfter {
				if prev != nil {
					s.skip(j, *w, 1, queuedReason(j, prev.tick, late))
					continue
				}
				s.misfireRest(j, items[i:])
				if w.missed {
					continue
				}
			}
		}
		s.runTick(j, *w)
		prev = w
	}
	if len(past) > 0 {
		s.runPast(j, past)
	}
}

// queuedReason is why a tick whose turn came late, after the handling of
// an earlier tick (prev) of its batch, is skipped.
func queuedReason(j *job, prev time.Time, late time.Duration) string {
	return fmt.Sprintf("schedule: the previous run is still in progress: this tick's turn came after tick %s's, %v late, past MisfireAfter %v",
		prev.UTC().Format(time.RFC3339), late.Round(time.Millisecond), j.MisfireAfter)
}

// recordMissed records the missed ticks among items in one call.
func (s *Scheduler) recordMissed(j *job, items []work) {
	var missed []ledger.RunRecord
	var late []time.Duration
	for _, w := range items {
		if w.missed {
			reason := fmt.Sprintf("schedule: tick missed: handled %v late, misfire policy %s", w.late.Round(time.Millisecond), j.Misfire)
			if w.gap.n > 0 {
				if !s.refineGap(j, &w.gap) {
					continue
				}
				reason = w.gap.reason(j)
			}
			missed = append(missed, s.notRun(j, w, ledger.RunMissed, reason))
			late = append(late, w.late)
		}
	}
	if len(missed) > 0 {
		s.record(missed...)
		for i := range missed {
			s.emit(recordEvent(EventMissed, &missed[i], late[i]))
		}
	}
}

// misfireRest applies the misfire policy again, as handled now, to the
// scheduled ticks of rest, none of which has run yet nor been chosen as a
// catch-up run, and records those it passes over as missed.
func (s *Scheduler) misfireRest(j *job, rest []work) {
	var is []int // where the ticks the policy decides on stand in rest
	var ws []work
	for i := range rest {
		if w := rest[i]; w.scheduled() && !w.missed {
			is, ws = append(is, i), append(ws, w)
		}
	}
	j.misfire(s.clock.Now(), ws)
	var missed []work
	for n, i := range is {
		rest[i] = ws[n]
		if ws[n].missed {
			missed = append(missed, ws[n])
		}
	}
	s.recordMissed(j, missed)
}

// notRun is the record of a tick that was not attempted.
func (s *Scheduler) notRun(j *job, w work, status ledger.RunStatus, reason string) ledger.RunRecord {
	return ledger.RunRecord{
		Job: j.Name, Tick: w.tick.UTC(), Trigger: w.trigger, Shard: w.shard, Shards: w.shards, Node: s.node,
		End: s.clock.Now(), Status: status, Error: truncate(s.redacted(reason), maxErrorLen),
	}
}

// redacted is text as Config.Redact rewrites it.
func (s *Scheduler) redacted(text string) string {
	if s.redact == nil || text == "" {
		return text
	}
	return s.redact(text)
}

// skip records a claimed tick as skipped, for reason, under the number of
// the attempt it stands for: the one its pending record holds (runTick).
func (s *Scheduler) skip(j *job, w work, attempt int, reason string) {
	rec := s.notRun(j, w, ledger.RunSkipped, reason)
	rec.Attempt = attempt
	s.recordOne(rec)
	s.emit(recordEvent(EventSkipped, &rec, 0))
}

// pausedPast is the skip reason of a backfill or re-run whose turn came
// while its job was paused: a pause stops them, as it stops the ticks.
const pausedPast = "schedule: the job was paused before this backfill or re-run of the tick started; backfill or re-run the tick once the job is resumed"

// paused reports whether job is paused, as this node last read.
func (s *Scheduler) paused(job string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.states[job].Paused
}

// runTick runs one claimed tick: it takes the job's lock (OverlapSkip),
// makes up to 1+Retries attempts with backoff while holding it, records
// each, and releases the lock.
//
// Before the tick waits for anything — its parents, jitter, a pool's
// permit, a lock it waits for — it writes the attempt's running record
// (pending, through ahead), so that a node killed meanwhile leaves a
// record the sweep settles as interrupted (sweep.go); a skip replaces it
// under the same attempt number. A tick claimed ahead (Config.ClaimAhead)
// writes it too, then takes the lock and waits for the tick. A tick that
// does not wait writes its running record as the attempt starts, one lock
// round trip after the claim. What a kill between the claim and either
// write loses is that one write wide.
func (s *Scheduler) runTick(j *job, w work) {
	attempt := 1 + w.attempts // a retaken shard's go on after the stopped node's
	if w.request != "" && s.stoppingNow() {
		// Shutdown has begun: the request stays pending, and another
		// node takes it over once this one's node lease ends (retake.go).
		return
	}
	switch {
	case w.past:
		var ok bool
		if attempt, ok = s.beginPast(j, w); !ok {
			return
		}
	default:
		s.requestTaken(j, w)
	}
	w.first = attempt
	pendingAt := 0 // the attempt whose pending record is written
	ahead := func() {
		if pendingAt != attempt {
			pendingAt = attempt
			s.recordStart(s.pending(j, w, attempt))
		}
	}
	if w.past || w.retake { // they wait for the lock
		ahead()
	}
	var last ledger.RunRecord                        // the last attempt recorded, for EventTickEnded
	defer func() { s.tickEnded(&last, w.catchUp) }() // onTime may make it a catch-up run
	// tickCtx spans the waits and the attempts: it ends with a cancel
	// request (cancel.go; a tick waiting for its parents, say, shows as
	// running and can be cancelled), the job's removal, the lock,
	// MaxHold, or the end of Shutdown's grace period.
	tickCtx, tickCancel := context.WithCancelCause(s.runCtx)
	defer tickCancel(nil)
	run := s.startRun(j, w, tickCancel)
	if run == nil {
		s.skip(j, w, attempt, ErrRemoved.Error())
		return
	}
	defer s.endRun(j, run)
	if w.past && s.paused(j.Name) {
		s.skip(j, w, attempt, pausedPast)
		return
	}
	if !s.awaitParents(tickCtx, j, w, attempt, ahead) {
		return
	}
	if j.Jitter > 0 {
		ahead()
		s.sleep(rand.N(j.Jitter), tickCtx.Done()) // ends early only when tickCtx does
	}
	if tickCtx.Err() != nil {
		s.skip(j, w, attempt, context.Cause(tickCtx).Error()+" before the run started")
		return
	}
	var lock *tasklock.Lock
	var lim limits // Job.MaxConcurrent's and Job.Pool's permits (limits.go)
	defer func() {
		s.releaseLimits(j, &lim)
		if lock != nil {
			s.release(j, lock)
		}
	}()
	// stopLoss, once lock is held, is its cancelOnLoss's stop: deferred
	// here, after the release, so that it runs before it, and not in the
	// attempts loop, where each defer would cost an allocation.
	var stopLoss func() bool
	defer func() {
		if stopLoss != nil {
			stopLoss()
		}
	}()
	locks := j.Overlap == OverlapSkip && !w.allow // the tick runs under the job's lock
	written := false                              // the first attempt's running record is written, as it will start
	if w.tick.After(s.clock.Now()) && j.ahead > 0 && w.trigger == "" && !w.past {
		// Claimed ahead (Config.ClaimAhead): take the lock now, write the
		// running record as the attempt will start (at the tick, with the
		// lock's fence), and wait for the tick. A lock still held (the
		// previous run's) or not obtained is asked for again at the tick,
		// below, and the attempt then writes its record itself.
		if locks {
			if l, err := s.obtain(j); err == nil {
				lock = l
				stopLoss = cancelOnLoss(l, tickCancel)
				if newer, ok := j.overtaken(&w); ok {
					s.skip(j, w, attempt, overtakenReason(newer))
					return
				}
			}
		}
		rec := s.pending(j, w, attempt)
		rec.Start = w.tick.UTC()
		if lock != nil {
			rec.Fence = lock.Fence()
		}
		pendingAt, written = attempt, lock != nil || !locks
		s.recordStart(rec)
		if !s.sleep(w.tick.Sub(s.clock.Now()), tickCtx.Done()) {
			s.skip(j, w, attempt, context.Cause(tickCtx).Error()+" before the run started")
			return
		}
	}
	if j.Overlap == OverlapAllow && j.Lock.MaxHold > 0 {
		d := s.addDeadline(s.clock.Now().Add(j.Lock.MaxHold), tickCancel, tasklock.ErrMaxHold)
		defer s.removeDeadline(d)
	}
	for try := 1; ; try++ {
		if try > 1 {
			// A retry's number is claimed: a re-run of this tick may be
			// numbering its attempts meanwhile.
			n, err := s.claimAttempt(j, w, attempt+1)
			if err != nil {
				s.log.Error("schedule: claiming a retry's attempt number; not retrying", "node", s.node, "job", j.Name, "tick", w.tick, "attempt", attempt+1, "err", err)
				return
			}
			attempt = n
		}
		var rec ledger.RunRecord
		if locks && lock == nil {
			var l *tasklock.Lock
			var err error
			switch {
			case w.shards > 1:
				l, err = s.obtainShard(j, w)
			case w.past:
				l, err = s.obtainPast(j)
			default:
				l, err = s.obtain(j)
			}
			switch {
			case errors.Is(err, tasklock.ErrNotObtained):
				s.skip(j, w, attempt, lockHeldReason+err.Error())
				return
			case err != nil:
				now := s.clock.Now()
				rec = s.notRun(j, w, ledger.RunFailed, "schedule: taking the job's lock: "+err.Error())
				rec.Attempt, rec.Start, rec.End = attempt, now, now
				s.emit(w.startEvent(&rec))
			default:
				lock = l
				stopLoss = cancelOnLoss(l, tickCancel)
				if newer, ok := j.overtaken(&w); ok {
					s.skip(j, w, attempt, overtakenReason(newer))
					return
				}
			}
		}
		if try == 1 && rec.Status == "" && !s.onTime(j, &w, pendingAt) {
			return
		}
		if rec.Status == "" {
			var skip string
			if rec, skip = s.takeLimits(tickCtx, tickCancel, j, w, attempt, &lim, ahead); skip != "" {
				s.skip(j, w, attempt, skip)
				return
			}
		}
		if rec.Status == "" {
			// The last attempt the tick can make may run under tickCtx
			// itself, ended as the attempt returns (attempt).
			lastTry := try > j.Retries
			rec = s.attempt(tickCtx, tickCancel, lastTry, j, w, attempt, cmp.Or(lock, lim.running), written && try == 1)
		}
		s.recordOne(rec)
		s.logRun(&rec)
		s.emit(w.runEvent(EventRunEnded, &rec))
		last = rec
		retry := rec.Status == ledger.RunFailed || rec.Status == ledger.RunTimeout
		if !retry || try > j.Retries || tickCtx.Err() != nil || s.removed(j) {
			return
		}
		backoff := min(j.RetryBackoff<<min(try-1, 30), j.RetryBackoffMax)
		if !s.sleep(backoff, tickCtx.Done()) {
			return
		}
	}
}

// onTime checks, as the first attempt at a scheduled tick is about to
// start with the job's lock held, that the tick is still within
// MisfireAfter; execute checked it as the tick's turn came, and taking
// the lock is a store round trip that a store slow to answer makes long.
// A tick late by then was handled late and goes to the misfire policy,
// alone: MisfireSkip records it missed (onTime reports false), the others
// run it as a catch-up run. Ticks that waited on purpose before — for
// their parents, Jitter, or with a running record written ahead
// (pendingAt) — and catch-up runs, trigger requests, backfills and
// retaken shards are not checked.
func (s *Scheduler) onTime(j *job, w *work, pendingAt int) bool {
	if w.catchUp || !w.scheduled() || w.past || w.retake || pendingAt != 0 || len(j.After) > 0 || j.Jitter > 0 {
		return true
	}
	late := s.clock.Now().Sub(w.tick)
	if late <= j.MisfireAfter {
		return true
	}
	if j.Misfire != MisfireSkip {
		w.catchUp = true
		return true
	}
	m := *w
	m.missed, m.late = true, late
	s.recordMissed(j, []work{m})
	return false
}

// cancelOnLoss ends a tick's context, by cancel, when l is lost; the
// caller calls the returned stop once it no longer holds l.
func cancelOnLoss(l *tasklock.Lock, cancel context.CancelCauseFunc) (stop func() bool) {
	lockCtx := l.Context()
	return context.AfterFunc(lockCtx, func() { cancel(context.Cause(lockCtx)) })
}

// pending is the running record of attempt n of w, written before it
// starts: it says the tick was claimed here and stands until the attempt's
// own records, or a skip's, replace it.
func (s *Scheduler) pending(j *job, w work, n int) ledger.RunRecord {
	return ledger.RunRecord{
		Job: j.Name, Tick: w.tick.UTC(), Trigger: w.trigger, Shard: w.shard, Shards: w.shards, Attempt: n, Node: s.node,
		Start: s.clock.Now(), Status: ledger.RunRunning,
	}
}

// attempt calls the handler once and returns its record. With written, its
// running record is written already (a tick claimed ahead: runTick).
//
// The handler's context ends as attempt returns. It is a child of parent,
// except for the last attempt at a tick (lastTry) of a job without
// Timeout: no retry follows under parent then, so the handler runs under
// parent itself and attempt ends it with parentCancel, which saves a
// context per run.
func (s *Scheduler) attempt(parent context.Context, parentCancel context.CancelCauseFunc, lastTry bool, j *job, w work, n int, lock *tasklock.Lock, written bool) ledger.RunRecord {
	ctx, cancel := parent, parentCancel
	if !lastTry || j.Timeout > 0 {
		ctx, cancel = context.WithCancelCause(parent)
	}
	defer cancel(nil)
	start := s.clock.Now()
	if j.Timeout > 0 {
		d := s.addDeadline(start.Add(j.Timeout), cancel, ErrTimeout)
		defer s.removeDeadline(d)
	}
	var fence uint64
	if lock != nil {
		fence = lock.Fence()
	}
	var out io.Writer = io.Discard
	var tl *output
	if s.tail > 0 {
		tl = newOutput(s.tail)
		out = tl
	}
	run := Run{
		Job: j.Name, Tick: w.tick.UTC(), Trigger: w.trigger, Node: s.node,
		Attempt: n, Fence: fence, CatchUp: w.catchUp, Output: out, Shard: w.shard, Shards: w.shards,
	}
	if lock != nil {
		run.Deadline = lock.Deadline
	}
	s.emit(Event{
		Type: EventRunStarted, Job: j.Name, Tick: run.Tick, Trigger: w.trigger, Shard: w.shard, Shards: w.shards, CatchUp: w.catchUp,
		Attempt: n, First: n == w.first, Requested: w.past, Fence: fence, Start: start, Late: start.Sub(run.Tick),
	})
	// The running record, before the handler starts: if this node dies
	// now, another one finds it and settles it as interrupted (sweep.go).
	// When other records are being written it is queued without waiting,
	// and a run that ends before the queue's next write replaces it with
	// its outcome (history.go).
	if !written {
		s.recordStart(ledger.RunRecord{
			Job: j.Name, Tick: run.Tick, Trigger: w.trigger, Shard: w.shard, Shards: w.shards, Attempt: n, Node: s.node, Fence: fence,
			Start: start, Status: ledger.RunRunning,
		})
	}
	w.turn.release() // the next past tick of the job may start (pastqueue.go)
	err := s.call(ctx, j, run)
	rec := ledger.RunRecord{
		Job: j.Name, Tick: run.Tick, Trigger: w.trigger, Shard: w.shard, Shards: w.shards, Attempt: n, Node: s.node, Fence: fence,
		Start: start, End: s.clock.Now(),
	}
	if tl != nil {
		rec.Output = s.redacted(tl.String())
	}
	cause := context.Cause(ctx)
	if ctx.Err() == nil {
		cause = nil
	}
	var lost error
	if lock != nil {
		lost = lock.Err()
	}
	switch {
	case lost != nil && errors.Is(lost, tasklock.ErrMaxHold):
		rec.Status, cause = ledger.RunTimeout, lost
	case lost != nil:
		rec.Status, cause = ledger.RunLost, lost
	case errors.Is(cause, ErrTimeout), errors.Is(cause, tasklock.ErrMaxHold):
		rec.Status = ledger.RunTimeout
	case errors.Is(cause, tasklock.ErrLockLost): // a pool's permit (limits.go)
		rec.Status = ledger.RunLost
	case errors.Is(cause, ErrCancelled), errors.Is(cause, ErrRemoved):
		// A cancel request (cancel.go), or the job's removal with
		// RemoveOptions.Cancel (remove.go): someone stopped the run, it
		// did not fail; its error names which.
		rec.Status = ledger.RunCancelled
	case errors.Is(cause, ErrShutdown):
		// Stopped by this node's Shutdown after its grace period: cut
		// short as a dead node's run is, not a failure of the job's.
		rec.Status = ledger.RunInterrupted
	case cause != nil || err != nil:
		rec.Status = ledger.RunFailed
	default:
		rec.Status = ledger.RunOK
	}
	rec.Error = truncate(s.redacted(errorText(err, cause)), maxErrorLen)
	return rec
}

// errorText is the handler's error and, when not already part of it, the
// reason its context ended.
func errorText(err, cause error) string {
	switch {
	case err == nil && cause == nil:
		return ""
	case err == nil:
		return cause.Error()
	case cause == nil || errors.Is(err, cause) || strings.Contains(err.Error(), cause.Error()):
		return err.Error()
	}
	return err.Error() + " (" + cause.Error() + ")"
}

// call runs the handler, turning a panic into an error.
func (s *Scheduler) call(ctx context.Context, j *job, run Run) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("schedule: handler panicked: %v", r)
			s.log.Error("schedule: handler panicked", "node", s.node, "job", j.Name, "tick", run.Tick, "panic", r, "stack", string(debug.Stack()))
		}
	}()
	return j.Handler(ctx, run)
}

// logRun logs a run's end. The level is checked first: building the
// record's attributes costs more than the rest of a short run's logging.
func (s *Scheduler) logRun(r *ledger.RunRecord) {
	level := slogLevel(r.Status)
	if !s.log.Enabled(context.Background(), level) {
		return
	}
	s.log.Log(context.Background(), level, "schedule: run ended", "node", s.node, "job", r.Job, "tick", r.Tick,
		"trigger", r.Trigger, "attempt", r.Attempt, "status", r.Status, "duration", r.End.Sub(r.Start), "err", r.Error)
}

// lockHeldReason starts the error of a tick skipped because its job's lock
// was held. The lock alone cannot tell a run in progress from a lock that
// outlived its run: a release the store did not answer (during a failover,
// say) leaves the lease held until it ends, as a stopped node's run does.
const lockHeldReason = "schedule: the previous run is still in progress, or its lock outlived it (a release that failed holds it until its lease ends): "

// obtain takes the job's lock, once.
func (s *Scheduler) obtain(j *job) (*tasklock.Lock, error) {
	return s.lk.TryObtain(s.lockCalls.get(), j.key, j.obtainOpts)
}

func (s *Scheduler) release(j *job, l *tasklock.Lock) {
	ctx := s.lockCalls.get()
	if err := l.Release(ctx); err != nil && !errors.Is(err, tasklock.ErrNotHeld) {
		s.log.Error("schedule: releasing the job's lock", "node", s.node, "job", j.Name, "err", err)
	}
}

// timeoutShare is how long a sharedTimeout hands out one context.
const timeoutShare = time.Millisecond

// sharedTimeout hands out contexts that bound store calls: each ends
// storeTimeout after the call that gets it, at most timeoutShare later.
// Calls made within timeoutShare of each other share one context, so that
// the runs of a tick, which obtain and release their locks together, do
// not make a context and a timer per call. A context handed out is never
// cancelled before its deadline: calls may still be using it.
type sharedTimeout struct {
	mu    sync.Mutex
	ctx   context.Context
	stop  context.CancelFunc // ctx's; never called: ctx ends at its deadline
	until time.Time          // calls starting before then get ctx
}

// get returns a context that ends no sooner than storeTimeout from now.
func (t *sharedTimeout) get() context.Context {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx == nil || !now.Before(t.until) {
		t.ctx, t.stop = context.WithTimeout(context.Background(), storeTimeout+timeoutShare)
		t.until = now.Add(timeoutShare)
	}
	return t.ctx
}

// triggerDone removes a claimed trigger request from the job's state.
func (s *Scheduler) triggerDone(job, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	_, err := s.ledger.SetJobState(ctx, ledger.JobStateParams{Job: job, Op: ledger.JobTriggerDone, Trigger: id})
	if err != nil {
		s.log.Error("schedule: removing a trigger request", "node", s.node, "job", job, "trigger", id, "err", err)
	}
}

// sleep waits d on the Scheduler's clock; it reports false when done
// closed first.
func (s *Scheduler) sleep(d time.Duration, done <-chan struct{}) bool {
	t := s.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-done:
		return false
	}
}

// slogLevel is the level a run's end is logged at: failures are the
// handler's business and are in history, so they do not warn.
func slogLevel(st ledger.RunStatus) slog.Level {
	switch st {
	case ledger.RunFailed, ledger.RunTimeout, ledger.RunLost:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}
