// Package apijson holds the JSON shapes of jobs, run records and locks that
// the CLI (--json) and the dashboard's API share, so that a script written
// against one reads the other.
package apijson

import (
	"context"
	"iter"
	"slices"
	"strconv"
	"time"

	"github.com/tasklock/tasklock/driver"
	"github.com/tasklock/tasklock/ledger"
	"github.com/tasklock/tasklock/schedule"
)

// Job is a job's stored state and latest run.
type Job struct {
	Job string `json:"job"`
	// State is "broken" (its schedule gives no next tick: Broken says
	// why), "paused", "ok", or "defined": defined at run time (tasklock
	// jobs create, POST /api/jobs) and not yet registered by a node of
	// tasklock serve, so that nothing runs it yet.
	State    string    `json:"state"`
	Broken   string    `json:"broken,omitempty"`
	Paused   bool      `json:"paused"`
	Triggers []Trigger `json:"pending_triggers"`
	// Spec and Since: the schedule the fleet registered the job with, and
	// when it first ran it with that schedule; unset for a job no node
	// registered (known from its history or a stored state only).
	Spec    string     `json:"spec,omitempty"`
	Since   *time.Time `json:"since,omitempty"`
	LastRun *Run       `json:"last_run"`
	// After are the job's parents (schedule.Job.After) and Children the
	// configured jobs whose After names it, sorted: the edges of the
	// dependency graph around the job; omitted when there are none.
	After    []string `json:"after,omitempty"`
	Children []string `json:"children,omitempty"`
}

// Children returns, for each job named in the After of a job of jobs, the
// jobs whose After names it, sorted by name.
func Children(jobs iter.Seq[schedule.Job]) map[string][]string {
	out := map[string][]string{}
	for j := range jobs {
		for _, p := range j.After {
			out[p] = append(out[p], j.Name)
		}
	}
	for _, cs := range out {
		slices.Sort(cs)
	}
	return out
}

// The job states.
const (
	StateOK     = "ok"
	StatePaused = "paused"
	StateBroken = "broken"
	// StateDefined is a job defined at run time that no node of tasklock
	// serve has registered yet: no node runs it (none is running, or every
	// node refused the definition; their logs say why).
	StateDefined = "defined"
)

// SetBroken marks the job broken for reason; "" leaves it as it is.
func (j *Job) SetBroken(reason string) {
	if reason != "" {
		j.State, j.Broken = StateBroken, reason
	}
}

// parse parses specs for SpecBroken (a variable for tests).
var parse = schedule.Parse

// SpecBroken says why a registered spec (as ledger.JobState.Spec, its time
// zone a CRON_TZ= prefix) cannot give a tick after now, or "" when it can:
// such a job is broken, as its nodes report.
func SpecBroken(spec string, now time.Time) string {
	if spec == "" {
		return ""
	}
	s, err := parse(spec, nil)
	if err != nil {
		return "its schedule cannot be read: " + err.Error()
	}
	if s.Next(now).IsZero() {
		return "its schedule " + strconv.Quote(spec) + " gives no tick after " + now.UTC().Format(time.RFC3339)
	}
	return ""
}

// Trigger is a pending trigger-now request.
type Trigger struct {
	ID string    `json:"id"`
	At time.Time `json:"at"`
	// Tick is the past tick a backfill or re-run asks for; unset for a
	// trigger-now. Rerun: run it even if it ran.
	Tick  *time.Time `json:"tick,omitempty"`
	Rerun bool       `json:"rerun,omitempty"`
}

// Run is one run record.
type Run struct {
	Job     string    `json:"job"`
	Tick    time.Time `json:"tick"`
	Trigger string    `json:"trigger,omitempty"`
	// Shard and Shards: the shard-run's index and the job's shard count
	// for a sharded job (Shards > 1); 0 and 0 otherwise. TickStatus, set
	// by FromRuns for a sharded job's records, is the overall status of
	// the tick (schedule.TickStatus) from the records listed with it.
	Shard      int        `json:"shard"`
	Shards     int        `json:"shards,omitempty"`
	TickStatus string     `json:"tick_status,omitempty"`
	Attempt    int        `json:"attempt"`
	Node       string     `json:"node"`
	Fence      uint64     `json:"fence"`
	Start      *time.Time `json:"start"`
	End        *time.Time `json:"end"`
	Status     string     `json:"status"`
	Error      string     `json:"error,omitempty"`
	Output     string     `json:"output,omitempty"`
	Recorded   time.Time  `json:"recorded"`
	// ID, set by the dashboard, names the record for GET /api/run?id=.
	ID string `json:"id,omitempty"`
	// OutputTruncated, set by the dashboard's run lists, says that Output
	// is the end of the stored output only (GET /api/run has all of it).
	OutputTruncated bool `json:"output_truncated,omitempty"`
}

// Lock is one held lock.
type Lock struct {
	Key         string `json:"key"`
	Owner       string `json:"owner"`
	Fence       uint64 `json:"fence"`
	ExpiresInMS int64  `json:"expires_in_ms"`
	// Kind is the kind of hold: mutex, read or write (the sides of a
	// read-write lock), or permit (of a semaphore of Permits permits). A
	// read-write lock or semaphore has one Lock per holder.
	Kind    string `json:"kind"`
	Permits int    `json:"permits,omitempty"`
	// Waiting marks a writer waiting for readers to leave (a claim that
	// holds new readers off), not a holder.
	Waiting bool `json:"waiting,omitempty"`
}

// KindText is l's kind as people read it: "mutex", "read", "write",
// "write (waiting)" or "permit (of N)".
func (l Lock) KindText() string {
	switch {
	case l.Waiting:
		return l.Kind + " (waiting)"
	case l.Permits > 0:
		return l.Kind + " (of " + strconv.Itoa(l.Permits) + ")"
	}
	return l.Kind
}

// FromRun converts a run record, with its times in UTC.
func FromRun(r ledger.RunRecord) *Run {
	j := &Run{
		Job: r.Job, Tick: r.Tick.UTC(), Trigger: r.Trigger, Shard: r.Shard, Shards: r.Shards, Attempt: r.Attempt, Node: r.Node, Fence: r.Fence,
		Status: string(r.Status), Error: r.Error, Output: r.Output, Recorded: r.Recorded.UTC(),
	}
	if !r.Start.IsZero() {
		s := r.Start.UTC()
		j.Start = &s
	}
	if !r.End.IsZero() {
		e := r.End.UTC()
		j.End = &e
	}
	return j
}

// FromRuns converts run records as FromRun does, and sets the TickStatus
// of a sharded job's records from the records of the same tick among rs.
// A listing page may hold only some of a tick's records (cut by its limit
// or a status filter): FromRunsOf reads the rest.
func FromRuns(rs []ledger.RunRecord) []*Run {
	return fromRuns(rs, tickGroups(rs))
}

// maxTickReads bounds the ticks FromRunsOf reads again for one listing.
const maxTickReads = 50

// FromRunsOf is FromRuns for a listing page read from l: the TickStatus of
// a sharded tick whose records in rs do not cover every shard is taken
// from all its records in l, so that a tick cut by the page's limit or by
// a status filter shows its true status, not running. Only an error of l
// is returned.
func FromRunsOf(ctx context.Context, l ledger.Ledger, rs []ledger.RunRecord) ([]*Run, error) {
	groups := tickGroups(rs)
	reads := 0
	for k, g := range groups {
		seen := make(map[int]bool)
		for _, r := range g {
			seen[r.Shard] = true
		}
		if len(seen) >= g[0].Shards || reads >= maxTickReads {
			continue
		}
		reads++
		tick := g[0].Tick
		// To is a second on: a store may keep ticks to the millisecond or the
		// second, and ticks are whole seconds; the loop keeps this one.
		all, err := l.Runs(ctx, ledger.RunQuery{Job: k.job, From: tick, To: tick.Add(time.Second)})
		if err != nil {
			return nil, err
		}
		full := g[:0:0]
		for _, r := range all {
			if r.Trigger == k.trigger && r.Tick.Equal(tick) {
				full = append(full, r)
			}
		}
		if len(full) >= len(g) {
			groups[k] = full
		}
	}
	return fromRuns(rs, groups), nil
}

// tickKey names one tick (or trigger-now request) of a job.
type tickKey struct {
	job, trigger string
	tick         int64
}

// tickGroups groups the records of sharded jobs in rs by tick.
func tickGroups(rs []ledger.RunRecord) map[tickKey][]ledger.RunRecord {
	groups := make(map[tickKey][]ledger.RunRecord)
	for _, r := range rs {
		if r.Shards > 1 {
			k := tickKey{r.Job, r.Trigger, r.Tick.UnixNano()}
			groups[k] = append(groups[k], r)
		}
	}
	return groups
}

// fromRuns converts rs, with the TickStatus of each sharded tick from its
// records in groups.
func fromRuns(rs []ledger.RunRecord, groups map[tickKey][]ledger.RunRecord) []*Run {
	out := make([]*Run, len(rs))
	for i, r := range rs {
		out[i] = FromRun(r)
		if r.Shards > 1 {
			out[i].TickStatus = string(schedule.TickStatus(groups[tickKey{r.Job, r.Trigger, r.Tick.UnixNano()}]))
		}
	}
	return out
}

// FromState converts a job's stored state, State "paused" or "ok"; LastRun
// is left nil.
func FromState(st ledger.JobState) Job {
	j := Job{Job: st.Job, State: StateOK, Paused: st.Paused, Triggers: []Trigger{}, Spec: st.Spec}
	if st.Paused {
		j.State = StatePaused
	}
	if !st.Since.IsZero() {
		since := st.Since.UTC()
		j.Since = &since
	}
	for _, t := range st.Triggers {
		if t.Cancel {
			continue // a cancel request runs nothing (RunCancelled); it waits a poll at most
		}
		tr := Trigger{ID: t.ID, At: t.At.UTC(), Rerun: t.Rerun}
		if !t.Tick.IsZero() {
			tick := t.Tick.UTC()
			tr.Tick = &tick
		}
		j.Triggers = append(j.Triggers, tr)
	}
	return j
}

// FromLease converts a listed lease.
func FromLease(l driver.Lease) Lock {
	return Lock{Key: l.Key, Owner: l.Owner, Fence: l.Fence, ExpiresInMS: l.TTL.Milliseconds(),
		Kind: l.Mode.String(), Permits: l.Limit, Waiting: l.Waiting}
}
