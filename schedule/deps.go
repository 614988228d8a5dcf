package schedule

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/tasklock/tasklock/ledger"
)

// Dependencies between jobs (Job.After, Job.Within).
//
// Tick T of a child, whose schedule's previous tick is P, may start once
// every parent has a RunOK run for a tick in (P, T] — every shard of it ok
// for a sharded parent (RunRecord.Shards). The rule is in ticks, read from
// the ledger, so every node decides the same whatever its clock. The node
// that claimed T waits for it: it reads the ledger every poll interval,
// and at once when a run of a parent ends on this node. Once Within has
// passed it records T as skipped, naming each parent still not done and
// its last status.

// A tick waits for its parents Within when it is set; when it is not,
// until the job's next tick (and at most MisfireWindow): then the next
// tick waits in its place, so that a parent that keeps failing leaves one
// waiting tick per job, not one per tick of the hour.

// maxLookBack bounds how far before a tick prevTick looks for the one
// before it (a cron schedule may tick years apart: February 29th on a
// Monday).
const maxLookBack = 1 << 31 * time.Second

// tickStep turns the bounds of a span of ticks (P, T] into the ledger's
// [From, To): stores keep ticks to the microsecond.
const tickStep = time.Microsecond

// depPageSize is how many run records one ledger read of a parent's
// successful runs returns.
const depPageSize = 500

// validateDeps checks Job.After and Job.Within.
// A parent that is this job is a cycle, which Add reports.
func validateDeps(j *Job) error {
	bad := func(field, format string, args ...any) error {
		return badJob(j.Name, field, fmt.Sprintf(format, args...), nil)
	}
	for i, p := range j.After {
		field := fmt.Sprintf("Job.After[%d]", i)
		switch {
		case p == "":
			return bad(field, "empty: want a job's name")
		case len(p) > MaxJobName:
			return bad(field, "%d bytes long, the maximum is %d", len(p), MaxJobName)
		case slices.Contains(j.After[:i], p):
			return bad(field, "%q is named twice", p)
		}
		for _, c := range p {
			if unicode.IsControl(c) { // C0, DEL and C1
				return bad(field, "contains control character %U", c)
			}
		}
	}
	j.After = slices.Clone(j.After)
	switch {
	case j.Within < 0:
		return bad("Job.Within", "%v is negative", j.Within)
	case j.Within > 0 && len(j.After) == 0:
		return bad("Job.Within", "set, and Job.After names no parent to wait for")
	case j.Within > j.MisfireWindow:
		return bad("Job.Within", "%v is more than MisfireWindow %v: a tick would still wait after every node stopped looking at it", j.Within, j.MisfireWindow)
	}
	return nil
}

// Cycle returns a cycle of dependencies through the job named job whose
// parents are after: the names along it from job back to job ("a", "b",
// "a"), or nil when there is none. parents returns the Job.After of
// another job, nil for a job it does not know. Scheduler.Add uses it to
// refuse a job that closes a cycle; tasklock's configuration check too.
func Cycle(job string, after []string, parents func(name string) []string) []string {
	seen := map[string]bool{}
	var path []string
	var visit func(name string) bool
	visit = func(name string) bool {
		path = append(path, name)
		if name == job {
			return true
		}
		if !seen[name] {
			seen[name] = true
			for _, p := range parents(name) {
				if visit(p) {
					return true
				}
			}
		}
		path = path[:len(path)-1]
		return false
	}
	for _, p := range after {
		path = append(path[:0], job)
		if visit(p) {
			return path
		}
	}
	return nil
}

// CycleText is a cycle as Cycle returns it, written "a -> b -> a".
func CycleText(cycle []string) string { return strings.Join(cycle, " -> ") }

// cycleOf returns the cycle j would close among the jobs of s. Callers
// hold s.mu.
func (s *Scheduler) cycleOf(j *Job) error {
	c := Cycle(j.Name, j.After, func(name string) []string {
		if o := s.jobs[name]; o != nil {
			return o.After
		}
		return nil
	})
	if c == nil {
		return nil
	}
	return badJob(j.Name, "Job.After", "cycle "+CycleText(c), nil)
}

// prevTick returns the tick of sched before t, or the zero time when there
// is none within maxLookBack.
func prevTick(sched Schedule, t time.Time) time.Time {
	for d := time.Second; d <= maxLookBack; d *= 2 {
		n := sched.Next(t.Add(-d))
		if n.IsZero() || !n.Before(t) {
			continue
		}
		for {
			m := sched.Next(n)
			if m.IsZero() || !m.Before(t) {
				return n
			}
			n = m
		}
	}
	return time.Time{}
}

// depWaiters wakes the ticks that wait for their parents when a run of a
// parent ends on this node.
type depWaiters struct {
	mu sync.Mutex
	by map[string]map[*depWaiter]struct{} // by parent
	// okTick is, per job, the newest tick of a run that this node saw end
	// ok — written here or read from the ledger — of a job that is not
	// sharded: a child whose window holds it needs no ledger read.
	okTick map[string]time.Time
	waits  atomic.Int64 // times a tick went to sleep waiting, for tests
	reads  atomic.Int64 // ledger reads of a parent's runs, for tests
}

type depWaiter struct {
	parents []string
	wake    chan struct{} // capacity 1
}

func (d *depWaiters) add(parents []string) *depWaiter {
	w := &depWaiter{parents: parents, wake: make(chan struct{}, 1)}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.by == nil {
		d.by = make(map[string]map[*depWaiter]struct{})
	}
	for _, p := range parents {
		if d.by[p] == nil {
			d.by[p] = make(map[*depWaiter]struct{})
		}
		d.by[p][w] = struct{}{}
	}
	return w
}

func (d *depWaiters) remove(w *depWaiter) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range w.parents {
		delete(d.by[p], w)
		if len(d.by[p]) == 0 {
			delete(d.by, p)
		}
	}
}

// ended wakes the waiters for the jobs of the final records in rs, once
// written (err is the write's result), and notes their ok runs when the
// write succeeded.
func (d *depWaiters) ended(rs []ledger.RunRecord, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range rs {
		if err == nil {
			d.sawOK(&rs[i])
		}
	}
	if len(d.by) == 0 {
		return
	}
	for _, r := range rs {
		if !r.Status.Final() {
			continue
		}
		for w := range d.by[r.Job] {
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}
}

// sawOK notes r in okTick when it is an ok run of a job that is not
// sharded, newer than the one noted. Callers hold d.mu.
func (d *depWaiters) sawOK(r *ledger.RunRecord) {
	if r.Status != ledger.RunOK || r.Shards > 1 {
		return
	}
	if t, ok := d.okTick[r.Job]; ok && !r.Tick.After(t) {
		return
	}
	if d.okTick == nil {
		d.okTick = make(map[string]time.Time)
	}
	d.okTick[r.Job] = r.Tick
}

// knownDone reports whether this node saw job end ok for a tick in
// (prev, tick].
func (d *depWaiters) knownDone(job string, prev, tick time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, ok := d.okTick[job]
	return ok && t.After(prev) && !t.After(tick)
}

// waitDeadline is when tick stops waiting for its parents, taken up at now,
// and how the skip reason says it: Within after now, or the job's next
// tick but at most MisfireWindow after now.
func waitDeadline(j *job, tick, now time.Time) (time.Time, string) {
	if j.Within > 0 {
		return now.Add(j.Within), fmt.Sprintf("within %v", j.Within)
	}
	if next := j.sched.Next(tick); !next.IsZero() && next.Before(now.Add(j.MisfireWindow)) {
		return next, "by the job's next tick (" + next.UTC().Format(time.RFC3339) + ")"
	}
	return now.Add(j.MisfireWindow), fmt.Sprintf("within %v (misfire window)", j.MisfireWindow)
}

// awaitParents holds a scheduled tick of a job with parents until they are
// done for it, and reports whether to run it. When Within passes first, or
// ctx ends (Shutdown's grace period, a cancel request), it records the
// tick as skipped, with the reason. A trigger
// request — trigger-now, backfill, re-run — runs at once: someone asked for
// that run.
func (s *Scheduler) awaitParents(ctx context.Context, j *job, w work, attempt int, ahead func()) bool {
	if len(j.After) == 0 || w.trigger != "" || w.request != "" {
		return true
	}
	prev := prevTick(j.sched, w.tick)
	waiter := s.deps.add(j.After)
	defer s.deps.remove(waiter)
	deadline, limit := waitDeadline(j, w.tick, s.clock.Now())
	left := j.After
	logged := false
	for {
		left = s.parentsLeft(j, left, prev, w.tick)
		if len(left) == 0 {
			return true
		}
		now := s.clock.Now()
		if !now.Before(deadline) {
			s.skip(j, w, attempt, s.depsReason(j, left, prev, w.tick, limit))
			return false
		}
		if !logged {
			logged = true
			s.log.Debug("schedule: waiting for the job's parents", "node", s.node, "job", j.Name, "tick", w.tick, "parents", left)
			ahead()
		}
		t := s.clock.NewTimer(min(s.poll, deadline.Sub(now)))
		s.deps.waits.Add(1)
		select {
		case <-t.C():
		case <-waiter.wake:
		case <-ctx.Done(): // Shutdown's grace ended, or a cancel request
			t.Stop()
			s.skip(j, w, attempt, context.Cause(ctx).Error()+" while waiting for the job's parents "+strings.Join(left, ", "))
			return false
		}
		t.Stop()
	}
}

// parentsLeft returns the parents among ps that have no successful run for
// a tick in (prev, tick]. A parent the ledger cannot be read for counts as
// not done, and is read again at the next poll.
func (s *Scheduler) parentsLeft(j *job, ps []string, prev, tick time.Time) []string {
	var left []string
	for _, p := range ps {
		ok, err := s.parentDone(p, prev, tick)
		if err != nil {
			s.log.Error("schedule: reading the history of a parent", "node", s.node, "job", j.Name, "parent", p, "err", err)
		}
		if !ok {
			left = append(left, p)
		}
	}
	return left
}

// parentDone reports whether job has a run for a tick in (prev, tick] that
// succeeded: a RunOK record, or one for each of its shards when it is
// sharded.
func (s *Scheduler) parentDone(job string, prev, tick time.Time) (bool, error) {
	if s.deps.knownDone(job, prev, tick) {
		return true, nil
	}
	s.deps.reads.Add(1)
	q := ledger.RunQuery{Job: job, To: tick.Add(tickStep), Status: ledger.RunOK, Limit: depPageSize}
	if !prev.IsZero() {
		q.From = prev.Add(tickStep)
	}
	type run struct {
		tick    time.Time
		trigger string
	}
	shards := map[run]map[int]bool{}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		rs, err := s.ledger.Runs(ctx, q)
		cancel()
		if err != nil {
			return false, err
		}
		for _, r := range rs {
			if r.Status != ledger.RunOK {
				continue
			}
			if r.Shards <= 1 {
				s.deps.mu.Lock()
				s.deps.sawOK(&r)
				s.deps.mu.Unlock()
				return true, nil
			}
			k := run{r.Tick.UTC(), r.Trigger}
			if shards[k] == nil {
				shards[k] = make(map[int]bool)
			}
			shards[k][r.Shard] = true
			if len(shards[k]) >= r.Shards {
				return true, nil
			}
		}
		if len(rs) < q.Limit {
			return false, nil
		}
		last := rs[len(rs)-1].Key()
		q.Before = &last
	}
}

// depsReason is the error of a tick skipped because parents were not done:
// each of them with its last status.
func (s *Scheduler) depsReason(j *job, left []string, prev, tick time.Time, limit string) string {
	parts := make([]string, len(left))
	for i, p := range left {
		parts[i] = p + " (" + s.lastStatus(p, prev, tick) + ")"
	}
	return fmt.Sprintf("schedule: parents not done %s: %s", limit, strings.Join(parts, ", "))
}

// lastStatus describes job's newest run for a tick up to tick, saying so
// when that tick is not after prev.
func (s *Scheduler) lastStatus(job string, prev, tick time.Time) string {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	rs, err := s.ledger.Runs(ctx, ledger.RunQuery{Job: job, To: tick.Add(tickStep), Limit: 1})
	switch {
	case err != nil:
		return "last run unknown: " + err.Error()
	case len(rs) == 0:
		return "no run yet"
	}
	r := rs[0]
	text := fmt.Sprintf("last run %s, tick %s", r.Status, r.Tick.UTC().Format(time.RFC3339))
	if r.Shards > 1 {
		text += fmt.Sprintf(", shard %d of %d", r.Shard, r.Shards)
	}
	if !r.Tick.After(prev) {
		text += ", before the previous tick of this job"
	}
	return text
}
