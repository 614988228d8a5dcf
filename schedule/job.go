package schedule

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tasklock/tasklock"
)

// Job is a periodic job. Only Name, Schedule and Handler are required; zero
// fields take the defaults documented on them. The fields map one to one to
// the daemon's configuration keys.
type Job struct {
	// Name identifies the job across the cluster: in the ledger, in the
	// job's lock key and in history. At most MaxJobName bytes of UTF-8
	// without control characters (C0, DEL and C1: unicode.IsControl).
	Name string
	// Schedule is the job's spec: cron with an optional seconds field,
	// a descriptor or @every (see Parse).
	Schedule string
	// TimeZone is the IANA zone the schedule's wall-clock times are read
	// in, e.g. "Europe/Berlin". Default: UTC. A CRON_TZ= prefix in
	// Schedule may set it instead, not both.
	TimeZone string
	// Handler runs the job for one tick. Its ctx ends when the attempt
	// times out, the job's lock is lost or Lock.MaxHold is reached, or
	// Shutdown's grace period ends; context.Cause tells which (ErrTimeout,
	// tasklock.ErrLockLost, tasklock.ErrMaxHold, ErrShutdown). It should
	// return soon after.
	Handler func(ctx context.Context, run Run) error

	// Overlap says whether a tick may run while the job's previous run is
	// still in progress on any node. Default: OverlapSkip.
	Overlap Overlap
	// Misfire says what happens to ticks that came while no node ran the
	// job. Default: MisfireOnce.
	Misfire Misfire
	// MisfireAfter is how late, by the handling node's clock, a tick may be
	// handled and still count as on time; later ticks are missed and go to
	// the Misfire policy. A tick is handled as its claim returns, and a
	// tick the policy did not choose as a catch-up run must also start
	// within MisfireAfter: one whose turn on its node comes later, after
	// the run of an earlier tick claimed with it (after an outage, say),
	// is skipped, as a tick that finds the previous run in progress is
	// (with OverlapAllow it runs at once instead, beside that run); one
	// made late by taking the job's lock (a store slow to answer) goes to
	// the policy alone: it runs as a catch-up run, or with MisfireSkip is
	// missed. The waits a job asks for come after and are bounded by their
	// own options: Jitter, After (Within), a pool's permit (PoolWait).
	// Retries are attempts of a tick that started. Default: 5s.
	MisfireAfter time.Duration
	// MisfireWindow is how far back a node looks for missed ticks when it
	// starts or catches up. Older ticks are forgotten: neither run nor
	// recorded. Default: 1h; at most half of Config.ClaimRetention.
	MisfireWindow time.Duration
	// CatchUpMax is how many missed ticks MisfireCatchUp runs at most, the
	// newest. Default: 10; at most MaxBacklog.
	CatchUpMax int

	// Timeout bounds each attempt; its ctx then ends with ErrTimeout and
	// the attempt is recorded as timed out. Zero: none.
	Timeout time.Duration
	// Retries is how many times a failed or timed-out attempt is repeated
	// within the tick, holding the job's lock throughout. Default: 0.
	Retries int
	// RetryBackoff is the wait before the first retry, doubling for each
	// next one up to RetryBackoffMax. Defaults: 1s and 1m.
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration
	// Jitter delays each run by a random duration below it, spreading jobs
	// that share a schedule. The tick is claimed on time. At most
	// MisfireWindow, and less than the shortest time between two ticks of
	// Schedule (over its next 1,000 ticks), so that a run starts before
	// the next tick's. Zero: none.
	Jitter time.Duration
	// LeaderOnly makes the job run only on the fleet's leader, for teams
	// that want one active node: a node claims its ticks (and trigger-nows)
	// only while Config.IsLeader reports true. Ticks that come while no
	// node leads are owed, not lost: the node that leads next handles them
	// by the Misfire policy, and the ledger keeps a tick another leader ran
	// from running again. It needs Config.IsLeader.
	LeaderOnly bool

	// Fleet-wide limits and placement (limits.go).

	// MaxConcurrent, when above 0, lets up to this many runs of the job be
	// in progress at once across the fleet: a run holds a permit of the
	// semaphore Config.KeyPrefix + Name + "/running" (tasklock.Semaphore)
	// instead of the job's lock, so Overlap is allow, bounded; a tick that
	// finds every permit held is recorded as skipped. Run.Fence is the
	// permit's fence, and Lock applies to the permit. Every node must give
	// the job the same number: a semaphore keeps its size while any permit
	// is held. At most tasklock.MaxPermits. Zero: Overlap decides.
	MaxConcurrent int
	// Pool names one of Config.Pools. A run then also holds a permit of
	// the pool's semaphore (Config.KeyPrefix + "pool/" + Pool) while it
	// runs, retries included, so that at most the pool's size of runs of
	// all its jobs are in progress at once across the fleet. A run that
	// finds every permit held waits for one, up to PoolWait, holding the
	// job's lock (or its MaxConcurrent permit) meanwhile; when the wait
	// ends without a permit the tick is recorded as skipped, with a reason
	// naming the pool; Shutdown ends the wait at once, and the tick is
	// recorded as skipped too. The wait makes the run late: EventRunStarted
	// shows by how much. "": none.
	Pool string
	// PoolWait bounds a run's wait for a permit of its Pool. Zero: until
	// the job's first tick after the wait begins, so a run never waits
	// past its job's next turn.
	PoolWait time.Duration
	// Nodes are the labels a node must carry (Config.Labels), every one,
	// to run the job: other nodes never claim its ticks or its trigger-now
	// requests. A job whose labels no running node carries does not run,
	// and its ticks are not recorded until such a node starts (then they
	// are missed ticks, handled by Misfire). Empty: any node.
	Nodes []string

	// After names the job's parents: jobs each of whose ticks this job's
	// tick waits for. Tick T (the schedule's tick before it being P) runs
	// once every parent has a successful run (every shard ok, for a
	// sharded parent) for a tick of its own in (P, T] — scheduled or
	// triggered — so parents on other schedules, and on other nodes or
	// Schedulers sharing the ledger, work alike. The node that claimed T
	// waits for that, reading the ledger every Config.PollInterval (and
	// at once when a parent's run ends on it), before taking the job's
	// lock. A trigger request (trigger-now, backfill, re-run) does not wait. A parent this Scheduler
	// does not know is allowed (another node may run it); Add refuses a
	// job that closes a cycle among the jobs it knows. Nil: none.
	After []string
	// Within is how long a tick waits for its parents, from when the node
	// takes it up (the tick itself, when on time); then it is recorded as
	// skipped, naming each parent not done and its last status (and so
	// when Shutdown's grace period ends while it waits). Default: until
	// the job's next tick, where the next tick takes over the wait (at
	// most MisfireWindow), so a failing parent leaves one waiting tick per
	// job; at most MisfireWindow. Only with After.
	Within time.Duration

	// Lock are the options of the job's lock, which a run holds while it
	// lasts (with OverlapSkip; OverlapAllow takes no lock), checked by
	// tasklock.ObtainOptions.Validate:
	//   - TTL is its lease length, renewed while the run lasts. Default:
	//     tasklock.DefaultTTL.
	//   - MinHold keeps it until the run's start + MinHold even when the
	//     run ends earlier: with OverlapSkip, ticks within it are skipped.
	//     It needs the lock, so not with OverlapAllow. Zero: none.
	//   - MaxHold bounds a run, retries included: the lock is not renewed
	//     past start + MaxHold, the handler's ctx ends with
	//     tasklock.ErrMaxHold and the attempt is recorded as timed out.
	//     With OverlapAllow it is enforced by the node's clock alone.
	//     Zero: unbounded.
	//   - Grace ends the handler's ctx this much before the lock could go
	//     to another node after a loss, a failed renewal or MaxHold,
	//     leaving the handler that long to stop: tasklock serve sets it to
	//     a command job's kill_grace. Less than half of TTL, and than
	//     MaxHold. Zero: none.
	//
	// The scheduler sets the other fields itself, and Add rejects a job
	// that sets them: Owner is Config.Node; Wait is zero and Fair unset (a
	// tick that finds the lock held is skipped, not waited or queued for);
	// NoRenew and ProgressTimeout are unset (the lock is renewed while the
	// run lasts, and a handler has no Heartbeat to call).
	Lock tasklock.ObtainOptions

	// Shards splits each tick into this many shard-runs, 0 to Shards-1,
	// each claimed and run once across the fleet (Run.Shard, Run.Shards)
	// and holding its own lock, the job's key + "/shard/" + the index, so
	// that with OverlapSkip only a shard's own previous run makes it skip.
	// At each tick a node claims the shards k with k mod L = r, where r is
	// its rank among the L live nodes (the names of the node leases,
	// sorted; it needs Config.NodeLister, else a node counts itself alone
	// and claims every shard); a poll later, a node with no shard-run of
	// the job under way claims the shards still unclaimed, one at a time,
	// and takes over, one at a time, the shards whose claiming node
	// stopped (its node lease ended) before recording an outcome. 0 or 1:
	// not sharded. At most ledger.MaxShards. Not with LeaderOnly.
	Shards int
}

// MaxJobName is the longest job name, in bytes.
const MaxJobName = 200

// MaxBacklog is how many missed ticks of a job a node handles at most in one
// pass, the newest; older ones are forgotten.
const MaxBacklog = 100

// MaxClaimAhead bounds Config.ClaimAhead: a job's lock is held for that
// long before its tick, and a pause waits for it.
const MaxClaimAhead = time.Second

// plain reports whether j's ticks may be claimed ahead (Config.ClaimAhead):
// it has nothing to wait for between the claim and the handler that
// counts from the tick (Jitter, After, a pool's or MaxConcurrent's
// permit), one lock (no shards), no leader to ask at the tick, and no
// lock option that counts from the obtain (MaxHold, MinHold, NoRenew's
// TTL), which the wait would shift.
func plain(j *job) bool {
	o := &j.Lock
	return j.Shards <= 1 && len(j.After) == 0 && j.Jitter == 0 && !j.LeaderOnly && j.Pool == "" && j.MaxConcurrent == 0 &&
		o.MaxHold == 0 && o.MinHold == 0 && !o.NoRenew
}

// Job defaults.
const (
	DefaultMisfireAfter    = 5 * time.Second
	DefaultMisfireWindow   = time.Hour
	DefaultCatchUpMax      = 10
	DefaultRetryBackoff    = time.Second
	DefaultRetryBackoffMax = time.Minute
)

// Overlap is what happens when a tick comes while the job's previous run is
// still in progress.
type Overlap uint8

// The overlap policies.
const (
	// OverlapSkip holds the job's lock during each run, so runs never
	// overlap across the cluster; a tick that finds the lock held is
	// recorded as skipped. On a node, a scheduled tick never runs after a
	// later tick of its job: one that takes the lock after a later tick's
	// run did (a busy node starting their runs out of order) is recorded
	// as skipped too. A lock whose release failed (the store did not
	// answer) stays held until its lease ends, and skips the ticks until
	// then as a run in progress would.
	OverlapSkip Overlap = iota
	// OverlapAllow runs every tick, overlapping or not; no lock is taken
	// and Run.Fence is 0.
	OverlapAllow
)

var overlapNames = [...]string{"skip", "allow"}

// String returns "skip" or "allow".
func (o Overlap) String() string {
	if int(o) < len(overlapNames) {
		return overlapNames[o]
	}
	return fmt.Sprintf("Overlap(%d)", o)
}

// UnmarshalText parses "skip" or "allow", for configuration files.
func (o *Overlap) UnmarshalText(b []byte) error {
	for i, n := range overlapNames {
		if string(b) == n {
			*o = Overlap(i)
			return nil
		}
	}
	return fmt.Errorf("schedule: unknown overlap policy %q (want skip or allow)", b)
}

// Misfire is what happens to ticks that came while no node ran the job (all
// were down, or the store could not be reached): ticks handled more than
// Job.MisfireAfter late.
type Misfire uint8

// The misfire policies.
const (
	// MisfireOnce runs the newest missed tick, once, and records the
	// others as missed.
	MisfireOnce Misfire = iota
	// MisfireSkip runs none and records them as missed.
	MisfireSkip
	// MisfireCatchUp runs the newest Job.CatchUpMax missed ticks, oldest
	// first, and records the others as missed.
	MisfireCatchUp
)

var misfireNames = [...]string{"once", "skip", "catch_up"}

// String returns "once", "skip" or "catch_up".
func (m Misfire) String() string {
	if int(m) < len(misfireNames) {
		return misfireNames[m]
	}
	return fmt.Sprintf("Misfire(%d)", m)
}

// UnmarshalText parses "once", "skip" or "catch_up", for configuration
// files.
func (m *Misfire) UnmarshalText(b []byte) error {
	for i, n := range misfireNames {
		if string(b) == n {
			*m = Misfire(i)
			return nil
		}
	}
	return fmt.Errorf("schedule: unknown misfire policy %q (want once, skip or catch_up)", b)
}

// Run describes one attempt at one tick, as passed to Job.Handler.
type Run struct {
	Job     string
	Tick    time.Time // the scheduled instant, UTC; for Trigger, when it was requested
	Trigger string    // the trigger-now request's ID; "" for a scheduled tick
	Node    string    // this node
	Attempt int       // 1 for the first attempt
	// Fence is the job lock's fencing token: pass it to the resources the
	// job writes so they can refuse a run that lost its lock (see
	// package fence). 0 with OverlapAllow; with MaxConcurrent, the fence
	// of the run's permit.
	Fence uint64
	// CatchUp is true when the tick was missed and runs late by the
	// misfire policy.
	CatchUp bool
	// Output collects what the handler wants in history: up to
	// Config.OutputMax bytes of it (its head and tail past that) are
	// recorded with the run.
	Output io.Writer

	// Shard is this shard-run's index, 0 to Shards-1, for a job with
	// Job.Shards; 0 otherwise.
	Shard int
	// Shards is the job's shard count; 0 when it is not sharded.
	Shards int

	// Deadline, nil when the run holds no lock (OverlapAllow), says when
	// the run's lock (with MaxConcurrent, its permit) stops being trusted
	// as its latest renewal set it (tasklock.Lock.Deadline): the handler's
	// ctx ends by then unless a renewal moves it later. A handler whose
	// work runs in another process hands it this time, again as it moves,
	// so that the work stops in time even while this one is paused.
	Deadline func() time.Time
}

// job is a validated Job with its parsed schedule and this node's progress
// through its ticks.
type job struct {
	Job
	sched Schedule
	key   string

	// Guarded by Scheduler.mu.
	since  time.Time     // when the fleet first ran the job with this schedule (the ledger's registration)
	broken string        // why the schedule gave no next tick; "" while it does
	after  time.Time     // every tick up to and including after was handled here
	next   time.Time     // when a pass looks at sched.Next(after) (schedule): the heap's key
	idx    int           // index in the heap, -1 when not in it
	owner  string        // the node that prefers the job; "" when none does (prefer.go)
	lag    bool          // owner is another node: its ticks are claimed here only as fallbacks
	ahead  time.Duration // how long before its ticks a pass claims them (Config.ClaimAhead; set by Add)

	// obtainOpts are the options of the job's lock for this node (set by
	// Add), built once and shared by its runs: read only.
	obtainOpts *tasklock.ObtainOptions

	rm jobRemoval // Scheduler.Remove (remove.go); guarded by Scheduler.mu

	// newest is the newest scheduled tick (UnixNano) whose run took the
	// job's lock on this node (overtaken).
	newest atomic.Int64

	// past holds the backfills and re-runs of the job this node claimed
	// and has not started yet, to start them oldest tick first
	// (pastqueue.go).
	past pastQueue
}

// overtaken reports whether a newer scheduled tick of j than w's took the
// job's lock on this node first, and which; otherwise it notes w's tick as
// the newest. A run calls it with the job's lock just taken: the runs of a
// job's ticks start in goroutines of their own, one per pass, and on a
// busy node a later pass's goroutine can take the lock, run and release it
// before an earlier one gets there. The older tick then must not run after
// the newer one, which it would with a higher fence. Trigger requests,
// backfills, shard-runs and retaken shards are not ordered by tick and are
// not checked.
func (j *job) overtaken(w *work) (time.Time, bool) {
	if !w.scheduled() || w.past || w.retake || w.shards > 1 {
		return time.Time{}, false
	}
	tick := w.tick.UnixNano()
	for {
		n := j.newest.Load()
		switch {
		case n > tick:
			return time.Unix(0, n).UTC(), true
		case n == tick || j.newest.CompareAndSwap(n, tick):
			return time.Time{}, false
		}
	}
}

// overtakenReason is the skip reason of a tick overtaken by newer.
func overtakenReason(newer time.Time) string {
	return fmt.Sprintf("schedule: tick %s of this job took its lock first on this node, and a tick never runs after a later one",
		newer.Format(time.RFC3339Nano))
}

func validateJob(j Job, keyPrefix string, retention time.Duration) (*job, error) {
	bad := func(field, format string, args ...any) error {
		return badJob(j.Name, field, fmt.Sprintf(format, args...), nil)
	}
	switch {
	case j.Name == "":
		return nil, bad("Job.Name", "empty")
	case len(j.Name) > MaxJobName:
		return nil, bad("Job.Name", "%d bytes long, the maximum is %d", len(j.Name), MaxJobName)
	case !utf8.ValidString(j.Name):
		return nil, bad("Job.Name", "not valid UTF-8")
	}
	for _, c := range j.Name {
		if unicode.IsControl(c) { // C0, DEL and C1
			return nil, bad("Job.Name", "contains control character %U", c)
		}
	}
	if j.Handler == nil {
		return nil, bad("Job.Handler", "nil")
	}
	loc := time.UTC
	if j.TimeZone != "" {
		l, err := loadZone(j.TimeZone)
		if err != nil {
			return nil, bad("Job.TimeZone", "%q: %v", j.TimeZone, err)
		}
		loc = l
		if _, _, ok := tzPrefix(j.Schedule); ok {
			return nil, bad("Job.TimeZone", "set, and Job.Schedule has a CRON_TZ= prefix too")
		}
	}
	sched, err := Parse(j.Schedule, loc)
	if err != nil {
		var pe *ParseError
		reason := err.Error()
		if errors.As(err, &pe) {
			reason = pe.detail()
		}
		return nil, badJob(j.Name, "Job.Schedule", reason, err)
	}
	if j.MisfireAfter == 0 {
		j.MisfireAfter = DefaultMisfireAfter
	}
	if j.MisfireWindow == 0 {
		j.MisfireWindow = DefaultMisfireWindow
	}
	if j.CatchUpMax == 0 {
		j.CatchUpMax = DefaultCatchUpMax
	}
	if j.RetryBackoff == 0 {
		j.RetryBackoff = DefaultRetryBackoff
	}
	if j.RetryBackoffMax == 0 {
		j.RetryBackoffMax = max(DefaultRetryBackoffMax, j.RetryBackoff)
	}
	if j.Lock.TTL == 0 {
		j.Lock.TTL = tasklock.DefaultTTL
	}
	switch {
	case j.Overlap > OverlapAllow:
		return nil, bad("Job.Overlap", "unknown policy %d", j.Overlap)
	case j.Misfire > MisfireCatchUp:
		return nil, bad("Job.Misfire", "unknown policy %d", j.Misfire)
	case j.MisfireAfter < 0:
		return nil, bad("Job.MisfireAfter", "%v is negative", j.MisfireAfter)
	case j.MisfireWindow < j.MisfireAfter:
		return nil, bad("Job.MisfireWindow", "%v is less than MisfireAfter %v", j.MisfireWindow, j.MisfireAfter)
	case j.MisfireWindow > retention/2:
		return nil, bad("Job.MisfireWindow", "%v is more than half of Config.ClaimRetention %v: a tick could be forgotten before every node stopped looking at it", j.MisfireWindow, retention)
	case j.CatchUpMax < 0 || j.CatchUpMax > MaxBacklog:
		return nil, bad("Job.CatchUpMax", "%d is not within [1, %d]", j.CatchUpMax, MaxBacklog)
	case j.Timeout < 0:
		return nil, bad("Job.Timeout", "%v is negative", j.Timeout)
	case j.Retries < 0 || j.Retries > 100:
		return nil, bad("Job.Retries", "%d is not within [0, 100]", j.Retries)
	case j.RetryBackoff < 0:
		return nil, bad("Job.RetryBackoff", "%v is negative", j.RetryBackoff)
	case j.RetryBackoffMax < j.RetryBackoff:
		return nil, bad("Job.RetryBackoffMax", "%v is less than RetryBackoff %v", j.RetryBackoffMax, j.RetryBackoff)
	case j.Jitter < 0:
		return nil, bad("Job.Jitter", "%v is negative", j.Jitter)
	case j.Jitter > j.MisfireWindow:
		// As Within: the claimed tick has no record while the run waits.
		return nil, bad("Job.Jitter", "%v is more than MisfireWindow %v: a run could start after every node stopped looking at its tick", j.Jitter, j.MisfireWindow)
	}
	if gap := shortestGap(sched, time.Now()); j.Jitter > 0 && gap > 0 && j.Jitter >= gap {
		return nil, bad("Job.Jitter", "%v is not less than the %v between two ticks of %q: a run could start after the next tick's", j.Jitter, gap, j.Schedule)
	}
	if err := validateDeps(&j); err != nil {
		return nil, err
	}
	if err := validateLock(j.Name, j.Lock); err != nil {
		return nil, err
	}
	if err := validateShards(j, keyPrefix); err != nil {
		return nil, err
	}
	if j.Lock.MinHold > 0 && j.Overlap == OverlapAllow {
		return nil, bad("Job.Lock.MinHold", "needs the job's lock, and Overlap is allow")
	}
	key := keyPrefix + j.Name
	if err := tasklock.ValidateKey(key); err != nil {
		reason := err.Error()
		var oe *tasklock.OptionError
		if errors.As(err, &oe) {
			reason = oe.Reason
		}
		return nil, badJob(j.Name, "Job.Name", "makes an invalid lock key: "+reason, err)
	}
	return &job{Job: j, sched: sched, key: key, idx: -1}, nil
}

// shortestGap is the shortest time between two consecutive ticks of s
// among its next 1,000 ticks after from, or those of the year after from
// if fewer: exact for @every and for the cron specs that repeat within a
// year. Zero: s has fewer than two ticks in that span.
func shortestGap(s Schedule, from time.Time) time.Duration {
	end := from.AddDate(1, 0, 0)
	var gap time.Duration
	prev := s.Next(from)
	for range 1000 {
		if prev.IsZero() || prev.After(end) {
			break
		}
		next := s.Next(prev)
		if next.IsZero() {
			break
		}
		if d := next.Sub(prev); gap == 0 || d < gap {
			gap = d
		}
		prev = next
	}
	return gap
}

// validateLock checks a job's lock options: the fields the scheduler sets
// must be unset, the others pass tasklock.ObtainOptions.Validate; a mistake
// is named as the Job's field ("Job.Lock.MaxHold").
func validateLock(job string, o tasklock.ObtainOptions) error {
	const set = "set by the scheduler"
	switch {
	case o.Owner != "":
		return badJob(job, "Job.Lock.Owner", set+": the owner is Config.Node", nil)
	case o.Wait != 0:
		return badJob(job, "Job.Lock.Wait", set+": a tick that finds the lock held is skipped, not waited for", nil)
	case o.NoRenew:
		return badJob(job, "Job.Lock.NoRenew", set+": the lock is renewed while the run lasts", nil)
	case o.ProgressTimeout != 0:
		return badJob(job, "Job.Lock.ProgressTimeout", "not supported: a handler has no Heartbeat to call", nil)
	case o.Fair:
		// A permit (MaxConcurrent, Pool) refuses it at every run.
		return badJob(job, "Job.Lock.Fair", set+": a tick that finds the lock held is skipped, not queued for", nil)
	}
	err := o.Validate()
	var oe *tasklock.OptionError
	if !errors.As(err, &oe) {
		return err
	}
	return badJob(job, "Job.Lock."+strings.TrimPrefix(oe.Field, "ObtainOptions."), oe.Reason, nil)
}

// lockOptions are the options of the job's lock, a copy the caller may
// change.
func (j *job) lockOptions(node string) *tasklock.ObtainOptions {
	o := j.Lock
	o.Owner = node
	return &o
}
