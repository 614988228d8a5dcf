package schedule

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/ledger"
)

// Fleet-wide limits and placement: Job.MaxConcurrent, Job.Pool with
// Config.Pools, and Job.Nodes with Config.Labels.

// MaxLabelLen bounds a node label (Config.Labels, Job.Nodes) and a pool
// name (Config.Pools, Job.Pool), in bytes.
const MaxLabelLen = 63

// errPoolWait is the cause that ends a run's wait for a pool permit when
// Job.PoolWait (or the job's next tick) passed.
var errPoolWait = errors.New("schedule: the wait for a pool permit ended")

// CheckLabel returns "" when s can be a node label (Config.Labels,
// Job.Nodes) or a pool name (Config.Pools, Job.Pool), and otherwise what is
// wrong: it is 1 to MaxLabelLen bytes of ASCII letters, digits and
// - _ . : = /, starting with a letter or digit (so it reads well in a
// flag, a lock key and a metric label).
func CheckLabel(s string) string {
	switch {
	case s == "":
		return "empty"
	case len(s) > MaxLabelLen:
		return fmt.Sprintf("%d bytes long, the maximum is %d", len(s), MaxLabelLen)
	}
	for i, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !ok && i > 0 {
			ok = strings.ContainsRune("-_.:=/", c)
		}
		if !ok {
			return fmt.Sprintf("%q: want ASCII letters, digits and - _ . : = /, starting with a letter or digit", s)
		}
	}
	return ""
}

// limitsConfig checks Config.Pools and Config.Labels and returns them as
// the Scheduler keeps them.
func limitsConfig(c *Config) (map[string]int, map[string]bool, error) {
	pools := make(map[string]int, len(c.Pools))
	for name, n := range c.Pools {
		if msg := CheckLabel(name); msg != "" {
			return nil, nil, badOption("Config.Pools", "pool name %s", msg)
		}
		if n < 1 || n > tasklock.MaxPermits {
			return nil, nil, badOption("Config.Pools", "pool %q: size %d is not within [1, %d]", name, n, tasklock.MaxPermits)
		}
		if err := tasklock.ValidateKey(poolKey(c.KeyPrefix, name)); err != nil {
			return nil, nil, badOption("Config.Pools", "pool %q makes an invalid lock key: %v", name, err)
		}
		pools[name] = n
	}
	labels := make(map[string]bool, len(c.Labels))
	for _, l := range c.Labels {
		if msg := CheckLabel(l); msg != "" {
			return nil, nil, badOption("Config.Labels", "label %s", msg)
		}
		labels[l] = true
	}
	return pools, labels, nil
}

func poolKey(prefix, pool string) string { return prefix + "pool/" + pool }

// runningKey is the key of the semaphore of j's MaxConcurrent.
func (s *Scheduler) runningKey(j *job) string { return s.keyPrefix + j.Name + "/running" }

// checkLimits checks j's limits and placement against the Scheduler's
// pools, for Add. A job with MaxConcurrent takes no job lock: its Overlap
// becomes OverlapAllow, bounded by the semaphore.
func (s *Scheduler) checkLimits(j *job) error {
	bad := func(field, format string, args ...any) error {
		return badJob(j.Name, field, fmt.Sprintf(format, args...), nil)
	}
	switch {
	case j.MaxConcurrent < 0 || j.MaxConcurrent > tasklock.MaxPermits:
		return bad("Job.MaxConcurrent", "%d is not within [0, %d]", j.MaxConcurrent, tasklock.MaxPermits)
	case j.PoolWait < 0:
		return bad("Job.PoolWait", "%v is negative", j.PoolWait)
	case j.PoolWait > 0 && j.Pool == "":
		return bad("Job.PoolWait", "set, and Job.Pool is not: it bounds the wait for a pool permit")
	}
	if j.MaxConcurrent > 0 {
		if err := tasklock.ValidateKey(s.runningKey(j)); err != nil {
			return bad("Job.Name", "makes an invalid semaphore key for MaxConcurrent: %v", err)
		}
		j.Overlap = OverlapAllow
	}
	if j.Pool != "" {
		if _, ok := s.pools[j.Pool]; !ok {
			names := make([]string, 0, len(s.pools))
			for n := range s.pools {
				names = append(names, n)
			}
			sort.Strings(names)
			known := "Config.Pools is empty"
			if len(names) > 0 {
				known = "Config.Pools has " + strings.Join(names, ", ")
			}
			return bad("Job.Pool", "unknown pool %q (%s)", j.Pool, known)
		}
	}
	for i, l := range j.Nodes {
		if msg := CheckLabel(l); msg != "" {
			return bad("Job.Nodes", "label %s", msg)
		}
		if slices.Contains(j.Nodes[:i], l) {
			return bad("Job.Nodes", "label %q is listed twice", l)
		}
	}
	j.Nodes = slices.Clone(j.Nodes)
	return nil
}

// runsHere reports whether this node carries every label of j.Nodes, so
// that it may claim j's ticks.
func (s *Scheduler) runsHere(j *job) bool {
	for _, l := range j.Nodes {
		if !s.labels[l] {
			return false
		}
	}
	return true
}

// limits are the permits a run holds besides the job's lock.
type limits struct {
	running *tasklock.Lock // Job.MaxConcurrent's
	pool    *tasklock.Lock // Job.Pool's
	stops   []func() bool
}

// takeLimits takes the permits j's run still needs: one of the job's
// MaxConcurrent semaphore, without waiting, then one of its pool's,
// waiting up to the pool's bound. A permit's loss ends tickCtx with its
// cause (cancel). When a permit cannot be had, skip says why the tick is
// recorded as skipped; when the store failed, rec is the failed attempt's
// record (the next attempt tries again).
func (s *Scheduler) takeLimits(tickCtx context.Context, cancel context.CancelCauseFunc, j *job, w work, attempt int, h *limits, ahead func()) (rec ledger.RunRecord, skip string) {
	failed := func(what string, err error) (ledger.RunRecord, string) {
		now := s.clock.Now()
		rec := s.notRun(j, w, ledger.RunFailed, "schedule: taking "+what+": "+err.Error())
		rec.Attempt, rec.Start, rec.End = attempt, now, now
		s.emit(w.startEvent(&rec))
		return rec, ""
	}
	if j.MaxConcurrent > 0 && h.running == nil {
		ctx, c := context.WithTimeout(context.Background(), storeTimeout)
		l, err := s.lk.Semaphore(s.runningKey(j), j.MaxConcurrent).TryAcquire(ctx, j.obtainOpts)
		c()
		switch {
		case errors.Is(err, tasklock.ErrNotObtained):
			return rec, fmt.Sprintf("schedule: %d runs of the job are in progress already: %v", j.MaxConcurrent, err)
		case err != nil:
			return failed("a MaxConcurrent permit", err)
		}
		h.running = l
		h.watch(l, cancel)
	}
	if j.Pool != "" && h.pool == nil {
		size := s.pools[j.Pool]
		sem := s.lk.Semaphore(poolKey(s.keyPrefix, j.Pool), size)
		opts := j.lockOptions(s.node)
		opts.MinHold = 0 // MinHold is the job lock's: the pool's permit returns when the run ends
		start := s.clock.Now()
		until := s.poolDeadline(j)
		// One try first, so that a free permit is taken however late the
		// run is; then the wait, bounded on the Scheduler's clock.
		ctx, c := context.WithTimeout(tickCtx, storeTimeout)
		l, err := sem.TryAcquire(ctx, opts)
		c()
		var cause error
		if errors.Is(err, tasklock.ErrNotObtained) {
			s.log.Debug("schedule: waiting for a pool permit", "node", s.node, "job", j.Name, "pool", j.Pool, "until", until)
			ahead()
			wctx, wcancel := context.WithCancelCause(tickCtx)
			d := s.addDeadline(until, wcancel, errPoolWait)
			go func() { // Shutdown ends the wait: the run has not started
				select {
				case <-s.stopCh:
					wcancel(ErrShutdown)
				case <-wctx.Done():
				}
			}()
			l, err = sem.Acquire(wctx, opts)
			s.removeDeadline(d)
			cause = context.Cause(wctx)
			wcancel(nil)
		}
		switch {
		case err == nil:
		case errors.Is(cause, errPoolWait):
			return rec, fmt.Sprintf("schedule: pool %q: no permit free within %v: all %d are held by other runs",
				j.Pool, until.Sub(start).Round(time.Millisecond), size)
		case errors.Is(cause, ErrShutdown) || tickCtx.Err() != nil:
			return rec, fmt.Sprintf("schedule: pool %q: waiting for a permit: %v", j.Pool, cmp.Or(context.Cause(tickCtx), cause))
		default:
			return failed(fmt.Sprintf("a permit of pool %q", j.Pool), err)
		}
		if l != nil {
			h.pool = l
			h.watch(l, cancel)
		}
	}
	return rec, ""
}

// poolDeadline is when j's run stops waiting for a pool permit: PoolWait
// from now, or the job's first tick after now.
func (s *Scheduler) poolDeadline(j *job) time.Time {
	now := s.clock.Now()
	if j.PoolWait > 0 {
		return now.Add(j.PoolWait)
	}
	if next := j.sched.Next(now); !next.IsZero() {
		return next
	}
	return now.Add(j.MisfireWindow)
}

// watch ends the tick's context with l's cause when l is lost.
func (h *limits) watch(l *tasklock.Lock, cancel context.CancelCauseFunc) {
	lctx := l.Context()
	h.stops = append(h.stops, context.AfterFunc(lctx, func() { cancel(context.Cause(lctx)) }))
}

// release returns the permits h holds.
func (s *Scheduler) releaseLimits(j *job, h *limits) {
	for _, stop := range h.stops {
		stop()
	}
	for _, l := range []*tasklock.Lock{h.pool, h.running} {
		if l == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		if err := l.Release(ctx); err != nil && !errors.Is(err, tasklock.ErrNotHeld) {
			s.log.Error("schedule: releasing a permit", "node", s.node, "job", j.Name, "key", l.Key(), "err", err)
		}
		cancel()
	}
}
