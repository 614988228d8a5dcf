package schedule

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tasklock/tasklock"
	"github.com/tasklock/tasklock/ledger"
)

// Backfill and re-run requests are trigger requests (ledger.TriggerRequest)
// that name a past tick. Their IDs say how the tick runs, so that every
// node reads the same: "bf-s-" and "bf-a-" begin a backfill's (overlap
// skip and allow), "rr-s-" and "rr-a-" a re-run's. A node handling one
// claims:
//
//   - for a backfill, the key (job, tick, "backfill"), or "backfill:N"
//     when the tick's highest attempt was N > 0 as it was asked for (the
//     base, below): every backfill of that tick asked for meanwhile
//     contends on it, so it runs once however many were asked for; and it
//     runs only when the tick has not run (its records are missed or
//     skipped ones, or none). A tick whose backfill was skipped (its job
//     was paused) has a higher attempt since, so a later backfill claims a
//     key of its own and runs it;
//   - for a re-run, the key (job, tick, request ID): each request runs
//     once, as the next attempt after the last one recorded.
//
// Either way the run is recorded under the tick's own key (Trigger ""),
// so the tick's history shows every attempt in order. A past run of a
// tick (or shard) the ledger holds no record of also claims the tick's
// own key first (startPast), so that the schedule, if it has not handled
// the tick yet, does not run it again. Two runs of one tick
// never share an attempt number: the first attempt of a scheduled tick is
// the tick claim's, and every other attempt number — a backfill's or
// re-run's, a retry's — is claimed on its own first, as the key (job, tick,
// "attempt:N", shard) (claimAttempt). So two re-runs asked for at once,
// or a re-run beside a retry, run as attempts N and N+1.
//
// A backfill's or re-run's ID also carries the tick's highest attempt when
// it was asked for, the base: "rr-s-2-" then random hex re-runs a tick that
// had two attempts. Its runs are numbered after the base, and for a
// sharded job the nodes watching the tick (shard.go) count a shard as done
// once it has an attempt after the base: every shard runs once more, not
// only the shards of the node that took the request first. An ID without a
// base (from an older build) counts as base 0.
const (
	backfillClaim = "backfill"
	backfillSkip  = "bf-s-"
	backfillAllow = "bf-a-"
	rerunSkip     = "rr-s-"
	rerunAllow    = "rr-a-"
)

// DefaultBackfillMax is BackfillOptions.Max when not set.
const DefaultBackfillMax = 1000

// MaxBackfill bounds BackfillOptions.Max: one RequestBackfill asks for at
// most this many ticks. Each tick is one request: one ledger write
// (SetJobState, a transaction that also returns the job's state with
// every request still pending, so n requests read about n²/2 rows while
// they write), and until a node takes it, one more row in every node's
// JobStates poll (twice a second) and one more claim in its claim batch.
// Into a SQLite file, paced (see RequestBackfill), 1,000 requests take
// 4 s and 2,000 take 16 s on their own; beside a serve on the same file,
// which takes them as they come, 4,000 took 84 s and 5,000 took 101 s,
// with no claim, renewal or live tick of the serve lost to the file's
// write lock. Twice as many would take several minutes, most of them in
// reading back pending requests, and keep twice as many rows in every
// poll of every node for as long. A longer range is asked for as several
// backfills.
const MaxBackfill = 5000

// backfillChunk is how many ticks RequestBackfill reads the attempts of
// (one ledger read) before it requests them.
const backfillChunk = 256

// BackfillOptions configure RequestBackfill and RequestRerun.
type BackfillOptions struct {
	// Overlap says how the requested ticks run. OverlapSkip (the default):
	// one at a time and never beside another run of the job — each waits
	// for the job's lock, where a scheduled tick would be skipped.
	// OverlapAllow: without the job's lock, at once on the nodes that
	// claim them.
	Overlap Overlap
	// Rerun runs ticks that already ran again, each as a new attempt.
	// Without it a tick that already has an attempt in the ledger is left
	// alone.
	Rerun bool
	// Max is how many ticks one request may name at most, up to
	// MaxBackfill; a range with more is refused (TooManyTicksError) rather
	// than cut. Default: DefaultBackfillMax.
	Max int
	// Now is the present, past which no tick may be asked for. Zero:
	// time.Now().
	Now time.Time
}

// RequestBackfill asks the fleet to run the ticks of job's schedule in
// [from, to], oldest first, each on one node: it adds one request per tick
// to the ledger and returns the ticks. The schedule is the one the fleet
// registered (ledger.JobState.Spec), so the job must have been run by a
// node. Ticks after now are refused: they are the scheduler's to run. Nodes
// take the requests within a poll interval; with o.Rerun unset a tick that
// already has an attempt is not run again (jobs history shows which ran).
// When adding a request fails (ctx ends, say) it returns the ticks
// requested before it with the error: those requests stay, and the fleet
// runs them (the failed one may have been added too). A paused job's
// backfill is refused: a pause stops backfills.
//
// The range is counted before anything is requested, no further than
// o.Max+1 ticks (an @every schedule's by arithmetic). The requests are
// written one at a time, each followed by a pause as long as its write
// took (pace), and the ticks' attempts are read backfillChunk ticks at a
// time: a backfill of o.Max ticks takes about twice as long as its writes,
// and leaves a store with one writer (a SQLite file) free for the nodes
// half that time.
func RequestBackfill(ctx context.Context, l ledger.Ledger, job string, from, to time.Time, o BackfillOptions) ([]time.Time, error) {
	if o.Max == 0 {
		o.Max = DefaultBackfillMax
	}
	switch {
	case o.Max < 0:
		return nil, badRequest("backfill %q: Max %d is negative", job, o.Max)
	case o.Max > MaxBackfill:
		return nil, badRequest("backfill %q: Max %d is more than MaxBackfill (%d), the most one request may ask for: split the range", job, o.Max, MaxBackfill)
	case from.IsZero() || to.IsZero():
		return nil, badRequest("backfill %q: the range needs both ends", job)
	case to.Before(from):
		return nil, badRequest("backfill %q: the range ends (%s) before it starts (%s)", job, to.UTC().Format(time.RFC3339), from.UTC().Format(time.RFC3339))
	case to.After(cmp.Or(o.Now, time.Now())):
		return nil, badRequest("backfill %q: the range ends in the future (%s): those ticks are the scheduler's to run", job, to.UTC().Format(time.RFC3339))
	}
	sched, st, err := registered(ctx, l, job)
	if err != nil {
		return nil, err
	}
	if st.Paused {
		return nil, pausedRequest("backfill", job)
	}
	// Counted before any is requested (a range with too many is refused,
	// not cut), and no further than Max+1: a range of years of a
	// one-second schedule is refused at once.
	n, exact := countTicks(sched, from.Add(-time.Nanosecond), to, o.Max+1)
	switch {
	case n == 0:
		return nil, badRequest("backfill %q: its schedule has no tick from %s to %s", job, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	case n > o.Max && exact:
		return nil, &TooManyTicksError{Job: job, Ticks: n, Max: o.Max}
	case n > o.Max:
		return nil, &TooManyTicksError{Job: job, Max: o.Max}
	}
	prefix := backfillSkip
	if o.Overlap == OverlapAllow {
		prefix = backfillAllow
	}
	if o.Rerun {
		prefix = rerunSkip
		if o.Overlap == OverlapAllow {
			prefix = rerunAllow
		}
	}
	// Requested backfillChunk ticks at a time, each chunk's attempts read
	// in one ledger read just before: no read grows with the range.
	ticks := make([]time.Time, 0, n)
	chunk := make([]time.Time, 0, min(n, backfillChunk))
	for t := sched.Next(from.Add(-time.Nanosecond)); len(ticks) < n; {
		chunk = chunk[:0]
		for ; !t.IsZero() && !t.After(to) && len(chunk) < backfillChunk && len(ticks)+len(chunk) < n; t = sched.Next(t) {
			chunk = append(chunk, t.UTC())
		}
		if len(chunk) == 0 {
			break
		}
		bases, err := lastAttempts(ctx, l, job, chunk[0], chunk[len(chunk)-1])
		if err != nil {
			return ticks, fmt.Errorf("schedule: backfill %q: %w", job, err)
		}
		for _, tick := range chunk {
			start := time.Now()
			if err := request(ctx, l, job, withBase(prefix, bases[tick.Unix()]), tick, o.Rerun); err != nil {
				return ticks, err
			}
			ticks = append(ticks, tick)
			if len(ticks) == n {
				break
			}
			if err := pace(ctx, time.Since(start)); err != nil {
				return ticks, fmt.Errorf("schedule: backfill %q: %w", job, err)
			}
		}
	}
	return ticks, nil
}

// pace waits d, the time the request before took, or until ctx ends (its
// error): RequestBackfill writes at most half the time. A store with one
// writer at a time (a SQLite file) would otherwise be written back to back
// by it, and the nodes sharing the file, whose writers wait in SQLite's
// busy handler (polling the lock at intervals growing to 100 ms), would
// rarely find it free: their claims and lock renewals failed with
// SQLITE_BUSY, and live ticks were missed, while a few thousand ticks were
// requested.
func pace(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RequestRerun asks the fleet to run tick of job again, once, as the next
// attempt after the last one the ledger holds (1 when it holds none); for a
// sharded job, every shard of the tick, each once, spread over the nodes.
// The tick must be one of the job's registered schedule, not in the
// future, and not before the job could have run: a tick before the
// registration of its schedule (ledger.JobState.Since) is refused unless
// the ledger holds a run of the job at or before it (it ran then, with an
// earlier schedule, or by a backfill). A paused job's re-run is refused.
// It returns the request's ID.
func RequestRerun(ctx context.Context, l ledger.Ledger, job string, tick time.Time, o BackfillOptions) (string, error) {
	sched, st, err := registered(ctx, l, job)
	if err != nil {
		return "", err
	}
	if st.Paused {
		return "", pausedRequest("re-run", job)
	}
	since := st.Since
	tick = tick.UTC()
	if !sched.Next(tick.Add(-time.Nanosecond)).Equal(tick) {
		return "", badRequest("re-run %q: %s is not a tick of its schedule (the next one is %s)", job, tick.Format(time.RFC3339), sched.Next(tick).UTC().Format(time.RFC3339))
	}
	if tick.After(cmp.Or(o.Now, time.Now())) {
		return "", badRequest("re-run %q: the tick %s is in the future", job, tick.Format(time.RFC3339))
	}
	if tick.Before(since) {
		rs, err := l.Runs(ctx, ledger.RunQuery{Job: job, To: tick.Add(time.Second), Limit: 1})
		if err != nil {
			return "", fmt.Errorf("schedule: re-run %q: reading its runs up to the tick: %w", job, err)
		}
		if len(rs) == 0 {
			return "", badRequest("re-run %q: the tick %s is before the job could have run: the fleet runs it with this schedule since %s, and the ledger holds no run of it at or before the tick",
				job, tick.Format(time.RFC3339), since.UTC().Format(time.RFC3339))
		}
	}
	prefix := rerunSkip
	if o.Overlap == OverlapAllow {
		prefix = rerunAllow
	}
	bases, err := lastAttempts(ctx, l, job, tick, tick)
	if err != nil {
		return "", fmt.Errorf("schedule: re-run %q: %w", job, err)
	}
	id, err := newRequestID(withBase(prefix, bases[tick.Unix()]))
	if err != nil {
		return "", err
	}
	_, err = l.SetJobState(ctx, ledger.JobStateParams{Job: job, Op: ledger.JobTrigger, Trigger: id, Tick: tick, Rerun: true})
	if err != nil {
		return "", fmt.Errorf("schedule: re-run %q: %w", job, err)
	}
	return id, nil
}

func request(ctx context.Context, l ledger.Ledger, job, prefix string, t time.Time, rerun bool) error {
	id, err := newRequestID(prefix)
	if err != nil {
		return err
	}
	if _, err := l.SetJobState(ctx, ledger.JobStateParams{Job: job, Op: ledger.JobTrigger, Trigger: id, Tick: t, Rerun: rerun}); err != nil {
		return fmt.Errorf("schedule: backfill %q: requesting tick %s: %w", job, t.Format(time.RFC3339), err)
	}
	return nil
}

func newRequestID(prefix string) (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("schedule: reading random bytes: %w", err)
	}
	return prefix + hex.EncodeToString(b[:]), nil
}

// withBase is a backfill's or re-run's ID prefix with its base.
func withBase(prefix string, base int) string {
	return prefix + strconv.Itoa(base) + "-"
}

// pastBase returns the base a backfill's or re-run's ID carries, 0 when it
// carries none.
func pastBase(id string) int {
	var rest string
	for _, p := range []string{rerunSkip, rerunAllow, backfillSkip, backfillAllow} {
		if r, ok := strings.CutPrefix(id, p); ok {
			rest = r
			break
		}
	}
	n, _, ok := strings.Cut(rest, "-")
	base, err := strconv.Atoi(n)
	if !ok || err != nil || base < 0 {
		return 0
	}
	return base
}

// lastAttempts returns the highest attempt the ledger holds at each of
// job's ticks from first to last (their scheduled keys, Trigger "", any
// shard), by the tick's Unix second; a tick with none is left out.
func lastAttempts(ctx context.Context, l ledger.Ledger, job string, first, last time.Time) (map[int64]int, error) {
	rs, err := l.Runs(ctx, ledger.RunQuery{Job: job, From: first, To: last.Add(time.Second)})
	if err != nil {
		return nil, fmt.Errorf("reading the ticks' attempts: %w", err)
	}
	bases := make(map[int64]int)
	for _, r := range rs {
		if r.Trigger == "" {
			bases[r.Tick.Unix()] = max(bases[r.Tick.Unix()], r.Attempt)
		}
	}
	return bases, nil
}

// ErrBadRequest is matched (errors.Is) by the errors of RequestBackfill and
// RequestRerun about the request itself: a range that ends before it
// starts or in the future, one with too many ticks or none, a time that is
// not a tick of the job's schedule, a re-run of a tick from before the job
// could have run.
var ErrBadRequest = errors.New("schedule: bad backfill or re-run request")

type requestError struct{ msg string }

func (e *requestError) Error() string        { return "schedule: " + e.msg }
func (e *requestError) Is(target error) bool { return target == ErrBadRequest }

func badRequest(format string, args ...any) error {
	return &requestError{fmt.Sprintf(format, args...)}
}

// TooManyTicksError is RequestBackfill's refusal of a range holding more
// ticks than BackfillOptions.Max. It matches ErrBadRequest (errors.Is); a
// caller that takes Max from its user (`tasklock jobs backfill --max`)
// names its own setting with Ticks and Max.
type TooManyTicksError struct {
	Job string
	// Ticks is how many ticks the range holds, or 0 when they were not
	// counted through: counting a range stops one tick past Max (an
	// @every schedule's range is counted whole, without walking it).
	Ticks int
	Max   int // BackfillOptions.Max
}

// Error implements error.
func (e *TooManyTicksError) Error() string {
	larger := "a larger Max"
	if e.Max >= MaxBackfill {
		larger = fmt.Sprintf("several (MaxBackfill is %d)", MaxBackfill)
	}
	if e.Ticks == 0 {
		return fmt.Sprintf("schedule: backfill %q: the range holds more than %d ticks, the most one request takes (BackfillOptions.Max): ask for a shorter range or %s",
			e.Job, e.Max, larger)
	}
	return fmt.Sprintf("schedule: backfill %q: the range holds %d ticks, more than the most one request takes (BackfillOptions.Max %d): ask for a shorter range or %s",
		e.Job, e.Ticks, e.Max, larger)
}

// Is reports whether target is ErrBadRequest.
func (e *TooManyTicksError) Is(target error) bool { return target == ErrBadRequest }

// ErrNotRegistered is returned by RequestBackfill and RequestRerun for a
// job no node registered, whose schedule is therefore unknown.
var ErrNotRegistered = errors.New("schedule: no node has registered the job")

// pausedRequest is the refusal of a backfill or re-run of a paused job.
func pausedRequest(what, job string) error {
	return badRequest("%s %q: the job is paused, and a pause stops its backfills and re-runs: resume it first", what, job)
}

// registered returns the schedule the fleet registered job with, and the
// job's state (since when it has that schedule: ledger.JobState.Since;
// whether it is paused).
func registered(ctx context.Context, l ledger.Ledger, job string) (Schedule, ledger.JobState, error) {
	sts, err := l.Jobs(ctx)
	if err != nil {
		return nil, ledger.JobState{}, fmt.Errorf("schedule: reading the job states: %w", err)
	}
	for _, st := range sts {
		if st.Job != job {
			continue
		}
		if st.Spec == "" {
			break
		}
		sched, err := Parse(st.Spec, time.UTC)
		if err != nil {
			return nil, ledger.JobState{}, fmt.Errorf("schedule: job %q: its registered schedule %q: %w", job, st.Spec, err)
		}
		return sched, st, nil
	}
	return nil, ledger.JobState{}, &notRegisteredError{job}
}

type notRegisteredError struct{ job string }

func (e *notRegisteredError) Error() string {
	return fmt.Sprintf("schedule: no node has registered the job %q, so its schedule is not known (a node registers a job when it starts running it)", e.job)
}

func (e *notRegisteredError) Is(target error) bool { return target == ErrNotRegistered }

// countTicks counts the ticks of sched in (after, to], up to limit: it
// stops there, with exact false, unless it can count them without walking
// them (an @every schedule's), when the count is exact however large.
func countTicks(sched Schedule, after, to time.Time, limit int) (n int, exact bool) {
	first := sched.Next(after)
	if first.IsZero() || first.After(to) {
		return 0, true
	}
	if e, ok := sched.(every); ok {
		// Its ticks are the multiples of e.d seconds: first is one, and to
		// is at or after it.
		return int(min((to.Unix()-first.Unix())/e.d+1, int64(math.MaxInt))), true
	}
	for t := first; !t.IsZero() && !t.After(to); t = sched.Next(t) {
		if n == limit {
			return n, false
		}
		n++
	}
	return n, true
}

// requestWork is the work a trigger request asks for.
func requestWork(tr ledger.TriggerRequest) work {
	if tr.Tick.IsZero() {
		return work{tick: tr.At, trigger: tr.ID, request: tr.ID}
	}
	w := work{tick: tr.Tick.UTC(), request: tr.ID, past: true}
	w.allow = strings.HasPrefix(tr.ID, backfillAllow) || strings.HasPrefix(tr.ID, rerunAllow)
	w.attempts = pastBase(tr.ID)
	switch {
	case tr.Rerun:
		w.claim, w.rerun = tr.ID, true
	case w.attempts > 0:
		w.claim = backfillClaim + ":" + strconv.Itoa(w.attempts)
	default:
		w.claim = backfillClaim
	}
	return w
}

// pastAttempts is what the ledger holds at a tick (its scheduled key,
// Trigger ""), for a backfill or re-run of it.
type pastAttempts struct {
	used     int  // the highest attempt number, 0 when none
	ran      bool // a record that is not missed or skipped (those are not runs, though a skip takes the number of the attempt it stands for)
	recorded bool // any record, a missed one (attempt 0) too
}

// lastAttempt reads what the ledger holds at j's tick.
func (s *Scheduler) lastAttempt(j *job, tick time.Time, shard int) (pastAttempts, error) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	rs, err := s.ledger.Runs(ctx, ledger.RunQuery{Job: j.Name, From: tick, To: tick.Add(time.Second)})
	if err != nil {
		return pastAttempts{}, err
	}
	var a pastAttempts
	for _, r := range rs {
		if r.Trigger == "" && r.Tick.Equal(tick) && r.Shard == shard {
			a.used = max(a.used, r.Attempt)
			a.ran = a.ran || (r.Attempt > 0 && r.Status != ledger.RunSkipped && r.Status != ledger.RunMissed)
			a.recorded = true
		}
	}
	return a, nil
}

// beginPast is startPast, tried again while the ledger fails, with a
// backoff growing to 5 s, until the Scheduler's runs end: this node's
// claim of the request won (pass), and no other node runs it while this
// one lives (retake.go). It returns the first attempt's number, or ok
// false when there is nothing to run.
func (s *Scheduler) beginPast(j *job, w work) (first int, ok bool) {
	for backoff := 250 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		first, err := s.startPast(j, w)
		if err == nil {
			return first, first > 0
		}
		s.log.Error("schedule: starting a backfill or re-run, will retry", "node", s.node, "job", j.Name, "tick", w.tick, "request", w.request, "retry_in", backoff, "err", err)
		if !s.sleep(backoff, s.runCtx.Done()) {
			s.log.Error("schedule: a backfill or re-run was not run: the node stopped while the ledger failed", "node", s.node, "job", j.Name, "tick", w.tick, "request", w.request)
			return 0, false
		}
	}
}

// startPast prepares a backfill or re-run of a past tick: it claims the
// number of its first attempt, removes the request (requestTaken) and
// returns that number, or 0 when there is nothing to run (a backfill of a
// tick that already ran). An error (the ledger could not be read, a claim
// could not be made) leaves the request, and may be tried again.
//
// A tick (or shard) the ledger holds no record of may not have been
// handled on schedule yet: the requester's clock is ahead of the fleet's,
// or the tick is handled late (no leader yet, a preferred node's fallback
// delay, a node catching up as it starts). The run then first claims the
// tick's own key (Trigger ""), which the schedule's claim contends on:
// taken, this run is the tick's first attempt and no node runs the tick
// on schedule; held by the schedule already, whose run has not recorded
// its attempt 1 yet, a re-run numbers its attempts after that one, and a
// backfill waits for that record (awaitScheduled): a run means the tick
// ran, a skip that the backfill runs it, as attempt 2. A tick older than
// MisfireAfter and scheduledRecordWait was claimed while paused, or by a
// stopped node: either runs it as attempt 1 at once. (Unless a node
// catching up claimed it as a catch-up run just now: a backfill then runs
// beside that run, a window of one lock round trip.)
//
// A retake (shard.go) goes on with the attempt of a stopped node: a
// backfill's shard is retaken although the tick has an attempt.
func (s *Scheduler) startPast(j *job, w work) (first int, err error) {
	a, err := s.lastAttempt(j, w.tick, w.shard)
	if err != nil {
		return 0, fmt.Errorf("reading the attempts of the tick: %w", err)
	}
	if !w.rerun && !w.retake && a.ran { // a retake goes on with a stopped node's attempt
		s.requestTaken(j, w)
		s.log.Info("schedule: backfill: the tick already ran", "node", s.node, "job", j.Name, "tick", w.tick, "attempts", a.used)
		return 0, nil
	}
	next := max(a.used, w.attempts) + 1
	if !a.recorded {
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		held, err := s.claimWork(ctx, j, w, "")
		cancel()
		switch {
		case err == nil && held == nil: // the schedule will not run the tick
		case errors.Is(held, ledger.ErrClaimed) && w.retake: // by the stopped node's run
		case errors.Is(held, ledger.ErrClaimed) && s.clock.Now().Sub(w.tick) > j.MisfireAfter+scheduledRecordWait:
			// Not the claim of a run on schedule, which would be recorded
			// by now: one made while the job was paused, or by a node that
			// stopped before it recorded the run. This is attempt 1.
		case errors.Is(held, ledger.ErrClaimed) && w.rerun:
			next = max(next, 2)
		case errors.Is(held, ledger.ErrClaimed):
			var stopped bool
			if a, stopped, err = s.awaitScheduled(j, w); err != nil {
				return 0, fmt.Errorf("reading the attempts of the tick: %w", err)
			}
			if stopped { // the request stays, for another node (retake.go)
				return 0, nil
			}
			if a.ran {
				s.requestTaken(j, w)
				s.log.Info("schedule: backfill: the tick ran on schedule meanwhile", "node", s.node, "job", j.Name, "tick", w.tick, "attempts", a.used)
				return 0, nil
			}
			next = max(a.used, w.attempts, 1) + 1
		default:
			return 0, fmt.Errorf("claiming the tick: %w", cmp.Or(err, held))
		}
	}
	if first, err = s.claimAttempt(j, w, next); err != nil {
		return 0, fmt.Errorf("claiming an attempt number: %w", err)
	}
	s.requestTaken(j, w)
	return first, nil
}

// scheduledRecordWait bounds how long a backfill waits for the record of
// a tick the schedule has claimed (awaitScheduled). The schedule's run
// writes it one lock round trip after its claim, before it waits for
// anything; a claim still without a record after this long is taken for
// one whose node stopped in between.
const scheduledRecordWait = 5 * time.Second

// awaitScheduled polls the ledger for the first record of w's tick, which
// the schedule has claimed, for up to scheduledRecordWait or until the
// Scheduler's runs end (stopped), and returns what it then holds. A backfill must
// not decide before it: the schedule's run is attempt 1, and a backfill
// that ran beside it would run the tick twice and record its attempt 1
// over the schedule's.
func (s *Scheduler) awaitScheduled(j *job, w work) (a pastAttempts, stopped bool, err error) {
	deadline := s.clock.Now().Add(scheduledRecordWait)
	for {
		a, err = s.lastAttempt(j, w.tick, w.shard)
		if err != nil || a.recorded || !s.clock.Now().Before(deadline) {
			return a, false, err
		}
		if !s.sleep(100*time.Millisecond, s.runCtx.Done()) {
			return a, true, nil
		}
	}
}

// maxAttemptClaims bounds the numbers one claimAttempt call tries.
const maxAttemptClaims = 64

// claimAttempt claims the lowest attempt number from n up that no other
// run of w's tick holds (the key (job, tick, "attempt:N", shard)), one
// round trip per number tried, and returns it.
func (s *Scheduler) claimAttempt(j *job, w work, n int) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	for range maxAttemptClaims {
		held, err := s.claimWork(ctx, j, w, attemptClaim(n))
		switch {
		case err != nil:
			return 0, err
		case held == nil:
			return n, nil
		case !errors.Is(held, ledger.ErrClaimed):
			return 0, held
		}
		n++
	}
	return 0, fmt.Errorf("attempts %d to %d of the tick are all claimed", n-maxAttemptClaims, n-1)
}

// claimWork claims the key (job, w's tick, trigger, w's shard) for w: a
// backfill's or re-run's claims are made with a token of the request's
// own, so that two requests this node runs at once, each repeating its
// claims after an error, never both hold one key.
func (s *Scheduler) claimWork(ctx context.Context, j *job, w work, trigger string) (held, err error) {
	p := s.claimParams(j.Name, w.tick, trigger, w.shard)
	if w.request != "" && w.past {
		p.Token += "/" + w.request
	}
	return s.claimSingle(ctx, p)
}

// attemptClaim is the Trigger of the claim of attempt number n.
func attemptClaim(n int) string { return "attempt:" + strconv.Itoa(n) }

// obtainPast takes the job's lock for a past tick run with overlap skip:
// it waits for a run in progress to end, up to the end of the Scheduler's
// run context.
func (s *Scheduler) obtainPast(j *job) (*tasklock.Lock, error) {
	return s.lk.Obtain(s.runCtx, j.key, j.obtainOpts)
}

// maxGapWalk bounds how many ticks olderTicks counts.
const maxGapWalk = 1 << 20

// gap is the ticks of a job that came before the newest MaxBacklog of a
// long outage: too many to handle one by one, they are recorded as missed
// in one record, at the newest of them, so that however long the outage
// the history says how many ticks did not run and the job goes on (no
// cliff, unlike a CronJob after 100 missed starts).
type gap struct {
	n           int       // how many; maxGapWalk means at least that many
	first, last time.Time // the oldest and the newest of them
}

// olderTicks returns the ticks of sched in (after, ticks[0]) when backlog
// returned a full backlog, which it cuts to the newest MaxBacklog.
func olderTicks(sched Schedule, after time.Time, ticks []time.Time) gap {
	if len(ticks) < MaxBacklog {
		return gap{}
	}
	var g gap
	for t := sched.Next(after); !t.IsZero() && t.Before(ticks[0]) && g.n < maxGapWalk; t = sched.Next(t) {
		if g.n == 0 {
			g.first = t
		}
		g.last = t
		g.n++
	}
	return g
}

// refineGap leaves out of g the ticks up to the newest one the ledger has a
// record of (a node that starts does not know what ran before it), and
// reports whether any are left to record. A ledger that cannot be read
// leaves g as it is.
func (s *Scheduler) refineGap(j *job, g *gap) bool {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	rs, err := s.ledger.Runs(ctx, ledger.RunQuery{Job: j.Name, From: g.first, To: g.last, Limit: 1})
	if err != nil || len(rs) == 0 {
		return true
	}
	n, first := 0, time.Time{}
	for t := j.sched.Next(rs[0].Tick); !t.IsZero() && !t.After(g.last) && n < maxGapWalk; t = j.sched.Next(t) {
		if n == 0 {
			first = t
		}
		n++
	}
	g.n, g.first = n, first
	return n > 0
}

func (g gap) reason(j *job) string {
	count := fmt.Sprint(g.n)
	if g.n >= maxGapWalk {
		count = "at least " + count
	}
	return fmt.Sprintf("schedule: %s ticks missed from %s to %s, while no node ran the job: more than the %d newest, which are handled one by one (misfire policy %s)",
		count, g.first.UTC().Format(time.RFC3339), g.last.UTC().Format(time.RFC3339), MaxBacklog, j.Misfire)
}
