// Package apijson holds the JSON shapes of jobs, run records and locks that
// the CLI (--json) and the dashboard's API share, so that a script written
// against one reads the other.
package apijson

import (
	"time"

	"github.com/tasklock/tasklock/driver"
)

// Job is a job's stored state and latest run.
type Job struct {
	Job      string    `json:"job"`
	Paused   bool      `json:"paused"`
	Triggers []Trigger `json:"pending_triggers"`
	LastRun  *Run      `json:"last_run"`
}

// Trigger is a pending trigger-now request.
type Trigger struct {
	ID string    `json:"id"`
	At time.Time `json:"at"`
}

// Run is one run record.
type Run struct {
	Job      string     `json:"job"`
	Tick     time.Time  `json:"tick"`
	Trigger  string     `json:"trigger,omitempty"`
	Attempt  int        `json:"attempt"`
	Node     string     `json:"node"`
	Fence    uint64     `json:"fence"`
	Start    *time.Time `json:"start"`
	End      *time.Time `json:"end"`
	Status   string     `json:"status"`
	Error    string     `json:"error,omitempty"`
	Output   string     `json:"output,omitempty"`
	Recorded time.Time  `json:"recorded"`
}

// Lock is one held lock.
type Lock struct {
	Key         string `json:"key"`
	Owner       string `json:"owner"`
	Fence       uint64 `json:"fence"`
	ExpiresInMS int64  `json:"expires_in_ms"`
}

// FromRun converts a run record, with its times in UTC.
func FromRun(r driver.RunRecord) *Run {
	j := &Run{
		Job: r.Job, Tick: r.Tick.UTC(), Trigger: r.Trigger, Attempt: r.Attempt, Node: r.Node, Fence: r.Fence,
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

// FromState converts a job's stored state; LastRun is left nil.
func FromState(st driver.JobState) Job {
	j := Job{Job: st.Job, Paused: st.Paused, Triggers: []Trigger{}}
	for _, t := range st.Triggers {
		j.Triggers = append(j.Triggers, Trigger{ID: t.ID, At: t.At.UTC()})
	}
	return j
}

// FromLease converts a listed lease.
func FromLease(l driver.Lease) Lock {
	return Lock{Key: l.Key, Owner: l.Owner, Fence: l.Fence, ExpiresInMS: l.TTL.Milliseconds()}
}
